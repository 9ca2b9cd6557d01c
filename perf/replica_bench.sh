#!/bin/bash
# The cost of server replicas on push_pull: psbench pushpull with --replicas 1 and 2, alternating,
# REPS rounds of each, 2 workers and 2 servers over tcp, a 4 MiB key (one slice: bandwidth) and a
# 600-byte key (latency). One JSON line per run on stdout, prefixed with the round and replicas.
#   perf/replica_bench.sh BIN [REPS]
set -euo pipefail
B=${1:?usage: perf/replica_bench.sh BIN [REPS]}
REPS=${2:-3}
for rep in $(seq 1 "$REPS"); do
  for r in 1 2; do
    for size in 4194304 600; do
      iters=100
      [ "$size" = 600 ] && iters=2000
      line=$(timeout 300 "$B/psrun" --transport tcp -n 2 -s 2 --replicas "$r" -- \
        "$B/psbench" pushpull --size "$size" --iters "$iters" 2>/dev/null | grep '"bench"' |
        sed 's/^\[worker 0\] //')
      echo "rep=$rep replicas=$r $line"
    done
  done
done
