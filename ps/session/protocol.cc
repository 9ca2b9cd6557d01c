#include "ps/session/protocol.h"

#include <fmt/core.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "transport/secure/handshake.h"
#include "transport/wire.h"

namespace psrt::ps {
inline namespace session {
namespace {

using wire::load;
using wire::store;

Status bad(std::string message) {
  return protocol_error(std::move(message));
}

bool is_data(WireType t) {
  return t != WireType::kBytes;
}

// The exact payload size of a kFixed or kRecords body.
std::size_t fixed_size(const Header& h) {
  const MessageInfo& m = info(h.type);
  return m.body == Body::kRecords ? h.count * m.bytes : m.bytes;
}

// Slice coordinates: count >= 1 elements at offset inside a tensor of total elements.
Status check_slice(const Header& h) {
  if (h.count == 0) return bad(fmt::format("{} with count 0", to_string(h.type)));
  if (h.total == 0 || h.offset >= h.total || h.count > h.total - h.offset)
    return bad(fmt::format("{} slice [{}, +{}) lies outside a tensor of {} elements",
                           to_string(h.type), h.offset, h.count, h.total));
  return {};
}

// The payload of a control message (no body, text, fixed records): its size against the type.
Status check_control_payload(const Header& h, std::size_t payload_size) {
  const auto name = to_string(h.type);
  const Body body = body_of(h.type);
  if (body == Body::kNone) {
    if (payload_size != 0)
      return bad(fmt::format("{} carries no payload, got {} bytes", name, payload_size));
    return {};
  }
  if (h.dtype != WireType::kBytes) return bad(fmt::format("{} with a data dtype", name));
  if (body == Body::kBytes) {
    if (payload_size > kMaxControlBytes)
      return bad(
          fmt::format("{} payload of {} bytes exceeds {}", name, payload_size, kMaxControlBytes));
    return {};
  }
  // kFixed, kRecords
  if (h.count > kMaxControlBytes / 4 || fixed_size(h) > kMaxControlBytes)
    return bad(fmt::format("{} with {} records exceeds the {}-byte control limit", name, h.count,
                           kMaxControlBytes));
  if (payload_size != fixed_size(h))
    return bad(
        fmt::format("{} payload of {} bytes, expected {}", name, payload_size, fixed_size(h)));
  return {};
}

// A slice's values (INIT, PUSH, PULL, their replies): dtype, slice, limit, count x dtype size.
Status check_data_payload(const Header& h, std::size_t payload_size, const Limits& limits) {
  const auto name = to_string(h.type);
  const Body body = body_of(h.type);
  const bool pull = body == Body::kPull;
  if (!is_data(h.dtype)) return bad(fmt::format("{} without a data dtype", name));
  if (body != Body::kData && h.dtype != WireType::kF32)
    return bad(fmt::format("{} must carry f32 values", name));
  if (body != Body::kF32Reply)
    if (auto s = check_slice(h); !s.ok()) return s;
  if (h.count > limits.max_data_bytes / wire_size(h.dtype))
    return bad(fmt::format("{} of {} elements exceeds the {}-byte slice limit", name, h.count,
                           limits.max_data_bytes));
  const std::size_t want = pull ? 0 : h.count * wire_size(h.dtype);
  if (payload_size != want)
    return bad(fmt::format("{} payload of {} bytes, but {} elements of {} bytes need {}", name,
                           payload_size, h.count, wire_size(h.dtype), want));
  return {};
}

// A slice described by CUDA IPC records: the slice as for data, the records' fixed size.
Status check_ipc_payload(const Header& h, std::size_t payload_size, const Limits& limits) {
  const auto name = to_string(h.type);
  if (!is_data(h.dtype)) return bad(fmt::format("{} without a data dtype", name));
  if (body_of(h.type) == Body::kF32Ipc && h.dtype != WireType::kF32)
    return bad(fmt::format("{} must describe f32 values", name));
  if (auto s = check_slice(h); !s.ok()) return s;
  if (h.count > limits.max_data_bytes / wire_size(h.dtype))
    return bad(fmt::format("{} of {} elements exceeds the {}-byte slice limit", name, h.count,
                           limits.max_data_bytes));
  const std::size_t want = info(h.type).bytes;
  if (payload_size != want)
    return bad(fmt::format("{} payload of {} bytes, expected {}", name, payload_size, want));
  return {};
}

// The payload a header announces, by its type's body kind (PSRT_PS_MESSAGES).
Status check_payload(const Header& h, std::size_t payload_size, const Limits& limits) {
  switch (body_of(h.type)) {
    case Body::kNone:
    case Body::kBytes:
    case Body::kFixed:
    case Body::kRecords:
      return check_control_payload(h, payload_size);
    case Body::kData:
    case Body::kF32Data:
    case Body::kF32Reply:
    case Body::kPull:
      return check_data_payload(h, payload_size, limits);
    case Body::kIpc:
    case Body::kF32Ipc:
      return check_ipc_payload(h, payload_size, limits);
  }
  return bad(fmt::format("{} has no body kind", to_string(h.type)));
}

}  // namespace

Status protocol_error(std::string message) {
  return Status(ErrorCode::kProtocol, std::move(message));
}

std::string_view to_string(MsgType t) noexcept {
  const auto value = static_cast<std::uint8_t>(t);
  return is_message_type(value) ? info(t).name : "?";
}

std::string_view to_string(Role r) noexcept {
  switch (r) {
    case Role::kScheduler:
      return "scheduler";
    case Role::kServer:
      return "server";
    case Role::kWorker:
      return "worker";
  }
  return "?";
}

std::string_view to_string(WireType t) noexcept {
  switch (t) {
    case WireType::kF32:
      return "f32";
    case WireType::kF16:
      return "f16";
    case WireType::kBF16:
      return "bf16";
    case WireType::kBytes:
      return "bytes";
  }
  return "?";
}

WireType to_wire(GradType t) {
  if (static_cast<int>(t) >= kNumGradTypes)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("unknown GradType {}", static_cast<int>(t)));
  return static_cast<WireType>(t);
}

GradType to_grad_type(WireType t) {
  if (t == WireType::kBytes) throw Error(ErrorCode::kInternal, "to_grad_type of a byte payload");
  return static_cast<GradType>(t);
}

std::size_t wire_size(WireType t) noexcept {
  switch (t) {
    case WireType::kF32:
      return 4;
    case WireType::kF16:
    case WireType::kBF16:
      return 2;
    case WireType::kBytes:
      return 1;
  }
  return 1;
}

HeaderBytes encode(const Header& h) {
  HeaderBytes b{};
  store<std::uint32_t>(&b[0], kMagic);
  store<std::uint16_t>(&b[4], kProtocolVersion);
  store<std::uint8_t>(&b[6], static_cast<std::uint8_t>(h.type));
  store<std::uint8_t>(&b[7], static_cast<std::uint8_t>(h.dtype));
  store<std::uint64_t>(&b[8], h.request_id);
  store<std::uint64_t>(&b[16], h.key);
  store<std::uint64_t>(&b[24], h.offset);
  store<std::uint64_t>(&b[32], h.count);
  store<std::uint64_t>(&b[40], h.total);
  store<std::uint64_t>(&b[48], h.round);
  store<std::uint32_t>(&b[56], h.arg0);
  store<std::uint32_t>(&b[60], h.arg1);
  return b;
}

Status decode(std::span<const std::byte> bytes, std::size_t payload_size, const Limits& limits,
              Header& out) {
  // Both ends of a connection send first, so a process without the secure mode often reads the
  // secure peer's HELLO before the peer reads its bytes: name the cause here too.
  if (bytes.size() >= 4 && load<std::uint32_t>(bytes.data()) == transport::secure::kMagic)
    return bad(
        "a secure-mode handshake: the peer runs in secure mode and this process does not; both "
        "ends must run in secure mode (psrun --secure / PSRT_SECURE=1)");
  if (bytes.size() != kHeaderBytes)
    return bad(fmt::format("header of {} bytes, expected {}", bytes.size(), kHeaderBytes));
  const std::byte* b = bytes.data();
  if (auto magic = load<std::uint32_t>(b); magic != kMagic)
    return bad(
        fmt::format("bad magic {:#010x}: the peer does not speak the psrt PS protocol", magic));
  if (auto v = load<std::uint16_t>(b + 4); v != kProtocolVersion)
    return bad(
        fmt::format("protocol version {} but this build speaks version {}; run the same "
                    "psrt version on every process",
                    v, kProtocolVersion));
  auto type = load<std::uint8_t>(b + 6);
  if (!is_message_type(type)) return bad(fmt::format("unknown message type {}", type));
  auto dtype = load<std::uint8_t>(b + 7);
  if (dtype > static_cast<std::uint8_t>(WireType::kBytes))
    return bad(fmt::format("unknown dtype {}", dtype));
  Header h;
  h.type = static_cast<MsgType>(type);
  h.dtype = static_cast<WireType>(dtype);
  h.request_id = load<std::uint64_t>(b + 8);
  h.key = load<std::uint64_t>(b + 16);
  h.offset = load<std::uint64_t>(b + 24);
  h.count = load<std::uint64_t>(b + 32);
  h.total = load<std::uint64_t>(b + 40);
  h.round = load<std::uint64_t>(b + 48);
  h.arg0 = load<std::uint32_t>(b + 56);
  h.arg1 = load<std::uint32_t>(b + 60);

  if (h.type == MsgType::kInit && h.key_update() > kMaxKeyUpdate)
    return bad(fmt::format("INIT with key update {} (0 optimizer, 1 mean, 2 sum)", h.key_update()));
  if ((h.type == MsgType::kOptimizerState || h.type == MsgType::kSetOptimizerState) &&
      (h.part() < 1 || h.part() > 2))
    return bad(fmt::format("{} of part {} (1 momentum or exp_avg, 2 exp_avg_sq)", to_string(h.type),
                           h.part()));
  if (h.type == MsgType::kOptimizerStateReply && h.state_kind() > kMaxStateKind)
    return bad(fmt::format("OPTIMIZER_STATE_REPLY with state kind {} (0 none, 1 momentum, 2 Adam)",
                           h.state_kind()));
  if (Status st = check_payload(h, payload_size, limits); !st.ok()) return st;
  out = h;
  return {};
}

std::vector<std::byte> encode_slices(std::span<const SliceRecord> slices) {
  std::vector<std::byte> out(slices.size() * kSliceRecordBytes);
  std::byte* p = out.data();
  for (const auto& s : slices) {
    store<std::uint32_t>(p, s.server);
    store<std::uint32_t>(p + 4, s.index);
    store<std::uint64_t>(p + 8, s.offset);
    store<std::uint64_t>(p + 16, s.count);
    p += kSliceRecordBytes;
  }
  return out;
}

Status decode_slices(std::span<const std::byte> bytes, std::uint64_t total,
                     std::uint32_t num_servers, std::vector<SliceRecord>& out) {
  if (bytes.size() % kSliceRecordBytes != 0 || bytes.empty())
    return bad(fmt::format("slice table of {} bytes", bytes.size()));
  std::vector<SliceRecord> slices(bytes.size() / kSliceRecordBytes);
  std::uint64_t next = 0;
  for (std::size_t i = 0; i < slices.size(); ++i) {
    const std::byte* p = bytes.data() + i * kSliceRecordBytes;
    SliceRecord s{load<std::uint32_t>(p), load<std::uint32_t>(p + 4), load<std::uint64_t>(p + 8),
                  load<std::uint64_t>(p + 16)};
    if (s.server >= num_servers)
      return bad(fmt::format("slice {} on server {} of {}", i, s.server, num_servers));
    if (s.index != i || s.offset != next || s.count == 0 || s.count > total - next)
      return bad(fmt::format("slice {} [{}, +{}) does not tile a tensor of {} elements", i,
                             s.offset, s.count, total));
    next += s.count;
    slices[i] = s;
  }
  if (next != total) return bad(fmt::format("slices cover {} of {} elements", next, total));
  out = std::move(slices);
  return {};
}

std::vector<std::byte> encode_ranks(std::span<const std::uint32_t> ranks) {
  std::vector<std::byte> out(ranks.size() * 4);
  for (std::size_t i = 0; i < ranks.size(); ++i)
    store<std::uint32_t>(&out[i * 4], ranks[i]);
  return out;
}

Status decode_ranks(std::span<const std::byte> bytes, std::vector<std::uint32_t>& out) {
  if (bytes.size() % 4 != 0) return bad(fmt::format("rank list of {} bytes", bytes.size()));
  std::vector<std::uint32_t> ranks(bytes.size() / 4);
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    ranks[i] = load<std::uint32_t>(&bytes[i * 4]);
    if (ranks[i] == kAnyRank) return bad("rank list holds an unassigned rank");
    if (ranks[i] >= kMaxRanks)
      return bad(
          fmt::format("rank list holds rank {}, above the limit of {}", ranks[i], kMaxRanks - 1));
  }
  out = std::move(ranks);
  return {};
}

