// The PS wire protocol: header round trip and layout, every rejection decode() makes, and the
// structured payload codecs (slice tables, rank lists, optimizer records, address lines).
#include "ps/session/protocol.h"

#include <fmt/core.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/fused_sgd.h"
#include "ps/session/protocol_device.h"
#include "ps/session/replica_protocol.h"
#include "transport/secure/handshake.h"
#include "transport/wire.h"

namespace psrt::ps {
namespace {

constexpr std::uint64_t kU64Max = std::numeric_limits<std::uint64_t>::max();

Header data_header(MsgType type, WireType dtype, std::uint64_t offset, std::uint64_t count,
                   std::uint64_t total) {
  Header h;
  h.type = type;
  h.dtype = dtype;
  h.offset = offset;
  h.count = count;
  h.total = total;
  return h;
}

Header control_header(MsgType type, std::uint64_t count = 0) {
  Header h;
  h.type = type;
  h.dtype = WireType::kBytes;
  h.count = count;
  return h;
}

Status decode_bytes(const HeaderBytes& b, std::size_t payload, const Limits& limits = {}) {
  Header out;
  return decode(b, payload, limits, out);
}

Status decode_header(const Header& h, std::size_t payload, const Limits& limits = {}) {
  return decode_bytes(encode(h), payload, limits);
}

// Expects a kProtocol rejection whose message contains `needle`.
void expect_rejected(const Status& s, const std::string& needle) {
  EXPECT_FALSE(s.ok()) << "accepted; expected a rejection naming '" << needle << "'";
  EXPECT_EQ(s.code(), ErrorCode::kProtocol) << s.message();
  EXPECT_NE(s.message().find(needle), std::string::npos)
      << "message '" << s.message() << "' does not name '" << needle << "'";
}

std::vector<std::byte> bytes_of(std::string_view s) {
  auto b = as_bytes(s);
  return {b.begin(), b.end()};
}

// --- header ---

TEST(ProtocolHeader, RoundTripsEveryField) {
  Header h;
  h.type = MsgType::kPushPull;
  h.dtype = WireType::kBF16;
  h.request_id = 0x0102030405060708ull;
  h.key = 0x1112131415161718ull;
  h.offset = 0x21;
  h.count = 0x30;
  h.total = 0x4142434445464748ull;
  h.round = 0x5152535455565758ull;
  h.arg0 = 0x61626364u;
  h.arg1 = 0x71727374u;
  Header out;
  ASSERT_TRUE(decode(encode(h), h.count * 2, Limits{}, out).ok());
  EXPECT_EQ(out.type, h.type);
  EXPECT_EQ(out.dtype, h.dtype);
  EXPECT_EQ(out.request_id, h.request_id);
  EXPECT_EQ(out.key, h.key);
  EXPECT_EQ(out.offset, h.offset);
  EXPECT_EQ(out.count, h.count);
  EXPECT_EQ(out.total, h.total);
  EXPECT_EQ(out.round, h.round);
  EXPECT_EQ(out.arg0, h.arg0);
  EXPECT_EQ(out.arg1, h.arg1);
}

// An ERROR carries its code in arg0: every code of the table (psrt/error.h) arrives as itself,
// through encode and decode, the last one included; a value past the table, or 0 (an ERROR is
// never success), arrives as kProtocol.
TEST(ProtocolHeader, EveryErrorCodeArrivesAsItself) {
  const auto last = static_cast<std::uint32_t>(kLastErrorCode);
  std::set<std::string_view> texts;
  for (std::uint32_t v = 1; v <= last; ++v) {
    const auto code = static_cast<ErrorCode>(v);
    Header h = control_header(MsgType::kError);
    h.set_error_code(code);
    Header out;
    ASSERT_TRUE(decode(encode(h), 0, Limits{}, out).ok());
    EXPECT_EQ(out.error_code(), code) << "code " << v << " (" << to_string(code) << ")";
    EXPECT_EQ(out.shutdown_code(), code) << v;
    EXPECT_NE(to_string(code), "unknown") << v;
    texts.insert(to_string(code));
  }
  EXPECT_EQ(texts.size(), last) << "two codes share a text";
  Header h = control_header(MsgType::kError);
  h.arg0 = last + 1;
  EXPECT_EQ(h.error_code(), ErrorCode::kProtocol);
  h.arg0 = 0;
  EXPECT_EQ(h.error_code(), ErrorCode::kProtocol);
  EXPECT_EQ(h.shutdown_code(), ErrorCode::kOk);
  EXPECT_EQ(to_string(static_cast<ErrorCode>(last + 1)), "unknown");
}

TEST(ProtocolHeader, LayoutIsLittleEndianAtTheDocumentedOffsets) {
  Header h = data_header(MsgType::kPush, WireType::kF16, 3, 4, 10);
  h.request_id = 0x0a;
  h.key = 0x0b;
  h.round = 0x0c;
  h.arg0 = 0x0d;
  h.arg1 = 0x0e;
  auto b = encode(h);
  ASSERT_EQ(b.size(), kHeaderBytes);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data()), 4), "PSPM");
  EXPECT_EQ(wire::load<std::uint16_t>(&b[4]), kProtocolVersion);
  EXPECT_EQ(b[6], std::byte{static_cast<std::uint8_t>(MsgType::kPush)});
  EXPECT_EQ(b[7], std::byte{1});
  EXPECT_EQ(wire::load<std::uint64_t>(&b[8]), 0x0au);
  EXPECT_EQ(wire::load<std::uint64_t>(&b[16]), 0x0bu);
  EXPECT_EQ(wire::load<std::uint64_t>(&b[24]), 3u);
  EXPECT_EQ(wire::load<std::uint64_t>(&b[32]), 4u);
  EXPECT_EQ(wire::load<std::uint64_t>(&b[40]), 10u);
  EXPECT_EQ(wire::load<std::uint64_t>(&b[48]), 0x0cu);
  EXPECT_EQ(wire::load<std::uint32_t>(&b[56]), 0x0du);
  EXPECT_EQ(wire::load<std::uint32_t>(&b[60]), 0x0eu);
}

