// Where the server applies a slice update: the one call the parameter server makes, whatever
// memory the slice lives in. Host memory runs fused_sgd_cpu on the calling thread; device memory
// runs fused_sgd_cuda (kernels/fused_sgd_cuda.h, same spec) in builds with PSRT_HAVE_CUDA.
//
//   SliceUpdate u{weights, momentum, grads, n, DType::kBF16, count, 1.f / n, first_step};
//   const StepResult r = apply_update(u, cfg, MemoryType::kHost);
//   if (r.skipped) { /* a non-finite gradient: nothing written (cfg.skip_nonfinite) */ }
#pragma once

#include "kernels/fused_sgd.h"
#include "psrt/buffer.h"

namespace psrt::kernels {

// Applies one slice's update, as a step of its own (the guard and clipping of `cfg` see this
// slice only), where its buffers live (weights, momentum and every gradient must all be in
// `where`), and returns what the step did (skipped, norm, clip factor; see fused_sgd.h).
// Blocking: a CUDA update runs on `stream` (a cudaStream_t of the device holding the weights;
// null = its legacy default stream) and is complete on return. Throws psrt::Error:
// kInvalidArgument for an unusable update (see fused_sgd_cpu_step), kUnsupported for device
// memory in a build without the CUDA update (or with no usable GPU), kSystem for a failing CUDA
// call.
StepResult apply_update(const SliceUpdate& u, const OptimizerConfig& cfg, psrt::MemoryType where,
                        void* stream = nullptr);

}  // namespace psrt::kernels
