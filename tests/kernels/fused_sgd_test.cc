// The fused SGD kernel against a float64 model of torch.optim.SGD, and every vector ISA against
// the scalar one bit for bit.
#include "kernels/fused_sgd.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/dispatch.h"
#include "sgd_test_util.h"

namespace psrt::kernels::testing {
namespace {

enum class Momentum { kNone, kPlain, kNesterov };

std::string_view to_string(Momentum m) {
  return m == Momentum::kNone ? "NoMomentum" : m == Momentum::kPlain ? "Momentum" : "Nesterov";
}

OptimizerConfig make_config(Momentum mode, bool weight_decay, float dampening) {
  OptimizerConfig cfg;
  cfg.lr = 0.05f;
  cfg.momentum = mode == Momentum::kNone ? 0.f : 0.9f;
  cfg.dampening = dampening;
  cfg.weight_decay = weight_decay ? 0.01f : 0.f;
  cfg.nesterov = mode == Momentum::kNesterov;
  return cfg;
}

// torch.optim.SGD.step for one parameter, in float64 (torch/optim/sgd.py, _single_tensor_sgd).
struct ReferenceSgd {
  std::vector<double> w, buf;
  bool have_buf = false;

  void step(const GradSet& grads, double grad_scale, const OptimizerConfig& cfg) {
    const double lr = cfg.lr, mom = cfg.momentum, damp = cfg.dampening, wd = cfg.weight_decay;
    if (buf.empty()) buf.resize(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) {
      double d_p = 0;
      for (const auto& g : grads.values)
        d_p += g[i];
      d_p *= grad_scale;
      if (wd != 0) d_p += wd * w[i];
      if (mom != 0) {
        buf[i] = have_buf ? mom * buf[i] + (1 - damp) * d_p : d_p;  // first step: buf = clone(d_p)
        d_p = cfg.nesterov ? d_p + mom * buf[i] : buf[i];
      }
      w[i] -= lr * d_p;
    }
    have_buf = true;
  }
};

// Indices where `got` is off `want` by more than fp32 rounding over a few steps accounts for.
std::string mismatches(const std::vector<float>& got, const std::vector<double>& want) {
  std::string out;
  int n = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::abs(got[i] - want[i]) <= 1e-5 * std::max(1.0, std::abs(want[i]))) continue;
    if (++n <= 5)
      out += " [" + std::to_string(i) + "] " + std::to_string(got[i]) + " vs " +
             std::to_string(want[i]) + ";";
  }
  return n == 0 ? "" : std::to_string(n) + " of " + std::to_string(got.size()) + " off:" + out;
}

using ReferenceParam = std::tuple<int, DType, Momentum, bool, float>;

class FusedSgdReference : public ::testing::TestWithParam<ReferenceParam> {};

