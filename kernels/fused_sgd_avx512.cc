// The AVX-512 backend: 16 fp32 lanes, fp16 widened by VCVTPH2PS (AVX-512F), bf16 by a 16-bit shift.
// This file is compiled with -mavx512f -mavx512bw and is only called when cpu_has_isa(kAvx512)
// holds. Each lane performs exactly the IEEE operations of update_element, in the same order, with
// separate multiplies and adds (-ffp-contract=off keeps the compiler from fusing them), so the
// results equal the scalar backend's bit for bit.
#include <immintrin.h>

#include "kernels/fused_sgd_internal.h"

namespace psrt::kernels::detail {
namespace {

constexpr std::size_t kLanes = 16;
// Vectors in flight per step: the sum over gradients is a dependency chain per vector, so
// several independent chains hide the add latency.
constexpr std::size_t kUnroll = 4;

template <DType T>
__m512 load16(const void* grads, std::size_t i) {
  if constexpr (T == DType::kF32) {
    return _mm512_loadu_ps(static_cast<const float*>(grads) + i);
  } else {
    const __m256i h = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(static_cast<const std::uint16_t*>(grads) + i));
    if constexpr (T == DType::kF16) {
      return _mm512_cvtph_ps(h);
    } else {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
  }
}

struct Params16 {
  __m512 grad_scale, clip_coef, lr, weight_decay, momentum, one_minus_dampening;
};

Params16 broadcast(const ElementParams& p) {
  return Params16{_mm512_set1_ps(p.grad_scale), _mm512_set1_ps(p.clip_coef),
                  _mm512_set1_ps(p.lr),         _mm512_set1_ps(p.weight_decay),
                  _mm512_set1_ps(p.momentum),   _mm512_set1_ps(p.one_minus_dampening)};
}

// update_element on 16 lanes.
void update16(__m512 g, const float* w_in, float* w_ptr, float* m_ptr, const ElementParams& p,
              const Params16& v) {
  const __m512 w = _mm512_loadu_ps(w_in);
  g = _mm512_mul_ps(g, v.grad_scale);
  if (p.has_clip) g = _mm512_mul_ps(g, v.clip_coef);
  if (p.has_weight_decay) g = _mm512_add_ps(g, _mm512_mul_ps(v.weight_decay, w));
  if (p.has_momentum) {
    const __m512 buf = p.first_step
                           ? g
                           : _mm512_add_ps(_mm512_mul_ps(v.momentum, _mm512_loadu_ps(m_ptr)),
                                           _mm512_mul_ps(v.one_minus_dampening, g));
    _mm512_storeu_ps(m_ptr, buf);
    g = p.nesterov ? _mm512_add_ps(g, _mm512_mul_ps(v.momentum, buf)) : buf;
  }
  _mm512_storeu_ps(w_ptr, _mm512_sub_ps(w, _mm512_mul_ps(v.lr, g)));
}

// Sums the gradients of U consecutive vectors starting at element i in the fixed order
// j = 0..N-1 (each gradient element is loaded once).
template <DType T, std::size_t U>
void sum_vectors(const SliceUpdate& u, std::size_t i, __m512 (&g)[U]) {
  for (std::size_t k = 0; k < U; ++k) {
    g[k] = load16<T>(u.grads[0], i + k * kLanes);
  }
  for (int j = 1; j < u.num_grads; ++j) {
    const void* src = u.grads[j];
    for (std::size_t k = 0; k < U; ++k) {
      g[k] = _mm512_add_ps(g[k], load16<T>(src, i + k * kLanes));
    }
  }
}

// Updates U consecutive vectors starting at element i.
template <DType T, std::size_t U>
void update_vectors(const SliceUpdate& u, const ElementParams& p, const Params16& v,
                    std::size_t i) {
  __m512 g[U];
  sum_vectors<T, U>(u, i, g);
  for (std::size_t k = 0; k < U; ++k) {
    const std::size_t at = i + k * kLanes;
    update16(g[k], weights_source(u) + at, u.weights + at,
             p.has_momentum ? u.momentum + at : nullptr, p, v);
  }
}

template <DType T>
void run(const SliceUpdate& u, const OptimizerConfig& cfg, float clip_coef) {
  const ElementParams p = make_element_params(u, cfg, clip_coef);
  const Params16 v = broadcast(p);
  std::size_t i = 0;
  for (; i + kUnroll * kLanes <= u.count; i += kUnroll * kLanes) {
    update_vectors<T, kUnroll>(u, p, v, i);
  }
  for (; i + kLanes <= u.count; i += kLanes) {
    update_vectors<T, 1>(u, p, v, i);
  }
  update_elements_scalar<T>(u, p, i, u.count);
}

// Adam/AdamW's constants broadcast, and adam_element on 16 lanes.
struct Adam16 {
  __m512 grad_scale, clip_coef, weight_decay, decay, beta1, one_minus_beta1, beta2, one_minus_beta2,
      bc2_sqrt, eps, neg_step_size;
};

Adam16 broadcast(const AdamParams& p) {
  return Adam16{_mm512_set1_ps(p.grad_scale),     _mm512_set1_ps(p.clip_coef),
                _mm512_set1_ps(p.weight_decay),   _mm512_set1_ps(p.k.decay),
                _mm512_set1_ps(p.beta1),          _mm512_set1_ps(p.k.one_minus_beta1),
                _mm512_set1_ps(p.beta2),          _mm512_set1_ps(p.k.one_minus_beta2),
                _mm512_set1_ps(p.k.bc2_sqrt),     _mm512_set1_ps(p.eps),
                _mm512_set1_ps(p.k.neg_step_size)};
}

void adam16(__m512 g, const float* w_in, float* w_ptr, float* m_ptr, float* v_ptr,
            const AdamParams& p, const Adam16& c) {
  __m512 w = _mm512_loadu_ps(w_in);
  g = _mm512_mul_ps(g, c.grad_scale);
  if (p.has_clip) g = _mm512_mul_ps(g, c.clip_coef);
  if (p.l2) g = _mm512_add_ps(g, _mm512_mul_ps(c.weight_decay, w));
  if (p.decoupled) w = _mm512_mul_ps(w, c.decay);
  const __m512 m = _mm512_add_ps(_mm512_mul_ps(c.beta1, _mm512_loadu_ps(m_ptr)),
                                 _mm512_mul_ps(c.one_minus_beta1, g));
  const __m512 v = _mm512_add_ps(_mm512_mul_ps(c.beta2, _mm512_loadu_ps(v_ptr)),
                                 _mm512_mul_ps(_mm512_mul_ps(c.one_minus_beta2, g), g));
  const __m512 d = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), c.bc2_sqrt), c.eps);
  _mm512_storeu_ps(m_ptr, m);
  _mm512_storeu_ps(v_ptr, v);
  _mm512_storeu_ps(w_ptr, _mm512_add_ps(w, _mm512_div_ps(_mm512_mul_ps(c.neg_step_size, m), d)));
}

