#!/usr/bin/env bash
# The format check: every C++ and CUDA source the repository tracks must be as clang-format 14
# (.clang-format) writes it. Prints each file that is not and the command that fixes them all;
# exits 1 if there is one.
#   scripts/check_format.sh          check (CI: make check-format)
#   scripts/check_format.sh --fix    rewrite the files in place
set -euo pipefail
cd "$(dirname "$0")/.."
format=$(command -v clang-format-14 || command -v clang-format || true)
[[ -n "$format" ]] || { echo "check_format.sh: needs clang-format 14 (apt-get install clang-format)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
if [[ "${1:-}" == "--fix" ]]; then
  "$format" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$format" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  printf '%s\n' "${bad[@]}"
  echo "check-format: ${#bad[@]} file(s) differ from clang-format's layout; fix them with" \
       "scripts/check_format.sh --fix (or clang-format -i FILE)" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files as clang-format writes them"
