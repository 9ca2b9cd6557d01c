#include "kernels/dispatch.h"

#include <fmt/core.h>

#include "psrt/error.h"

namespace psrt::kernels {

void apply_update(const SliceUpdate& u, const SgdConfig& cfg, psrt::MemoryType where) {
  switch (where) {
    case MemoryType::kHost:
      fused_sgd_cpu(u, cfg);
      return;
    case MemoryType::kCuda:
      // The CUDA kernel plugs in here; until then say so rather than touch device pointers.
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("apply_update: the slice of {} {} values is in CUDA memory (CUDA "
                              "update not built into this psrt); keep server slices in host "
                              "memory",
                              u.count, to_string(u.dtype)));
  }
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("apply_update: unknown memory type {}", static_cast<int>(where)));
}

}  // namespace psrt::kernels
