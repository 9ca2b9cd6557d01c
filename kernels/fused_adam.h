// The server's Adam and AdamW update: the same fused pass as kernels/fused_sgd.h (one call that
// aggregates N gradients of a slice and updates its state), applying torch.optim.Adam or
// torch.optim.AdamW (OptimizerConfig::algorithm) instead of SGD. The entry points are fused_sgd.h's
// (fused_sgd_cpu_step, apply_update): they read the algorithm from the config. This header is the
// spec of the arithmetic; kernels/fused_sgd_*.cc implement it per ISA, fused_sgd_cuda.cu on the
// GPU.
//
// State of a slice (SliceUpdate): `momentum` is exp_avg (m), `exp_avg_sq` is v, both count fp32
// values, zero before the first step; `step` is the number of this step, 1 on the first
// (torch's state['step'] after its increment). The caller counts steps per slice and does not
// count a skipped one (the guard below).
//
// Per call, computed once in fp64 from the fp32 config and rounded to fp32 once each, so every ISA
// and the CUDA kernel use the same constants (lr is the round's learning rate):
//   one_minus_beta1 = float(1 - beta1)            one_minus_beta2 = float(1 - beta2)
//   neg_step_size   = float(-lr / (1 - beta1^step))
//   bc2_sqrt        = float(sqrt(1 - beta2^step))
//   decay           = float(1 - lr * weight_decay)                    (AdamW only)
// (pow and sqrt are the C library's fp64 functions, as Python's ** and math.sqrt in torch.)
//
// Per element i, in exactly this order, all fp32, no contraction into FMA:
//   g = float(grads[0][i]); for j in 1..N-1: g = g + float(grads[j][i])   (fixed order)
//   g = g * grad_scale                                   (1/N for mean, 1 for sum)
//   [g = g * clip_coef when the step is clipped: fused_sgd.h's pre-pass, shared]
//   Adam,  weight_decay != 0:  g = g + weight_decay * w                    (L2)
//   AdamW, weight_decay != 0:  w = w * decay                               (decoupled)
//   m = beta1 * m + one_minus_beta1 * g
//   v = beta2 * v + (one_minus_beta2 * g) * g
//   d = sqrt(v) / bc2_sqrt + eps                          (sqrt correctly rounded)
//   w = w + (neg_step_size * m) / d
// This is torch 1.13's _single_tensor_adam/_single_tensor_adamw (foreach=False) operation for
// operation; torch's own CPU kernels fuse some of these multiply-adds (FMA) in their vector
// bodies, so torch agrees to rounding, not bit for bit (tests/kernels/fused_adam_test.cc bounds
// it). Hyperparameters are fp32 here and fp64 in torch: a beta of 0.999 is 0.99900001287 here.
//
// Guard and clipping: fused_sgd.h's pre-pass, unchanged (norm of the aggregated gradient g after
// grad_scale, before weight decay). A skipped step writes nothing: weights, m and v keep their
// bits, and the caller does not count the step.
//
// The CUDA kernel (fused_sgd_cuda.h) performs the same operations in the same order with IEEE
// division and square root (-fmad=false, no fast math): its results equal the CPU's bit for bit.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "kernels/fused_sgd.h"

namespace psrt::kernels {

// The per-call constants above, for `cfg` at step `step` (>= 1).
struct AdamConstants {
  float one_minus_beta1;
  float one_minus_beta2;
  float neg_step_size;
  float bc2_sqrt;
  float decay;  // AdamW's (1 - lr * weight_decay); 1 for Adam
};
// `static inline` as kernels/fused_sgd_internal.h explains: the ISA files (compiled with -mavx2,
// -mavx512f) and the CUDA launcher each get their own copy, never one a linker picked from
// another ISA's object.
static inline AdamConstants adam_constants(const OptimizerConfig& cfg,
                                           std::uint64_t step) noexcept {
  const double lr = cfg.lr;
  const double b1 = cfg.beta1;
  const double b2 = cfg.beta2;
  const auto t = static_cast<double>(step);
  return AdamConstants{
      static_cast<float>(1.0 - b1),
      static_cast<float>(1.0 - b2),
      static_cast<float>(-lr / (1.0 - std::pow(b1, t))),
      static_cast<float>(std::sqrt(1.0 - std::pow(b2, t))),
      cfg.algorithm == OptimizerAlgorithm::kAdamW
          ? static_cast<float>(1.0 - lr * static_cast<double>(cfg.weight_decay))
          : 1.f,
  };
}

// Whether `cfg` runs Adam or AdamW.
inline bool is_adam(const OptimizerConfig& cfg) noexcept {
  return cfg.algorithm == OptimizerAlgorithm::kAdam || cfg.algorithm == OptimizerAlgorithm::kAdamW;
}

std::string_view to_string(OptimizerAlgorithm a) noexcept;
// "sgd", "adam" or "adamw" (as to_string writes them); false for anything else.
bool parse_algorithm(std::string_view text, OptimizerAlgorithm& out) noexcept;
// "B1,B2" (psrun --betas, PSRT_BETAS, pstrain --betas) into cfg.beta1/beta2; false when it is
// not two numbers separated by a comma (their range is decode_optimizer's to check).
bool parse_betas(std::string_view text, OptimizerConfig& cfg);

}  // namespace psrt::kernels
