#!/usr/bin/env bash
# clang-tidy 14 (.clang-tidy) over every project .cc of a configured build's
# compile_commands.json; `make tidy` configures that build (LibTorch off: see below). Fails on
# any diagnostic, printing them.
#   scripts/tidy.sh BUILD_DIR [JOBS]
#
# Left out: tests/fuzz (libFuzzer entry points, built by `make fuzz` with clang only), the .cu
# files (nvcc), and kernels/fused_sgd.cc and tests/kernels/fused_sgd_contract_test.cc, which ask
# __builtin_cpu_supports("f16c"): GCC's builtin knows that feature, clang 14's does not (an
# error, not a warning, so NOLINT cannot hold it). LibTorch's code (libtorch/, tools/pstrain, tools/pseval, tests/pstrain) is
# left out by configuring without it: clang 14 cannot compile LibTorch 1.13's headers against
# GCC 12's libstdc++ (c10::IValue is used while incomplete), so clang-tidy would report only
# that.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:?usage: scripts/tidy.sh BUILD_DIR [JOBS]}"
jobs="${2:-$(nproc)}"
[[ -f "$build/compile_commands.json" ]] ||
  { echo "tidy.sh: no $build/compile_commands.json: configure $build with CMake first" >&2; exit 2; }
runner=$(command -v run-clang-tidy-14 || command -v run-clang-tidy || true)
[[ -n "$runner" ]] || { echo "tidy.sh: needs clang-tidy 14 (apt-get install clang-tidy)" >&2; exit 2; }
tidy=$(command -v clang-tidy-14 || command -v clang-tidy)

root=$(pwd)
log="$build/tidy.log"
start=$SECONDS
# This checkout's .cc files in the compile commands, less those left out above.
files=$(grep -o '"file": "[^"]*"' "$build/compile_commands.json" | sed 's/^"file": "//; s/"$//' |
  grep "^${root}/.*\.cc\$" | grep -v "^${root}/build" |
  grep -vE "^${root}/(tests/fuzz/|kernels/fused_sgd\.cc\$|tests/kernels/fused_sgd_contract_test\.cc\$)" |
  sort -u)
[[ -n "$files" ]] || { echo "tidy.sh: no project .cc file in $build/compile_commands.json" >&2; exit 2; }
regex="^($(sed 's/[.+]/\\&/g' <<<"$files" | paste -sd'|'))\$"
status=0
# The compile commands are GCC's: a GCC-only warning flag (-Wno-restrict, -Wno-maybe-uninitialized)
# is an error to clang unless it is told to ignore unknown ones.
"$runner" -quiet -clang-tidy-binary "$tidy" -extra-arg=-Wno-unknown-warning-option -p "$build" \
  -j "$jobs" "$regex" >"$log" 2>&1 ||
  status=$?
# A diagnostic of the project's own code: "path:line:col: warning|error: ... [check]".
diagnostics=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E "^${root}/.*: (warning|error): " | sort -u || true)
elapsed=$((SECONDS - start))
if [[ -n "$diagnostics" || $status -ne 0 ]]; then
  [[ -n "$diagnostics" ]] && echo "$diagnostics"
  # No diagnostic of the project's code but a failed run: clang's own errors say why.
  [[ -z "$diagnostics" ]] && { sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E "error: |^Error while" | head -n 20 ||
    tail -n 40 "$log"; }
  echo "tidy: $(grep -c . <<<"$diagnostics") diagnostic(s) in ${elapsed} s (full output: $log)" >&2
  exit 1
fi
echo "tidy: clean in ${elapsed} s"
