// Gradient element types: one type from the public API (Worker::push) through the wire (ps::
// WireType holds the same values, plus a byte type for control payloads) down to the fused update
// (kernels::DType is this type). Weights are always fp32; gradients may travel as fp16 or bf16
// to halve the bytes pushed (the servers accumulate in fp32).
//
// C++17 as well as C++20: nvcc compiles the CUDA kernel at C++17 and sees this header through
// kernels/fused_sgd.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace psrt {

// The values are on the wire (a header's dtype byte): a new type goes at the end.
enum class GradType : std::uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2 };
inline constexpr int kNumGradTypes = 3;

// Bytes per element: 4 (fp32) or 2 (fp16, bf16); 0 for a value that is no GradType.
constexpr std::size_t element_size(GradType t) noexcept {
  switch (t) {
    case GradType::kF32:
      return 4;
    case GradType::kF16:
    case GradType::kBF16:
      return 2;
  }
  return 0;
}

// "f32", "f16", "bf16" (as the wire's dtypes are named).
constexpr std::string_view to_string(GradType t) noexcept {
  switch (t) {
    case GradType::kF32:
      return "f32";
    case GradType::kF16:
      return "f16";
    case GradType::kBF16:
      return "bf16";
  }
  return "unknown-dtype";
}

}  // namespace psrt