std::vector<std::byte> encode_members(std::span<const MemberRecord> members) {
  std::vector<std::byte> out(members.size() * kMemberRecordBytes);
  for (std::size_t i = 0; i < members.size(); ++i) {
    std::byte* p = &out[i * kMemberRecordBytes];
    store<std::uint32_t>(p, members[i].rank);
    std::memcpy(p + 4, members[i].credential.data(), kCredentialBytes);
  }
  return out;
}

Status decode_members(std::span<const std::byte> bytes, std::vector<MemberRecord>& out) {
  if (bytes.size() % kMemberRecordBytes != 0)
    return bad(fmt::format("member list of {} bytes", bytes.size()));
  std::vector<MemberRecord> members(bytes.size() / kMemberRecordBytes);
  std::vector<std::uint32_t> ranks(members.size());
  for (std::size_t i = 0; i < members.size(); ++i) {
    const std::byte* p = &bytes[i * kMemberRecordBytes];
    members[i].rank = ranks[i] = load<std::uint32_t>(p);
    std::memcpy(members[i].credential.data(), p + 4, kCredentialBytes);
    if (members[i].rank >= kMaxRanks)
      return bad(fmt::format("member list holds rank {}, above the limit of {}", members[i].rank,
                             kMaxRanks - 1));
  }
  std::sort(ranks.begin(), ranks.end());
  if (auto d = std::adjacent_find(ranks.begin(), ranks.end()); d != ranks.end())
    return bad(fmt::format("member list holds rank {} twice", *d));
  out = std::move(members);
  return {};
}

