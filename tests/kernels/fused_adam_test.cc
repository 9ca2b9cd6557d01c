// The fused Adam/AdamW kernel (kernels/fused_adam.h) against a float64 model of torch.optim.Adam
// and AdamW, against torch itself step by step (tests/kernels/torch_adam_reference.py, when
// /usr/bin/python3 has torch), and every vector ISA against the scalar one bit for bit.
#include "kernels/fused_adam.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "psrt/error.h"
#include "sgd_test_util.h"

namespace psrt::kernels::testing {
namespace {

OptimizerConfig adam_config(OptimizerAlgorithm algorithm, float weight_decay) {
  OptimizerConfig cfg;
  cfg.algorithm = algorithm;
  cfg.lr = 1e-2f;
  cfg.weight_decay = weight_decay;
  return cfg;
}

// One slice's Adam state, and the update that applies `grads` to it as step `step`.
struct AdamSlice {
  std::vector<float> w, m, v;
  explicit AdamSlice(std::vector<float> weights)
      : w(std::move(weights)), m(w.size(), 0.f), v(w.size(), 0.f) {}
  SliceUpdate update(const GradSet& g, float grad_scale, std::uint64_t step) {
    std::vector<float> none;
    SliceUpdate u = make_update(w, none, g, grad_scale, false);
    u.momentum = m.data();
    u.exp_avg_sq = v.data();
    u.step = step;
    return u;
  }
};

// torch.optim.Adam/AdamW.step for one parameter in float64 (torch/optim/adam.py and adamw.py,
// _single_tensor_*), with the config's fp32 hyperparameters.
struct ReferenceAdam {
  std::vector<double> w, m, v;
  std::uint64_t step = 0;

  void apply(const GradSet& grads, double grad_scale, const OptimizerConfig& cfg) {
    if (m.empty()) m.assign(w.size(), 0.0), v.assign(w.size(), 0.0);
    ++step;
    const double lr = cfg.lr, wd = cfg.weight_decay, b1 = cfg.beta1, b2 = cfg.beta2;
    const auto t = static_cast<double>(step);
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    for (std::size_t i = 0; i < w.size(); ++i) {
      double g = 0;
      for (const auto& x : grads.values)
        g += x[i];
      g *= grad_scale;
      if (cfg.algorithm == OptimizerAlgorithm::kAdam) g += wd * w[i];
      if (cfg.algorithm == OptimizerAlgorithm::kAdamW) w[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      w[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + cfg.eps);
    }
  }
};

// Elements off by more than `tol` relative (absolute below 1).
std::string mismatches(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  std::string out;
  int n = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::abs(got[i] - want[i]) <= tol * std::max(1.0, std::abs(want[i]))) continue;
    if (++n <= 5)
      out += " [" + std::to_string(i) + "] " + std::to_string(got[i]) + " vs " +
             std::to_string(want[i]) + ";";
  }
  return n == 0 ? "" : std::to_string(n) + " of " + std::to_string(got.size()) + " off:" + out;
}

using Param = std::tuple<OptimizerAlgorithm, int, DType, bool, bool>;

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto [algorithm, n, dtype, decay, mean] = info.param;
  return std::string(to_string(algorithm)) + "_N" + std::to_string(n) + "_" +
         std::string(to_string(dtype)) + (decay ? "_Decay" : "_NoDecay") +
         (mean ? "_Mean" : "_Sum");
}

class FusedAdam : public ::testing::TestWithParam<Param> {};

// 50 steps with a changing lr, each ISA, against float64: the fp32 kernel stays within 2e-6 of the
// exact torch arithmetic (|w| <= ~1, lr <= 1e-2).
TEST_P(FusedAdam, MatchesFloat64AdamOverFiftySteps) {
  const auto [algorithm, n, dtype, decay, mean] = GetParam();
  OptimizerConfig cfg = adam_config(algorithm, decay ? 0.05f : 0.f);
  std::mt19937_64 rng(7);
  const std::size_t count = 203;  // vector bodies and a tail on every ISA
  const std::vector<float> w0 = random_weights(count, rng);
  for (CpuIsa isa : available_isas()) {
    SCOPED_TRACE(std::string(to_string(isa)));
    std::mt19937_64 grng(11);
    AdamSlice s(w0);
    ReferenceAdam ref{{w0.begin(), w0.end()}, {}, {}};
    const float scale = mean ? 1.f / static_cast<float>(n) : 1.f;
    for (std::uint64_t step = 1; step <= 50; ++step) {
      cfg.lr = 1e-2f / static_cast<float>(step % 7 + 1);
      const GradSet g = make_grads(dtype, n, count, GradRange::kModerate, grng);
      (void)fused_sgd_cpu(s.update(g, scale, step), cfg, isa);
      ref.apply(g, scale, cfg);
      ASSERT_EQ(mismatches(s.w, ref.w, 2e-6), "") << "step " << step;
    }
  }
}

