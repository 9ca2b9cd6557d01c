#!/usr/bin/env bash
# The training tables of perf/RESULTS.md: LeNet on Fashion-MNIST through the parameter server.
#   perf/training_matrix.sh [BIN] [OUT]     (BIN = build/bin, OUT = perf/out/training)
# Runs one after another (never two jobs at once): accuracy in sync/async/ssp with 4 workers for
# 5 epochs; overhead at N = 1 (PS vs --no-ps, same batch and threads); scaling N = 1, 2, 4 and
# --no-ps for 2 epochs. Each run's summary line goes to OUT/summary.jsonl, its metrics to
# OUT/<name>.jsonl; the tables are printed at the end.
set -euo pipefail
bin=${1:-build/bin}
out=${2:-perf/out/training}
mkdir -p "$out"
: > "$out/summary.jsonl"
transport=$("$bin/psbench" backends | head -n1)
train="$bin/pstrain --model lenet --dataset fashion-mnist"

run() {  # run NAME CMD...
  local name=$1; shift
  echo "== $name: $*" >&2
  rm -f "$out/$name.jsonl"
  "$@" --metrics "$out/$name.jsonl" 2>"$out/$name.log" | sed -n 's/^\(\[worker 0\] \)\{0,1\}\({.*\)$/\2/p' |
    jq -c --arg name "$name" '. + {run: $name}' | tee -a "$out/summary.jsonl"
}

ps() { echo "$bin/psrun --transport $transport $*"; }

# Accuracy: 4 workers, 5 epochs, the three consistency modes.
run sync4  $(ps -n 4) -- $train --epochs 5
run async4 $(ps -n 4 --mode async) -- $train --epochs 5
run ssp4   $(ps -n 4 --mode ssp --staleness 2) -- $train --epochs 5
# Overhead at N = 1: same batch, same threads, one after the other.
for t in 1 2; do
  run "noPS_t$t" $train --epochs 1 --no-ps --threads $t
  run "ps1_t$t" $(ps -n 1) -- $train --epochs 1 --threads $t
done
# Scaling: 2 epochs each, default threads (--no-ps: every core; N workers: cores / (N + 1)).
run scale_noPS $train --epochs 2 --no-ps
for n in 1 2 4; do run "scale_n$n" $(ps -n $n) -- $train --epochs 2; done

echo
echo "| run | workers | samples/s per worker | samples/s total | test accuracy | wall s |"
echo "|---|---|---|---|---|---|"
jq -r '"| \(.run) | \(.workers) | \(.samples_per_sec_per_worker|floor) | \(.samples_per_sec|floor) | \(.test_accuracy) | \(.wall_s*10|floor/10) |"' "$out/summary.jsonl"
