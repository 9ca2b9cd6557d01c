// Reproducible randomness for the data layer. Everything here depends only on the seeds given,
// never on the global RNG, the thread count or the standard library's distributions (whose
// algorithms are implementation-defined), so every worker of a job draws the same numbers.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>

namespace psrt::pstrain {

// Combines two values into a well-mixed 64-bit seed (splitmix64 finaliser over a ^ rotated b).
// Use it to derive per-epoch / per-step / per-sample seeds: mix_seed(mix_seed(seed, epoch), step).
constexpr uint64_t mix_seed(uint64_t a, uint64_t b) noexcept {
  uint64_t z = a + 0x9e3779b97f4a7c15ULL + ((b << 17) | (b >> 47)) + b * 0xd1342543de82ef95ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A uniform integer in [0, bound), bound >= 1, without modulo bias (rejection sampling).
inline uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound) noexcept {
  const uint64_t limit = UINT64_MAX - (UINT64_MAX % bound);  // a multiple of bound
  uint64_t x = rng();
  while (x >= limit)
    x = rng();
  return x % bound;
}

// A uniform double in (0, 1]: 53 random bits, never 0 so that log() below is finite.
inline double uniform_open_closed(std::mt19937_64& rng) noexcept {
  return static_cast<double>((rng() >> 11) + 1) * 0x1.0p-53;
}

// Two independent standard normal values (Box-Muller).
struct NormalPair {
  double first;
  double second;
};
inline NormalPair standard_normal_pair(std::mt19937_64& rng) noexcept {
  const double radius = std::sqrt(-2.0 * std::log(uniform_open_closed(rng)));
  const double angle = 2.0 * std::numbers::pi * uniform_open_closed(rng);
  return {radius * std::cos(angle), radius * std::sin(angle)};
}

}  // namespace psrt::pstrain
