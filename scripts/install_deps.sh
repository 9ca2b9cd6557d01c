#!/usr/bin/env bash
# Installs the Debian 12 packages psrt needs, and only those that are missing.
# Usage: scripts/install_deps.sh          what building and running psrt needs: the programs
#                                         (psrun, pstrain, pseval, psbench), the library and the
#                                         Python module (`make demo`, `make build`)
#        scripts/install_deps.sh --dev    that and what the checks need: the test suite and its
#                                         launchers (Slurm, munge, OpenMPI, sshd), clang tools,
#                                         sanitizers and fuzzing, packaging (`make test`, `make
#                                         tidy`, `make fuzz`, `make package`, .ci/run)
# As root, or with sudo available. To add a package, append it to the one list below it belongs to.
set -euo pipefail

# Building and running psrt.
minimal_packages=(
  cmake g++ make pkg-config
  libfmt-dev libcli11-dev nlohmann-json3-dev
  libucx-dev ucx-utils
  libibverbs-dev libhwloc-dev  # psrun --preflight (RDMA ports), placement (hwloc)
  libssl-dev
  libtorch-dev zlib1g-dev dataset-fashion-mnist  # pstrain, pseval; the demo's data set
  python3-dev pybind11-dev python3-torch python3-numpy  # import psrt (python/)
  prometheus-cpp-dev  # psrun --metrics-port
)

# Testing, checking and packaging psrt.
dev_packages=(
  libgtest-dev libgmock-dev python3-pytest
  openmpi-bin slurm-wlm munge python3-yaml  # psrun --launcher mpi|slurm, deploy/ tests
  iproute2 openssh-server openssh-client    # tests/multihost (namespaces), psrun --hosts
  clang libclang-rt-14-dev clang-format clang-tidy universal-ctags  # tidy, format, fuzz
  python3-matplotlib  # perf/ plots
  prometheus  # the metrics test scrapes a job with a real Prometheus
  dpkg-dev help2man mmdebstrap uidmap  # make package (dpkg-shlibdeps, man pages), its clean-root test
  ccache  # make package takes make build's objects (Makefile, CCACHE)
)

case "${1:-}" in
  "") packages=("${minimal_packages[@]}") ;;
  --dev) packages=("${minimal_packages[@]}" "${dev_packages[@]}") ;;
  *) echo "install_deps: unknown argument '$1' (usage: scripts/install_deps.sh [--dev])" >&2; exit 2 ;;
esac

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
