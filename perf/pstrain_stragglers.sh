#!/bin/bash
# Backup workers against a straggler in training (docs/elastic.md): pstrain, LeNet on
# Fashion-MNIST, 1 server over tcp, batch 16, worker 3 at half speed when slowed (--slow-rank 3
# --slow-factor 2: before each step it sleeps as long as its previous step computed; a sleep,
# not a busy loop, as in perf/backup_workers.sh). Five jobs per repetition, alternating, each
# repetition with its own --seed (the model's initial weights and the shuffles):
#   4 workers, b = 0, undisturbed                 the anchor
#   4 workers, b = 0, worker 3 slowed             every round waits for worker 3
#   4 workers, b = 1, worker 3 slowed             a round applies the first 3 of 4 gradients
#   4 + 1 workers, b = 1, worker 3 slowed         a backup worker added (Chen et al.): a round
#                                                 applies the first 4 of 5, as the anchor's do
#   4 workers, b = 1, undisturbed                 what b = 1 costs when nobody is slow
# Every job runs the anchor's rounds (EPOCHS epochs of 4 workers: --max-steps), so the jobs
# differ only in which gradients each round applies. One line per job: the pace (the servers'
# rounds per second of rank 0's training time) and its ratio to the repetition's anchor, the
# samples a second its rounds applied (rounds/s x 16 x (workers - b)), the test accuracy and its
# difference from the anchor's in points, worker 3's steps computed and pushes dropped, and the
# wall time; then per job kind the mean ratio and the mean accuracy over the repetitions.
#   perf/pstrain_stragglers.sh BIN [REPS] [EPOCHS] [THREADS]
set -euo pipefail
B=${1:?usage: perf/pstrain_stragglers.sh BIN [REPS] [EPOCHS] [THREADS]}
REPS=${2:-3}
EPOCHS=${3:-1}
THREADS=${4:-1}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
# Rounds of EPOCHS epochs of 4 workers (pstrain's steps per epoch: 60000 / 4 / 16).
ROUNDS=$((EPOCHS * (60000 / 4 / 16)))

job() {  # job WORKERS B_WORKERS SLOWED
  local slow=-1
  [ "$3" = 1 ] && slow=3
  rm -f "$OUT"/m*.jsonl
  "$B/psrun" --transport tcp -n "$1" -s 1 --backup-workers "$2" -- \
    "$B/pstrain" --model lenet --dataset fashion-mnist --epochs $((EPOCHS + 1)) \
    --max-steps "$ROUNDS" --threads "$THREADS" --batch-size 16 --seed "$rep" \
    --log-every 100000 --slow-rank "$slow" --slow-factor 2 --metrics "$OUT/m{rank}.jsonl" \
    > "$OUT/log" 2>&1 || { tail -20 "$OUT/log"; exit 1; }
  /usr/bin/python3 - "$OUT" "$rep" "$1" "$2" "$3" <<'EOF'
import json, sys, os
out, rep, n, b, slowed = sys.argv[1:6]
summary = next(json.loads(l[l.index('{'):]) for l in open(os.path.join(out, 'log'))
               if '"samples_per_sec"' in l and '"dataset"' in l)
steps3 = [json.loads(l) for l in open(os.path.join(out, 'm3.jsonl')) if '"loss"' in l]
dropped3 = sum(s.get('dropped', 0) for s in steps3)
def pace(s):  # the servers' rounds per second of rank 0's training time
    return s.get('rounds_per_sec', s['samples_per_sec'] / (16 * s['workers']))
anchor = os.path.join(out, 'anchor')
if (n, b, slowed) == ('4', '0', '0'):
    open(anchor, 'w').write(json.dumps(summary))
a = json.load(open(anchor))
kind = f"n={n} b={b} slowed={slowed}"
ratio = pace(summary) / pace(a)
print(f"rep={rep} {kind} rounds_per_sec={pace(summary):.1f} ratio={ratio:.2f} "
      f"applied_samples_per_sec={pace(summary) * 16 * (int(n) - int(b)):.0f} "
      f"test_accuracy={summary['test_accuracy']:.4f} "
      f"vs_anchor_pt={100 * (summary['test_accuracy'] - a['test_accuracy']):+.2f} "
      f"rounds={summary['steps']} worker3_steps={len(steps3)} worker3_dropped={dropped3} "
      f"wall_s={summary['wall_s']:.1f}", flush=True)
with open(os.path.join(out, 'all.jsonl'), 'a') as f:
    f.write(json.dumps({'kind': kind, 'ratio': ratio, 'acc': summary['test_accuracy']}) + '\n')
EOF
}

for rep in $(seq 1 "$REPS"); do
  job 4 0 0
  job 4 0 1
  job 4 1 1
  job 5 1 1
  job 4 1 0
done
/usr/bin/python3 - "$OUT/all.jsonl" <<'EOF'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
for kind in dict.fromkeys(r['kind'] for r in rows):
    mine = [r for r in rows if r['kind'] == kind]
    acc = [r['acc'] for r in mine]
    print(f"mean {kind}: ratio={statistics.mean(r['ratio'] for r in mine):.2f} "
          f"test_accuracy={statistics.mean(acc):.4f} (min {min(acc):.4f}, max {max(acc):.4f}, "
          f"{len(mine)} runs)")
EOF
