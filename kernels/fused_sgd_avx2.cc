// The AVX2 backend: 8 fp32 lanes, fp16 widened by F16C (VCVTPH2PS), bf16 by a 16-bit shift.
// This file is compiled with -mavx2 -mf16c and is only called when cpu_has_isa(kAvx2) holds.
// Each lane performs exactly the IEEE operations of update_element, in the same order, with
// separate multiplies and adds (-ffp-contract=off keeps the compiler from fusing them), so the
// results equal the scalar backend's bit for bit.
#include <immintrin.h>

#include "kernels/fused_sgd_internal.h"

namespace psrt::kernels::detail {
namespace {

constexpr std::size_t kLanes = 8;
// Vectors in flight per step: the sum over gradients is a dependency chain per vector, so
// several independent chains hide the add latency.
constexpr std::size_t kUnroll = 4;

template <DType T>
__m256 load8(const void* grads, std::size_t i) {
  if constexpr (T == DType::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(grads) + i);
  } else {
    const __m128i h = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(grads) + i));
    if constexpr (T == DType::kF16) {
      return _mm256_cvtph_ps(h);
    } else {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
  }
}

struct Params8 {
  __m256 grad_scale, clip_coef, lr, weight_decay, momentum, one_minus_dampening;
};

Params8 broadcast(const ElementParams& p) {
  return Params8{_mm256_set1_ps(p.grad_scale), _mm256_set1_ps(p.clip_coef),
                 _mm256_set1_ps(p.lr),         _mm256_set1_ps(p.weight_decay),
                 _mm256_set1_ps(p.momentum),   _mm256_set1_ps(p.one_minus_dampening)};
}

// update_element on 8 lanes.
void update8(__m256 g, const float* w_in, float* w_ptr, float* m_ptr, const ElementParams& p,
             const Params8& v) {
  const __m256 w = _mm256_loadu_ps(w_in);
  g = _mm256_mul_ps(g, v.grad_scale);
  if (p.has_clip) g = _mm256_mul_ps(g, v.clip_coef);
  if (p.has_weight_decay) g = _mm256_add_ps(g, _mm256_mul_ps(v.weight_decay, w));
  if (p.has_momentum) {
    const __m256 buf = p.first_step
                           ? g
                           : _mm256_add_ps(_mm256_mul_ps(v.momentum, _mm256_loadu_ps(m_ptr)),
                                           _mm256_mul_ps(v.one_minus_dampening, g));
    _mm256_storeu_ps(m_ptr, buf);
    g = p.nesterov ? _mm256_add_ps(g, _mm256_mul_ps(v.momentum, buf)) : buf;
  }
  _mm256_storeu_ps(w_ptr, _mm256_sub_ps(w, _mm256_mul_ps(v.lr, g)));
}

// Sums the gradients of U consecutive vectors starting at element i in the fixed order
// j = 0..N-1 (each gradient element is loaded once).
template <DType T, std::size_t U>
void sum_vectors(const SliceUpdate& u, std::size_t i, __m256 (&g)[U]) {
  for (std::size_t k = 0; k < U; ++k) {
    g[k] = load8<T>(u.grads[0], i + k * kLanes);
  }
  for (int j = 1; j < u.num_grads; ++j) {
    const void* src = u.grads[j];
    for (std::size_t k = 0; k < U; ++k) {
      g[k] = _mm256_add_ps(g[k], load8<T>(src, i + k * kLanes));
    }
  }
}

// Updates U consecutive vectors starting at element i.
template <DType T, std::size_t U>
void update_vectors(const SliceUpdate& u, const ElementParams& p, const Params8& v, std::size_t i) {
  __m256 g[U];
  sum_vectors<T, U>(u, i, g);
  for (std::size_t k = 0; k < U; ++k) {
    const std::size_t at = i + k * kLanes;
    update8(g[k], weights_source(u) + at, u.weights + at,
            p.has_momentum ? u.momentum + at : nullptr, p, v);
  }
}

template <DType T>
void run(const SliceUpdate& u, const OptimizerConfig& cfg, float clip_coef) {
  const ElementParams p = make_element_params(u, cfg, clip_coef);
  const Params8 v = broadcast(p);
  std::size_t i = 0;
  for (; i + kUnroll * kLanes <= u.count; i += kUnroll * kLanes) {
    update_vectors<T, kUnroll>(u, p, v, i);
  }
  for (; i + kLanes <= u.count; i += kLanes) {
    update_vectors<T, 1>(u, p, v, i);
  }
  update_elements_scalar<T>(u, p, i, u.count);
}

// Adam/AdamW's constants broadcast, and adam_element on 8 lanes.
struct Adam8 {
  __m256 grad_scale, clip_coef, weight_decay, decay, beta1, one_minus_beta1, beta2, one_minus_beta2,
      bc2_sqrt, eps, neg_step_size;
};

Adam8 broadcast(const AdamParams& p) {
  return Adam8{_mm256_set1_ps(p.grad_scale),     _mm256_set1_ps(p.clip_coef),
               _mm256_set1_ps(p.weight_decay),   _mm256_set1_ps(p.k.decay),
               _mm256_set1_ps(p.beta1),          _mm256_set1_ps(p.k.one_minus_beta1),
               _mm256_set1_ps(p.beta2),          _mm256_set1_ps(p.k.one_minus_beta2),
               _mm256_set1_ps(p.k.bc2_sqrt),     _mm256_set1_ps(p.eps),
               _mm256_set1_ps(p.k.neg_step_size)};
}

