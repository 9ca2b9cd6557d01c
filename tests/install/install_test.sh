#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, builds tests/install/consumer (docs/cpp-api.md's
# worker example) against it with find_package(psrt), and runs it under the installed psrun; with
# LibTorch in the build, the same for tests/install/torch_consumer (its LibTorch example).
# With the Python module in the build (a third argument: its interpreter), docs/python-api.md's
# example runs from the installed package.
set -euo pipefail
build=$1 src=$2 python=${3:-}
prefix=$build/install-test
rm -rf "$prefix" "$build/consumer-build"
cmake --install "$build" --prefix "$prefix" >/dev/null
cmake -S "$src/tests/install/consumer" -B "$build/consumer-build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$build/consumer-build" -j2 >/dev/null
out=$("$prefix/bin/psrun" --transport tcp -n 2 -- "$build/consumer-build/consumer" 2>&1)
echo "$out"
[ "$(grep -c 'max |w - target| = ' <<<"$out")" = 2 ]

if [ -x "$prefix/bin/pstrain" ]; then
  rm -rf "$build/torch-consumer-build"
  cmake -S "$src/tests/install/torch_consumer" -B "$build/torch-consumer-build" \
    -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
  cmake --build "$build/torch-consumer-build" -j2 >/dev/null
  out=$("$prefix/bin/psrun" --transport tcp -n 2 -- "$build/torch-consumer-build/torch_consumer" 2>&1)
  echo "$out"
  [ "$(grep -c 'loss .* -> ' <<<"$out")" = 2 ]
fi

if [ -n "$python" ]; then
  site=$(echo "$prefix"/lib/python3*/*-packages)
  [ -f "$site/psrt/__init__.py" ] || { echo "install_test: no psrt package under $prefix/lib" >&2; exit 1; }
  out=$(PYTHONPATH=$site "$prefix/bin/psrun" --transport tcp -n 2 -- "$python" \
    "$src/tests/install/python_consumer.py" 2>&1)
  echo "$out"
  [ "$(grep -c 'python rank .*: weights -2.0 ok' <<<"$out")" = 2 ]
fi