// A well-formed message of every type decodes, and keeps its type.
TEST(ProtocolHeader, EveryTypeDecodesWhenWellFormed) {
  for (int t = 1; t <= static_cast<int>(MsgType::kLast); ++t) {
    if (!is_message_type(static_cast<std::uint8_t>(t))) continue;  // a gap between ranges
    const auto type = static_cast<MsgType>(t);
    Header h = control_header(type);
    std::size_t payload = 0;
    switch (type) {
      case MsgType::kHello:
      case MsgType::kChallenge:
        payload = kNonceBytes;
        break;
      case MsgType::kAuth:
      case MsgType::kWelcome:
        payload = kDigestBytes;
        break;
      case MsgType::kSetOptimizer:
        payload = kOptimizerRecordBytes;
        break;
      case MsgType::kLocateReply:
        h.count = 3;
        payload = 3 * kSliceRecordBytes;
        break;
      case MsgType::kMembership:
        h.count = 5;
        payload = 5 * kMemberRecordBytes;
        break;
      case MsgType::kError:
      case MsgType::kRegister:
      case MsgType::kRegisterReply:
      case MsgType::kShutdown:
        payload = 17;
        break;
      case MsgType::kPush:
      case MsgType::kPushPull:
        h = data_header(type, WireType::kF16, 2, 3, 8);
        payload = 6;
        break;
      case MsgType::kInit:
      case MsgType::kPullReply:
      case MsgType::kReplicate:
        h = data_header(type, WireType::kF32, 2, 3, 8);
        payload = 12;
        break;
      case MsgType::kReplicateCommit:
        h.count = 2;
        payload = 2 * kReplicaCountBytes;
        break;
      case MsgType::kMetrics:
        h.count = 4;
        payload = 4 * kMetricRecordBytes;
        break;
      case MsgType::kTimeline:
        h.count = 2;
        payload = 2 * kTimelineRecordBytes;
        break;
      case MsgType::kReplicaSet:
        payload = 17;
        break;
      case MsgType::kPull:
      case MsgType::kVersion:
        h = data_header(type, WireType::kF32, 2, 3, 8);
        break;
      case MsgType::kOptimizerState:
        h = data_header(type, WireType::kF32, 2, 3, 8);
        h.set_part(2);
        break;
      case MsgType::kOptimizerStateReply:
        h = data_header(type, WireType::kF32, 2, 3, 8);
        h.set_state_kind(static_cast<std::uint32_t>(StateKind::kAdam));
        payload = 12;
        break;
      case MsgType::kSetOptimizerState:
        h = data_header(type, WireType::kF32, 2, 3, 8);
        h.set_part(1);
        payload = 12;
        break;
      case MsgType::kDeviceInfoReply:
        payload = 17;
        break;
      case MsgType::kPushIpc:
      case MsgType::kPullIpc:
        h = data_header(type, WireType::kF32, 2, 3, 8);
        payload = kIpcRecordBytes;
        break;
      case MsgType::kPushPullIpc:
        h = data_header(type, WireType::kBF16, 2, 3, 8);
        payload = 2 * kIpcRecordBytes;
        break;
      default:
        break;
    }
    Header out;
    Status s = decode(encode(h), payload, Limits{}, out);
    EXPECT_TRUE(s.ok()) << to_string(type) << ": " << s.message();
    EXPECT_EQ(out.type, type);
    EXPECT_NE(to_string(type), "?");
  }
}

// OPTIMIZER_STATE and SET_OPTIMIZER_STATE name part 1 or 2; a reply names a known state kind.
TEST(ProtocolHeader, OptimizerStatePartsAndKindsAreRangeChecked) {
  Header out;
  for (std::uint32_t part : {0u, 3u, 0xffffffffu}) {
    Header get = data_header(MsgType::kOptimizerState, WireType::kF32, 2, 3, 8);
    get.set_part(part);
    expect_rejected(decode(encode(get), 0, Limits{}, out),
                    fmt::format("OPTIMIZER_STATE of part {} (1 momentum or exp_avg, 2 "
                                "exp_avg_sq)",
                                part));
    Header set = data_header(MsgType::kSetOptimizerState, WireType::kF32, 2, 3, 8);
    set.set_part(part);
    expect_rejected(decode(encode(set), 12, Limits{}, out),
                    fmt::format("SET_OPTIMIZER_STATE of part {}", part));
  }
  Header reply = data_header(MsgType::kOptimizerStateReply, WireType::kF32, 2, 3, 8);
  reply.set_state_kind(3);
  expect_rejected(decode(encode(reply), 12, Limits{}, out),
                  "OPTIMIZER_STATE_REPLY with state kind 3 (0 none, 1 momentum, 2 Adam)");
  Header set = data_header(MsgType::kSetOptimizerState, WireType::kF32, 2, 3, 8);
  set.set_part(2);
  expect_rejected(decode(encode(set), 8, Limits{}, out), "SET_OPTIMIZER_STATE payload of 8 bytes");
}

TEST(ProtocolHeader, RejectsAWrongHeaderSize) {
  auto good = encode(control_header(MsgType::kBarrier));
  Header out;
  std::vector<std::byte> shorter(good.begin(), good.end() - 1);
  expect_rejected(decode(shorter, 0, Limits{}, out), "header of 63 bytes, expected 64");
  std::vector<std::byte> longer(good.begin(), good.end());
  longer.push_back(std::byte{0});
  expect_rejected(decode(longer, 0, Limits{}, out), "header of 65 bytes");
  expect_rejected(decode({}, 0, Limits{}, out), "header of 0 bytes");
}

TEST(ProtocolHeader, RejectsBadMagic) {
  auto b = encode(control_header(MsgType::kBarrier));
  b[0] = std::byte{'X'};
  expect_rejected(decode_bytes(b, 0), "bad magic");
}

