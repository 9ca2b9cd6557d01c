#!/bin/bash
# The cost of watching a job (docs/monitoring.md): the same job with nothing on, with live metrics
# (psrun --metrics-port 0) and with the timeline (psrun --timeline), interleaved REPS times so that
# all three share the machine's state; the ratios are against "off" of the same run.
#   psbench pushpull --keys KEYS (goodput MB/s; 2 workers x 2 servers) and pstrain LeNet on
#   Fashion-MNIST (samples/s over steps 30..150 of rank 0; 2 workers x 1 server).
# With BEFORE_BIN (a build without the hooks) its jobs run in the same rotation as "before".
# Usage: perf/observe_overhead.sh BUILD_BIN [REPS] [KEYS] [BEFORE_BIN]
set -euo pipefail
bin=${1:?usage: perf/observe_overhead.sh BUILD_BIN [REPS] [KEYS] [BEFORE_BIN]}
reps=${2:-5}
keys=${3:-40}
before=${4:-}
modes=(off metrics timeline)
[ -n "$before" ] && modes=(before off metrics timeline)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" | tail -1; }
flags() {
  case $1 in
    off | before) ;;
    metrics) echo "--metrics-port 0" ;;
    timeline) echo "--timeline $tmp/t.json" ;;
  esac
}
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
declare -A pp tr
for ((i = 0; i < reps; i++)); do
  for mode in "${modes[@]}"; do
    b=$bin
    [ "$mode" = before ] && b=$before
    # shellcheck disable=SC2046
    g=$("$b/psrun" --transport tcp -n 2 -s 2 $(flags $mode) -- "$b/psbench" pushpull \
      --size 1048576 --keys "$keys" --iters 30 --warmup 3 2>&1 | grep '"bench":"pushpull"' |
      field goodput_MBps)
    pp[$mode]+="$g "
    if [ -x "$b/pstrain" ]; then
      rm -f "$tmp/m.jsonl"
      # shellcheck disable=SC2046
      "$b/psrun" --transport tcp -n 2 -s 1 $(flags $mode) -- "$b/pstrain" --model lenet \
        --dataset fashion-mnist --epochs 1 --max-steps 150 --metrics "$tmp/m.jsonl" \
        >/dev/null 2>&1
      s=$(python3 -c "
import json,sys
rows=[json.loads(l) for l in open('$tmp/m.jsonl') if l.strip()]
rows=[r for r in rows if 'step' in r and 'time_s' in r and 'loss' in r]
a,b=rows[29],rows[-1]
print((b['step']-a['step'])*b.get('batch_size',16)/(b['time_s']-a['time_s']))")
      tr[$mode]+="$s "
    fi
  done
done
for mode in "${modes[@]}"; do
  p=$(tr ' ' '\n' <<<"${pp[$mode]}" | grep . | median)
  po=$(tr ' ' '\n' <<<"${pp[off]}" | grep . | median)
  echo "pushpull keys=$keys 2x2 tcp $mode: goodput median $p MB/s = $(awk -v a="$p" -v b="$po" 'BEGIN{printf "%.3f", a/b}') x off (runs: ${pp[$mode]})"
  if [ -n "${tr[$mode]:-}" ]; then
    t=$(tr ' ' '\n' <<<"${tr[$mode]}" | grep . | median)
    to=$(tr ' ' '\n' <<<"${tr[off]}" | grep . | median)
    echo "pstrain lenet 2x1 tcp $mode: samples/s median $t = $(awk -v a="$t" -v b="$to" 'BEGIN{printf "%.3f", a/b}') x off (runs: ${tr[$mode]})"
  fi
done
