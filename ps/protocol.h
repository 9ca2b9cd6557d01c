// The parameter server's wire protocol: one fixed 64-byte little-endian header per message, plus
// an optional payload whose length the header fixes (dtype size × count). No object
// serialisation: structured payloads (slice tables, member lists) are arrays of fixed records.
//
// Header layout (byte offset: field):
//    0: u32 magic 'PSPM'      4: u16 version     6: u8 type       7: u8 dtype
//    8: u64 request_id       16: u64 key        24: u64 offset   32: u64 count
//   40: u64 total            48: u64 round      56: u32 arg0     60: u32 arg1
// Every field is range-checked by decode() before anything else reads it.
//
// This header is the wire format only: it includes the standard library and include/psrt/, and
// nothing of the layers below ps/. The codecs whose C++ types belong to a lower layer live in a
// header named after that layer, next to their users: ps/protocol_kernels.h (kernels::DType)
// and ps/protocol_device.h (device::IpcRecord). Their record sizes stay
// here, since decode() checks payload sizes against them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "psrt/error.h"
#include "psrt/optimizer.h"

namespace psrt::ps {

inline constexpr std::uint32_t kMagic = 0x4d505350;  // "PSPM" in memory order
// 2: the handshake proofs cover role, rank and the membership credential; MEMBERSHIP carries
// each worker's credential; REGISTER_REPLY gives a worker its own.
inline constexpr std::uint16_t kProtocolVersion = 2;
inline constexpr std::size_t kHeaderBytes = 64;
// Text and table payloads (errors, addresses, slice tables) stay below this.
inline constexpr std::size_t kMaxControlBytes = 1 << 20;
inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kDigestBytes = 32;
// A worker's membership credential: drawn by the scheduler when the worker registers, given to
// it in REGISTER_REPLY and to every server in MEMBERSHIP. A worker's AUTH to a server proves it
// (ps/auth.h), so that a peer holding only the job secret cannot push or pull as another rank.
inline constexpr std::size_t kCredentialBytes = 16;
using Credential = std::array<std::byte, kCredentialBytes>;

enum class MsgType : std::uint8_t {
  // Handshake, on every connection before anything else.
  kHello = 1,      // client → acceptor: arg0 role, arg1 rank (or kAnyRank); payload client nonce
  kChallenge,      // acceptor → client: payload acceptor nonce
  kAuth,           // client → acceptor: payload the client's proof of the secret
  kWelcome,        // acceptor → client: authenticated; payload the acceptor's proof
  kError,          // reply to request_id: arg0 ErrorCode; payload UTF-8 text
  // Scheduler.
  kRegister,       // arg0 role, arg1 rank wanted (kAnyRank); payload: a server's listen address
  kRegisterReply,  // arg0 rank, arg1 live workers, round = checkpoint to resume; payload addresses;
                   // to a worker: key, offset = its membership credential (credential_of)
  kUnregister,
  kUnregisterReply,
  kLocate,         // key, total (0 = look up only) → kLocateReply: count records of SliceRecord
  kLocateReply,
  kBarrier,
  kBarrierReply,
  kHeartbeat,      // no reply
  kMembership,     // scheduler → server: count MemberRecords of the live workers; acked
  kMembershipAck,
  kShutdown,       // scheduler → everyone: arg0 ErrorCode (kOk = job finished); payload reason
  // Server data path. offset/count place the slice in the key's tensor; arg0 is the slice index.
  kInit,           // payload count f32 → kInitReply (arg1 = 1 when this init stored the value)
  kInitReply,
  kSetOptimizer,   // payload OptimizerRecord → kSetOptimizerReply
  kSetOptimizerReply,
  // PUSH and PUSH_PULL: arg1 = the learning rate for this gradient's round as fp32 bits, 0 =
  // the configured one (a schedule; a round takes its first gradient's).
  kPush,           // payload count × dtype → kPushAck once received
  kPushAck,
  kPull,           // → kPullReply once this worker's pushes are applied
  kPushPull,       // kPush + kPull in one message
  kPullReply,      // payload count f32 weights; round = slice version
  // CUDA IPC (worker and CUDA server on one host, device/ipc.h): slices stay in the worker's GPU
  // memory and the server reads or writes them in place; the payload is IpcRecords.
  kDeviceInfo,       // worker → server → kDeviceInfoReply; payload empty, or one IpcRecord of a
                     // probe buffer that a CUDA server opens to prove IPC works (else ERROR)
  kDeviceInfoReply,  // payload lines: the server's device ("cpu" | "cuda:N"), its host's boot id
  kPushIpc,          // one record: the gradient → kPushAck once the update has read it
  kPushPullIpc,      // two records: the gradient, then the output → kPullIpcReply
  kPullIpc,          // one record: the output (f32) → kPullIpcReply
  kPullIpcReply,     // no payload: the weights are in the worker's output; round = slice version
  kLast = kPullIpcReply,
};
std::string_view to_string(MsgType t) noexcept;

// Payload element type. kBytes is for control payloads (text, tables, nonces).
enum class WireType : std::uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2, kBytes = 3 };
std::string_view to_string(WireType t) noexcept;  // "f32", "f16", "bf16", "bytes"

