// What the CPU backends of fused_sgd_cpu share: the per-element update in the spec's order, the
// exact fp16/bf16 -> fp32 conversions, and one entry point per ISA. Not a public header.
//
// Every function defined here is `static inline` on purpose: the ISA files are compiled with
// -mavx2 / -mavx512f, and an ordinary inline function is emitted as one COMDAT copy that the
// linker may take from the AVX-512 object for the scalar path, which would fault on a CPU
// without AVX-512. Internal linkage gives each object file its own copy. For the same reason
// these helpers use no std:: templates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/fused_adam.h"
#include "kernels/fused_sgd.h"

namespace psrt::kernels::detail {

// The loop-invariant parts of the update, computed once per call so every ISA (and the tail of
// every ISA) uses the same fp32 constants.
struct ElementParams {
  float grad_scale;
  float clip_coef;  // the step's clipping factor; used only when has_clip
  float lr;
  float weight_decay;
  float momentum;
  float one_minus_dampening;  // 1 - dampening, rounded to fp32 once
  bool has_clip;              // a separate flag, so an unclipped step does no multiply at all
  bool has_weight_decay;
  bool has_momentum;
  bool nesterov;
  bool first_step;
};

// clip_coef: the step's factor when it clips (< 1), else 1 (no multiply).
static inline ElementParams make_element_params(const SliceUpdate& u, const OptimizerConfig& cfg,
                                                float clip_coef) {
  return ElementParams{
      u.grad_scale,        clip_coef,           cfg.lr,          cfg.weight_decay,
      cfg.momentum,        1.f - cfg.dampening, clip_coef < 1.f, cfg.weight_decay != 0.f,
      cfg.momentum != 0.f, cfg.nesterov,        u.first_step};
}

// Exact fp16 -> fp32, including subnormals, infinities and NaNs. A NaN keeps its payload and
// gets the quiet bit set, which is what VCVTPH2PS does, so the scalar tail matches the vector
// body bit for bit.
static inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  std::uint32_t bits = 0;
  if (exponent == 0x1fu) {
    bits = sign | 0x7f800000u | (mantissa << 13) | (mantissa != 0 ? 0x00400000u : 0u);
  } else if (exponent != 0) {
    bits = sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // Subnormal half: mantissa * 2^-24. Every one is a normal fp32; shift the leading one into
    // the implicit-bit position and lower the exponent by the shift.
    exponent = 127 - 14;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// bf16 is the top half of an fp32, so widening is a shift.
static inline float bf16_to_float(std::uint16_t b) {
  const std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <DType T>
static inline float load_grad(const void* grads, std::size_t i) {
  if constexpr (T == DType::kF32) {
    return static_cast<const float*>(grads)[i];
  } else if constexpr (T == DType::kF16) {
    return half_to_float(static_cast<const std::uint16_t*>(grads)[i]);
  } else {
    return bf16_to_float(static_cast<const std::uint16_t*>(grads)[i]);
  }
}

// The spec's steps after the sum, for one element. The vector bodies perform the same IEEE
// operations in the same order on each lane.
// The weights are read from `w_in` and written to `w` (the same address for an update in place).
static inline void update_element(float g, const float* w_in, float* w, float* m,
                                  const ElementParams& p) {
  const float w0 = *w_in;
  g = g * p.grad_scale;
  if (p.has_clip) g = g * p.clip_coef;
  if (p.has_weight_decay) g = g + p.weight_decay * w0;
  if (p.has_momentum) {
    const float buf = p.first_step ? g : p.momentum * *m + p.one_minus_dampening * g;
    *m = buf;
    g = p.nesterov ? g + p.momentum * buf : buf;
  }
  *w = w0 - p.lr * g;
}

// Where an update reads the weights from (SliceUpdate::weights_in, else in place).
static inline const float* weights_source(const SliceUpdate& u) {
  return u.weights_in != nullptr ? u.weights_in : u.weights;
}

// Elements [begin, end) one at a time: the scalar backend's whole loop and every ISA's tail.
template <DType T>
static inline void update_elements_scalar(const SliceUpdate& u, const ElementParams& p,
                                          std::size_t begin, std::size_t end) {
  for (std::size_t i = begin; i < end; ++i) {
    float g = load_grad<T>(u.grads[0], i);
    for (int j = 1; j < u.num_grads; ++j)
      g = g + load_grad<T>(u.grads[j], i);
    update_element(g, weights_source(u) + i, u.weights + i,
                   p.has_momentum ? u.momentum + i : nullptr, p);
  }
}

// Adam/AdamW's loop-invariant parts (kernels/fused_adam.h), computed once per call.
struct AdamParams {
  float grad_scale;
  float clip_coef;  // used only when has_clip
  float weight_decay;
  float beta1, beta2, eps;
  AdamConstants k;
  bool has_clip;
  bool l2;         // Adam with weight_decay != 0: g = g + weight_decay * w
  bool decoupled;  // AdamW with weight_decay != 0: w = w * decay
};

static inline AdamParams make_adam_params(const SliceUpdate& u, const OptimizerConfig& cfg,
                                          float clip_coef) {
  const bool decay = cfg.weight_decay != 0.f;
  return AdamParams{u.grad_scale,
                    clip_coef,
                    cfg.weight_decay,
                    cfg.beta1,
                    cfg.beta2,
                    cfg.eps,
                    adam_constants(cfg, u.step),
                    clip_coef < 1.f,
                    decay && cfg.algorithm == OptimizerAlgorithm::kAdam,
                    decay && cfg.algorithm == OptimizerAlgorithm::kAdamW};
}

// fused_adam.h's steps after the sum, for one element; the vector bodies do the same per lane.
static inline void adam_element(float g, const float* w_in, float* w, float* m, float* v,
                                const AdamParams& p) {
  float w0 = *w_in;
  g = g * p.grad_scale;
  if (p.has_clip) g = g * p.clip_coef;
  if (p.l2) g = g + p.weight_decay * w0;
  if (p.decoupled) w0 = w0 * p.k.decay;
  const float m1 = p.beta1 * *m + p.k.one_minus_beta1 * g;
  const float v1 = p.beta2 * *v + (p.k.one_minus_beta2 * g) * g;
  const float d = __builtin_sqrtf(v1) / p.k.bc2_sqrt + p.eps;
  *m = m1;
  *v = v1;
  *w = w0 + (p.k.neg_step_size * m1) / d;
}

// Elements [begin, end) one at a time: the scalar Adam backend's loop and every ISA's tail.
template <DType T>
static inline void adam_elements_scalar(const SliceUpdate& u, const AdamParams& p,
                                        std::size_t begin, std::size_t end) {
  for (std::size_t i = begin; i < end; ++i) {
    float g = load_grad<T>(u.grads[0], i);
    for (int j = 1; j < u.num_grads; ++j)
      g = g + load_grad<T>(u.grads[j], i);
    adam_element(g, weights_source(u) + i, u.weights + i, u.momentum + i, u.exp_avg_sq + i, p);
  }
}

// The pre-pass's fp64 partial sums of squares (fused_sgd.h): element i of a slice adds to
// partial i % kNormPartials. 16 so that one AVX-512 vector, or two AVX2 vectors, of consecutive
// elements feed the partials lane for lane.
inline constexpr std::size_t kNormPartials = 16;

// The pre-pass over elements [begin, end) one at a time: the scalar backend's whole loop and
// every ISA's tail. g is formed exactly as update_elements_scalar forms it.
template <DType T>
static inline void accumulate_squares_scalar(const SliceUpdate& u, std::size_t begin,
                                             std::size_t end, double* partials) {
  for (std::size_t i = begin; i < end; ++i) {
    float g = load_grad<T>(u.grads[0], i);
    for (int j = 1; j < u.num_grads; ++j)
      g = g + load_grad<T>(u.grads[j], i);
    g = g * u.grad_scale;
    const double d = g;
    partials[i % kNormPartials] = partials[i % kNormPartials] + d * d;
  }
}

// One per ISA, each in its own file compiled for that ISA. They assume a validated SliceUpdate
// (fused_sgd.cc checks it) and that the CPU has the ISA. clip_coef as for make_element_params.
void fused_sgd_scalar(const SliceUpdate& u, const OptimizerConfig& cfg, float clip_coef);
void fused_sgd_avx2(const SliceUpdate& u, const OptimizerConfig& cfg, float clip_coef);
void fused_sgd_avx512(const SliceUpdate& u, const OptimizerConfig& cfg, float clip_coef);

// Adam/AdamW, one per ISA likewise (kernels/fused_adam.h).
void fused_adam_scalar(const SliceUpdate& u, const OptimizerConfig& cfg, float clip_coef);
void fused_adam_avx2(const SliceUpdate& u, const OptimizerConfig& cfg, float clip_coef);
void fused_adam_avx512(const SliceUpdate& u, const OptimizerConfig& cfg, float clip_coef);

// The pre-pass over one slice: adds its squares to partials[kNormPartials] in the order above.
void sum_squares_scalar(const SliceUpdate& u, double* partials);
void sum_squares_avx2(const SliceUpdate& u, double* partials);
void sum_squares_avx512(const SliceUpdate& u, double* partials);

}  // namespace psrt::kernels::detail
