#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, builds tests/install/consumer (the README's
# worker example) against it with find_package(psrt), and runs it under the installed psrun.
set -euo pipefail
build=$1 src=$2
prefix=$build/install-test
rm -rf "$prefix" "$build/consumer-build"
cmake --install "$build" --prefix "$prefix" >/dev/null
cmake -S "$src/tests/install/consumer" -B "$build/consumer-build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$build/consumer-build" -j2 >/dev/null
out=$("$prefix/bin/psrun" --transport tcp -n 2 -- "$build/consumer-build/consumer" 2>&1)
echo "$out"
[ "$(grep -c 'max |w - target| = ' <<<"$out")" = 2 ]