TEST_P(FusedSgdReference, MatchesFloat64TorchSgdOverTwelveSteps) {
  const auto [n, dtype, mode, weight_decay, dampening] = GetParam();
  const OptimizerConfig cfg = make_config(mode, weight_decay, dampening);
  constexpr int kSteps = 12;
  for (std::size_t count : {1, 7, 33, 1000, 4099}) {
    for (bool mean : {true, false}) {
      SCOPED_TRACE("count " + std::to_string(count) + (mean ? " mean" : " sum"));
      std::mt19937_64 rng(count * 131 + n * 7 + static_cast<int>(dtype) + (mean ? 1000003 : 0));
      std::vector<float> w = random_weights(count, rng);
      std::vector<float> m(mode == Momentum::kNone ? 0 : count, -7.f);  // first step overwrites
      ReferenceSgd ref{{w.begin(), w.end()}, {}};
      const double scale = mean ? 1.0 / n : 1.0;
      for (int step = 0; step < kSteps; ++step) {
        const GradSet g = make_grads(dtype, n, count, GradRange::kModerate, rng);
        apply_update(make_update(w, m, g, static_cast<float>(scale), step == 0), cfg,
                     MemoryType::kHost);
        ref.step(g, scale, cfg);
      }
      EXPECT_EQ(mismatches(w, ref.w), "") << "weights";
      if (!m.empty()) {
        EXPECT_EQ(mismatches(m, ref.buf), "") << "momentum";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Grid, FusedSgdReference,
    ::testing::Combine(::testing::Range(1, 17),
                       ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                       ::testing::Values(Momentum::kNone, Momentum::kPlain, Momentum::kNesterov),
                       ::testing::Bool(), ::testing::Values(0.f, 0.1f)),
    [](const ::testing::TestParamInfo<ReferenceParam>& info) {
      // Appended piece by piece: GCC 12 misreports `"literal" + std::string` (-Wrestrict).
      const ReferenceParam& p = info.param;
      std::string name = "N";
      name += std::to_string(std::get<0>(p));
      name += '_';
      name += to_string(std::get<1>(p));
      name += '_';
      name += to_string(std::get<2>(p));
      name += std::get<3>(p) ? "_WeightDecay" : "_NoWeightDecay";
      name += std::get<4>(p) != 0.f ? "_Dampening" : "_NoDampening";
      return name;
    });

// First index where two fp32 arrays differ in their bits, or -1.
long first_bit_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (bits_of(a[i]) != bits_of(b[i])) return static_cast<long>(i);
  }
  return -1;
}

using IsaParam = std::tuple<CpuIsa, DType>;

class FusedSgdIsa : public ::testing::TestWithParam<IsaParam> {};

TEST_P(FusedSgdIsa, BitIdenticalToScalar) {
  const auto [isa, dtype] = GetParam();
  if (!cpu_has_isa(isa)) GTEST_SKIP() << "this CPU lacks " << to_string(isa);
  const std::vector<OptimizerConfig> configs = {
      make_config(Momentum::kNone, false, 0.f), make_config(Momentum::kPlain, true, 0.f),
      make_config(Momentum::kPlain, false, 0.1f), make_config(Momentum::kNesterov, true, 0.f)};
  for (int n : {1, 2, 3, 5, 8, 16, 31}) {
    for (std::size_t count : {1, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 127, 129, 1000, 4099}) {
      for (std::size_t c = 0; c < configs.size(); ++c) {
        SCOPED_TRACE("N " + std::to_string(n) + " count " + std::to_string(count) + " config " +
                     std::to_string(c));
        std::mt19937_64 rng(n * 1000003 + count * 17 + c);
        std::vector<float> w_scalar = random_weights(count, rng), w_isa = w_scalar;
        std::vector<float> m_scalar(configs[c].momentum != 0.f ? count : 0), m_isa = m_scalar;
        for (int step = 0; step < 3; ++step) {
          // Wide inputs: subnormals, large values and the fp16/bf16 conversion of every class.
          const GradSet g = make_grads(dtype, n, count, GradRange::kWide, rng);
          const float scale = step == 1 ? 1.f / static_cast<float>(n) : 1.f;
          fused_sgd_cpu(make_update(w_scalar, m_scalar, g, scale, step == 0), configs[c],
                        CpuIsa::kScalar);
          fused_sgd_cpu(make_update(w_isa, m_isa, g, scale, step == 0), configs[c], isa);
          ASSERT_EQ(first_bit_difference(w_isa, w_scalar), -1) << "weights, step " << step;
          ASSERT_EQ(first_bit_difference(m_isa, m_scalar), -1) << "momentum, step " << step;
        }
      }
    }
  }
}

// An update out of place (SliceUpdate::weights_in: the server's second weights buffer) writes
// exactly what the update in place writes, on every ISA, and never writes the buffer it reads.
TEST_P(FusedSgdIsa, OutOfPlaceEqualsInPlaceAndLeavesItsSourceAlone) {
  const auto [isa, dtype] = GetParam();
  for (CpuIsa run_isa : {CpuIsa::kScalar, isa}) {
    if (!cpu_has_isa(run_isa)) GTEST_SKIP() << "this CPU lacks " << to_string(run_isa);
    const OptimizerConfig cfg = make_config(Momentum::kNesterov, true, 0.1f);
    for (std::size_t count : {1, 17, 65, 4099}) {
      SCOPED_TRACE(std::string(to_string(run_isa)) + " count " + std::to_string(count));
      std::mt19937_64 rng(count);
      std::vector<float> w_in_place = random_weights(count, rng), m_in_place(count);
      const std::vector<float> source = w_in_place;
      std::vector<float> w_source = source, w_out(count, -7.f), m_out(count);
      const GradSet g = make_grads(dtype, 3, count, GradRange::kWide, rng);
      fused_sgd_cpu(make_update(w_in_place, m_in_place, g, 1.f / 3, true), cfg, run_isa);
      SliceUpdate out_of_place = make_update(w_out, m_out, g, 1.f / 3, true);
      out_of_place.weights_in = w_source.data();
      fused_sgd_cpu(out_of_place, cfg, run_isa);
      EXPECT_EQ(first_bit_difference(w_out, w_in_place), -1) << "weights";
      EXPECT_EQ(first_bit_difference(m_out, m_in_place), -1) << "momentum";
      EXPECT_EQ(first_bit_difference(w_source, source), -1) << "the source was written";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(VectorIsas, FusedSgdIsa,
                         ::testing::Combine(::testing::Values(CpuIsa::kAvx2, CpuIsa::kAvx512),
                                            ::testing::Values(DType::kF32, DType::kF16,
                                                              DType::kBF16)),
                         [](const ::testing::TestParamInfo<IsaParam>& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_" +
                                  std::string(to_string(std::get<1>(info.param)));
                         });

}  // namespace
}  // namespace psrt::kernels::testing
