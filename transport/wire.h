// Little-endian field encoding for the fixed wire headers. Encoders write into a byte array,
// decoders read from one; neither trusts alignment.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace psrt::wire {

static_assert(std::endian::native == std::endian::little,
              "psrt's wire format is little-endian; add byte swaps for this host");

template <typename T>
requires std::is_integral_v<T>
inline void store(std::byte* at, T value) {
  std::memcpy(at, &value, sizeof value);
}

template <typename T>
requires std::is_integral_v<T>
inline T load(const std::byte* at) {
  T value;
  std::memcpy(&value, at, sizeof value);
  return value;
}

}  // namespace psrt::wire
