// The UCX backend's bootstrap handshake, sent once each way over the TCP socket that connect()
// opens to a listener. It carries what UCX needs to create endpoints (the worker address) and
// what psrt needs to route active messages (the sender's connection id). The socket then stays
// open as a liveness channel: its EOF or keepalive failure is how a dead peer is noticed.
//
//   offset  size  field
//   0       4     magic 'PSUX' (0x58555350)
//   4       2     version (1)
//   6       2     reserved, must be 0
//   8       8     conn_id: the sender's id for this connection; the receiver puts it in every
//                 active-message header it sends back
//   16      40    boot_id: /proc/sys/kernel/random/boot_id of the sender, NUL-padded; equal ids
//                 mean one host (shared memory usable)
//   56      4     address_len (1 .. kMaxWorkerAddressBytes)
//   60      ...   UCX worker address
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace psrt::transport::ucx {

inline constexpr std::uint32_t kHelloMagic = 0x58555350;  // "PSUX"
inline constexpr std::uint16_t kHelloVersion = 1;
inline constexpr std::size_t kHelloFixedBytes = 60;
inline constexpr std::size_t kBootIdBytes = 40;
inline constexpr std::size_t kMaxWorkerAddressBytes = 64 * 1024;

struct Hello {
  std::uint64_t conn_id = 0;
  std::string boot_id;
  std::vector<std::byte> worker_address;
};

std::vector<std::byte> encode_hello(const Hello& hello);

// Decodes the fixed part; on success returns "" and sets `address_len` (the bytes that follow).
std::string decode_hello_fixed(std::span<const std::byte, kHelloFixedBytes> in, Hello& out,
                               std::size_t& address_len);

}  // namespace psrt::transport::ucx
