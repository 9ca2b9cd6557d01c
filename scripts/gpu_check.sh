#!/usr/bin/env bash
# The GPU checks of issue 5 in one go, for a machine with an NVIDIA GPU, CUDA at /usr/local/cuda,
# CMake and a CUDA PyTorch, but no package archive: unpacks the .debs of scripts/gpu_debs.sh,
# builds psrt against the CUDA LibTorch, runs the gpu-labelled tests, compute-sanitizer on the
# kernel tests, psbench kernel (fp32, bf16) and perf/kernel_vs_pytorch.py. Logs go to $OUT (or
# ./gpu-out).
# Usage: scripts/gpu_check.sh [DEBS_DIR]   (default .gpu-debs)
set -uo pipefail
debs=${1:-.gpu-debs}
out=${OUT:-gpu-out}
mkdir -p "$out"
prefix=/tmp/psrt-gpu-deps
mkdir -p "$prefix"
for f in "$debs"/*.deb; do dpkg -x "$f" "$prefix"; done
export CMAKE_PREFIX_PATH="$prefix/usr:$prefix/usr/lib/x86_64-linux-gnu/cmake"
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:$prefix/usr/lib/x86_64-linux-gnu/ucx:${LD_LIBRARY_PATH:-}"
export UCX_MODULE_DIR="$prefix/usr/lib/x86_64-linux-gnu/ucx"
export PATH="/usr/local/cuda/bin:$prefix/usr/bin:$PATH"
torch_dir=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')/Torch
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"

cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DPSRT_WITH_CUDA=ON -DTorch_DIR="$torch_dir" \
  -DCMAKE_INCLUDE_PATH="$prefix/usr/include" -DCMAKE_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu" \
  >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build build-gpu -j"$(nproc)" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }

ctest --test-dir build-gpu -L gpu --output-on-failure --timeout 300 -j4 2>&1 | tee "$out/ctest-gpu.log" | tail -15
# compute-sanitizer: memcheck and racecheck on the kernel tests (each device test once).
for tool in memcheck racecheck; do
  /usr/local/cuda/bin/compute-sanitizer --tool "$tool" --error-exitcode 9 \
    build-gpu/bin/cuda_kernel_test --gtest_brief=1 >"$out/sanitizer-$tool.log" 2>&1
  echo "compute-sanitizer $tool: exit $? ($(grep -c 'ERROR SUMMARY: 0 errors' "$out/sanitizer-$tool.log") clean summaries)"
done
for dtype in fp32 bf16; do
  build-gpu/bin/psbench kernel --device cuda --workers 8 --params 25600000 --dtype "$dtype" \
    | tee -a "$out/psbench-kernel.jsonl"
  python3 perf/kernel_vs_pytorch.py --psbench build-gpu/bin/psbench --dtype "$dtype" \
    | tee -a "$out/kernel-vs-pytorch.jsonl"
done