// A process without the secure mode reads a secure peer's HELLO: its refusal names the cause
// (whichever end reads the other's bytes first, the log says both ends must run in secure mode).
TEST(ProtocolHeader, ASecureHandshakeIsRefusedNamingTheSecureMode) {
  std::vector<std::byte> hello(transport::secure::kHandshakeBytes);
  transport::secure::encode_handshake({}, hello.data());
  Header out;
  expect_rejected(decode(hello, 0, Limits{}, out),
                  "the peer runs in secure mode and this process does not; both ends must run in "
                  "secure mode (psrun --secure / PSRT_SECURE=1)");
}

TEST(ProtocolHeader, RejectsAnotherProtocolVersion) {
  auto b = encode(control_header(MsgType::kBarrier));
  wire::store<std::uint16_t>(&b[4], kProtocolVersion + 1);
  expect_rejected(decode_bytes(b, 0), "protocol version " + std::to_string(kProtocolVersion + 1));
  wire::store<std::uint16_t>(&b[4], 0);
  expect_rejected(decode_bytes(b, 0), "protocol version 0");
}

TEST(ProtocolHeader, RejectsUnknownTypes) {
  auto b = encode(control_header(MsgType::kBarrier));
  b[6] = std::byte{0};
  expect_rejected(decode_bytes(b, 0), "unknown message type 0");
  const auto past = static_cast<std::uint8_t>(MsgType::kLast) + 1;
  b[6] = std::byte{static_cast<std::uint8_t>(past)};
  expect_rejected(decode_bytes(b, 0), "unknown message type " + std::to_string(past));
  b[6] = std::byte{255};
  expect_rejected(decode_bytes(b, 0), "unknown message type 255");
  b[6] = std::byte{41};  // in the gap below the metrics' range (60-69)
  expect_rejected(decode_bytes(b, 0), "unknown message type 41");
}

TEST(ProtocolHeader, RejectsUnknownDtypes) {
  auto b = encode(control_header(MsgType::kBarrier));
  b[7] = std::byte{4};
  expect_rejected(decode_bytes(b, 0), "unknown dtype 4");
  b[7] = std::byte{255};
  expect_rejected(decode_bytes(b, 0), "unknown dtype 255");
}

TEST(ProtocolHeader, RejectsAPayloadOnTypesThatCarryNone) {
  expect_rejected(decode_header(control_header(MsgType::kBarrier), 1),
                  "BARRIER carries no payload, got 1 bytes");
  expect_rejected(decode_header(control_header(MsgType::kHeartbeat), 64), "HEARTBEAT");
  expect_rejected(decode_header(control_header(MsgType::kPushAck), 4), "PUSH_ACK");
  // PULL carries slice coordinates but no values.
  expect_rejected(decode_header(data_header(MsgType::kPull, WireType::kF32, 0, 1, 1), 4),
                  "PULL payload of 4 bytes");
}

// VERSION names a slice as a PULL does (f32 coordinates, no values); its reply is a bare header.
TEST(ProtocolHeader, VersionIsASliceWithoutValuesAndItsReplyABareHeader) {
  EXPECT_TRUE(decode_header(data_header(MsgType::kVersion, WireType::kF32, 2, 3, 8), 0).ok());
  expect_rejected(decode_header(data_header(MsgType::kVersion, WireType::kF32, 0, 1, 1), 4),
                  "VERSION payload of 4 bytes");
  expect_rejected(decode_header(data_header(MsgType::kVersion, WireType::kBF16, 0, 2, 2), 0),
                  "VERSION must carry f32 values");
  expect_rejected(decode_header(data_header(MsgType::kVersion, WireType::kBytes, 0, 2, 2), 0),
                  "VERSION without a data dtype");
  expect_rejected(decode_header(data_header(MsgType::kVersion, WireType::kF32, 7, 2, 8), 0),
                  "VERSION");  // a slice past the end of its tensor
  Header reply = control_header(MsgType::kVersionReply);
  reply.round = 12;
  Header out;
  const auto b = encode(reply);
  ASSERT_TRUE(decode(b, 0, Limits{}, out).ok());
  EXPECT_EQ(out.round, 12u);
  expect_rejected(decode_header(reply, 8), "VERSION_REPLY carries no payload, got 8 bytes");
}

TEST(ProtocolHeader, RejectsDataTypesWithAByteDtype) {
  expect_rejected(decode_header(data_header(MsgType::kPush, WireType::kBytes, 0, 4, 4), 4),
                  "PUSH without a data dtype");
  expect_rejected(decode_header(data_header(MsgType::kPull, WireType::kBytes, 0, 4, 4), 0),
                  "PULL without a data dtype");
}

TEST(ProtocolHeader, RejectsControlTypesWithADataDtype) {
  Header h = control_header(MsgType::kError);
  h.dtype = WireType::kF32;
  expect_rejected(decode_header(h, 4), "ERROR with a data dtype");
  h = control_header(MsgType::kHello);
  h.dtype = WireType::kF16;
  expect_rejected(decode_header(h, kNonceBytes), "HELLO with a data dtype");
}

TEST(ProtocolHeader, RejectsInitPullAndPullReplyWithNonF32) {
  expect_rejected(decode_header(data_header(MsgType::kInit, WireType::kF16, 0, 2, 2), 4),
                  "INIT must carry f32 values");
  expect_rejected(decode_header(data_header(MsgType::kPullReply, WireType::kBF16, 0, 2, 2), 4),
                  "PULL_REPLY must carry f32 values");
  expect_rejected(decode_header(data_header(MsgType::kPull, WireType::kF16, 0, 2, 2), 0),
                  "PULL must carry f32 values");
  // PUSH may carry any data dtype.
  EXPECT_TRUE(decode_header(data_header(MsgType::kPush, WireType::kF16, 0, 2, 2), 4).ok());
  EXPECT_TRUE(decode_header(data_header(MsgType::kPush, WireType::kBF16, 0, 2, 2), 4).ok());
}

