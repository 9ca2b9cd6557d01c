#include "transport/tcp/frame.h"

#include <fmt/core.h>

#include "transport/transport.h"
#include "transport/wire.h"

namespace psrt::transport::tcp {

void encode_frame_prefix(const FramePrefix& prefix, std::byte* out) {
  wire::store<std::uint32_t>(out, kFrameMagic);
  wire::store<std::uint16_t>(out + 4, kFrameVersion);
  wire::store<std::uint16_t>(out + 6, prefix.header_len);
  wire::store<std::uint64_t>(out + 8, prefix.payload_len);
  wire::store<std::uint64_t>(out + 16, 0);
}

std::string decode_frame_prefix(std::span<const std::byte, kFramePrefixBytes> in,
                                std::size_t max_payload_bytes, FramePrefix& out) {
  auto magic = wire::load<std::uint32_t>(in.data());
  if (magic != kFrameMagic) {
    return fmt::format("bad frame magic 0x{:08x} (not a psrt peer?)", magic);
  }
  auto version = wire::load<std::uint16_t>(in.data() + 4);
  if (version != kFrameVersion) {
    return fmt::format("frame version {} is not supported (this build speaks {})", version,
                       kFrameVersion);
  }
  auto header_len = wire::load<std::uint16_t>(in.data() + 6);
  if (header_len > kMaxHeaderBytes) {
    return fmt::format("header of {} bytes exceeds the {}-byte limit", header_len, kMaxHeaderBytes);
  }
  auto payload_len = wire::load<std::uint64_t>(in.data() + 8);
  if (payload_len > max_payload_bytes) {
    return fmt::format("payload of {} bytes exceeds the {}-byte limit (Options::max_payload_bytes)",
                       payload_len, max_payload_bytes);
  }
  if (wire::load<std::uint64_t>(in.data() + 16) != 0) return "reserved frame field is not zero";
  out.header_len = header_len;
  out.payload_len = payload_len;
  return {};
}

}  // namespace psrt::transport::tcp
