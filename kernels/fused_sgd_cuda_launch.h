// The seam between fused_sgd_cuda (fused_sgd_cuda.cc, C++20) and its launcher
// (fused_sgd_cuda.cu, compiled by nvcc as C++17, which cannot include <span>). Not public.
#pragma once

#include <cstddef>

#include "kernels/fused_sgd.h"

namespace psrt::kernels::detail {

// Launches the update of slices[0, num_slices) (after the guard/clipping pre-pass when `cfg`
// asks for it) and waits for it. Assumes every slice and `cfg` passed fused_sgd_cuda's
// validation and that at least one slice has count > 0.
StepResult launch_fused_sgd_cuda(const SliceUpdate* slices, std::size_t num_slices,
                                 const SgdConfig& cfg, void* stream);

}  // namespace psrt::kernels::detail