// INIT's arg1 is the key's KeyUpdate (0 optimizer, 1 mean, 2 sum): any other value is refused.
TEST(ProtocolHeader, InitCarriesAKnownKeyUpdateOnly) {
  for (std::uint32_t u = 0; u <= kMaxKeyUpdate; ++u) {
    Header h = data_header(MsgType::kInit, WireType::kF32, 0, 2, 2);
    h.set_key_update(u);
    Header out;
    ASSERT_TRUE(decode(encode(h), 8, Limits{}, out).ok()) << u;
    EXPECT_EQ(out.key_update(), u);
  }
  Header h = data_header(MsgType::kInit, WireType::kF32, 0, 2, 2);
  h.set_key_update(kMaxKeyUpdate + 1);
  expect_rejected(decode_header(h, 8), "INIT with key update 3 (0 optimizer, 1 mean, 2 sum)");
}

TEST(ProtocolHeader, RejectsCountZero) {
  expect_rejected(decode_header(data_header(MsgType::kPush, WireType::kF32, 0, 0, 4), 0),
                  "PUSH with count 0");
  expect_rejected(decode_header(data_header(MsgType::kInit, WireType::kF32, 0, 0, 4), 0),
                  "INIT with count 0");
  expect_rejected(decode_header(data_header(MsgType::kPull, WireType::kF32, 0, 0, 4), 0),
                  "PULL with count 0");
}

TEST(ProtocolHeader, RejectsSlicesOutsideTheTensor) {
  // offset >= total
  expect_rejected(decode_header(data_header(MsgType::kPush, WireType::kF32, 10, 1, 10), 4),
                  "PUSH slice [10, +1) lies outside a tensor of 10 elements");
  // total 0
  expect_rejected(decode_header(data_header(MsgType::kPush, WireType::kF32, 0, 1, 0), 4),
                  "lies outside a tensor of 0 elements");
  // offset + count > total
  expect_rejected(decode_header(data_header(MsgType::kPush, WireType::kF32, 5, 6, 10), 24),
                  "[5, +6) lies outside");
  // offset + count overflows 64 bits
  expect_rejected(decode_header(data_header(MsgType::kPull, WireType::kF32, std::uint64_t{1} << 63,
                                            std::uint64_t{1} << 63, kU64Max),
                                0),
                  "lies outside");
  expect_rejected(
      decode_header(data_header(MsgType::kInit, WireType::kF32, kU64Max - 1, 2, kU64Max), 8),
      "lies outside");
  // The last element exactly.
  EXPECT_TRUE(decode_header(data_header(MsgType::kPush, WireType::kF32, 9, 1, 10), 4).ok());
  EXPECT_TRUE(
      decode_header(data_header(MsgType::kPull, WireType::kF32, kU64Max - 2, 2, kU64Max), 0).ok());
}

TEST(ProtocolHeader, RejectsAPayloadSizeOtherThanCountTimesDtypeSize) {
  expect_rejected(decode_header(data_header(MsgType::kPush, WireType::kF32, 0, 1, 1), 3),
                  "PUSH payload of 3 bytes");
  expect_rejected(decode_header(data_header(MsgType::kPush, WireType::kF32, 0, 1, 1), 5), "need 4");
  expect_rejected(decode_header(data_header(MsgType::kPush, WireType::kF16, 0, 3, 3), 12),
                  "need 6");
  expect_rejected(decode_header(data_header(MsgType::kInit, WireType::kF32, 0, 3, 3), 6),
                  "need 12");
  expect_rejected(decode_header(data_header(MsgType::kPullReply, WireType::kF32, 0, 3, 3), 0),
                  "need 12");
}

TEST(ProtocolHeader, RejectsCountsAboveTheSliceLimit) {
  const Limits small{1024};
  EXPECT_TRUE(
      decode_header(data_header(MsgType::kPush, WireType::kF32, 0, 256, 1000), 1024, small).ok());
  expect_rejected(
      decode_header(data_header(MsgType::kPush, WireType::kF32, 0, 257, 1000), 1028, small),
      "PUSH of 257 elements exceeds the 1024-byte slice limit");
  EXPECT_TRUE(
      decode_header(data_header(MsgType::kPush, WireType::kBF16, 0, 512, 1000), 1024, small).ok());
  expect_rejected(
      decode_header(data_header(MsgType::kPush, WireType::kBF16, 0, 513, 1000), 1026, small),
      "exceeds the 1024-byte slice limit");
  // A pull carries no payload but asks for a reply of count values: bounded too.
  expect_rejected(
      decode_header(data_header(MsgType::kPull, WireType::kF32, 0, 257, 1000), 0, small),
      "PULL of 257 elements exceeds");
  // A count whose byte size overflows size_t is rejected by the limit, not wrapped.
  expect_rejected(
      decode_header(
          data_header(MsgType::kPush, WireType::kF32, 0, (std::uint64_t{1} << 62) + 1, kU64Max), 4),
      "exceeds the 2147483648-byte slice limit");
}

TEST(ProtocolHeader, RejectsFixedSizeTypesOfAnotherSize) {
  expect_rejected(decode_header(control_header(MsgType::kHello), kNonceBytes - 1),
                  "HELLO payload of 31 bytes, expected 32");
  expect_rejected(decode_header(control_header(MsgType::kChallenge), kNonceBytes + 1),
                  "CHALLENGE payload of 33 bytes, expected 32");
  expect_rejected(decode_header(control_header(MsgType::kAuth), 0),
                  "AUTH payload of 0 bytes, expected 32");
  expect_rejected(decode_header(control_header(MsgType::kWelcome), 64), "WELCOME payload of 64");
  // 24 bytes: the record of a build without the algorithm, betas and eps (protocol version 2).
  expect_rejected(decode_header(control_header(MsgType::kSetOptimizer), 24),
                  "SET_OPTIMIZER payload of 24 bytes, expected 40");
  expect_rejected(decode_header(control_header(MsgType::kLocateReply, 2), 47),
                  "LOCATE_REPLY payload of 47 bytes, expected 48");
  expect_rejected(decode_header(control_header(MsgType::kMembership, 3), 11),
                  "MEMBERSHIP payload of 11 bytes, expected 60");
  expect_rejected(decode_header(control_header(MsgType::kMembership, kMaxControlBytes / 4 + 1), 0),
                  "MEMBERSHIP with 262145 records");
  // A record count whose byte size would overflow is refused before it is multiplied.
  expect_rejected(decode_header(control_header(MsgType::kLocateReply, kU64Max), 0), "records");
}

