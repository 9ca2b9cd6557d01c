#include "transport/ucx/hello.h"

#include <fmt/core.h>
#include <sys/random.h>

#include <algorithm>
#include <cstring>

#include "psrt/error.h"
#include "transport/wire.h"

namespace psrt::transport::ucx {

RouteToken random_route_token() {
  RouteToken t;
  std::size_t have = 0;
  while (have < t.size()) {
    ssize_t n = ::getrandom(t.data() + have, t.size() - have, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw Error(ErrorCode::kSystem,
                  fmt::format("getrandom failed: no entropy for a UCX route token ({})",
                              std::strerror(errno)));
    have += static_cast<std::size_t>(n);
  }
  return t;
}

bool same_route_token(const std::byte* bytes, const RouteToken& token) noexcept {
  unsigned char diff = 0;
  for (std::size_t i = 0; i < token.size(); ++i)
    diff |= static_cast<unsigned char>(bytes[i] ^ token[i]);
  return diff == 0;
}

std::uint64_t route_key(const std::byte* token) noexcept {
  return wire::load<std::uint64_t>(token);
}

std::vector<std::byte> encode_hello(const Hello& hello) {
  std::vector<std::byte> out(kHelloFixedBytes + hello.worker_address.size());
  std::byte* p = out.data();
  wire::store<std::uint32_t>(p, kHelloMagic);
  wire::store<std::uint16_t>(p + 4, kHelloVersion);
  wire::store<std::uint16_t>(p + 6, 0);
  std::memcpy(p + 8, hello.route_token.data(), kRouteTokenBytes);
  std::memcpy(p + 24, hello.boot_id.data(), std::min(hello.boot_id.size(), kBootIdBytes));
  wire::store<std::uint32_t>(p + 64, static_cast<std::uint32_t>(hello.worker_address.size()));
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
    return fmt::format(
        "handshake version {} is not supported (this build speaks {}: every "
        "process of a job must run the same psrt build)",
        version, kHelloVersion);
  }
  if (wire::load<std::uint16_t>(p + 6) != 0) return "reserved handshake field is not zero";
  std::memcpy(out.route_token.data(), p + 8, kRouteTokenBytes);
  const char* boot = reinterpret_cast<const char*>(p + 24);
  out.boot_id.assign(boot, strnlen(boot, kBootIdBytes));
  address_len = wire::load<std::uint32_t>(p + 64);
  if (address_len == 0 || address_len > kMaxWorkerAddressBytes) {
    return fmt::format("worker address of {} bytes is outside 1..{}", address_len,
                       kMaxWorkerAddressBytes);
  }
  return {};
}

}  // namespace psrt::transport::ucx
