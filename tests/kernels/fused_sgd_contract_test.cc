// The fused SGD kernel's contract beyond the math's accuracy: exact results where the math is
// exact, exact fp16/bf16 widening, errors for unusable input with nothing written, and no
// write outside the slice.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/fused_sgd.h"
#include "kernels/fused_sgd_internal.h"
#include "psrt/config.h"
#include "psrt/error.h"
#include "sgd_test_util.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace psrt::kernels::testing {
namespace {

// Integer gradients, lr = 1, sum mode: every intermediate is a small integer, so fp32 is exact.
// With momentum 1 and no dampening the buffer after step s is s*G (G = the summed gradient), so
// after S steps w = w0 - G*S(S+1)/2, or with Nesterov w0 - G*(S(S+1)/2 + S).
TEST(FusedSgdExact, IntegerGradientsGiveClosedForm) {
  constexpr int kN = 16, kSteps = 6;
  constexpr std::size_t kCount = 1003;
  for (CpuIsa isa : available_isas()) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (int variant = 0; variant < 3; ++variant) {  // plain, momentum 1, Nesterov momentum 1
        SCOPED_TRACE(std::string(to_string(isa)) + " " + std::string(to_string(dtype)) +
                     " variant " + std::to_string(variant));
        std::mt19937_64 rng(variant * 10 + static_cast<int>(dtype));
        std::uniform_int_distribution<int> small(-100, 100);
        GradSet g = make_grads(dtype, kN, kCount, GradRange::kModerate, rng);
        std::vector<double> sum(kCount, 0.0);
        for (int j = 0; j < kN; ++j) {
          for (std::size_t i = 0; i < kCount; ++i) {
            const int v = small(rng);  // exact in fp16 (11 bits) and bf16 (8 bits)
            if (dtype == DType::kF32) {
              const auto f = static_cast<float>(v);
              std::memcpy(&g.bytes[j][i * 4], &f, 4);
            } else {
              const float f = static_cast<float>(v);
              // bf16: the top half of the fp32; fp16 built from the integer's binary form.
              std::uint16_t h = static_cast<std::uint16_t>(bits_of(f) >> 16);
              if (dtype == DType::kF16) {
                h = v == 0 ? 0
                           : static_cast<std::uint16_t>(
                                 (v < 0 ? 0x8000 : 0) | ((std::ilogb(f) + 15) << 10) |
                                 ((std::abs(v) << (10 - std::ilogb(f))) & 0x3ff));
              }
              std::memcpy(&g.bytes[j][i * 2], &h, 2);
            }
            sum[i] += v;
          }
        }
        OptimizerConfig cfg;
        cfg.lr = 1.f;
        cfg.momentum = variant == 0 ? 0.f : 1.f;
        cfg.nesterov = variant == 2;
        std::vector<float> w(kCount), m(variant == 0 ? 0 : kCount);
        for (std::size_t i = 0; i < kCount; ++i)
          w[i] = static_cast<float>(i % 97) - 48.f;
        const std::vector<float> w0 = w;
        for (int s = 0; s < kSteps; ++s) {
          fused_sgd_cpu(make_update(w, m, g, 1.f, s == 0), cfg, isa);
        }
        const double triangle = kSteps * (kSteps + 1) / 2.0;
        const double factor = variant == 0 ? kSteps : variant == 1 ? triangle : triangle + kSteps;
        for (std::size_t i = 0; i < kCount; ++i) {
          ASSERT_EQ(w[i], static_cast<float>(w0[i] - sum[i] * factor)) << "element " << i;
          if (variant != 0) {
            ASSERT_EQ(m[i], static_cast<float>(sum[i] * kSteps)) << "element " << i;
          }
        }
      }
    }
  }
}

