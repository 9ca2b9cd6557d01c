#!/bin/bash
# Backup workers against a straggler (docs/elastic.md): psbench pushpull, 4 workers, 1 server,
# tcp, one 1 MiB key, each round after COMPUTE_MS of "compute" (a sleep: the host has few cores
# and a busy-looping straggler would free cores for the others); worker 3 at half speed (twice
# the compute). Four jobs per repetition, alternating: undisturbed (b 0), slowed with b 0 (today:
# every round waits for it), slowed with b 1, undisturbed with b 1. One line per job: rep, b,
# slowed, and rank 0's JSON (round_us_mean = the job's wall time per round).
#   perf/backup_workers.sh BIN [REPS] [ITERS] [COMPUTE_MS]
set -euo pipefail
B=${1:?usage: perf/backup_workers.sh BIN [REPS] [ITERS] [COMPUTE_MS]}
REPS=${2:-3}
ITERS=${3:-400}
COMPUTE_MS=${4:-20}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

job() {  # job B_WORKERS SLOWED
  local slow=-1
  [ "$2" = 1 ] && slow=3
  "$B/psrun" --transport tcp -n 4 -s 1 --backup-workers "$1" -- \
    "$B/psbench" pushpull --size 1048576 --iters "$ITERS" --warmup 10 \
    --compute-ms "$COMPUTE_MS" --slow-rank "$slow" --slow-factor 2 > "$OUT/log" 2>&1
  echo "rep=$rep b=$1 slowed=$2 $(grep '"bench"' "$OUT/log" | sed 's/^\[worker 0\] //')"
}

for rep in $(seq 1 "$REPS"); do
  job 0 0
  job 0 1
  job 1 1
  job 1 0
done
