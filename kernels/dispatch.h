// Where the server applies a slice update: the one call the parameter server makes, whatever
// memory the slice lives in. Host memory runs fused_sgd_cpu on the calling thread; device memory
// will run the CUDA kernel of the same spec (kernels/fused_sgd.h) once it is built.
//
//   SliceUpdate u{weights, momentum, grads, n, DType::kBF16, count, 1.f / n, first_step};
//   apply_update(u, cfg, MemoryType::kHost);
#pragma once

#include "kernels/fused_sgd.h"
#include "psrt/buffer.h"

namespace psrt::kernels {

// Applies one slice's update where its buffers live (weights, momentum and every gradient must
// all be in `where`). Blocking. Throws psrt::Error: kInvalidArgument for an unusable update (see
// fused_sgd_cpu), kUnsupported for device memory in a build without the CUDA update.
void apply_update(const SliceUpdate& u, const SgdConfig& cfg, psrt::MemoryType where);

}  // namespace psrt::kernels