TEST(ProtocolHeader, RejectsControlPayloadsAboveTheLimit) {
  EXPECT_TRUE(decode_header(control_header(MsgType::kError), kMaxControlBytes).ok());
  expect_rejected(decode_header(control_header(MsgType::kError), kMaxControlBytes + 1),
                  "ERROR payload of 1048577 bytes exceeds 1048576");
  expect_rejected(decode_header(control_header(MsgType::kRegisterReply), kMaxControlBytes + 1),
                  "REGISTER_REPLY payload");
  expect_rejected(decode_header(control_header(MsgType::kShutdown), std::size_t{1} << 40),
                  "SHUTDOWN payload");
}

// Known gap (reported, not fixed here): the header comment promises that slice tables stay
// below kMaxControlBytes, but LOCATE_REPLY is only bounded to kMaxControlBytes / 4 records of
// 24 bytes, i.e. 6 MiB. Enable once ps/session/protocol.cc bounds fixed_size(h) by
// kMaxControlBytes.
TEST(ProtocolHeader, RejectsSliceTablesAboveTheControlLimit) {
  const std::uint64_t records = kMaxControlBytes / kSliceRecordBytes + 1;
  expect_rejected(
      decode_header(control_header(MsgType::kLocateReply, records), records * kSliceRecordBytes),
      "LOCATE_REPLY");
}

TEST(ProtocolHeader, LeavesTheOutputUntouchedOnRejection) {
  Header out;
  out.key = 77;
  auto b = encode(data_header(MsgType::kPush, WireType::kF32, 0, 1, 1));
  EXPECT_FALSE(decode(b, 3, Limits{}, out).ok());
  EXPECT_EQ(out.key, 77u);
}

TEST(ProtocolDtypes, SizesAndConversions) {
  EXPECT_EQ(wire_size(WireType::kF32), 4u);
  EXPECT_EQ(wire_size(WireType::kF16), 2u);
  EXPECT_EQ(wire_size(WireType::kBF16), 2u);
  EXPECT_EQ(wire_size(WireType::kBytes), 1u);
  // One type: a GradType is its wire value, kernels::DType is GradType.
  static_assert(std::is_same_v<kernels::DType, GradType>);
  for (auto t : {WireType::kF32, WireType::kF16, WireType::kBF16}) {
    EXPECT_EQ(to_wire(to_grad_type(t)), t);
    EXPECT_EQ(static_cast<int>(to_grad_type(t)), static_cast<int>(t));
    EXPECT_EQ(wire_size(t), kernels::dtype_size(to_grad_type(t)));
    EXPECT_EQ(to_string(t), to_string(to_grad_type(t)));
  }
  try {
    (void)to_grad_type(WireType::kBytes);
    ADD_FAILURE() << "to_grad_type(kBytes) did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
  }
  try {
    (void)to_wire(static_cast<GradType>(kNumGradTypes));
    ADD_FAILURE() << "to_wire of a value that is no GradType did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "unknown GradType 3");
  }
  EXPECT_EQ(to_string(Role::kScheduler), "scheduler");
  EXPECT_EQ(to_string(Role::kServer), "server");
  EXPECT_EQ(to_string(Role::kWorker), "worker");
}

// --- slice tables ---

TEST(ProtocolSlices, RoundTrip) {
  const std::vector<SliceRecord> in = {{2, 0, 0, 4}, {0, 1, 4, 4}, {1, 2, 8, 2}};
  auto bytes = encode_slices(in);
  ASSERT_EQ(bytes.size(), 3 * kSliceRecordBytes);
  std::vector<SliceRecord> out;
  ASSERT_TRUE(decode_slices(bytes, 10, 3, out).ok());
  ASSERT_EQ(out.size(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].server, in[i].server);
    EXPECT_EQ(out[i].index, in[i].index);
    EXPECT_EQ(out[i].offset, in[i].offset);
    EXPECT_EQ(out[i].count, in[i].count);
  }
}

Status slices_status(const std::vector<SliceRecord>& in, std::uint64_t total,
                     std::uint32_t servers) {
  std::vector<SliceRecord> out = {{9, 9, 9, 9}};
  Status s = decode_slices(encode_slices(in), total, servers, out);
  if (!s.ok()) {
    EXPECT_EQ(out.size(), 1u) << "a rejected table leaves the output untouched";
  }
  return s;
}

TEST(ProtocolSlices, RejectsTablesThatDoNotTile) {
  // A gap between slice 0 and 1.
  expect_rejected(slices_status({{0, 0, 0, 4}, {0, 1, 5, 5}}, 10, 1),
                  "slice 1 [5, +5) does not tile a tensor of 10 elements");
  // Overlap.
  expect_rejected(slices_status({{0, 0, 0, 4}, {0, 1, 3, 7}}, 10, 1), "slice 1 [3, +7)");
  // Not starting at 0.
  expect_rejected(slices_status({{0, 0, 1, 9}}, 10, 1), "slice 0 [1, +9)");
  // Indices out of order.
  expect_rejected(slices_status({{0, 1, 0, 4}, {0, 0, 4, 6}}, 10, 1), "does not tile");
  // An empty slice.
  expect_rejected(slices_status({{0, 0, 0, 0}, {0, 1, 0, 10}}, 10, 1), "slice 0 [0, +0)");
  // Past the end, including a count that would overflow the running offset.
  expect_rejected(slices_status({{0, 0, 0, 11}}, 10, 1), "does not tile");
  expect_rejected(slices_status({{0, 0, 0, 4}, {0, 1, 4, kU64Max}}, 10, 1), "does not tile");
  // Short of the end.
  expect_rejected(slices_status({{0, 0, 0, 4}, {0, 1, 4, 4}}, 10, 1),
                  "slices cover 8 of 10 elements");
}

