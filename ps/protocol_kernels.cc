#include "ps/protocol_kernels.h"

namespace psrt::ps {

kernels::DType to_dtype(WireType t) {
  switch (t) {
    case WireType::kF32:
      return kernels::DType::kF32;
    case WireType::kF16:
      return kernels::DType::kF16;
    case WireType::kBF16:
      return kernels::DType::kBF16;
    case WireType::kBytes:
      break;
  }
  throw Error(ErrorCode::kInternal, "to_dtype of a byte payload");
}

WireType to_wire(kernels::DType t) noexcept {
  switch (t) {
    case kernels::DType::kF32:
      return WireType::kF32;
    case kernels::DType::kF16:
      return WireType::kF16;
    case kernels::DType::kBF16:
      return WireType::kBF16;
  }
  return WireType::kBytes;
}

}  // namespace psrt::ps
