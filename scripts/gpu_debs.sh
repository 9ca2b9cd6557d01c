#!/usr/bin/env bash
# Downloads (does not install) the Debian 12 packages a GPU machine without a package archive
# needs to build and test psrt: UCX and its libraries, and the build-only dependencies. Run it on
# a Debian 12 machine with the archive; carry the folder to the GPU machine and run
# scripts/gpu_check.sh there.
# Usage: scripts/gpu_debs.sh [DIR]   (default .gpu-debs, ignored by git)
set -euo pipefail
dir=${1:-.gpu-debs}
mkdir -p "$dir"
cd "$dir"
packages=(
  libucx0 libucx-dev ucx-utils libibverbs1 librdmacm1 libnuma1 libnl-3-200 libnl-route-3-200
  libfmt9 libfmt-dev libcli11-dev nlohmann-json3-dev libgtest-dev libgmock-dev
  libssl-dev libssl3 zlib1g-dev
)
apt-get download "${packages[@]}" >/dev/null
ls -1 *.deb | wc -l | xargs echo "gpu_debs: packages in $PWD:"
du -sh . | cut -f1 | xargs echo "gpu_debs: size"