template <DType T, std::size_t U>
void adam_vectors(const SliceUpdate& u, const AdamParams& p, const Adam16& c, std::size_t i) {
  __m512 g[U];
  sum_vectors<T, U>(u, i, g);
  for (std::size_t k = 0; k < U; ++k) {
    const std::size_t at = i + k * kLanes;
    adam16(g[k], weights_source(u) + at, u.weights + at, u.momentum + at, u.exp_avg_sq + at, p, c);
  }
}

template <DType T>
void run_adam(const SliceUpdate& u, const OptimizerConfig& cfg, float clip_coef) {
  const AdamParams p = make_adam_params(u, cfg, clip_coef);
  const Adam16 c = broadcast(p);
  std::size_t i = 0;
  for (; i + kUnroll * kLanes <= u.count; i += kUnroll * kLanes) {
    adam_vectors<T, kUnroll>(u, p, c, i);
  }
  for (; i + kLanes <= u.count; i += kLanes) {
    adam_vectors<T, 1>(u, p, c, i);
  }
  adam_elements_scalar<T>(u, p, i, u.count);
}

// The pre-pass on U consecutive vectors at element i, where i % kNormPartials == 0: each
// vector's 16 elements feed partials 0..15, the low eight through acc[0], the high through
// acc[1].
template <DType T, std::size_t U>
void square_vectors(const SliceUpdate& u, __m512 grad_scale, std::size_t i, __m512d (&acc)[2]) {
  __m512 g[U];
  sum_vectors<T, U>(u, i, g);
  for (std::size_t k = 0; k < U; ++k) {
    const __m512 scaled = _mm512_mul_ps(g[k], grad_scale);
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(scaled));
    const __m512d hi =
        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(scaled), 1)));
    acc[0] = _mm512_add_pd(acc[0], _mm512_mul_pd(lo, lo));
    acc[1] = _mm512_add_pd(acc[1], _mm512_mul_pd(hi, hi));
  }
}

template <DType T>
void sum_squares(const SliceUpdate& u, double* partials) {
  static_assert(kLanes == kNormPartials);
  const __m512 grad_scale = _mm512_set1_ps(u.grad_scale);
  __m512d acc[2] = {_mm512_loadu_pd(partials), _mm512_loadu_pd(partials + 8)};
  std::size_t i = 0;
  for (; i + kUnroll * kLanes <= u.count; i += kUnroll * kLanes) {
    square_vectors<T, kUnroll>(u, grad_scale, i, acc);
  }
  for (; i + kLanes <= u.count; i += kLanes) {
    square_vectors<T, 1>(u, grad_scale, i, acc);
  }
  _mm512_storeu_pd(partials, acc[0]);
  _mm512_storeu_pd(partials + 8, acc[1]);
  accumulate_squares_scalar<T>(u, i, u.count, partials);
}

}  // namespace

void sum_squares_avx512(const SliceUpdate& u, double* partials) {
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

void fused_sgd_avx512(const SliceUpdate& u, const OptimizerConfig& cfg, float clip_coef) {
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

void fused_adam_avx512(const SliceUpdate& u, const OptimizerConfig& cfg, float clip_coef) {
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
