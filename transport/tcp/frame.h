// The tcp backend's frame: a fixed 24-byte little-endian prefix, then the message header, then
// the payload.
//
//   offset  size  field
//   0       4     magic 'PSRT' (0x54525350)
//   4       2     version (1)
//   6       2     header_len  (<= kMaxHeaderBytes)
//   8       8     payload_len (<= Options::max_payload_bytes)
//   16      8     reserved, must be 0
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace psrt::transport::tcp {

inline constexpr std::uint32_t kFrameMagic = 0x54525350;  // "PSRT" little-endian
inline constexpr std::uint16_t kFrameVersion = 1;
inline constexpr std::size_t kFramePrefixBytes = 24;

struct FramePrefix {
  std::uint16_t header_len = 0;
  std::uint64_t payload_len = 0;
};

void encode_frame_prefix(const FramePrefix& prefix, std::byte* out);

// Checks every field. On success returns an empty string and fills `out`; otherwise returns why
// the bytes are not a valid frame (for the log line and the close reason).
std::string decode_frame_prefix(std::span<const std::byte, kFramePrefixBytes> in,
                                std::size_t max_payload_bytes, FramePrefix& out);

}  // namespace psrt::transport::tcp
