#!/usr/bin/env bash
# The main job: LeNet on Fashion-MNIST for one epoch, two workers through the parameter server,
# over the best transport this build has (UCX when present). Prints rank 0's JSON summary line.
set -euo pipefail
bin=${1:-build/bin}
if [ ! -x "$bin/pstrain" ]; then
  echo "demo: $bin/pstrain is missing: this build has no LibTorch (install libtorch-dev, or run" \
       "scripts/install_deps.sh, and rebuild)" >&2
  exit 1
fi
transport=$("$bin/psbench" backends | head -n1)
echo "== psrun --transport $transport -n 2 -- pstrain --model lenet --dataset fashion-mnist --epochs 1"
"$bin/psrun" --transport "$transport" -n 2 -- "$bin/pstrain" --model lenet \
  --dataset fashion-mnist --epochs 1
