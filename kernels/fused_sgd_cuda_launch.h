// The seam between fused_sgd_cuda / FusedSgdCudaBatch (fused_sgd_cuda.cc, C++20) and their
// launcher (fused_sgd_cuda.cu, compiled by nvcc as C++17, which cannot include <span>). Not
// public.
#pragma once

#include <cstddef>

#include "kernels/fused_sgd.h"

namespace psrt::kernels::detail {

// Launches the update of slices[0, num_slices) (after the guard/clipping pre-pass when `cfg`
// asks for it) and waits for it. Assumes every slice and `cfg` passed fused_sgd_cuda's
// validation and that at least one slice has count > 0.
StepResult launch_fused_sgd_cuda(const SliceUpdate* slices, std::size_t num_slices,
                                 const OptimizerConfig& cfg, void* stream);

// A slice table resident in device memory with the launch parameters that go with it; defined
// in fused_sgd_cuda.cu.
struct PreparedLaunch;

// Builds the table of slices[0, num_slices) and copies it to the device that holds the first
// non-empty slice's weights (blocking). Same assumptions as launch_fused_sgd_cuda. Never null.
PreparedLaunch* prepare_fused_sgd_cuda(const SliceUpdate* slices, std::size_t num_slices,
                                       const OptimizerConfig& cfg);
// Enqueues one kernel launch of `prepared` on `stream` and returns without waiting.
void launch_prepared_fused_sgd_cuda(const PreparedLaunch& prepared, void* stream);
int prepared_device(const PreparedLaunch& prepared) noexcept;
// Frees the device table (cudaFree waits for the device's queued work first). Errors ignored.
void destroy_prepared_fused_sgd_cuda(PreparedLaunch* prepared) noexcept;

}  // namespace psrt::kernels::detail
