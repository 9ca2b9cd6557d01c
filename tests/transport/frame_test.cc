#include "transport/tcp/frame.h"

#include <gtest/gtest.h>

#include <array>

#include "transport/transport.h"
#include "transport/wire.h"

namespace psrt::transport::tcp {
namespace {

std::array<std::byte, kFramePrefixBytes> encoded(std::uint16_t header_len, std::uint64_t payload) {
  std::array<std::byte, kFramePrefixBytes> b{};
  encode_frame_prefix({header_len, payload}, b.data());
  return b;
}

TEST(FramePrefix, RoundTripsAndIsLittleEndian) {
  auto b = encoded(17, 0x0102030405ull);
  EXPECT_EQ(b[0], std::byte{0x50});  // 'P'
  EXPECT_EQ(b[3], std::byte{0x54});  // 'T'
  EXPECT_EQ(b[8], std::byte{0x05});
  FramePrefix out;
  EXPECT_EQ(decode_frame_prefix(b, 1ull << 40, out), "");
  EXPECT_EQ(out.header_len, 17);
  EXPECT_EQ(out.payload_len, 0x0102030405ull);
}

TEST(FramePrefix, RejectsEveryBadField) {
  FramePrefix out{3, 4};
  auto b = encoded(1, 1);
  b[0] = std::byte{0};
  EXPECT_NE(decode_frame_prefix(b, 100, out).find("magic"), std::string::npos);

  b = encoded(1, 1);
  wire::store<std::uint16_t>(b.data() + 4, 2);
  EXPECT_NE(decode_frame_prefix(b, 100, out).find("version 2"), std::string::npos);

  b = encoded(kMaxHeaderBytes + 1, 1);
  EXPECT_NE(decode_frame_prefix(b, 100, out).find("header"), std::string::npos);

  b = encoded(1, 101);
  EXPECT_NE(decode_frame_prefix(b, 100, out).find("exceeds"), std::string::npos);

  b = encoded(1, 1);
  b[20] = std::byte{1};
  EXPECT_NE(decode_frame_prefix(b, 100, out).find("reserved"), std::string::npos);

  EXPECT_EQ(out.header_len, 3) << "a rejected prefix leaves the output untouched";
  EXPECT_EQ(out.payload_len, 4u);
}

TEST(FramePrefix, AcceptsLimitsExactly) {
  FramePrefix out;
  EXPECT_EQ(decode_frame_prefix(encoded(kMaxHeaderBytes, 100), 100, out), "");
  EXPECT_EQ(decode_frame_prefix(encoded(0, 0), 0, out), "");
}

}  // namespace
}  // namespace psrt::transport::tcp