enum class Role : std::uint32_t { kScheduler = 0, kServer = 1, kWorker = 2 };
std::string_view to_string(Role r) noexcept;
inline constexpr std::uint32_t kAnyRank = 0xffffffffu;
// Ranks are below this bound (2^20): a worker asking for a higher one is refused, a job that
// has handed out every rank below it refuses further joiners, and a rank list holding a higher
// one is malformed. Far below kAnyRank, so that no rank arithmetic can reach it.
inline constexpr std::uint32_t kMaxRanks = 1u << 20;

struct Header {
  MsgType type = MsgType::kError;
  WireType dtype = WireType::kBytes;
  std::uint64_t request_id = 0;
  std::uint64_t key = 0;
  std::uint64_t offset = 0;
  std::uint64_t count = 0;
  std::uint64_t total = 0;
  std::uint64_t round = 0;
  std::uint32_t arg0 = 0;
  std::uint32_t arg1 = 0;
};

using HeaderBytes = std::array<std::byte, kHeaderBytes>;
HeaderBytes encode(const Header& h);

// Limits a receiver enforces on top of the format itself.
struct Limits {
  std::size_t max_data_bytes = std::size_t{1} << 31;  // one slice's payload
};

// Decodes and range-checks a header and the payload size that came with it. Errors are
// kProtocol with a message naming the field and value.
// The status every decoder here returns for bad input: kProtocol with `message`.
Status protocol_error(std::string message);

Status decode(std::span<const std::byte> bytes, std::size_t payload_size, const Limits& limits,
              Header& out);

std::size_t wire_size(WireType t) noexcept;
// The ErrorCode an ERROR message carries in arg0; kProtocol for a value no ErrorCode has.
ErrorCode error_code_of(const Header& h) noexcept;
// WireType <-> kernels::DType: ps/protocol_kernels.h.

// One slice of a key as the scheduler placed it (kLocateReply payload record, 24 bytes).
struct SliceRecord {
  std::uint32_t server = 0;
  std::uint32_t index = 0;
  std::uint64_t offset = 0;
  std::uint64_t count = 0;
};
inline constexpr std::size_t kSliceRecordBytes = 24;
std::vector<std::byte> encode_slices(std::span<const SliceRecord> slices);
// Checks that the records tile [0, total) in order with servers below num_servers.
Status decode_slices(std::span<const std::byte> bytes, std::uint64_t total,
                     std::uint32_t num_servers, std::vector<SliceRecord>& out);

std::vector<std::byte> encode_ranks(std::span<const std::uint32_t> ranks);
Status decode_ranks(std::span<const std::byte> bytes, std::vector<std::uint32_t>& out);

// A live worker in MEMBERSHIP (20 bytes): u32 rank, then its 16-byte credential.
struct MemberRecord {
  std::uint32_t rank = 0;
  Credential credential{};
};
inline constexpr std::size_t kMemberRecordBytes = 4 + kCredentialBytes;
std::vector<std::byte> encode_members(std::span<const MemberRecord> members);
// Ranks assigned (not kAnyRank) and unique.
Status decode_members(std::span<const std::byte> bytes, std::vector<MemberRecord>& out);
// The credential in a REGISTER_REPLY's key and offset fields, and back.
void set_credential(Header& h, const Credential& c);
Credential credential_of(const Header& h);

// kSetOptimizer payload (24 bytes): lr, momentum, dampening, weight_decay (f32), flags (u32:
// bit 0 nesterov, bit 1 skip_nonfinite; other bits must be 0), max_grad_norm (f32, finite,
// >= 0). The first 20 bytes are the old record's, whose nesterov word was 0 or 1; a peer of the
// old build is refused by the payload size check, with a message naming both sizes.
inline constexpr std::size_t kOptimizerRecordBytes = 24;
inline constexpr std::uint32_t kOptimizerNesterov = 1u << 0;
inline constexpr std::uint32_t kOptimizerSkipNonfinite = 1u << 1;
std::vector<std::byte> encode_optimizer(const OptimizerConfig& c);
// Checks the values as torch.optim.SGD does (finite, >= 0, dampening <= 1, Nesterov's needs) and
// the flags; errors are kProtocol for the size, kInvalidArgument for the values.
Status decode_optimizer(std::span<const std::byte> bytes, OptimizerConfig& out);

// device::IpcRecord on the wire: 64-byte memory handle, u64 offset, u64 allocation bytes,
// 64-byte event handle (the handle size is device::kIpcHandleBytes, which ps/protocol_device.h
// checks against this one). encode_ipc / decode_ipc: ps/protocol_device.h.
inline constexpr std::size_t kIpcHandleWireBytes = 64;
inline constexpr std::size_t kIpcRecordBytes = 2 * kIpcHandleWireBytes + 16;

// Addresses in kRegisterReply: '\n'-separated, each non-empty and printable.
std::vector<std::byte> encode_lines(std::span<const std::string> lines);
Status decode_lines(std::span<const std::byte> bytes, std::vector<std::string>& out);

inline std::span<const std::byte> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace psrt::ps
