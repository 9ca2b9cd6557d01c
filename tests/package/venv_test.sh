#!/usr/bin/env bash
# `pip install .` as a PyTorch user runs it: a venv of Debian's python3 with its site packages
# (python3-torch), pip install --no-build-isolation of this source tree (reusing make package's
# build directory, so that nothing compiles twice), then from outside the tree and without
# PYTHONPATH: import psrt, psrt.torch; the venv's psrun console script with a two-worker job; and
# the refusal when the torch found is not the one psrt was built against.
# Usage: venv_test.sh SOURCE_DIR PACKAGE_BUILD_DIR WORK_DIR
set -euo pipefail
src=$(realpath "$1") package_build=$(realpath "$2") work=$(realpath -m "$3")
fail() { echo "venv_test: FAILED: $*" >&2; exit 1; }
rm -rf "$work"
mkdir -p "$work"
cd "$work"
unset PYTHONPATH
/usr/bin/python3 -m venv --system-site-packages v
PSRT_CMAKE_BUILD_DIR=$package_build v/bin/pip install --quiet --no-build-isolation "$src" ||
  fail "pip install --no-build-isolation $src"

version=$(v/bin/python -c 'import psrt, psrt.torch; print(psrt.__version__)')
echo "import psrt, psrt.torch: psrt $version from $(v/bin/python -c 'import psrt; print(psrt.__file__)')"
[ "$(v/bin/psrun --version)" = "$version" ] || fail "psrun --version differs from psrt.__version__ $version"

out=$(v/bin/psrun --transport tcp -n 2 -- v/bin/python "$src/tests/install/python_consumer.py" 2>&1) ||
  { echo "$out"; fail "the two-worker job"; }
echo "$out"
[ "$(grep -c 'python rank .*: weights -2.0 ok' <<<"$out")" = 2 ] || fail "the job's result"

# A torch of another version first on the path: import psrt must refuse, naming both versions.
mkdir -p other-torch/torch other-torch/torch-0.0.1.dist-info
touch other-torch/torch/__init__.py
printf 'Metadata-Version: 2.1\nName: torch\nVersion: 0.0.1\n' >other-torch/torch-0.0.1.dist-info/METADATA
if out=$(PYTHONPATH=$work/other-torch v/bin/python -c 'import psrt' 2>&1); then
  fail "import psrt accepted torch 0.0.1"
fi
echo "$out" | tail -n 1
grep -q "ImportError: psrt $version was built against torch .*, but this interpreter finds torch 0.0.1" <<<"$out" ||
  fail "the refusal does not name both torch versions"
echo "venv_test: all passed"
