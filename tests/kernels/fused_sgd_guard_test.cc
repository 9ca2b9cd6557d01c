// The step-level guard and clipping of the fused SGD update (OptimizerConfig::skip_nonfinite and
// max_grad_norm, spec in kernels/fused_sgd.h): a skipped step writes nothing, finite steps are
// untouched by the guard, clipping follows torch.nn.utils.clip_grad_norm_ on the mean gradient
// with one norm over all the step's slices, and every ISA agrees bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/fused_sgd.h"
#include "psrt/error.h"
#include "sgd_test_util.h"

namespace psrt::kernels::testing {
namespace {

std::string isa_dtype(CpuIsa isa, DType dtype) {
  return std::string(to_string(isa)) + " " + std::string(to_string(dtype));
}

enum class Special { kNaN, kPosInf, kNegInf };

const char* name_of(Special s) {
  return s == Special::kNaN ? "NaN" : s == Special::kPosInf ? "+Inf" : "-Inf";
}

// Overwrites element i of gradient j with a NaN or an infinity in its own dtype's encoding.
void set_special(GradSet& g, int j, std::size_t i, Special s) {
  const auto jj = static_cast<std::size_t>(j);
  const double inf = std::numeric_limits<double>::infinity();
  g.values[jj][i] = s == Special::kNaN ? std::nan("") : s == Special::kPosInf ? inf : -inf;
  if (g.dtype == DType::kF32) {
    const float f = static_cast<float>(g.values[jj][i]);
    std::memcpy(&g.bytes[jj][i * 4], &f, 4);
    return;
  }
  std::uint16_t bits = 0;
  if (g.dtype == DType::kF16) {
    bits = s == Special::kNaN ? 0x7e00 : s == Special::kPosInf ? 0x7c00 : 0xfc00;
  } else {
    bits = s == Special::kNaN ? 0x7fc0 : s == Special::kPosInf ? 0x7f80 : 0xff80;
  }
  std::memcpy(&g.bytes[jj][i * 2], &bits, 2);
}

// The spec's aggregated gradient of element i, computed here independently of the kernel: the
// fixed-order fp32 sum of the (exactly representable) decoded values, times grad_scale. The test
// target is compiled with -ffp-contract=off, so these are the same IEEE operations.
float aggregated(const GradSet& g, std::size_t i, float grad_scale) {
  float s = static_cast<float>(g.values[0][i]);
  for (std::size_t j = 1; j < g.values.size(); ++j)
    s = s + static_cast<float>(g.values[j][i]);
  return s * grad_scale;
}

// The step's norm in plain left-to-right fp64 order (the kernel uses 16 partials).
double reference_norm(const std::vector<const GradSet*>& grads, float grad_scale) {
  double sum = 0;
  for (const GradSet* g : grads) {
    for (std::size_t i = 0; i < g->count; ++i) {
      const double d = aggregated(*g, i, grad_scale);
      sum += d * d;
    }
  }
  return std::sqrt(sum);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

OptimizerConfig momentum_config() {
  OptimizerConfig cfg;
  cfg.lr = 0.05f;
  cfg.momentum = 0.9f;
  cfg.weight_decay = 0.01f;
  return cfg;
}

// A NaN or infinity in any one of N gradients, at the first, a middle, the last vector-body and
// the last (scalar-tail) element, in every dtype: the step is skipped and no bit of weights or
// momentum changes.
TEST(FusedSgdGuard, NonFiniteGradientSkipsTheStepAndWritesNothing) {
  OptimizerConfig cfg = momentum_config();
  cfg.skip_nonfinite = true;
  for (CpuIsa isa : available_isas()) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (int n : {1, 3}) {
        for (std::size_t count : {std::size_t{5}, std::size_t{100}}) {
          for (std::size_t at : {std::size_t{0}, count / 2, count - 5, count - 1}) {
            for (int j : {0, n / 2, n - 1}) {
              for (Special kind : {Special::kNaN, Special::kPosInf, Special::kNegInf}) {
                SCOPED_TRACE(isa_dtype(isa, dtype) + " N " + std::to_string(n) + " count " +
                             std::to_string(count) + " " + name_of(kind) + " in gradient " +
                             std::to_string(j) + " at " + std::to_string(at));
                std::mt19937_64 rng(count * 7 + at);
                GradSet g = make_grads(dtype, n, count, GradRange::kWide, rng);
                set_special(g, j, at, kind);
                const std::vector<float> w0 = random_weights(count, rng);
                const std::vector<float> m0 = random_weights(count, rng);
                std::vector<float> w = w0, m = m0;
                const StepResult r = fused_sgd_cpu(
                    make_update(w, m, g, 1.f / static_cast<float>(n), false), cfg, isa);
                EXPECT_TRUE(r.skipped);
                EXPECT_FALSE(std::isfinite(r.grad_norm)) << r.grad_norm;
                EXPECT_FALSE(r.clipped);
                ASSERT_TRUE(same_bits(w, w0)) << "weights changed";
                ASSERT_TRUE(same_bits(m, m0)) << "momentum changed";
              }
            }
          }
        }
      }
    }
  }
}

// Finite fp32 gradients whose fp32 sum overflows: the aggregated gradient is infinite, so the
// step is skipped like any other non-finite one.
TEST(FusedSgdGuard, OverflowingSumIsNonFiniteToo) {
  OptimizerConfig cfg;
  cfg.skip_nonfinite = true;
  for (CpuIsa isa : available_isas()) {
    SCOPED_TRACE(to_string(isa));
    std::vector<float> g0(40, 1.f), g1(40, 1.f), w(40, 0.5f), m;
    g0[33] = 3e38f;
    g1[33] = 3e38f;
    const void* ptrs[] = {g0.data(), g1.data()};
    const SliceUpdate u{w.data(), nullptr, ptrs, 2, DType::kF32, w.size(), 1.f, false};
    const StepResult r = fused_sgd_cpu(u, cfg, isa);
    EXPECT_TRUE(r.skipped);
    EXPECT_EQ(w, std::vector<float>(40, 0.5f));
  }
}

// With finite inputs the guard changes nothing: bit-identical weights and momentum, and a
// finite norm equal (to fp64 summation order) to an independent computation.
TEST(FusedSgdGuard, FiniteInputsMatchTheUnguardedUpdateBitForBit) {
  for (CpuIsa isa : available_isas()) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (std::size_t count : {std::size_t{1}, std::size_t{33}, std::size_t{4099}}) {
        SCOPED_TRACE(isa_dtype(isa, dtype) + " count " + std::to_string(count));
        std::mt19937_64 rng(count + static_cast<int>(dtype));
        OptimizerConfig off = momentum_config();
        off.nesterov = true;
        OptimizerConfig on = off;
        on.skip_nonfinite = true;
        std::vector<float> w_off = random_weights(count, rng), w_on = w_off;
        std::vector<float> m_off(count), m_on(count);
        for (int step = 0; step < 3; ++step) {
          const GradSet g = make_grads(dtype, 4, count, GradRange::kWide, rng);
          const StepResult r_off =
              fused_sgd_cpu(make_update(w_off, m_off, g, 0.25f, step == 0), off, isa);
          const StepResult r_on =
              fused_sgd_cpu(make_update(w_on, m_on, g, 0.25f, step == 0), on, isa);
          ASSERT_TRUE(same_bits(w_on, w_off)) << "weights, step " << step;
          ASSERT_TRUE(same_bits(m_on, m_off)) << "momentum, step " << step;
          EXPECT_FALSE(r_on.skipped);
          EXPECT_FALSE(r_on.clipped);
          EXPECT_EQ(r_on.clip_coef, 1.f);
          const double want = reference_norm({&g}, 0.25f);
          EXPECT_NEAR(r_on.grad_norm, want, 1e-12 * want);
          EXPECT_EQ(r_off.grad_norm, 0.0) << "no pre-pass, no norm";
          EXPECT_FALSE(r_off.skipped);
        }
      }
    }
  }
}

