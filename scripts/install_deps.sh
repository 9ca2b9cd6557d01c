#!/usr/bin/env bash
# Installs the Debian 12 packages psrt builds and tests with, and only those that are missing.
# Usage: scripts/install_deps.sh   (as root, or with sudo available)
set -euo pipefail

packages=(
  cmake g++ make pkg-config
  libfmt-dev libcli11-dev nlohmann-json3-dev
  openmpi-bin slurm-wlm munge python3-yaml  # psrun --launcher mpi|slurm, deploy/ tests
  libgtest-dev libgmock-dev
  libucx-dev ucx-utils
  libssl-dev
  clang libclang-rt-14-dev clang-format clang-tidy universal-ctags
  libtorch-dev zlib1g-dev dataset-fashion-mnist
  python3-dev pybind11-dev python3-torch python3-numpy python3-pytest  # import psrt (python/)
  python3-matplotlib
  iproute2 openssh-server openssh-client
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install_deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install_deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
# Refresh the package lists only when apt cannot find a package as they are.
if ! $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
