#!/bin/bash
# Backup workers against a straggler in training (docs/elastic.md): pstrain, LeNet on
# Fashion-MNIST, 4 workers and 1 server over tcp, worker 3 at half speed (--slow-rank 3
# --slow-factor 2: before each step it sleeps as long as its previous step computed; a sleep,
# not a busy loop, as in perf/backup_workers.sh). Four jobs per repetition, alternating:
# undisturbed with b = 0 (the anchor), slowed with b = 0 (every round waits for worker 3),
# slowed with b = 1, undisturbed with b = 1. One line per job: the job's pace as samples/s
# (the servers' rounds per second of rank 0's training time x 16 samples x 4 workers: what the
# workers compute per second at that pace; with b = 1 a round applies 3 of the 4 gradients),
# its ratio to the repetition's anchor, rank 0's own samples/s (its computed steps; lower with
# b = 1, where rank 0's pushes are dropped too), the test accuracy and its difference from the
# anchor's in points, worker 3's steps computed and pushes dropped, and the wall time.
#   perf/pstrain_stragglers.sh BIN [REPS] [EPOCHS] [THREADS]
set -euo pipefail
B=${1:?usage: perf/pstrain_stragglers.sh BIN [REPS] [EPOCHS] [THREADS]}
REPS=${2:-2}
EPOCHS=${3:-1}
THREADS=${4:-1}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

job() {  # job B_WORKERS SLOWED
  local slow=-1
  [ "$2" = 1 ] && slow=3
  rm -f "$OUT"/m*.jsonl
  "$B/psrun" --transport tcp -n 4 -s 1 --backup-workers "$1" -- \
    "$B/pstrain" --model lenet --dataset fashion-mnist --epochs "$EPOCHS" --threads "$THREADS" \
    --batch-size 16 \
    --log-every 100000 --slow-rank "$slow" --slow-factor 2 --metrics "$OUT/m{rank}.jsonl" \
    > "$OUT/log" 2>&1 || { tail -20 "$OUT/log"; exit 1; }
  python3 - "$OUT" "$rep" "$1" "$2" <<'EOF'
import json, sys, os
out, rep, b, slowed = sys.argv[1:5]
summary = next(json.loads(l[l.index('{'):]) for l in open(os.path.join(out, 'log'))
               if '"samples_per_sec"' in l and '"dataset"' in l)
steps3 = [json.loads(l) for l in open(os.path.join(out, 'm3.jsonl')) if '"loss"' in l]
dropped3 = sum(s.get('dropped', 0) for s in steps3)
def pace(s):  # rounds per second of training x samples per round
    rounds = s.get('rounds_per_sec', s['samples_per_sec'] / (16 * s['workers']))
    return rounds * 16 * 4
anchor = os.path.join(out, 'anchor')
if b == '0' and slowed == '0':
    open(anchor, 'w').write(json.dumps(summary))
a = json.load(open(anchor))
print(f"rep={rep} b={b} slowed={slowed} samples_per_sec={pace(summary):.0f} "
      f"ratio={pace(summary) / pace(a):.2f} rank0_samples_per_sec={summary['samples_per_sec']:.0f} "
      f"test_accuracy={summary['test_accuracy']:.4f} "
      f"vs_anchor_pt={100 * (summary['test_accuracy'] - a['test_accuracy']):+.2f} "
      f"rounds={summary['steps']} worker3_steps={len(steps3)} worker3_dropped={dropped3} "
      f"wall_s={summary['wall_s']:.1f}")
EOF
}

for rep in $(seq 1 "$REPS"); do
  job 0 0
  job 0 1
  job 1 1
  job 1 0
done
