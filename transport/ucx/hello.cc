#include "transport/ucx/hello.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstring>

#include "transport/wire.h"

namespace psrt::transport::ucx {

std::vector<std::byte> encode_hello(const Hello& hello) {
  std::vector<std::byte> out(kHelloFixedBytes + hello.worker_address.size());
  std::byte* p = out.data();
  wire::store<std::uint32_t>(p, kHelloMagic);
  wire::store<std::uint16_t>(p + 4, kHelloVersion);
  wire::store<std::uint16_t>(p + 6, 0);
  wire::store<std::uint64_t>(p + 8, hello.conn_id);
  std::memcpy(p + 16, hello.boot_id.data(), std::min(hello.boot_id.size(), kBootIdBytes));
  wire::store<std::uint32_t>(p + 56, static_cast<std::uint32_t>(hello.worker_address.size()));
  std::memcpy(p + kHelloFixedBytes, hello.worker_address.data(), hello.worker_address.size());
  return out;
}

std::string decode_hello_fixed(std::span<const std::byte, kHelloFixedBytes> in, Hello& out,
                               std::size_t& address_len) {
  const std::byte* p = in.data();
  auto magic = wire::load<std::uint32_t>(p);
  if (magic != kHelloMagic) {
    return fmt::format("bad handshake magic 0x{:08x} (not a psrt ucx peer?)", magic);
  }
  auto version = wire::load<std::uint16_t>(p + 4);
  if (version != kHelloVersion) {
    return fmt::format("handshake version {} is not supported (this build speaks {})", version,
                       kHelloVersion);
  }
  if (wire::load<std::uint16_t>(p + 6) != 0) return "reserved handshake field is not zero";
  out.conn_id = wire::load<std::uint64_t>(p + 8);
  if (out.conn_id == 0) return "handshake connection id is 0";
  const char* boot = reinterpret_cast<const char*>(p + 16);
  out.boot_id.assign(boot, strnlen(boot, kBootIdBytes));
  address_len = wire::load<std::uint32_t>(p + 56);
  if (address_len == 0 || address_len > kMaxWorkerAddressBytes) {
    return fmt::format("worker address of {} bytes is outside 1..{}", address_len,
                       kMaxWorkerAddressBytes);
  }
  return {};
}

}  // namespace psrt::transport::ucx