void adam8(__m256 g, const float* w_in, float* w_ptr, float* m_ptr, float* v_ptr,
           const AdamParams& p, const Adam8& c) {
  __m256 w = _mm256_loadu_ps(w_in);
  g = _mm256_mul_ps(g, c.grad_scale);
  if (p.has_clip) g = _mm256_mul_ps(g, c.clip_coef);
  if (p.l2) g = _mm256_add_ps(g, _mm256_mul_ps(c.weight_decay, w));
  if (p.decoupled) w = _mm256_mul_ps(w, c.decay);
  const __m256 m = _mm256_add_ps(_mm256_mul_ps(c.beta1, _mm256_loadu_ps(m_ptr)),
                                 _mm256_mul_ps(c.one_minus_beta1, g));
  const __m256 v = _mm256_add_ps(_mm256_mul_ps(c.beta2, _mm256_loadu_ps(v_ptr)),
                                 _mm256_mul_ps(_mm256_mul_ps(c.one_minus_beta2, g), g));
  const __m256 d = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), c.bc2_sqrt), c.eps);
  _mm256_storeu_ps(m_ptr, m);
  _mm256_storeu_ps(v_ptr, v);
  _mm256_storeu_ps(w_ptr, _mm256_add_ps(w, _mm256_div_ps(_mm256_mul_ps(c.neg_step_size, m), d)));
}

template <DType T, std::size_t U>
void adam_vectors(const SliceUpdate& u, const AdamParams& p, const Adam8& c, std::size_t i) {
  __m256 g[U];
  sum_vectors<T, U>(u, i, g);
  for (std::size_t k = 0; k < U; ++k) {
    const std::size_t at = i + k * kLanes;
    adam8(g[k], weights_source(u) + at, u.weights + at, u.momentum + at, u.exp_avg_sq + at, p, c);
  }
}

template <DType T>
void run_adam(const SliceUpdate& u, const OptimizerConfig& cfg, float clip_coef) {
  const AdamParams p = make_adam_params(u, cfg, clip_coef);
  const Adam8 c = broadcast(p);
  std::size_t i = 0;
  for (; i + kUnroll * kLanes <= u.count; i += kUnroll * kLanes) {
    adam_vectors<T, kUnroll>(u, p, c, i);
  }
  for (; i + kLanes <= u.count; i += kLanes) {
    adam_vectors<T, 1>(u, p, c, i);
  }
  adam_elements_scalar<T>(u, p, i, u.count);
}

// The pre-pass on U consecutive vectors at element i, where i % kNormPartials == 0: vector k
// holds elements i + 8k .. i + 8k + 7, which feed partials 8(k % 2) .. 8(k % 2) + 7, i.e. the
// four fp64 lanes of acc[2(k % 2)] and then of acc[2(k % 2) + 1].
template <DType T, std::size_t U>
void square_vectors(const SliceUpdate& u, __m256 grad_scale, std::size_t i, __m256d (&acc)[4]) {
  __m256 g[U];
  sum_vectors<T, U>(u, i, g);
  for (std::size_t k = 0; k < U; ++k) {
    const __m256 scaled = _mm256_mul_ps(g[k], grad_scale);
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(scaled));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(scaled, 1));
    const std::size_t q = 2 * (k % 2);
    acc[q] = _mm256_add_pd(acc[q], _mm256_mul_pd(lo, lo));
    acc[q + 1] = _mm256_add_pd(acc[q + 1], _mm256_mul_pd(hi, hi));
  }
}

template <DType T>
void sum_squares(const SliceUpdate& u, double* partials) {
  static_assert(kUnroll * kLanes % kNormPartials == 0 && 2 * kLanes == kNormPartials);
  const __m256 grad_scale = _mm256_set1_ps(u.grad_scale);
  __m256d acc[4];
  for (std::size_t q = 0; q < 4; ++q)
    acc[q] = _mm256_loadu_pd(partials + 4 * q);
  std::size_t i = 0;
  for (; i + kUnroll * kLanes <= u.count; i += kUnroll * kLanes) {
    square_vectors<T, kUnroll>(u, grad_scale, i, acc);
  }
  for (; i + 2 * kLanes <= u.count; i += 2 * kLanes) {
    square_vectors<T, 2>(u, grad_scale, i, acc);
  }
  for (std::size_t q = 0; q < 4; ++q)
    _mm256_storeu_pd(partials + 4 * q, acc[q]);
  accumulate_squares_scalar<T>(u, i, u.count, partials);
}

}  // namespace

void sum_squares_avx2(const SliceUpdate& u, double* partials) {
  switch (u.dtype) {
    case DType::kF32:
      sum_squares<DType::kF32>(u, partials);
      break;
    case DType::kF16:
      sum_squares<DType::kF16>(u, partials);
      break;
    case DType::kBF16:
      sum_squares<DType::kBF16>(u, partials);
      break;
  }
}

void fused_sgd_avx2(const SliceUpdate& u, const OptimizerConfig& cfg, float clip_coef) {
  switch (u.dtype) {
    case DType::kF32:
      run<DType::kF32>(u, cfg, clip_coef);
      break;
    case DType::kF16:
      run<DType::kF16>(u, cfg, clip_coef);
      break;
    case DType::kBF16:
      run<DType::kBF16>(u, cfg, clip_coef);
      break;
  }
}

void fused_adam_avx2(const SliceUpdate& u, const OptimizerConfig& cfg, float clip_coef) {
  switch (u.dtype) {
    case DType::kF32:
      run_adam<DType::kF32>(u, cfg, clip_coef);
      break;
    case DType::kF16:
      run_adam<DType::kF16>(u, cfg, clip_coef);
      break;
    case DType::kBF16:
      run_adam<DType::kBF16>(u, cfg, clip_coef);
      break;
  }
}

}  // namespace psrt::kernels::detail