// torch.optim.SGD after torch.nn.utils.clip_grad_norm_(max_norm) on the mean gradient, in
// float64 from the exact inputs.
struct ClippedReference {
  std::vector<double> w, buf;
  bool have_buf = false;

  void step(const GradSet& g, double grad_scale, const OptimizerConfig& cfg) {
    double sum = 0;
    std::vector<double> d(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) {
      for (const auto& v : g.values)
        d[i] += v[i];
      d[i] *= grad_scale;
      sum += d[i] * d[i];
    }
    const double coef = std::min(1.0, cfg.max_grad_norm / (std::sqrt(sum) + 1e-6));
    if (buf.empty()) buf.resize(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) {
      double d_p = d[i] * coef;
      if (cfg.weight_decay != 0) d_p += cfg.weight_decay * w[i];
      if (cfg.momentum != 0) {
        buf[i] = have_buf ? cfg.momentum * buf[i] + (1 - cfg.dampening) * d_p : d_p;
        d_p = cfg.nesterov ? d_p + cfg.momentum * buf[i] : buf[i];
      }
      w[i] -= cfg.lr * d_p;
    }
    have_buf = true;
  }
};

TEST(FusedSgdClip, MatchesFloat64ClipGradNormThenSgd) {
  for (CpuIsa isa : available_isas()) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (std::size_t count : {std::size_t{7}, std::size_t{1000}, std::size_t{4099}}) {
        SCOPED_TRACE(isa_dtype(isa, dtype) + " count " + std::to_string(count));
        std::mt19937_64 rng(count * 3 + static_cast<int>(dtype));
        OptimizerConfig cfg = momentum_config();
        std::vector<float> w = random_weights(count, rng), m(count);
        ClippedReference ref{{w.begin(), w.end()}, {}};
        for (int step = 0; step < 6; ++step) {
          const GradSet g = make_grads(dtype, 3, count, GradRange::kModerate, rng);
          // About half this step's norm: every step clips, by a factor near 0.5.
          cfg.max_grad_norm = static_cast<float>(0.5 * reference_norm({&g}, 1.f / 3));
          const StepResult r = fused_sgd_cpu(make_update(w, m, g, 1.f / 3, step == 0), cfg, isa);
          ref.step(g, 1.0 / 3, cfg);
          const double want = reference_norm({&g}, 1.f / 3);
          ASSERT_NEAR(r.grad_norm, want, 1e-12 * want) << "step " << step;
          ASSERT_TRUE(r.clipped) << "step " << step << " norm " << r.grad_norm;
          EXPECT_FALSE(r.skipped);
          EXPECT_EQ(r.clip_coef, static_cast<float>(static_cast<double>(cfg.max_grad_norm) /
                                                    (r.grad_norm + 1e-6)));
          EXPECT_NEAR(r.clip_coef, 0.5f, 1e-5f);
        }
        for (std::size_t i = 0; i < count; ++i) {
          ASSERT_NEAR(w[i], ref.w[i], 1e-5 * std::max(1.0, std::abs(ref.w[i]))) << "element " << i;
          ASSERT_NEAR(m[i], ref.buf[i], 1e-5 * std::max(1.0, std::abs(ref.buf[i])))
              << "element " << i;
        }
      }
    }
  }
}

