#!/usr/bin/env bash
# The packages where a user installs them: a clean Debian 12 root (mmdebstrap --variant=apt), the
# .debs of `make package` installed there with apt (dependencies from the archive), then
# clean_root_inside.sh in it: psrun with pstrain, import psrt, a two-worker Python job, an outside
# CMake project against find_package(psrt), apt-get purge leaving no file; then the wheel in a
# venv of the same root (import and a two-worker job).
# Usage: clean_root_test.sh PACKAGES_DIR SOURCE_DIR WORK_DIR
# The root's tarball is kept in WORK_DIR and reused for 12 hours (one CI run builds it once).
# Exit 77 (ctest: skipped) only when a root cannot be made here: no mmdebstrap, or no namespaces.
set -euo pipefail
packages=$(realpath -m "$1") src=$(realpath "$2") work=$(realpath -m "$3")
skip() { echo "clean_root_test: SKIPPED: $*"; exit 77; }
fail() { echo "clean_root_test: $*" >&2; exit 1; }

command -v mmdebstrap >/dev/null ||
  skip "mmdebstrap is not installed (apt-get install mmdebstrap, or scripts/install_deps.sh --dev)"
[ "$(id -u)" -eq 0 ] || skip "needs root to enter the root (chroot, mounts); run as root"
unshare --mount --fork true 2>/dev/null ||
  skip "cannot make a mount namespace here (unshare --mount failed): no clean root possible"

shopt -s nullglob
debs=("$packages"/psrt_*_amd64.deb "$packages"/psrt-dev_*_amd64.deb)
wheels=("$packages"/psrt-*.whl)
[ ${#debs[@]} -eq 2 ] && [ ${#wheels[@]} -eq 1 ] ||
  fail "expected psrt_*.deb, psrt-dev_*.deb and one psrt-*.whl in $packages (found: ${debs[*]} ${wheels[*]}): run make package"

mkdir -p "$work"
tarball=$work/bookworm-apt.tar
if [ -z "$(find "$tarball" -mmin -720 2>/dev/null)" ]; then
  start=$SECONDS
  rm -f "$tarball"
  mmdebstrap --quiet --variant=apt --mode=unshare --format=tar bookworm "$tarball.part" ||
    skip "mmdebstrap --mode=unshare could not build a root here (see above)"
  mv "$tarball.part" "$tarball"
  echo "clean_root_test: built the Debian 12 root in $((SECONDS - start)) s"
fi

root=$work/root
rm -rf --one-file-system "$root" "$root.upper" "$root.work"
mkdir -p "$root"
tar -C "$root" --numeric-owner -xf "$tarball"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
mkdir -p "$root/tmp/psrt-test"
cp "${debs[@]}" "${wheels[@]}" "$src/tests/package/clean_root_inside.sh" \
  "$src/tests/install/python_consumer.py" "$root/tmp/psrt-test/"
cp -r "$src/tests/install/consumer" "$root/tmp/psrt-test/consumer"

# In a mount namespace of its own: /proc, /sys (hwloc's topology), /dev and /dev/shm for the
# jobs; this machine's apt archive as the lower layer of an overlay, so that packages it already
# downloaded are not downloaded again (what apt adds goes to the upper layer, inside WORK_DIR).
start=$SECONDS
set +e
unshare --mount --pid --fork --kill-child bash -euc '
  root=$1
  mount -t proc proc "$root/proc"
  mount --rbind /sys "$root/sys"
  mount --rbind /dev "$root/dev"
  mount -t tmpfs tmpfs "$root/dev/shm"
  mkdir -p "$root.upper" "$root.work"
  mount -t overlay overlay -o "lowerdir=/var/cache/apt/archives,upperdir=$root.upper,workdir=$root.work" \
    "$root/var/cache/apt/archives" 2>/dev/null || echo "clean_root_test: no apt cache overlay; downloading"
  chroot "$root" /bin/bash /tmp/psrt-test/clean_root_inside.sh
' _ "$root"
rc=$?
set -e
echo "clean_root_test: inside the root for $((SECONDS - start)) s (rc $rc)"
# --one-file-system: never into a mount, should one have outlived the namespace.
rm -rf --one-file-system "$root" "$root.upper" "$root.work"
exit $rc