namespace {

// Adam's and AdamW's bounds (torch.optim.Adam's), and the SGD-only fields they do not take.
Status check_adam(const OptimizerConfig& c) {
  if (c.algorithm == OptimizerAlgorithm::kSgd) return {};
  const char* name = c.algorithm == OptimizerAlgorithm::kAdam ? "Adam" : "AdamW";
  if (!(c.beta1 >= 0.f && c.beta1 < 1.f) || !(c.beta2 >= 0.f && c.beta2 < 1.f) ||
      !(c.eps > 0.f && c.eps <= 3.4e38f))
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("{} betas=({}, {}) eps={}: each beta must be in [0, 1) and eps "
                              "finite and > 0",
                              name, c.beta1, c.beta2, c.eps));
  if (c.momentum != 0.f || c.dampening != 0.f || c.nesterov)
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("{} takes no momentum, dampening or nesterov (those are SGD's; "
                              "Adam's momentum is betas): got momentum={} dampening={} "
                              "nesterov={}",
                              name, c.momentum, c.dampening, c.nesterov));
  return {};
}

}  // namespace

std::vector<std::byte> encode_optimizer(const OptimizerConfig& c) {
  std::vector<std::byte> out(kOptimizerRecordBytes);
  store<std::uint32_t>(&out[0], std::bit_cast<std::uint32_t>(c.lr));
  store<std::uint32_t>(&out[4], std::bit_cast<std::uint32_t>(c.momentum));
  store<std::uint32_t>(&out[8], std::bit_cast<std::uint32_t>(c.dampening));
  store<std::uint32_t>(&out[12], std::bit_cast<std::uint32_t>(c.weight_decay));
  store<std::uint32_t>(&out[16], (c.nesterov ? kOptimizerNesterov : 0u) |
                                     (c.skip_nonfinite ? kOptimizerSkipNonfinite : 0u));
  store<std::uint32_t>(&out[20], std::bit_cast<std::uint32_t>(c.max_grad_norm));
  store<std::uint32_t>(&out[24], static_cast<std::uint32_t>(c.algorithm));
  store<std::uint32_t>(&out[28], std::bit_cast<std::uint32_t>(c.beta1));
  store<std::uint32_t>(&out[32], std::bit_cast<std::uint32_t>(c.beta2));
  store<std::uint32_t>(&out[36], std::bit_cast<std::uint32_t>(c.eps));
  return out;
}

