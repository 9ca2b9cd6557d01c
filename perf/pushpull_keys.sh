#!/bin/bash
# Push/pull with many tensors in flight next to the transport's own bandwidth, in one run
# (perf/RESULTS.md, "Push/pull pipeline"). For each backend: `psbench transport --mode bw` at
# SIZE (the anchor), then pushpull 1 worker x 1 server with KEYS tensors, 4 x 2 with KEYS, and
# 1 x 1 with one tensor. With a second BIN the same jobs run alternately on both builds, so
# before and after share the machine's state.
# Usage: perf/pushpull_keys.sh BIN [BIN_BEFORE] [SIZE] [KEYS]
set -euo pipefail
bin=${1:?usage: perf/pushpull_keys.sh BIN [BIN_BEFORE] [SIZE] [KEYS]}
before=${2:-}
size=${3:-4194304}
keys=${4:-40}
builds=("$bin")
[ -n "$before" ] && builds=("$before" "$bin")
field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }
for t in ucx tcp; do
  anchor=$("$bin/psbench" transport --transport "$t" --mode bw --size "$size" --iters 200 |
    field bandwidth_MBps)
  echo "$t transport bw ${size} B: ${anchor} MB/s"
  for job in "1 1 $keys 20" "4 2 $keys 5" "1 1 1 200"; do
    read -r n s k iters <<<"$job"
    for b in "${builds[@]}"; do
      line=$(timeout 300 "$b/psrun" --transport "$t" -n "$n" -s "$s" -- "$b/psbench" pushpull \
        --size "$size" --keys "$k" --iters "$iters" --warmup 2 2>&1 | grep '"bench":"pushpull"')
      g=$(field goodput_MBps <<<"$line")
      p50=$(field round_us_p50 <<<"$line")
      p99=$(field round_us_p99 <<<"$line")
      ratio=$(awk -v g="$g" -v a="$anchor" 'BEGIN { printf "%.2f", g / a }')
      echo "$t ${n}x${s} keys=$k $(basename "$(dirname "$b/x")"): goodput $g MB/s = $ratio x anchor, p50 $p50 us, p99 $p99 us"
    done
  done
done