// A norm at or below the maximum (coef >= 1 in fp32) leaves the update exactly as without
// clipping.
TEST(FusedSgdClip, NotTriggeredWhenTheNormIsWithinTheMaximum) {
  for (CpuIsa isa : available_isas()) {
    for (double headroom : {1.01, 2.0, 1000.0}) {
      SCOPED_TRACE(std::string(to_string(isa)) + " max = norm * " + std::to_string(headroom));
      std::mt19937_64 rng(11);
      const GradSet g = make_grads(DType::kBF16, 2, 777, GradRange::kModerate, rng);
      OptimizerConfig plain = momentum_config();
      OptimizerConfig clip = plain;
      clip.max_grad_norm = static_cast<float>(reference_norm({&g}, 0.5f) * headroom);
      std::vector<float> w_plain = random_weights(g.count, rng), w_clip = w_plain;
      std::vector<float> m_plain(g.count), m_clip(g.count);
      fused_sgd_cpu(make_update(w_plain, m_plain, g, 0.5f, true), plain, isa);
      const StepResult r = fused_sgd_cpu(make_update(w_clip, m_clip, g, 0.5f, true), clip, isa);
      EXPECT_FALSE(r.clipped);
      EXPECT_EQ(r.clip_coef, 1.f);
      EXPECT_GT(r.grad_norm, 0.0);
      EXPECT_TRUE(same_bits(w_clip, w_plain));
      EXPECT_TRUE(same_bits(m_clip, m_plain));
    }
  }
}

