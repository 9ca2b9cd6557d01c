#!/usr/bin/env bash
# psbench pushpull for N in {1,2,4,8} workers and S in {1,2} servers, per backend, plus the
# anchor in the same run: psbench transport bandwidth of that backend at the same size.
# Usage: perf/pushpull_matrix.sh [BIN_DIR] [SIZE] [ITERS]
set -euo pipefail
bin=${1:-build/bin} size=${2:-4194304} iters=${3:-50}
for t in $("$bin/psbench" backends); do
  "$bin/psbench" transport --transport "$t" --mode bw --size "$size" --iters 200 2>/dev/null
  for s in 1 2; do
    for n in 1 2 4 8; do
      "$bin/psrun" --transport "$t" -n "$n" -s "$s" -- "$bin/psbench" pushpull --size "$size" \
        --iters "$iters" 2>/dev/null | sed 's/^\[worker 0\] //'
    done
  done
done
