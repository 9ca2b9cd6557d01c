// The server's update math: one fused pass that aggregates N gradients of a slice and applies
// torch.optim.SGD to its weights and momentum. The CPU implementation lives here; a CUDA one of
// the same spec plugs into kernels/dispatch.h.
//
// Spec, per element i, in exactly this order (no contraction into FMA, so every ISA and the
// CUDA kernel give bit-identical results):
//   g = float(grads[0][i]); for j in 1..N-1: g = g + float(grads[j][i])   (fixed order)
//   g = g * grad_scale                                   (1/N for mean, 1 for sum)
//   if weight_decay != 0: g = g + weight_decay * w
//   if momentum != 0:
//     m = first_step ? g : momentum * m + (1 - dampening) * g
//     g = nesterov ? g + momentum * m : m
//   w = w - lr * g
// All arithmetic is fp32; (1 - dampening) is computed once per call in fp32. fp16 and bf16
// gradients are widened exactly to fp32 before the sum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace psrt::kernels {

enum class DType : std::uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2 };
inline constexpr int kNumDTypes = 3;

std::size_t dtype_size(DType t) noexcept;
std::string_view to_string(DType t) noexcept;

struct SgdConfig {
  float lr = 0.01f;
  float momentum = 0.f;
  float dampening = 0.f;
  float weight_decay = 0.f;
  bool nesterov = false;
};

// One slice's update. Trivially copyable: the CUDA path hands the same struct to a kernel.
struct SliceUpdate {
  float* weights = nullptr;   // count fp32 values, updated in place
  float* momentum = nullptr;  // count fp32 values; may be null when SgdConfig::momentum == 0
  const void* const* grads = nullptr;  // num_grads arrays of count values of `dtype`
  int num_grads = 0;                   // >= 1
  DType dtype = DType::kF32;
  std::size_t count = 0;
  float grad_scale = 1.f;   // 1/num_grads for mean, 1 for sum
  bool first_step = false;  // momentum buffer := g on this step (torch's first step)
};

enum class CpuIsa : std::uint8_t { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
std::string_view to_string(CpuIsa isa) noexcept;

inline constexpr CpuIsa kAllCpuIsas[] = {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512};

// Whether this build and this CPU (with OS support for its registers) can run `isa`. kAvx2 needs
// AVX2+F16C; kAvx512 needs AVX-512F+BW. Ignores PSRT_CPU_ISA. Thread-safe.
bool cpu_has_isa(CpuIsa isa) noexcept;

// The widest ISA this CPU supports, capped by PSRT_CPU_ISA=scalar|avx2|avx512 when set (a cap
// above what the CPU has yields what it has). Reads the environment on every call, so a test or
// a launcher may change it; throws psrt::Error(kInvalidArgument) on any other value.
CpuIsa best_cpu_isa();

// Applies one slice's update on the calling thread. Throws psrt::Error(kInvalidArgument) on an
// unusable SliceUpdate (null pointers, num_grads < 1) or an ISA this CPU lacks; nothing is
// written then. Blocking; thread-safe for slices that do not overlap. Gradients must not alias
// weights or momentum. Results are bit-identical across ISAs for the same inputs.
void fused_sgd_cpu(const SliceUpdate& u, const SgdConfig& cfg, CpuIsa isa);
inline void fused_sgd_cpu(const SliceUpdate& u, const SgdConfig& cfg) {
  fused_sgd_cpu(u, cfg, best_cpu_isa());
}

}  // namespace psrt::kernels
