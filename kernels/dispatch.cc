#include "kernels/dispatch.h"

#include <fmt/core.h>

#include "psrt/config.h"
#include "psrt/error.h"

#if PSRT_HAVE_CUDA
#include "kernels/fused_sgd_cuda.h"
#endif

namespace psrt::kernels {

StepResult apply_update(const SliceUpdate& u, const OptimizerConfig& cfg, psrt::MemoryType where,
                        void* stream) {
  switch (where) {
    case MemoryType::kHost:
      return fused_sgd_cpu(u, cfg);
    case MemoryType::kCuda:
#if PSRT_HAVE_CUDA
      return fused_sgd_cuda(std::span<const SliceUpdate>(&u, 1), cfg, stream);
#else
      (void)stream;
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("apply_update: the slice of {} {} values is in CUDA memory (CUDA "
                              "update not built into this psrt); keep server slices in host "
                              "memory",
                              u.count, to_string(u.dtype)));
#endif
  }
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("apply_update: unknown memory type {}", static_cast<int>(where)));
}

}  // namespace psrt::kernels
