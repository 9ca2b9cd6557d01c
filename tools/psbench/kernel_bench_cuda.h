// psbench kernel --device cuda (see kernel_bench.h for what is timed and how bytes are counted).
// Compiled only in builds with PSRT_HAVE_CUDA.
#pragma once

#include "kernel_bench.h"
#include "kernels/fused_sgd.h"

namespace psrt::bench {

// Checks that CUDA device `device_index` is usable (throws psrt::Error kUnsupported naming the
// CUDA runtime's reason, or kInvalidArgument for an index past the device count, before any
// output), then prints one JSON line per config.params with gradients of `dtype`.
void run_cuda_kernel_bench(const KernelBenchConfig& config, int device_index, kernels::DType dtype);

}  // namespace psrt::bench