Status decode_optimizer(std::span<const std::byte> bytes, OptimizerConfig& out) {
  if (bytes.size() != kOptimizerRecordBytes)
    return bad(fmt::format("optimizer record of {} bytes", bytes.size()));
  auto f32 = [&](std::size_t at) { return std::bit_cast<float>(load<std::uint32_t>(&bytes[at])); };
  const auto flags = load<std::uint32_t>(&bytes[16]);
  const auto algorithm = load<std::uint32_t>(&bytes[24]);
  if (algorithm > static_cast<std::uint32_t>(OptimizerAlgorithm::kAdamW))
    return Status(
        ErrorCode::kInvalidArgument,
        fmt::format("optimizer algorithm {} is not known (0 sgd, 1 adam, 2 adamw)", algorithm));
  const OptimizerConfig c{.algorithm = static_cast<OptimizerAlgorithm>(algorithm),
                          .lr = f32(0),
                          .momentum = f32(4),
                          .dampening = f32(8),
                          .weight_decay = f32(12),
                          .nesterov = (flags & kOptimizerNesterov) != 0,
                          .beta1 = f32(28),
                          .beta2 = f32(32),
                          .eps = f32(36),
                          .max_grad_norm = f32(20),
                          .skip_nonfinite = (flags & kOptimizerSkipNonfinite) != 0};
  if ((flags & ~(kOptimizerNesterov | kOptimizerSkipNonfinite)) != 0)
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("optimizer flags {:#x} hold unknown bits (known: nesterov {:#x}, "
                              "skip_nonfinite {:#x})",
                              flags, kOptimizerNesterov, kOptimizerSkipNonfinite));
  // Same bounds torch.optim.SGD (and clip_grad_norm_) enforce, plus finiteness.
  auto finite_nonneg = [](float x) { return x >= 0.f && x <= 3.4e38f; };
  if (!finite_nonneg(c.lr) || !finite_nonneg(c.momentum) || !finite_nonneg(c.weight_decay) ||
      !(c.dampening >= 0.f && c.dampening <= 1.f) || !finite_nonneg(c.max_grad_norm))
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("optimizer lr={} momentum={} dampening={} weight_decay={} "
                              "max_grad_norm={}: values must be finite and >= 0 (dampening in "
                              "[0, 1])",
                              c.lr, c.momentum, c.dampening, c.weight_decay, c.max_grad_norm));
  if (c.nesterov && (c.momentum <= 0.f || c.dampening != 0.f))
    return Status(ErrorCode::kInvalidArgument,
                  "Nesterov momentum requires a momentum > 0 and zero dampening");
  if (Status st = check_adam(c); !st.ok()) return st;
  out = c;
  return {};
}

