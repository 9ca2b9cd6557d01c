// The UCX backend's bootstrap handshake over the TCP socket that connect() opens to a listener.
// It carries what UCX needs to create endpoints (the worker address) and what psrt needs to route
// active messages to this connection (the route token the peer must put in front of every message
// on it). The socket then stays open as a liveness channel: its EOF or keepalive failure is how a
// dead peer is noticed. The connection it opens is unauthenticated until the PS handshake
// (ps/session/endpoint.h) completes; but an endpoint is created from the peer's worker address,
// which names where UCX connects to and which shared memory it attaches, so with a job secret
// (Options::bootstrap_secret) no endpoint is created from a hello that does not prove it.
//
// The exchange: the listener sends a CHALLENGE as soon as it accepts; the connector answers with
// its HELLO; the listener checks it, creates its endpoint and answers with its own HELLO, which
// the connector checks before creating its endpoint. With a secret, each HELLO's mac is
// HMAC-SHA256 under a key derived from the secret and both nonces (hello_auth.h), over the HELLO
// with its mac zeroed and the direction: neither a HELLO of another exchange (replayed) nor one
// with another address or token (forged) verifies.
//
//   CHALLENGE (listener -> connector), 24 bytes
//   0       4     magic 'PSUX' (0x58555350)
//   4       2     version (3)
//   6       2     flags: bit 0 set: the listener checks hellos against a job secret
//   8       16    nonce: 128 random bits of the listener's (getrandom)
//
//   HELLO (each way), 116 bytes + the address
//   0       4     magic 'PSUX'
//   4       2     version (3)
//   6       2     flags: bit 0 set: `mac` proves the job secret (else it is zero); others 0
//   8       16    route_token: 128 random bits the sender drew for this connection; the receiver
//                 puts them in front of every active message it sends on it, and the sender
//                 takes a message only for the connection whose token it carries, compared in
//                 constant time (context.h)
//   24      40    boot_id: the sender's host id (base/host.h local_host_id(): its boot id and
//                 network namespace), NUL-padded; equal ids mean one host (shared memory
//                 usable, UCX error mode NONE); processes in different network namespaces of
//                 one machine differ
//   64      4     address_len (1 .. kMaxWorkerAddressBytes)
//   68      16    nonce: the connector's 128 random bits (the listener's HELLO repeats them)
//   84      32    mac
//   116     ...   UCX worker address
//
// Versions 1 and 2 (no challenge, no mac; version 1 carried sequential connection ids instead of
// tokens) are refused by a listener with a message naming both versions; a version 3 connector
// waits for a challenge an older listener never sends, until Options::connect_timeout.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace psrt::transport::ucx {

inline constexpr std::uint32_t kHelloMagic = 0x58555350;  // "PSUX"
inline constexpr std::uint16_t kHelloVersion = 3;
inline constexpr std::size_t kChallengeBytes = 24;
inline constexpr std::size_t kHelloFixedBytes = 116;
inline constexpr std::size_t kRouteTokenBytes = 16;
inline constexpr std::size_t kBootIdBytes = 40;
inline constexpr std::size_t kHelloNonceBytes = 16;
inline constexpr std::size_t kHelloMacBytes = 32;
inline constexpr std::size_t kHelloMacOffset = 84;
// A UCX 1.13 worker address is a few hundred bytes (one entry per device and transport: 215 on
// Debian 12 with loopback only); 16 KiB leaves room for many devices and refuses the rest before
// it is read.
inline constexpr std::size_t kMaxWorkerAddressBytes = std::size_t{16} * 1024;
// CHALLENGE and HELLO flags.
inline constexpr std::uint16_t kHelloAuthenticated = 1;

using RouteToken = std::array<std::byte, kRouteTokenBytes>;
using HelloNonce = std::array<std::byte, kHelloNonceBytes>;
using HelloMac = std::array<std::byte, kHelloMacBytes>;

// 128 bits from the kernel's CSPRNG (getrandom). Throws psrt::Error when none can be had.
RouteToken random_route_token();
HelloNonce random_hello_nonce();
// Constant-time comparison of `bytes` (kRouteTokenBytes of them) with `token`.
bool same_route_token(const std::byte* bytes, const RouteToken& token) noexcept;
// The token's first 8 bytes (little-endian): where the receiver looks its connection up.
std::uint64_t route_key(const std::byte* token) noexcept;

struct Challenge {
  std::uint16_t flags = 0;
  HelloNonce nonce{};
};

std::array<std::byte, kChallengeBytes> encode_challenge(const Challenge& challenge);
// "" on success, else why the bytes are not a challenge.
std::string decode_challenge(std::span<const std::byte, kChallengeBytes> in, Challenge& out);

struct Hello {
  std::uint16_t flags = 0;
  RouteToken route_token{};
  std::string boot_id;
  HelloNonce nonce{};
  HelloMac mac{};
  std::vector<std::byte> worker_address;
};

std::vector<std::byte> encode_hello(const Hello& hello);

// Decodes the fixed part; on success returns "" and sets `address_len` (the bytes that follow).
std::string decode_hello_fixed(std::span<const std::byte, kHelloFixedBytes> in, Hello& out,
                               std::size_t& address_len);

}  // namespace psrt::transport::ucx
