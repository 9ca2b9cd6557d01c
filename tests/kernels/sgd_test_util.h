// Test inputs for the fused SGD kernel: gradients generated directly as dtype bit patterns, each
// with its exact value as a double (decoded independently of the kernel's converters), so a
// float64 reference sees exactly the inputs the kernel sees.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
#include <vector>

#include "kernels/fused_sgd.h"

namespace psrt::kernels {

// gtest prints test parameters by name with these (found by argument-dependent lookup).
inline void PrintTo(DType t, std::ostream* os) {
  *os << to_string(t);
}
inline void PrintTo(CpuIsa isa, std::ostream* os) {
  *os << to_string(isa);
}

}  // namespace psrt::kernels

namespace psrt::kernels::testing {

// The ISAs this CPU (and build) can run.
inline std::vector<CpuIsa> available_isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : kAllCpuIsas) {
    if (cpu_has_isa(isa)) out.push_back(isa);
  }
  return out;
}

enum class GradRange {
  kModerate,  // |g| in about [1/64, 2): what the reference comparison uses
  kWide,      // every finite class incl. subnormals and large values: for bit-identity checks
};

// Exact value of a binary floating-point field layout: sign, biased exponent, mantissa bits.
inline double decode(bool negative, int exponent, std::uint32_t mantissa, int mantissa_bits,
                     int bias) {
  const double v = exponent == 0
                       ? std::ldexp(static_cast<double>(mantissa), 1 - bias - mantissa_bits)
                       : std::ldexp(static_cast<double>(mantissa | (1u << mantissa_bits)),
                                    exponent - bias - mantissa_bits);
  return negative ? -v : v;
}

struct GradSet {
  DType dtype = DType::kF32;
  std::size_t count = 0;
  std::vector<std::vector<unsigned char>> bytes;  // one array of count dtype values per gradient
  std::vector<std::vector<double>> values;        // the same values, exactly
  std::vector<const void*> ptrs;                  // what SliceUpdate::grads points at
};

inline GradSet make_grads(DType t, int n, std::size_t count, GradRange range,
                          std::mt19937_64& rng) {
  GradSet s;
  s.dtype = t;
  s.count = count;
  const std::size_t width = dtype_size(t);
  const bool wide = range == GradRange::kWide;
  for (int j = 0; j < n; ++j) {
    std::vector<unsigned char> bytes(count * width);
    std::vector<double> values(count);
    for (std::size_t i = 0; i < count; ++i) {
      // One draw per element: bit 63 is the sign, bits 32..62 pick the exponent, the low bits
      // the mantissa. The slight modulo bias does not matter here.
      const std::uint64_t r = rng();
      const bool negative = (r >> 63) != 0;
      const auto pick = [&](int lo, int hi) {
        return lo +
               static_cast<int>(((r >> 32) & 0x7fffffffu) % static_cast<unsigned>(hi - lo + 1));
      };
      if (t == DType::kF32) {
        // 1 + 8 + 23 bits; wide reaches fp32 subnormals and values near 2^13.
        const int e = wide ? pick(0, 140) : pick(121, 127);
        const auto m = static_cast<std::uint32_t>(r & 0x7fffffu);
        const std::uint32_t bits =
            (negative ? 0x80000000u : 0u) | (static_cast<std::uint32_t>(e) << 23) | m;
        std::memcpy(&bytes[i * 4], &bits, 4);
        values[i] = decode(negative, e, m, 23, 127);
      } else {
        const bool half = t == DType::kF16;
        const int mantissa_bits = half ? 10 : 7;
        const int bias = half ? 15 : 127;
        const int e =
            half ? (wide ? pick(0, 30) : pick(9, 15)) : (wide ? pick(0, 140) : pick(121, 127));
        const auto m = static_cast<std::uint32_t>(r & ((1u << mantissa_bits) - 1));
        const auto bits = static_cast<std::uint16_t>(
            (negative ? 0x8000u : 0u) | (static_cast<std::uint32_t>(e) << mantissa_bits) | m);
        std::memcpy(&bytes[i * 2], &bits, 2);
        values[i] = decode(negative, e, m, mantissa_bits, bias);
      }
    }
    s.bytes.push_back(std::move(bytes));
    s.values.push_back(std::move(values));
  }
  for (const auto& b : s.bytes)
    s.ptrs.push_back(b.data());
  return s;
}

inline std::vector<float> random_weights(std::size_t count, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> w(count);
  for (float& x : w)
    x = dist(rng);
  return w;
}

inline SliceUpdate make_update(std::vector<float>& weights, std::vector<float>& momentum,
                               const GradSet& g, float grad_scale, bool first_step) {
  SliceUpdate u;
  u.weights = weights.data();
  u.momentum = momentum.empty() ? nullptr : momentum.data();
  u.grads = g.ptrs.data();
  u.num_grads = static_cast<int>(g.ptrs.size());
  u.dtype = g.dtype;
  u.count = g.count;
  u.grad_scale = grad_scale;
  u.first_step = first_step;
  return u;
}

inline std::uint32_t bits_of(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

}  // namespace psrt::kernels::testing