void set_credential(Header& h, const Credential& c) {
  h.key = load<std::uint64_t>(c.data());
  h.offset = load<std::uint64_t>(c.data() + 8);
}

Credential credential_of(const Header& h) {
  Credential c;
  store<std::uint64_t>(c.data(), h.key);
  store<std::uint64_t>(c.data() + 8, h.offset);
  return c;
}

std::vector<std::byte> encode_lines(std::span<const std::string> lines) {
  std::string joined;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i) joined += '\n';
    joined += lines[i];
  }
  auto b = as_bytes(joined);
  return {b.begin(), b.end()};
}

Status decode_lines(std::span<const std::byte> bytes, std::vector<std::string>& out) {
  std::vector<std::string> lines;
  if (bytes.empty()) {
    out.clear();
    return {};
  }
  std::string cur;
  for (std::byte b : bytes) {
    char c = static_cast<char>(b);
    if (c == '\n') {
      if (cur.empty()) return bad("empty line in an address list");
      lines.push_back(std::move(cur));
      cur.clear();
    } else if (c < 0x21 || c > 0x7e) {
      return bad("non-printable byte in an address list");
    } else {
      cur += c;
    }
  }
  if (cur.empty()) return bad("empty line in an address list");
  lines.push_back(std::move(cur));
  out = std::move(lines);
  return {};
}

}  // namespace session
}  // namespace psrt::ps