TEST(ProtocolSlices, RejectsServersOutOfRange) {
  expect_rejected(slices_status({{0, 0, 0, 5}, {3, 1, 5, 5}}, 10, 3), "slice 1 on server 3 of 3");
  expect_rejected(slices_status({{0, 0, 0, 10}}, 10, 0), "slice 0 on server 0 of 0");
  EXPECT_TRUE(slices_status({{0, 0, 0, 5}, {2, 1, 5, 5}}, 10, 3).ok());
}

TEST(ProtocolSlices, RejectsEmptyAndRaggedTables) {
  expect_rejected(slices_status({}, 10, 1), "slice table of 0 bytes");
  expect_rejected(slices_status({}, 0, 1), "slice table of 0 bytes");
  auto bytes = encode_slices(std::vector<SliceRecord>{{0, 0, 0, 10}});
  bytes.push_back(std::byte{0});
  std::vector<SliceRecord> out;
  expect_rejected(decode_slices(bytes, 10, 1, out), "slice table of 25 bytes");
}

// --- rank lists ---

TEST(ProtocolRanks, RoundTrip) {
  const std::vector<std::uint32_t> in = {0, 3, 7, kMaxRanks - 1};
  auto bytes = encode_ranks(in);
  EXPECT_EQ(bytes.size(), 16u);
  std::vector<std::uint32_t> out;
  ASSERT_TRUE(decode_ranks(bytes, out).ok());
  EXPECT_EQ(out, in);
  ASSERT_TRUE(decode_ranks({}, out).ok());
  EXPECT_TRUE(out.empty());
}

TEST(ProtocolRanks, RejectsRaggedListsAndUnassignedRanks) {
  std::vector<std::uint32_t> out = {42};
  auto bytes = encode_ranks(std::vector<std::uint32_t>{1, 2});
  bytes.pop_back();
  expect_rejected(decode_ranks(bytes, out), "rank list of 7 bytes");
  expect_rejected(decode_ranks(encode_ranks(std::vector<std::uint32_t>{1, kAnyRank}), out),
                  "unassigned rank");
  // Ranks are bounded far below kAnyRank: 0xfffffffe would make the next joiner's rank kAnyRank.
  expect_rejected(decode_ranks(encode_ranks(std::vector<std::uint32_t>{1, 0xfffffffeu}), out),
                  "rank list holds rank 4294967294, above the limit of 1048575");
  expect_rejected(decode_ranks(encode_ranks(std::vector<std::uint32_t>{kMaxRanks}), out),
                  "above the limit");
  EXPECT_EQ(out, std::vector<std::uint32_t>{42});
}

// --- optimizer records ---

OptimizerConfig sgd(float lr, float momentum, float dampening, float weight_decay, bool nesterov) {
  return {.lr = lr,
          .momentum = momentum,
          .dampening = dampening,
          .weight_decay = weight_decay,
          .nesterov = nesterov};
}

Status optimizer_status(const OptimizerConfig& c) {
  OptimizerConfig out;
  return decode_optimizer(encode_optimizer(c), out);
}

OptimizerConfig guarded(OptimizerConfig c, float max_grad_norm, bool skip_nonfinite) {
  c.max_grad_norm = max_grad_norm;
  c.skip_nonfinite = skip_nonfinite;
  return c;
}

TEST(ProtocolOptimizer, RoundTrip) {
  for (const auto& in :
       {sgd(0.1f, 0.9f, 0.5f, 1e-4f, false), sgd(0.01f, 0.9f, 0.f, 0.f, true),
        sgd(0.f, 0.f, 1.f, 0.f, false), guarded(sgd(0.1f, 0.9f, 0.f, 0.f, true), 1.5f, true),
        guarded(sgd(0.1f, 0.f, 0.f, 0.f, false), 0.f, true),
        guarded(sgd(0.1f, 0.f, 0.f, 0.f, false), 1e-3f, false)}) {
    auto bytes = encode_optimizer(in);
    ASSERT_EQ(bytes.size(), kOptimizerRecordBytes);
    OptimizerConfig out;
    ASSERT_TRUE(decode_optimizer(bytes, out).ok());
    EXPECT_TRUE(out == in);  // OptimizerConfig's defaulted operator==, every field
    EXPECT_EQ(std::bit_cast<std::uint32_t>(out.lr), std::bit_cast<std::uint32_t>(in.lr));
    EXPECT_EQ(out.momentum, in.momentum);
    EXPECT_EQ(out.dampening, in.dampening);
    EXPECT_EQ(out.weight_decay, in.weight_decay);
    EXPECT_EQ(out.nesterov, in.nesterov);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(out.max_grad_norm),
              std::bit_cast<std::uint32_t>(in.max_grad_norm));
    EXPECT_EQ(out.skip_nonfinite, in.skip_nonfinite);
  }
}

// The flags word and the new field, byte for byte: bit 0 Nesterov, bit 1 skip_nonfinite,
// max_grad_norm at offset 20.
TEST(ProtocolOptimizer, LayoutOfFlagsAndMaxGradNorm) {
  const auto bytes = encode_optimizer(guarded(sgd(0.1f, 0.9f, 0.f, 0.f, true), 2.f, true));
  EXPECT_EQ(wire::load<std::uint32_t>(&bytes[16]), 3u);
  EXPECT_EQ(wire::load<std::uint32_t>(&bytes[20]), std::bit_cast<std::uint32_t>(2.f));
}

TEST(ProtocolOptimizer, RejectsANegativeOrNonFiniteMaxGradNorm) {
  for (float bad : {-1.f, -1e-30f, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    Status s = optimizer_status(guarded(sgd(0.1f, 0.f, 0.f, 0.f, false), bad, false));
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("max_grad_norm="), std::string::npos) << s.message();
  }
}

