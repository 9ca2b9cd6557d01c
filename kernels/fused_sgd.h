// The server's update math: one fused pass that aggregates N gradients of a slice and applies
// torch.optim.SGD to its weights and momentum (OptimizerConfig::algorithm kSgd; Adam and AdamW run
// through the same entry points, spec in kernels/fused_adam.h). The CPU implementation lives here;
// a CUDA one of the same spec plugs into kernels/dispatch.h.
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
//
// Guard and clipping (OptimizerConfig::skip_nonfinite, OptimizerConfig::max_grad_norm), per step. A
// step is the set of slices one call updates together (fused_sgd_cpu_step, fused_sgd_cuda). With
// both options off nothing below runs: no pre-pass, and results and speed are exactly the above.
// Otherwise a pre-pass runs first, over every element i of every slice of the step:
//   g_i = the aggregated gradient exactly as above (the fixed-order fp32 sum, times grad_scale)
//   sum = sum over the step of (double)g_i * (double)g_i     (fp64; order: see below)
//   norm = sqrt(sum)
// The fp64 sum of squares of fp32 values cannot overflow (each square is below 2^256), so `sum`
// is non-finite exactly when some g_i is: the pre-pass needs no separate non-finite flag.
//   if skip_nonfinite and norm is non-finite: the step is SKIPPED. Nothing is written: weights
//     and momentum of every slice keep their bits. The caller keeps first_step semantics: a
//     skipped first step leaves the momentum buffer "not yet initialised", so the next step
//     that is applied passes first_step again.
//   else if max_grad_norm > 0: coef = float(max_grad_norm / (norm + 1e-6)), computed in fp64 and
//     rounded to fp32 once. If coef < 1 the step is CLIPPED: right after `g = g * grad_scale`
//     every element also does `g = g * coef` (fp32), before weight decay and momentum. This is
//     torch.nn.utils.clip_grad_norm_(max_norm) applied to the mean (or summed) gradient, with
//     the norm over all the step's slices. When skip_nonfinite is off and the norm is not
//     finite, the same formula applies (an infinite norm gives coef 0, a NaN norm no clipping):
//     non-finite gradients then reach the weights, as they would without the option.
// Summation order of the pre-pass (fixed, so results are deterministic): on the CPU, 16 fp64
// partial sums, element i of a slice (counting from 0 in each slice) adding to partial i % 16,
// slices in order, then partials 0..15 added left to right; every CPU ISA follows that order,
// so the ISAs stay bit-identical with the options on. The CUDA update sums in another fixed
// order (kernels/fused_sgd_cuda.h), so its norm may differ from the CPU's in the last bits and
// a clipped step may use a coef one fp32 ulp away; unclipped and skipped steps are bit-identical
// (unless the norm lies within those last bits of the clipping threshold).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#if __cplusplus >= 202002L
#include <span>
#endif

#include "psrt/grad_type.h"
#include "psrt/optimizer.h"

namespace psrt::kernels {

// The gradients' element type is the public one (psrt/grad_type.h): one type from Worker::push
// down to these kernels, with no mapping between layers.
using DType = GradType;
inline constexpr int kNumDTypes = kNumGradTypes;

// to_string(DType) is psrt::to_string(GradType).
constexpr std::size_t dtype_size(DType t) noexcept {
  return element_size(t);
}

// The update's parameters are the public psrt::OptimizerConfig (psrt/optimizer.h): one type
// from Worker::set_optimizer down to these kernels.

// Whether `cfg` asks for the pre-pass over the step's gradients.
inline bool needs_prepass(const OptimizerConfig& cfg) noexcept {
  return cfg.skip_nonfinite || cfg.max_grad_norm > 0.f;
}

// What one step did beyond the update itself.
struct StepResult {
  bool skipped = false;  // skip_nonfinite and a non-finite gradient: nothing was written
  // sqrt of the fp64 sum of squares of the step's aggregated gradient; computed only when a
  // pre-pass ran (needs_prepass(cfg)), else 0. Non-finite when a gradient was.
  double grad_norm = 0;
  float clip_coef = 1.f;  // the factor the gradients were multiplied by: coef when clipped, else 1
  bool clipped = false;   // max_grad_norm > 0 and coef < 1
};

// One slice's update. Trivially copyable: the CUDA path hands the same struct to a kernel.
struct SliceUpdate {
  float* weights = nullptr;   // count fp32 values, updated in place (or written: weights_in)
  float* momentum = nullptr;  // count fp32 values; may be null when OptimizerConfig::momentum == 0
                              // (SGD). Adam/AdamW: exp_avg, required.
  const void* const* grads = nullptr;  // num_grads arrays of count values of `dtype`
  int num_grads = 0;                   // >= 1
  DType dtype = DType::kF32;
  std::size_t count = 0;
  float grad_scale = 1.f;   // 1/num_grads for mean, 1 for sum
  bool first_step = false;  // momentum buffer := g on this step (torch's first step)
  // CPU only (the CUDA backend refuses it): null, or count fp32 values the update reads the
  // weights from instead of `weights`, which it then only writes. The server updates into a
  // second buffer so that a reply in flight from the first is never written (ps/server.h).
  // Must not overlap `weights` unless equal to it.
  const float* weights_in = nullptr;
  float* exp_avg_sq = nullptr;  // Adam/AdamW: count fp32 values (v), required; SGD: unused
  std::uint64_t step = 0;       // Adam/AdamW: this step's number, >= 1 (kernels/fused_adam.h)
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

// Applies one step: every slice's update, on the calling thread, with the guard and clipping
// of `cfg` computed over all of them (one norm for the step). Throws psrt::Error
// (kInvalidArgument) on an unusable SliceUpdate (null pointers, num_grads < 1), a max_grad_norm
// that is negative or not finite, or an ISA this CPU lacks; every slice is checked first and
// nothing is written then. Blocking; thread-safe for steps whose slices do not overlap.
// Gradients must not alias weights or momentum. Results are bit-identical across ISAs for the
// same inputs, with or without the guard and clipping.
// (Hidden from C++17: nvcc compiles fused_sgd_cuda.cu as C++17, without std::span, and needs
// only the types of this header.)
#if __cplusplus >= 202002L
StepResult fused_sgd_cpu_step(std::span<const SliceUpdate> slices, const OptimizerConfig& cfg,
                              CpuIsa isa);
inline StepResult fused_sgd_cpu_step(std::span<const SliceUpdate> slices,
                                     const OptimizerConfig& cfg) {
  return fused_sgd_cpu_step(slices, cfg, best_cpu_isa());
}
#endif

// One slice as a step of its own: fused_sgd_cpu_step({&u, 1}, cfg, isa).
StepResult fused_sgd_cpu(const SliceUpdate& u, const OptimizerConfig& cfg, CpuIsa isa);
inline StepResult fused_sgd_cpu(const SliceUpdate& u, const OptimizerConfig& cfg) {
  return fused_sgd_cpu(u, cfg, best_cpu_isa());
}

}  // namespace psrt::kernels