// One step of three slices of different dtypes and sizes: the norm is over all of them, and
// every slice is scaled by the same coef, including a slice whose own norm is below the maximum.
TEST(FusedSgdClip, MultiSliceStepUsesOneGlobalNorm) {
  for (CpuIsa isa : available_isas()) {
    SCOPED_TRACE(to_string(isa));
    std::mt19937_64 rng(23);
    std::vector<GradSet> grads;
    grads.push_back(make_grads(DType::kF32, 2, 4099, GradRange::kModerate, rng));
    grads.push_back(make_grads(DType::kF16, 2, 3, GradRange::kModerate, rng));
    grads.push_back(make_grads(DType::kBF16, 2, 1000, GradRange::kModerate, rng));
    const double small_norm = reference_norm({&grads[1]}, 0.5f);
    const double global = reference_norm({&grads[0], &grads[1], &grads[2]}, 0.5f);
    OptimizerConfig cfg;
    cfg.lr = 0.25f;
    // Above the small slice's own norm, well below the global one.
    cfg.max_grad_norm = static_cast<float>(small_norm * 1.5);
    ASSERT_LT(cfg.max_grad_norm, global / 2);
    std::vector<std::vector<float>> w0, w;
    std::vector<std::vector<float>> no_momentum(grads.size());
    std::vector<SliceUpdate> step;
    for (std::size_t k = 0; k < grads.size(); ++k) {
      w0.push_back(random_weights(grads[k].count, rng));
      w.push_back(w0.back());
    }
    for (std::size_t k = 0; k < grads.size(); ++k)
      step.push_back(make_update(w[k], no_momentum[k], grads[k], 0.5f, false));
    const StepResult r = fused_sgd_cpu_step(step, cfg, isa);
    ASSERT_TRUE(r.clipped);
    EXPECT_NEAR(r.grad_norm, global, 1e-12 * global);
    EXPECT_EQ(r.clip_coef,
              static_cast<float>(static_cast<double>(cfg.max_grad_norm) / (r.grad_norm + 1e-6)));
    // w = w0 - lr * ((sum * scale) * coef), in fp32 op for op, with the one reported coef.
    for (std::size_t k = 0; k < grads.size(); ++k) {
      for (std::size_t i = 0; i < grads[k].count; ++i) {
        const float g = aggregated(grads[k], i, 0.5f) * r.clip_coef;
        ASSERT_EQ(bits_of(w[k][i]), bits_of(w0[k][i] - cfg.lr * g))
            << "slice " << k << " element " << i;
      }
    }
  }
}

// A skipped first step leaves the momentum buffer unwritten (the caller keeps first_step for
// the next step), and that next step initialises it as torch's first step does.
TEST(FusedSgdGuard, SkippedFirstStepLeavesMomentumUninitialised) {
  OptimizerConfig cfg = momentum_config();
  cfg.dampening = 0.5f;  // the first step (buf = g) and a later one (buf = 0.9 m + 0.5 g) differ
  cfg.skip_nonfinite = true;
  const float poison = -777.f;
  for (CpuIsa isa : available_isas()) {
    SCOPED_TRACE(to_string(isa));
    std::mt19937_64 rng(31);
    GradSet bad = make_grads(DType::kF32, 2, 50, GradRange::kModerate, rng);
    set_special(bad, 1, 20, Special::kNaN);
    const GradSet good = make_grads(DType::kF32, 2, 50, GradRange::kModerate, rng);
    const std::vector<float> w0 = random_weights(50, rng);
    std::vector<float> w = w0, m(50, poison);
    const StepResult skipped = fused_sgd_cpu(make_update(w, m, bad, 0.5f, true), cfg, isa);
    ASSERT_TRUE(skipped.skipped);
    EXPECT_TRUE(same_bits(w, w0));
    EXPECT_EQ(m, std::vector<float>(50, poison)) << "a skipped first step wrote the buffer";
    const StepResult applied = fused_sgd_cpu(make_update(w, m, good, 0.5f, true), cfg, isa);
    ASSERT_FALSE(applied.skipped);
    for (std::size_t i = 0; i < 50; ++i) {
      float g = aggregated(good, i, 0.5f);
      g = g + cfg.weight_decay * w0[i];
      ASSERT_EQ(bits_of(m[i]), bits_of(g)) << "element " << i << ": buf = g on the first step";
      ASSERT_EQ(bits_of(w[i]), bits_of(w0[i] - cfg.lr * g)) << "element " << i;
    }
  }
}