// Every ISA equals the scalar backend bit for bit, on gradients of every finite class.
TEST_P(FusedAdam, IsasAreBitIdentical) {
  const auto [algorithm, n, dtype, decay, mean] = GetParam();
  const OptimizerConfig cfg = adam_config(algorithm, decay ? 0.05f : 0.f);
  std::mt19937_64 rng(3);
  const std::size_t count = 333;
  const std::vector<float> w0 = random_weights(count, rng);
  std::vector<AdamSlice> runs;
  for (CpuIsa isa : available_isas()) {
    std::mt19937_64 grng(5);
    AdamSlice s(w0);
    for (std::uint64_t step = 1; step <= 5; ++step) {
      const GradSet g = make_grads(dtype, n, count, GradRange::kWide, grng);
      (void)fused_sgd_cpu(s.update(g, mean ? 1.f / static_cast<float>(n) : 1.f, step), cfg, isa);
    }
    runs.push_back(std::move(s));
  }
  for (std::size_t r = 1; r < runs.size(); ++r) {
    SCOPED_TRACE(std::string(to_string(available_isas()[r])));
    for (std::size_t i = 0; i < count; ++i) {
      ASSERT_EQ(bits_of(runs[r].w[i]), bits_of(runs[0].w[i])) << i;
      ASSERT_EQ(bits_of(runs[r].m[i]), bits_of(runs[0].m[i])) << i;
      ASSERT_EQ(bits_of(runs[r].v[i]), bits_of(runs[0].v[i])) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, FusedAdam,
    ::testing::Combine(::testing::Values(OptimizerAlgorithm::kAdam, OptimizerAlgorithm::kAdamW),
                       ::testing::Values(1, 4),
                       ::testing::Values(DType::kF32, DType::kF16, DType::kBF16), ::testing::Bool(),
                       ::testing::Bool()),
    param_name);

constexpr std::size_t kTorchCount = 515;
constexpr int kTorchSteps = 50;
constexpr float kTorchDecay = 0.05f;

using TorchParam = std::tuple<OptimizerAlgorithm, int, DType, bool>;

// torch_adam_reference.py's SPEC for a case.
std::string torch_spec(const TorchParam& p) {
  const auto [algorithm, n, dtype, mean] = p;
  return std::string(to_string(algorithm)) + "," + std::to_string(kTorchDecay) + "," +
         std::to_string(n) + "," + std::string(to_string(dtype)) + "," + (mean ? "1" : "0") + "," +
         std::to_string(kTorchSteps) + "," + std::to_string(kTorchCount);
}

// Reads what torch_adam_reference.py wrote for `spec` into `dir`.
std::vector<float> read_reference(const std::string& dir, const std::string& spec) {
  const std::string path = dir + "/" + spec + ".bin";
  std::vector<char> bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  std::remove(path.c_str());
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// The fp16 bits of a finite fp32 value that is exactly an fp16 value.
std::uint16_t exact_half(float x) {
  const std::uint32_t b = bits_of(x);
  const auto sign = static_cast<std::uint16_t>((b >> 16) & 0x8000u);
  const float a = std::abs(x);
  if (a < 0x1p-14f)
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(a * 0x1p24f));
  const std::uint32_t e = ((b >> 23) & 0xffu) - 127 + 15;
  return static_cast<std::uint16_t>(sign | (e << 10) | ((b & 0x7fffffu) >> 13));
}

// Exact dtype bit patterns of fp32 values that are exactly of that dtype.
GradSet grads_from(const float* values, int n, std::size_t count, DType dtype) {
  GradSet s;
  s.dtype = dtype;
  s.count = count;
  for (int j = 0; j < n; ++j) {
    std::vector<unsigned char> bytes(count * dtype_size(dtype));
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint32_t b = bits_of(values[j * count + i]);
      if (dtype == DType::kF32) {
        std::memcpy(&bytes[i * 4], &b, 4);
      } else if (dtype == DType::kBF16) {
        const auto h = static_cast<std::uint16_t>(b >> 16);
        std::memcpy(&bytes[i * 2], &h, 2);
      } else {
        const std::uint16_t h = exact_half(values[j * count + i]);
        std::memcpy(&bytes[i * 2], &h, 2);
      }
    }
    s.bytes.push_back(std::move(bytes));
  }
  for (const auto& b : s.bytes)
    s.ptrs.push_back(b.data());
  return s;
}

std::vector<TorchParam> torch_cases() {
  std::vector<TorchParam> out;
  for (auto a : {OptimizerAlgorithm::kAdam, OptimizerAlgorithm::kAdamW})
    for (int n : {1, 3})
      for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
        for (bool mean : {false, true})
          out.emplace_back(a, n, t, mean);
  return out;
}

// torch.optim.Adam/AdamW(foreach=False) step by step for 50 steps with an lr schedule, for Adam
// and AdamW with weight decay, 1 and 3 gradients of each dtype, mean and sum, on every ISA: every
// step's weights within 1e-6 relative (torch fuses multiply-adds the spec keeps apart). One test,
// so one python run writes every case's reference (importing torch takes seconds).
TEST(FusedAdamTorch, MatchesTorchStepByStepForFiftySteps) {
  const std::string dir = ::testing::TempDir() + "adam_torch_ref";
  std::string cmd = "mkdir -p " + dir +
                    " && /usr/bin/python3 " PSRT_TEST_SOURCE_DIR "/torch_adam_reference.py " + dir;
  for (const TorchParam& p : torch_cases())
    cmd += " " + torch_spec(p);
  if (std::system((cmd + " 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "/usr/bin/python3 with torch is not available";
  for (const TorchParam& p : torch_cases()) {
    SCOPED_TRACE(torch_spec(p));
    const auto [algorithm, n, dtype, mean] = p;
    const std::size_t count = kTorchCount;
    const std::vector<float> ref = read_reference(dir, torch_spec(p));
    ASSERT_EQ(ref.size(), count + kTorchSteps * (1 + (n + 1) * count));
    OptimizerConfig cfg = adam_config(algorithm, kTorchDecay);
    for (CpuIsa isa : available_isas()) {
      SCOPED_TRACE(std::string(to_string(isa)));
      AdamSlice s({ref.begin(), ref.begin() + count});
      const float* at = ref.data() + count;
      for (int step = 1; step <= kTorchSteps; ++step) {
        cfg.lr = *at++;
        const GradSet g = grads_from(at, n, count, dtype);
        at += n * count;
        (void)fused_sgd_cpu(s.update(g, mean ? 1.f / static_cast<float>(n) : 1.f, step), cfg, isa);
        const std::vector<double> want(at, at + count);
        at += count;
        ASSERT_EQ(mismatches(s.w, want, 1e-6), "") << "step " << step;
      }
    }
  }
}

// The guard: a non-finite gradient skips the step; weights and both moments keep their bits.
TEST(FusedAdamGuard, NonFiniteGradientWritesNothing) {
  OptimizerConfig cfg = adam_config(OptimizerAlgorithm::kAdamW, 0.1f);
  cfg.skip_nonfinite = true;
  std::mt19937_64 rng(9);
  for (CpuIsa isa : available_isas()) {
    AdamSlice s(random_weights(100, rng));
    GradSet g = make_grads(DType::kF32, 2, 100, GradRange::kModerate, rng);
    (void)fused_sgd_cpu(s.update(g, 0.5f, 1), cfg, isa);
    const AdamSlice before = s;
    const float inf = std::numeric_limits<float>::infinity();
    std::memcpy(&g.bytes[1][40], &inf, 4);
    const StepResult r = fused_sgd_cpu(s.update(g, 0.5f, 2), cfg, isa);
    EXPECT_TRUE(r.skipped);
    for (std::size_t i = 0; i < 100; ++i) {
      ASSERT_EQ(bits_of(s.w[i]), bits_of(before.w[i]));
      ASSERT_EQ(bits_of(s.m[i]), bits_of(before.m[i]));
      ASSERT_EQ(bits_of(s.v[i]), bits_of(before.v[i]));
    }
  }
}

TEST(FusedAdamValidation, RefusesMissingMomentsAndStepZero) {
  const OptimizerConfig cfg = adam_config(OptimizerAlgorithm::kAdam, 0.f);
  std::mt19937_64 rng(1);
  AdamSlice s(random_weights(8, rng));
  const GradSet g = make_grads(DType::kF32, 1, 8, GradRange::kModerate, rng);
  SliceUpdate u = s.update(g, 1.f, 0);
  try {
    (void)fused_sgd_cpu(u, cfg);
    FAIL() << "step 0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step is 0"), std::string::npos) << e.what();
  }
  u.step = 1;
  u.exp_avg_sq = nullptr;
  try {
    (void)fused_sgd_cpu(u, cfg);
    FAIL() << "a null exp_avg_sq accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs both moments"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace psrt::kernels::testing
