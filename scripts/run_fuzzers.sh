#!/usr/bin/env bash
# Runs libFuzzer targets from their checked-in seeds, JOBS of them at once (each is one
# single-threaded process, so on 2 cores two run in the time of one), each for SECONDS. Fails
# on the first crash, sanitizer report, leak or input slower than 10 s, printing the end of that
# target's log and where the input was saved; prints each target's last log line otherwise.
# `make fuzz` builds the targets and calls it.
#   scripts/run_fuzzers.sh BUILD_DIR SECONDS JOBS TARGET:SEEDS_DIR...
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/run_fuzzers.sh BUILD_DIR SECONDS JOBS TARGET:SEEDS_DIR...}
seconds=${2:?seconds}
jobs=${3:?jobs}
shift 3

# One target: its output folder build/fuzz-out/TARGET holds the log, the corpus it grew and
# anything it saved; the exit status says whether it found something.
run_one() {
  local build=$1 seconds=$2 spec=$3
  local t=${spec%%:*} seeds=${spec#*:}
  local out=$build/fuzz-out/$t
  rm -rf "$out" && mkdir -p "$out/corpus"
  "$build/bin/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$out/" "$out/corpus" "$seeds" >"$out/log" 2>&1
}
export -f run_one

echo "fuzz: $* for $seconds s each, $jobs at a time"
status=0
printf '%s\n' "$@" | xargs -P "$jobs" -I{} bash -c 'run_one "$@"' _ "$build" "$seconds" {} ||
  status=$?
for spec in "$@"; do
  t=${spec%%:*}
  out=$build/fuzz-out/$t
  saved=$(ls "$out"/crash-* "$out"/leak-* "$out"/timeout-* "$out"/oom-* 2>/dev/null | head -1 || true)
  if [[ -n "$saved" ]] || ! grep -q '^Done [0-9]* runs' "$out/log"; then
    tail -n 60 "$out/log"
    echo "fuzz: $t failed; input saved as ${saved:-(none)} (replay: $build/bin/$t FILE)"
    status=1
  else
    echo "fuzz: $t: $(tail -n 1 "$out/log")"
  fi
done
exit $((status == 0 ? 0 : 1))