TEST(ProtocolOptimizer, RejectsValuesTorchRejects) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const auto& c : {sgd(-0.1f, 0.f, 0.f, 0.f, false), sgd(nan, 0.f, 0.f, 0.f, false),
                        sgd(inf, 0.f, 0.f, 0.f, false), sgd(0.1f, -0.5f, 0.f, 0.f, false),
                        sgd(0.1f, nan, 0.f, 0.f, false), sgd(0.1f, 0.f, 1.5f, 0.f, false),
                        sgd(0.1f, 0.f, -0.1f, 0.f, false), sgd(0.1f, 0.f, nan, 0.f, false),
                        sgd(0.1f, 0.f, 0.f, -1.f, false), sgd(0.1f, 0.f, 0.f, inf, false)}) {
    Status s = optimizer_status(c);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument)
        << "lr=" << c.lr << " momentum=" << c.momentum << " dampening=" << c.dampening
        << " weight_decay=" << c.weight_decay;
    EXPECT_NE(s.message().find("must be finite and >= 0"), std::string::npos) << s.message();
  }
}

TEST(ProtocolOptimizer, RejectsNesterovWithoutMomentumOrWithDampening) {
  Status s = optimizer_status(sgd(0.1f, 0.f, 0.f, 0.f, true));
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Nesterov"), std::string::npos) << s.message();
  EXPECT_EQ(optimizer_status(sgd(0.1f, 0.9f, 0.1f, 0.f, true)).code(), ErrorCode::kInvalidArgument);
}

TEST(ProtocolOptimizer, RejectsUnknownFlagBitsAndSizes) {
  auto bytes = encode_optimizer(sgd(0.1f, 0.9f, 0.f, 0.f, false));
  OptimizerConfig out;
  out.lr = 123.f;
  for (std::uint32_t flags : {4u, 7u, 0x80000000u}) {
    wire::store<std::uint32_t>(&bytes[16], flags);
    Status s = decode_optimizer(bytes, out);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << flags;
    EXPECT_NE(s.message().find("unknown bits"), std::string::npos) << s.message();
  }
  bytes.pop_back();
  expect_rejected(decode_optimizer(bytes, out), "optimizer record of 39 bytes");
  bytes.resize(24);  // the record of protocol version 2
  expect_rejected(decode_optimizer(bytes, out), "optimizer record of 24 bytes");
  EXPECT_EQ(out.lr, 123.f) << "a rejected record leaves the output untouched";
}

OptimizerConfig adam(OptimizerAlgorithm a, float lr, float beta1, float beta2, float eps,
                     float weight_decay) {
  return {.algorithm = a,
          .lr = lr,
          .weight_decay = weight_decay,
          .beta1 = beta1,
          .beta2 = beta2,
          .eps = eps};
}

// Adam and AdamW: the algorithm, betas and eps at offsets 24..39, every field back.
TEST(ProtocolOptimizer, AdamRoundTripAndLayout) {
  const OptimizerConfig in =
      guarded(adam(OptimizerAlgorithm::kAdamW, 1e-3f, 0.8f, 0.99f, 1e-6f, 0.01f), 1.f, true);
  const auto bytes = encode_optimizer(in);
  ASSERT_EQ(bytes.size(), 40u);
  EXPECT_EQ(wire::load<std::uint32_t>(&bytes[24]), 2u);
  EXPECT_EQ(wire::load<std::uint32_t>(&bytes[28]), std::bit_cast<std::uint32_t>(0.8f));
  EXPECT_EQ(wire::load<std::uint32_t>(&bytes[32]), std::bit_cast<std::uint32_t>(0.99f));
  EXPECT_EQ(wire::load<std::uint32_t>(&bytes[36]), std::bit_cast<std::uint32_t>(1e-6f));
  OptimizerConfig out;
  ASSERT_TRUE(decode_optimizer(bytes, out).ok());
  EXPECT_TRUE(out == in);
  const OptimizerConfig plain = adam(OptimizerAlgorithm::kAdam, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.f);
  ASSERT_TRUE(decode_optimizer(encode_optimizer(plain), out).ok());
  EXPECT_TRUE(out == plain);
}

TEST(ProtocolOptimizer, RejectsBadBetasEpsAndSgdFieldsForAdam) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const auto& c : {adam(OptimizerAlgorithm::kAdam, 1e-3f, 1.f, 0.999f, 1e-8f, 0.f),
                        adam(OptimizerAlgorithm::kAdam, 1e-3f, 0.9f, -0.1f, 1e-8f, 0.f),
                        adam(OptimizerAlgorithm::kAdamW, 1e-3f, nan, 0.999f, 1e-8f, 0.f),
                        adam(OptimizerAlgorithm::kAdamW, 1e-3f, 0.9f, 0.999f, 0.f, 0.f)}) {
    Status s = optimizer_status(c);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(s.message().find("each beta must be in [0, 1) and eps finite and > 0"),
              std::string::npos)
        << s.message();
  }
  OptimizerConfig c = adam(OptimizerAlgorithm::kAdam, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.f);
  c.momentum = 0.9f;
  Status s = optimizer_status(c);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Adam takes no momentum, dampening or nesterov"), std::string::npos)
      << s.message();
  auto bytes = encode_optimizer(adam(OptimizerAlgorithm::kAdam, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.f));
  wire::store<std::uint32_t>(&bytes[24], 3);
  OptimizerConfig out;
  s = decode_optimizer(bytes, out);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("optimizer algorithm 3 is not known"), std::string::npos)
      << s.message();
}

// --- address lines ---

TEST(ProtocolLines, RoundTrip) {
  const std::vector<std::string> in = {"10.0.0.1:9100", "host-b.example:9101", "[::1]:7"};
  auto bytes = encode_lines(in);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
            "10.0.0.1:9100\nhost-b.example:9101\n[::1]:7");
  std::vector<std::string> out;
  ASSERT_TRUE(decode_lines(bytes, out).ok());
  EXPECT_EQ(out, in);
  const std::vector<std::string> one = {"x"};
  ASSERT_TRUE(decode_lines(encode_lines(one), out).ok());
  EXPECT_EQ(out, one);
}

TEST(ProtocolLines, EmptyPayloadIsAnEmptyList) {
  EXPECT_TRUE(encode_lines(std::vector<std::string>{}).empty());
  std::vector<std::string> out = {"stale"};
  ASSERT_TRUE(decode_lines({}, out).ok());
  EXPECT_TRUE(out.empty());
}

