// FNV-1a 64: the one non-cryptographic hash psrt uses (slice checkpoint checksums, parameter
// keys, weight digests). Not for anything an attacker chooses: the job secret covers that.
#pragma once

#include <cstddef>
#include <cstdint>

namespace psrt {

inline constexpr std::uint64_t kFnv1aOffset = 0xcbf29ce484222325ull;

// Hashes `size` bytes at `data`, continuing from `h` (chain calls to hash several buffers).
inline std::uint64_t fnv1a(const void* data, std::size_t size, std::uint64_t h = kFnv1aOffset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i)
    h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace psrt
