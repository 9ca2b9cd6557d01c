// Views of memory that psrt moves. Every buffer says where it lives, because the transport and
// the kernels take different paths for host and GPU memory. A view never owns its bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace psrt {

enum class MemoryType : std::uint8_t { kHost = 0, kCuda = 1 };

inline std::string_view to_string(MemoryType t) noexcept {
  return t == MemoryType::kHost ? "host" : "cuda";
}

struct ConstBuffer {
  const void* data = nullptr;
  std::size_t size = 0;
  MemoryType memory = MemoryType::kHost;
};

struct MutableBuffer {
  void* data = nullptr;
  std::size_t size = 0;
  MemoryType memory = MemoryType::kHost;

  operator ConstBuffer() const noexcept { return {data, size, memory}; }  // NOLINT: view widening
};

}  // namespace psrt