TEST(ProtocolLines, RejectsEmptyLines) {
  std::vector<std::string> out;
  for (std::string_view text : {"a\n\nb", "a\n", "\na", "\n"})
    expect_rejected(decode_lines(bytes_of(text), out), "empty line in an address list");
}

TEST(ProtocolLines, RejectsNonPrintableBytes) {
  std::vector<std::string> out = {"kept"};
  for (std::string_view text :
       {std::string_view("a b"), std::string_view("a\tb"), std::string_view("a\rb"),
        std::string_view("a\x7f"), std::string_view("\x80"), std::string_view("\xff"),
        std::string_view("a\0b", 3)})
    expect_rejected(decode_lines(bytes_of(text), out), "non-printable byte");
  EXPECT_EQ(out, std::vector<std::string>{"kept"});
}

}  // namespace
}  // namespace psrt::ps

namespace psrt::ps {
namespace {

// --- CUDA IPC records ---

device::IpcRecord ipc_record(std::uint8_t seed, std::uint64_t offset, std::uint64_t bytes) {
  device::IpcRecord r;
  for (std::size_t i = 0; i < device::kIpcHandleBytes; ++i) {
    r.memory[i] = std::byte(seed + i);
    r.event[i] = std::byte(seed * 3 + i);
  }
  r.offset = offset;
  r.allocation_bytes = bytes;
  return r;
}

TEST(ProtocolIpc, RecordsRoundTripAtTheDocumentedLayout) {
  std::vector<device::IpcRecord> in = {ipc_record(1, 256, 1 << 20), ipc_record(9, 0, 4)};
  auto bytes = encode_ipc(in);
  ASSERT_EQ(bytes.size(), 2 * kIpcRecordBytes);
  EXPECT_EQ(kIpcRecordBytes, 144u);
  // The second record's offset field: u64 little endian at 144 + 64.
  EXPECT_EQ(bytes[kIpcRecordBytes + 64], std::byte{0});
  EXPECT_EQ(bytes[64], std::byte{0});
  EXPECT_EQ(bytes[65], std::byte{1});  // 256 = 0x100
  std::vector<device::IpcRecord> out;
  ASSERT_TRUE(decode_ipc(bytes, 2, out).ok());
  ASSERT_EQ(out.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(out[i].memory, in[i].memory);
    EXPECT_EQ(out[i].event, in[i].event);
    EXPECT_EQ(out[i].offset, in[i].offset);
    EXPECT_EQ(out[i].allocation_bytes, in[i].allocation_bytes);
  }
}

TEST(ProtocolIpc, RejectsOffsetsOutsideTheAllocationAndWrongSizes) {
  std::vector<device::IpcRecord> out = {ipc_record(5, 1, 2)};
  const auto before = out.front().memory;
  std::vector<device::IpcRecord> bad = {ipc_record(1, 4096, 4096)};
  expect_rejected(decode_ipc(encode_ipc(bad), 1, out), "offset 4096 of an allocation of 4096");
  EXPECT_EQ(out.front().memory, before);  // untouched on rejection
  auto one = encode_ipc(std::vector<device::IpcRecord>{ipc_record(1, 0, 8)});
  expect_rejected(decode_ipc(one, 2, out), "expected 2 records");
  one.pop_back();
  expect_rejected(decode_ipc(one, 1, out), "expected 1 records");
}

TEST(ProtocolIpc, HeadersNeedTheRightNumberOfRecordsAndASlice) {
  expect_rejected(
      decode_header(data_header(MsgType::kPushPullIpc, WireType::kF32, 0, 4, 8), kIpcRecordBytes),
      "PUSH_PULL_IPC payload of 144 bytes, expected 288");
  expect_rejected(decode_header(data_header(MsgType::kPushIpc, WireType::kF32, 0, 4, 8), 16),
                  "expected 144");
  expect_rejected(
      decode_header(data_header(MsgType::kPullIpc, WireType::kBF16, 0, 4, 8), kIpcRecordBytes),
      "must describe f32 values");
  expect_rejected(
      decode_header(data_header(MsgType::kPushIpc, WireType::kF32, 6, 4, 8), kIpcRecordBytes),
      "lies outside a tensor");
  expect_rejected(
      decode_header(data_header(MsgType::kPushIpc, WireType::kBytes, 0, 4, 8), kIpcRecordBytes),
      "without a data dtype");
  expect_rejected(decode_header(control_header(MsgType::kPullIpcReply), 8), "carries no payload");
  // DEVICE_INFO: empty, or a probe record (control bytes).
  EXPECT_TRUE(decode_header(control_header(MsgType::kDeviceInfo), 0).ok());
  EXPECT_TRUE(decode_header(control_header(MsgType::kDeviceInfo), kIpcRecordBytes).ok());
  expect_rejected(
      decode_header(data_header(MsgType::kDeviceInfo, WireType::kF32, 0, 4, 8), kIpcRecordBytes),
      "with a data dtype");
}

}  // namespace
}  // namespace psrt::ps

namespace psrt::ps {
namespace {

TEST(ReplicaCounts, RoundTripAndRefuseBadRecords) {
  const std::vector<ReplicaCount> counts = {{0, 7, 7}, {3, 1ull << 40, 5}};
  auto bytes = encode_counts(counts);
  ASSERT_EQ(bytes.size(), 2 * kReplicaCountBytes);
  std::vector<ReplicaCount> back;
  ASSERT_TRUE(decode_counts(bytes, back).ok());
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].rank, 3u);
  EXPECT_EQ(back[1].applied, 1ull << 40);
  EXPECT_EQ(back[1].pushes, 5u);
  Status s = decode_counts(std::span(bytes).first(kReplicaCountBytes + 3), back);
  EXPECT_EQ(s.code(), ErrorCode::kProtocol);
  EXPECT_NE(s.message().find("not whole 20-byte records"), std::string::npos) << s.message();
  const std::vector<ReplicaCount> twice = {{2, 1, 1}, {2, 1, 1}};
  s = decode_counts(encode_counts(twice), back);
  EXPECT_NE(s.message().find("rank 2 twice"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace psrt::ps