TEST(HalfToFloat, SpecialValuesAreExact) {
  using detail::half_to_float;
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.f, -24));  // smallest subnormal
  EXPECT_EQ(half_to_float(0x0200), std::ldexp(1.f, -15));
  EXPECT_EQ(half_to_float(0x03ff), std::ldexp(1023.f, -24));  // largest subnormal
  EXPECT_EQ(half_to_float(0x8001), -std::ldexp(1.f, -24));
  EXPECT_EQ(half_to_float(0x0400), std::ldexp(1.f, -14));  // smallest normal
  EXPECT_EQ(half_to_float(0x3c00), 1.f);
  EXPECT_EQ(half_to_float(0x3555), 0.333251953125f);
  EXPECT_EQ(half_to_float(0x7bff), 65504.f);
  EXPECT_EQ(half_to_float(0xfbff), -65504.f);
  EXPECT_EQ(half_to_float(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(half_to_float(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(bits_of(half_to_float(0x0000)), 0u);
  EXPECT_EQ(bits_of(half_to_float(0x8000)), 0x80000000u);  // -0 keeps its sign
  EXPECT_TRUE(std::isnan(half_to_float(0x7e00)));
  EXPECT_EQ(bits_of(half_to_float(0x7e00)), 0x7fc00000u);
  EXPECT_EQ(bits_of(half_to_float(0x7c01)), 0x7fc02000u);  // signalling NaN: payload, quieted
  EXPECT_EQ(bits_of(half_to_float(0xfe01)), 0xffc02000u);
}

TEST(HalfToFloat, EveryFiniteValueMatchesItsDefinition) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const int e = static_cast<int>((h >> 10) & 0x1f);
    if (e == 0x1f) continue;
    const double want = decode((h & 0x8000) != 0, e, h & 0x3ff, 10, 15);
    ASSERT_EQ(detail::half_to_float(static_cast<std::uint16_t>(h)), want) << std::hex << h;
  }
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) float hardware_half_to_float(std::uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

// The vector bodies widen with VCVTPH2PS; the scalar tails must agree on every pattern, NaNs
// included, for the ISAs to stay bit-identical.
TEST(HalfToFloat, EveryPatternMatchesF16cBitForBit) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "this CPU lacks f16c";
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto x = static_cast<std::uint16_t>(h);
    ASSERT_EQ(bits_of(detail::half_to_float(x)), bits_of(hardware_half_to_float(x)))
        << std::hex << h;
  }
}
#endif

TEST(Bf16ToFloat, IsTheTopHalfOfAnFp32) {
  EXPECT_EQ(detail::bf16_to_float(0x3f80), 1.f);
  EXPECT_EQ(detail::bf16_to_float(0xc040), -3.f);
  EXPECT_EQ(detail::bf16_to_float(0x7f80), std::numeric_limits<float>::infinity());
  EXPECT_EQ(detail::bf16_to_float(0x0001), std::ldexp(1.f, -133));  // subnormal
  EXPECT_EQ(bits_of(detail::bf16_to_float(0x7fc1)), 0x7fc10000u);
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(to_string(DType::kBF16), "bf16");
  EXPECT_EQ(to_string(CpuIsa::kAvx512), "avx512");
  EXPECT_TRUE(cpu_has_isa(CpuIsa::kScalar));
}

// Sets an environment variable for one scope and restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(BestCpuIsa, EnvironmentCapsTheDetectedIsa) {
  const CpuIsa widest = available_isas().back();
  {
    ScopedEnv env("PSRT_CPU_ISA", "scalar");
    EXPECT_EQ(best_cpu_isa(), CpuIsa::kScalar);
  }
  {
    ScopedEnv env("PSRT_CPU_ISA", "avx512");  // a cap above the CPU gives what the CPU has
    EXPECT_EQ(best_cpu_isa(), widest);
  }
  {
    ScopedEnv env("PSRT_CPU_ISA", "avx2");
    EXPECT_EQ(best_cpu_isa(), cpu_has_isa(CpuIsa::kAvx2) ? CpuIsa::kAvx2 : CpuIsa::kScalar);
  }
}

// A valid one-element update with two gradients; each error case breaks one thing.
struct ErrorCase {
  std::vector<float> w{1.f}, m{0.f};
  float g0 = 1.f, g1 = 2.f;
  const void* grads[2] = {&g0, &g1};
  SliceUpdate u{w.data(), m.data(), grads, 2, DType::kF32, 1, 0.5f, true};
  OptimizerConfig cfg{
      .lr = 0.1f, .momentum = 0.9f, .dampening = 0.f, .weight_decay = 0.f, .nesterov = false};
};

