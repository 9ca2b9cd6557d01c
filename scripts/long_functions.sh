#!/usr/bin/env bash
# Lists the functions longer than a threshold (default 80 lines, from the signature's line to
# the closing brace) in the given folders (default: ps runtime tools libtorch), longest first,
# as "LINES FILE:LINE NAME". Uses universal-ctags (its end: field). With --check, exits 1 when
# any is listed, so that CI (.ci/run) holds the line. Tables are allowed (TABLES below).
#   scripts/long_functions.sh [--check] [--max N] [FOLDER...]
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
max=80
folders=()
while (($#)); do
  case "$1" in
    --check) check=1 ;;
    --max)
      max="${2:?--max takes a number of lines}"
      shift
      ;;
    -h | --help)
      sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *) folders+=("$1") ;;
  esac
  shift
done
((${#folders[@]})) || folders=(ps runtime tools libtorch)

# Tables, as FILE:FUNCTION: functions whose body is one declaration of data, a row per entry.
# They grow a row per new entry and read best whole, so no length applies to them.
TABLES=(
  runtime/env_contract.cc:env_contract # the PSRT_* environment contract (psrun --help-env)
)

if ! ctags --version 2>/dev/null | grep -q "Universal Ctags"; then
  echo "long_functions.sh: needs universal-ctags (apt-get install universal-ctags)" >&2
  exit 2
fi

found=$(ctags --languages=C++ --langmap=C++:+.cu --kinds-C++=f --fields=+ne -o - -R \
  "${folders[@]}" |
  awk -F'\t' -v max="$max" -v tables="${TABLES[*]}" '
  BEGIN { n = split(tables, t, " "); for (i = 1; i <= n; i++) table[t[i]] = 1 }
  {
    line = ""; end = ""
    for (i = 4; i <= NF; i++) {
      if ($i ~ /^line:/) line = substr($i, 6)
      if ($i ~ /^end:/) end = substr($i, 5)
    }
    if (line != "" && end != "" && end - line + 1 > max && !(($2 ":" $1) in table))
      printf "%4d %s:%s %s\n", end - line + 1, $2, line, $1
  }' | sort -rn)

[[ -n "$found" ]] && echo "$found"
if ((check)) && [[ -n "$found" ]]; then
  echo "long_functions.sh: $(wc -l <<<"$found") function(s) over $max lines" >&2
  exit 1
fi
exit 0
