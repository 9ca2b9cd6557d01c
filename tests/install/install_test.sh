#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, builds tests/install/consumer against it with
# find_package(psrt), and runs the result.
set -euo pipefail
build=$1 src=$2
prefix=$build/install-test
rm -rf "$prefix" "$build/consumer-build"
cmake --install "$build" --prefix "$prefix" >/dev/null
cmake -S "$src/tests/install/consumer" -B "$build/consumer-build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$build/consumer-build" -j2 >/dev/null
out=$("$build/consumer-build/consumer")
echo "consumer printed: $out"
[ "$out" = "hello:psrt" ]
