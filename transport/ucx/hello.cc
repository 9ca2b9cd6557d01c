#include "transport/ucx/hello.h"

#include <fmt/core.h>
#include <sys/random.h>

#include <algorithm>
#include <cstring>

#include "psrt/error.h"
#include "transport/wire.h"

namespace psrt::transport::ucx {

namespace {

template <std::size_t N>
std::array<std::byte, N> random_bits(const char* what) {
  std::array<std::byte, N> t;
  std::size_t have = 0;
  while (have < t.size()) {
    ssize_t n = ::getrandom(t.data() + have, t.size() - have, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw Error(ErrorCode::kSystem, fmt::format("getrandom failed: no entropy for a UCX {} ({})",
                                                  what, std::strerror(errno)));
    have += static_cast<std::size_t>(n);
  }
  return t;
}

// The common part of a challenge's and a hello's decoding: magic, version, flags.
std::string decode_preamble(const std::byte* p, std::uint16_t& flags) {
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
  flags = wire::load<std::uint16_t>(p + 6);
  if ((flags & ~kHelloAuthenticated) != 0)
    return fmt::format("unknown handshake flags 0x{:04x}", flags);
  return {};
}

}  // namespace

RouteToken random_route_token() {
  return random_bits<kRouteTokenBytes>("route token");
}

HelloNonce random_hello_nonce() {
  return random_bits<kHelloNonceBytes>("handshake nonce");
}

std::array<std::byte, kChallengeBytes> encode_challenge(const Challenge& challenge) {
  std::array<std::byte, kChallengeBytes> out{};
  wire::store<std::uint32_t>(out.data(), kHelloMagic);
  wire::store<std::uint16_t>(out.data() + 4, kHelloVersion);
  wire::store<std::uint16_t>(out.data() + 6, challenge.flags);
  std::memcpy(out.data() + 8, challenge.nonce.data(), kHelloNonceBytes);
  return out;
}

std::string decode_challenge(std::span<const std::byte, kChallengeBytes> in, Challenge& out) {
  std::string why = decode_preamble(in.data(), out.flags);
  if (!why.empty()) return why;
  std::memcpy(out.nonce.data(), in.data() + 8, kHelloNonceBytes);
  return {};
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
  wire::store<std::uint16_t>(p + 6, hello.flags);
  std::memcpy(p + 8, hello.route_token.data(), kRouteTokenBytes);
  std::memcpy(p + 24, hello.boot_id.data(), std::min(hello.boot_id.size(), kBootIdBytes));
  wire::store<std::uint32_t>(p + 64, static_cast<std::uint32_t>(hello.worker_address.size()));
  std::memcpy(p + 68, hello.nonce.data(), kHelloNonceBytes);
  std::memcpy(p + kHelloMacOffset, hello.mac.data(), kHelloMacBytes);
  std::memcpy(p + kHelloFixedBytes, hello.worker_address.data(), hello.worker_address.size());
  return out;
}

std::string decode_hello_fixed(std::span<const std::byte, kHelloFixedBytes> in, Hello& out,
                               std::size_t& address_len) {
  const std::byte* p = in.data();
  std::string why = decode_preamble(p, out.flags);
  if (!why.empty()) return why;
  std::memcpy(out.route_token.data(), p + 8, kRouteTokenBytes);
  const char* boot = reinterpret_cast<const char*>(p + 24);
  out.boot_id.assign(boot, strnlen(boot, kBootIdBytes));
  std::memcpy(out.nonce.data(), p + 68, kHelloNonceBytes);
  std::memcpy(out.mac.data(), p + kHelloMacOffset, kHelloMacBytes);
  address_len = wire::load<std::uint32_t>(p + 64);
  if (address_len == 0 || address_len > kMaxWorkerAddressBytes) {
    return fmt::format("worker address of {} bytes is outside 1..{}", address_len,
                       kMaxWorkerAddressBytes);
  }
  return {};
}

}  // namespace psrt::transport::ucx