// Every vector ISA equals the scalar one bit for bit with the guard and clipping on: weights,
// momentum, and the step's norm and coef, over multi-slice steps with tails.
TEST(FusedSgdClip, IsasAgreeBitForBit) {
  const std::vector<std::size_t> counts = {1, 15, 16, 17, 31, 33, 64, 65, 100, 1000, 4099};
  for (CpuIsa isa : available_isas()) {
    if (isa == CpuIsa::kScalar) continue;
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (int n : {1, 3, 9}) {
        SCOPED_TRACE(isa_dtype(isa, dtype) + " N " + std::to_string(n));
        std::mt19937_64 rng(n * 101 + static_cast<int>(dtype));
        std::vector<GradSet> grads;
        std::vector<const GradSet*> all;
        for (std::size_t c : counts)
          grads.push_back(make_grads(dtype, n, c, GradRange::kWide, rng));
        for (const GradSet& g : grads)
          all.push_back(&g);
        OptimizerConfig cfg = momentum_config();
        cfg.nesterov = true;
        cfg.skip_nonfinite = true;
        cfg.max_grad_norm = static_cast<float>(reference_norm(all, 1.f) * 0.3);
        std::vector<std::vector<float>> w_scalar, w_isa, m_scalar, m_isa;
        for (std::size_t c : counts) {
          w_scalar.push_back(random_weights(c, rng));
          w_isa.push_back(w_scalar.back());
          m_scalar.push_back(random_weights(c, rng));
          m_isa.push_back(m_scalar.back());
        }
        std::vector<SliceUpdate> step_scalar, step_isa;
        for (std::size_t k = 0; k < counts.size(); ++k) {
          step_scalar.push_back(make_update(w_scalar[k], m_scalar[k], grads[k], 1.f, k % 2 == 0));
          step_isa.push_back(make_update(w_isa[k], m_isa[k], grads[k], 1.f, k % 2 == 0));
        }
        const StepResult a = fused_sgd_cpu_step(step_scalar, cfg, CpuIsa::kScalar);
        const StepResult b = fused_sgd_cpu_step(step_isa, cfg, isa);
        ASSERT_TRUE(a.clipped);
        EXPECT_EQ(std::memcmp(&a.grad_norm, &b.grad_norm, sizeof(double)), 0)
            << a.grad_norm << " vs " << b.grad_norm;
        EXPECT_EQ(bits_of(a.clip_coef), bits_of(b.clip_coef));
        EXPECT_EQ(b.clipped, a.clipped);
        for (std::size_t k = 0; k < counts.size(); ++k) {
          ASSERT_TRUE(same_bits(w_isa[k], w_scalar[k])) << "weights of slice " << k;
          ASSERT_TRUE(same_bits(m_isa[k], m_scalar[k])) << "momentum of slice " << k;
        }
      }
    }
  }
}

TEST(FusedSgdGuard, BadMaxGradNormOrSliceIsRefusedBeforeAnyWrite) {
  float w0[4] = {1.f, 2.f, 3.f, 4.f};
  float w1[4] = {5.f, 6.f, 7.f, 8.f};
  const float g[4] = {1.f, 1.f, 1.f, 1.f};
  const void* grads[] = {g};
  const SliceUpdate good{w0, nullptr, grads, 1, DType::kF32, 4, 1.f, false};
  for (float bad :
       {-1.f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    OptimizerConfig cfg;
    cfg.max_grad_norm = bad;
    try {
      fused_sgd_cpu(good, cfg, CpuIsa::kScalar);
      ADD_FAILURE() << "max_grad_norm " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("max_grad_norm"), std::string::npos) << e.what();
    }
  }
  // The second slice of a step is unusable: the error names it and the first is not written.
  SliceUpdate broken{w1, nullptr, nullptr, 1, DType::kF32, 4, 1.f, false};
  const SliceUpdate step[] = {good, broken};
  OptimizerConfig cfg;
  cfg.max_grad_norm = 1.f;
  try {
    fused_sgd_cpu_step(step, cfg, CpuIsa::kScalar);
    ADD_FAILURE() << "a step with a null grads array was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("slice 1: grads is null"), std::string::npos) << e.what();
  }
  EXPECT_EQ(w0[0], 1.f);
  EXPECT_EQ(w0[3], 4.f);
}

TEST(FusedSgdGuard, ApplyUpdateReturnsTheStepResult) {
  std::vector<float> w(8, 1.f), m;
  std::vector<float> g(8, 0.f);
  g[0] = 3.f;
  g[1] = 4.f;  // norm 5
  const void* grads[] = {g.data()};
  const SliceUpdate u{w.data(), nullptr, grads, 1, DType::kF32, 8, 1.f, false};
  OptimizerConfig cfg;
  cfg.lr = 1.f;
  cfg.max_grad_norm = 1.f;
  const StepResult r = apply_update(u, cfg, MemoryType::kHost);
  EXPECT_TRUE(r.clipped);
  EXPECT_EQ(r.grad_norm, 5.0);
  const float coef = static_cast<float>(1.0 / (5.0 + 1e-6));
  EXPECT_EQ(r.clip_coef, coef);
  EXPECT_EQ(w[0], 1.f - 3.f * coef);
  EXPECT_EQ(w[1], 1.f - 4.f * coef);
  EXPECT_EQ(w[2], 1.f);
}

}  // namespace
}  // namespace psrt::kernels::testing