void expect_invalid(const SliceUpdate& u, const OptimizerConfig& cfg, const std::string& needle,
                    CpuIsa isa = CpuIsa::kScalar) {
  try {
    fused_sgd_cpu(u, cfg, isa);
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(FusedSgdErrors, UnusableUpdatesThrowInvalidArgumentAndWriteNothing) {
  ErrorCase c;
  auto u = c.u;
  u.num_grads = 0;
  expect_invalid(u, c.cfg, "num_grads is 0");
  u = c.u;
  u.weights = nullptr;
  expect_invalid(u, c.cfg, "weights is null");
  u = c.u;
  u.momentum = nullptr;
  expect_invalid(u, c.cfg, "momentum buffer is null");
  u = c.u;
  u.grads = nullptr;
  expect_invalid(u, c.cfg, "grads is null");
  c.grads[1] = nullptr;
  expect_invalid(c.u, c.cfg, "grads[1] of 2 is null");
  expect_invalid(ErrorCase{}.u, c.cfg, "lacks", static_cast<CpuIsa>(9));
  EXPECT_EQ(c.w[0], 1.f);
  EXPECT_EQ(c.m[0], 0.f);
}

TEST(FusedSgdErrors, NullMomentumIsFineWithoutMomentum) {
  ErrorCase c;
  c.u.momentum = nullptr;
  c.cfg.momentum = 0.f;
  fused_sgd_cpu(c.u, c.cfg, CpuIsa::kScalar);
  EXPECT_EQ(c.w[0], 1.f - 0.1f * 1.5f);
}

TEST(FusedSgdErrors, UnknownCpuIsaEnvValueNamesTheAcceptedOnes) {
  ScopedEnv env("PSRT_CPU_ISA", "sse9");
  ErrorCase c;
  try {
    fused_sgd_cpu(c.u, c.cfg);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("PSRT_CPU_ISA=sse9"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("scalar|avx2|avx512"), std::string::npos) << e.what();
  }
  EXPECT_EQ(c.w[0], 1.f);
}

TEST(ApplyUpdate, HostRunsTheCpuKernelAndCudaIsUnsupported) {
  ErrorCase c;
  apply_update(c.u, c.cfg, MemoryType::kHost);
  EXPECT_EQ(c.m[0], 1.5f);
  EXPECT_EQ(c.w[0], 1.f - 0.1f * 1.5f);
  try {
    apply_update(c.u, c.cfg, MemoryType::kCuda);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
#if PSRT_HAVE_CUDA
    // Host pointers labelled as device memory: refused by the CUDA update's pointer check when a
    // GPU is present, or for want of a usable GPU; either way nothing is written.
    const std::string what = e.what();
    if (e.code() == ErrorCode::kInvalidArgument) {
      EXPECT_NE(what.find("not CUDA device memory"), std::string::npos) << what;
    } else {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << what;
      EXPECT_NE(what.find("cuda"), std::string::npos) << what;
    }
#else
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("CUDA update not built"), std::string::npos) << e.what();
#endif
  }
  EXPECT_EQ(c.m[0], 1.5f);
  EXPECT_EQ(c.w[0], 1.f - 0.1f * 1.5f);
}

// Weights and momentum sit between poisoned guard zones, at an offset that leaves them
// unaligned for every vector width; the guards must come back untouched.
TEST(FusedSgdBounds, WritesNothingOutsideTheSlice) {
  constexpr std::size_t kPad = 67;
  constexpr float kPoison = -1234.5f;
  OptimizerConfig cfg{
      .lr = 0.05f, .momentum = 0.9f, .dampening = 0.f, .weight_decay = 0.01f, .nesterov = true};
  for (CpuIsa isa : available_isas()) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (std::size_t count = 1; count <= 4099; count = count < 80 ? count + 1 : count * 3 + 1) {
        SCOPED_TRACE(std::string(to_string(isa)) + " " + std::string(to_string(dtype)) + " count " +
                     std::to_string(count));
        std::mt19937_64 rng(count);
        const GradSet g = make_grads(dtype, 3, count, GradRange::kModerate, rng);
        std::vector<float> w(count + 2 * kPad, kPoison), m(count + 2 * kPad, kPoison);
        SliceUpdate u{w.data() + kPad, m.data() + kPad, g.ptrs.data(), 3, dtype, count, 1.f, true};
        fused_sgd_cpu(u, cfg, isa);
        for (std::size_t i = 0; i < kPad; ++i) {
          ASSERT_EQ(w[i], kPoison) << "weights guard before, " << i;
          ASSERT_EQ(m[i], kPoison) << "momentum guard before, " << i;
          ASSERT_EQ(w[kPad + count + i], kPoison) << "weights guard after, " << i;
          ASSERT_EQ(m[kPad + count + i], kPoison) << "momentum guard after, " << i;
        }
        ASSERT_NE(w[kPad + count - 1], kPoison) << "the last element was not updated";
      }
    }
  }
}

}  // namespace
}  // namespace psrt::kernels::testing
