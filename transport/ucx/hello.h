// The UCX backend's bootstrap handshake, sent once each way over the TCP socket that connect()
// opens to a listener. It carries what UCX needs to create endpoints (the worker address) and
// what psrt needs to route active messages to this connection (the route token the peer must
// put in front of every message on it). The socket then stays open as a liveness channel: its EOF
// or keepalive failure is how a dead peer is noticed. Nothing in it is acted on beyond creating the
// endpoint: the connection it opens is unauthenticated until the PS handshake
// (ps/session/endpoint.h) completes.
//
//   offset  size  field
//   0       4     magic 'PSUX' (0x58555350)
//   4       2     version (2)
//   6       2     reserved, must be 0
//   8       16    route_token: 128 random bits the sender drew for this connection; the receiver
//                 puts them in front of every active message it sends on it, and the sender
//                 takes a message only for the connection whose token it carries, compared in
//                 constant time (context.h)
//   24      40    boot_id: the sender's host id (base/host.h local_host_id(): its boot id and
//                 network namespace), NUL-padded; equal ids mean one host (shared memory
//                 usable, UCX error mode NONE); processes in different network namespaces of
//                 one machine differ
//   64      4     address_len (1 .. kMaxWorkerAddressBytes)
//   68      ...   UCX worker address
//
// Version 1 (the sender's sequential connection id instead of a token, which any process that
// could reach the worker could write) is refused with a message naming both versions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace psrt::transport::ucx {

inline constexpr std::uint32_t kHelloMagic = 0x58555350;  // "PSUX"
inline constexpr std::uint16_t kHelloVersion = 2;
inline constexpr std::size_t kHelloFixedBytes = 68;
inline constexpr std::size_t kRouteTokenBytes = 16;
inline constexpr std::size_t kBootIdBytes = 40;
inline constexpr std::size_t kMaxWorkerAddressBytes = std::size_t{64} * 1024;

using RouteToken = std::array<std::byte, kRouteTokenBytes>;

// 128 bits from the kernel's CSPRNG (getrandom). Throws psrt::Error when none can be had.
RouteToken random_route_token();
// Constant-time comparison of `bytes` (kRouteTokenBytes of them) with `token`.
bool same_route_token(const std::byte* bytes, const RouteToken& token) noexcept;
// The token's first 8 bytes (little-endian): where the receiver looks its connection up.
std::uint64_t route_key(const std::byte* token) noexcept;

struct Hello {
  RouteToken route_token{};
  std::string boot_id;
  std::vector<std::byte> worker_address;
};

std::vector<std::byte> encode_hello(const Hello& hello);

// Decodes the fixed part; on success returns "" and sets `address_len` (the bytes that follow).
std::string decode_hello_fixed(std::span<const std::byte, kHelloFixedBytes> in, Hello& out,
                               std::size_t& address_len);

}  // namespace psrt::transport::ucx
