#!/bin/bash
# Run by clean_root_test.sh inside a clean Debian 12 root, with the packages in /tmp/psrt-test.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
# dpkg without fsync (the root is thrown away afterwards): minutes less on a loaded disk.
echo 'Dpkg::Options { "--force-unsafe-io"; };' >/etc/apt/apt.conf.d/99psrt-test-unsafe-io
cd /tmp/psrt-test
step() { echo "== clean root (${SECONDS} s): $*"; }
fail() { echo "clean root: FAILED: $*" >&2; exit 1; }
# Two workers, each printing "... ok": the job's exact result (tests/install/python_consumer.py).
expect_two_ok() { echo "$1"; [ "$(grep -c 'python rank .*: weights -2.0 ok' <<<"$1")" = 2 ] || fail "$2"; }

step "apt-get install ./psrt_*.deb ./psrt-dev_*.deb (and cmake, g++ for the outside project)"
apt-get update -qq
# Every file of the root now, to compare with after the purge.
snapshot() { find / -xdev \( -path /proc -o -path /tmp -o -path /var/cache -o -path /var/lib/apt \
  -o -path /var/lib/dpkg -o -path /var/log -o -path /root/.cache \) -prune -o -print | sort; }
apt-get install -y -qq --no-install-recommends cmake g++ make >/dev/null
snapshot >/tmp/before
apt-get install -y -qq --no-install-recommends ./psrt_*_amd64.deb ./psrt-dev_*_amd64.deb >/dev/null
dpkg -s psrt | grep -E '^(Version|Depends|Suggests):'

step "psrun --version; man pages"
version=$(psrun --version)
echo "$version"
[ -f /usr/share/man/man1/psrun.1.gz ] && [ -f /usr/share/man/man1/pstrain.1.gz ] || fail "no man pages"

step "psrun -n 2 -- pstrain --model lenet --dataset synthetic --max-steps 20"
out=$(psrun -n 2 -- pstrain --model lenet --dataset synthetic --max-steps 20 2>&1) ||
  { echo "$out"; fail "pstrain under psrun"; }
echo "$out" | tail -n 3
grep -q '"steps":20' <<<"$out" || fail "pstrain's summary line does not say 20 steps"

step "python3 -c 'import psrt, psrt.torch'"
pyver=$(cd / && python3 -c 'import psrt, psrt.torch; print(psrt.__version__)')
[ "$pyver" = "$version" ] || fail "psrt.__version__ $pyver differs from psrun --version $version"

step "a two-worker Python job"
out=$(psrun --transport tcp -n 2 -- python3 python_consumer.py 2>&1) || { echo "$out"; fail "python job"; }
expect_two_ok "$out" "the Python job's result"

step "an outside CMake project against find_package(psrt)"
cmake -S consumer -B consumer-build >/dev/null
cmake --build consumer-build -j2 >/dev/null
out=$(psrun --transport tcp -n 2 -- consumer-build/consumer 2>&1) || { echo "$out"; fail "consumer"; }
echo "$out"
[ "$(grep -c 'max |w - target| = ' <<<"$out")" = 2 ] || fail "the consumer's result"

step "apt-get purge psrt psrt-dev leaves no file behind"
dpkg -L psrt psrt-dev | sort -u >/tmp/owned
apt-get purge -y -qq psrt psrt-dev >/dev/null
# The packages' own files and directories (those no other package shares), and any new path
# naming psrt (bytecode, caches, configuration): none may be left. Their dependencies stay (apt
# leaves them to autoremove), and the wheel below uses them.
snapshot >/tmp/after
left=$( (while read -r f; do [ -e "$f" ] && [ ! -d "$f" ] && echo "$f"; done </tmp/owned;
         comm -13 /tmp/before /tmp/after | grep -i psrt) | sort -u || true)
[ -z "$left" ] || { echo "$left"; fail "files left after the purge (above)"; }
! command -v psrun >/dev/null || fail "psrun is still installed"

step "the wheel in a venv (--system-site-packages: Debian's python3-torch)"
apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
python3 -m venv --system-site-packages /opt/psrt-venv
/opt/psrt-venv/bin/pip install --quiet --no-index --no-deps ./psrt-*.whl
pyver=$(cd / && /opt/psrt-venv/bin/python -c 'import psrt, psrt.torch; print(psrt.__version__)')
[ "$pyver" = "$version" ] || fail "the wheel's psrt.__version__ $pyver differs from the .deb's $version"
out=$(/opt/psrt-venv/bin/psrun --transport tcp -n 2 -- /opt/psrt-venv/bin/python python_consumer.py 2>&1) ||
  { echo "$out"; fail "the wheel's python job"; }
expect_two_ok "$out" "the wheel's Python job"
echo "clean root: all passed in ${SECONDS} s"
