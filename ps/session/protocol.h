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
// header named after that layer, next to their users: ps/session/protocol_device.h
// (device::IpcRecord). Their record sizes stay here, since decode() checks payload sizes against
// them.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "psrt/error.h"
#include "psrt/grad_type.h"
#include "psrt/optimizer.h"

namespace psrt::ps {
inline namespace session {

inline constexpr std::uint32_t kMagic = 0x4d505350;  // "PSPM" in memory order
// 2: the handshake proofs cover role, rank and the membership credential; MEMBERSHIP carries
// each worker's credential; REGISTER_REPLY gives a worker its own.
// 3: the optimizer record (SET_OPTIMIZER) carries the algorithm (SGD, Adam, AdamW), betas and eps;
// REPLICATE has a part 2 (Adam's exp_avg_sq, its step count in the header); REGISTER_REPLY gives
// a server its credential and REPLICA_SET names the primary and its credential; INIT's arg1 is the
// key's update (optimizer, mean, sum); PULL_REPLY's arg1 says the round's gradients and the late
// pushes dropped (--backup-workers); METRICS, TIMELINE, CLOCK and CLOCK_REPLY are new.
inline constexpr std::uint16_t kProtocolVersion = 3;
inline constexpr std::size_t kHeaderBytes = 64;
// Text and table payloads (errors, addresses, slice tables) stay below this.
inline constexpr std::size_t kMaxControlBytes = 1 << 20;
inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kDigestBytes = 32;
// A worker's membership credential: drawn by the scheduler when the worker registers, given to
// it in REGISTER_REPLY and to every server in MEMBERSHIP. A worker's AUTH to a server proves it
// (ps/session/auth.h), so that a peer holding only the job secret cannot push or pull as another
// rank.
inline constexpr std::size_t kCredentialBytes = 16;
using Credential = std::array<std::byte, kCredentialBytes>;

// The message table: every message type, once. Its columns are
//   X(enumerator, wire value, NAME, body, bytes, routes)
// and everything per type is derived from it: the MsgType enum, to_string, decode()'s payload
// checks (body and bytes), which payloads go where the handler places them (carries_data), the
// handshake, and who may send what (ps/session/permissions.h reads `routes`). A new message is one
// row. `body` (Body below) says what the payload is; `bytes` is the exact payload size of a kFixed
// or kIpc body, the size of one record of a kRecords body, 0 otherwise. `routes` (Route below) are
// the sender → receiver pairs that may send it once authenticated.
// The header's argument fields (arg0, arg1) have one meaning per message: the accessors of
// Header name them.
#define PSRT_PS_MESSAGES(X)                                                                        \
  /* Handshake, on every connection before anything else (ps/session/auth.h). */                   \
  /* client → acceptor: role, rank (or kAnyRank); payload the client's nonce */                  \
  X(kHello, 1, "HELLO", kFixed, kNonceBytes, kHandshake)                                           \
  /* acceptor → client: payload the acceptor's nonce */                                          \
  X(kChallenge, 2, "CHALLENGE", kFixed, kNonceBytes, kHandshake)                                   \
  /* client → acceptor: payload the client's proof of the secret */                              \
  X(kAuth, 3, "AUTH", kFixed, kDigestBytes, kHandshake)                                            \
  /* acceptor → client: authenticated; payload the acceptor's proof */                           \
  X(kWelcome, 4, "WELCOME", kFixed, kDigestBytes, kHandshake)                                      \
  /* reply to request_id: error_code, reroute(); payload UTF-8 text */                             \
  X(kError, 5, "ERROR", kBytes, 0, kEveryRoute)                                                    \
  /* Scheduler. */                                                                                 \
  /* role, rank wanted (kAnyRank); payload: a server's listen address */                           \
  X(kRegister, 6, "REGISTER", kBytes, 0, kServerToScheduler | kWorkerToScheduler)                  \
  /* assigned_rank, live_workers, round = checkpoint to resume; payload addresses; key, */         \
  /* offset = the registration's credential (credential_of), a worker's or a server's; to a */     \
  /* worker: count = 1 when it joined a running job (after the rendezvous) */                      \
  X(kRegisterReply, 7, "REGISTER_REPLY", kBytes, 0, kSchedulerToServer | kSchedulerToWorker)       \
  X(kUnregister, 8, "UNREGISTER", kNone, 0, kWorkerToScheduler)                                    \
  X(kUnregisterReply, 9, "UNREGISTER_REPLY", kNone, 0, kSchedulerToWorker)                         \
  /* key, total (0 = look up only) → LOCATE_REPLY: count SliceRecords */                         \
  X(kLocate, 10, "LOCATE", kNone, 0, kWorkerToScheduler)                                           \
  X(kLocateReply, 11, "LOCATE_REPLY", kRecords, kSliceRecordBytes, kSchedulerToWorker)             \
  X(kBarrier, 12, "BARRIER", kNone, 0, kWorkerToScheduler)                                         \
  X(kBarrierReply, 13, "BARRIER_REPLY", kNone, 0, kSchedulerToWorker)                              \
  /* no reply */                                                                                   \
  X(kHeartbeat, 14, "HEARTBEAT", kNone, 0, kServerToScheduler | kWorkerToScheduler)                \
  /* scheduler → server: count MemberRecords of the live workers; acked */                       \
  X(kMembership, 15, "MEMBERSHIP", kRecords, kMemberRecordBytes, kSchedulerToServer)               \
  X(kMembershipAck, 16, "MEMBERSHIP_ACK", kNone, 0, kServerToScheduler)                            \
  /* scheduler → everyone: error_code (kOk = job finished); payload the reason */                \
  X(kShutdown, 17, "SHUTDOWN", kBytes, 0, kSchedulerToServer | kSchedulerToWorker)                 \
  /* Server data path: offset/count place the slice in the key's tensor, slice() its index. */     \
  /* payload count f32 → INIT_REPLY (stored() when this init stored the value) */                \
  X(kInit, 18, "INIT", kF32Data, 0, kWorkerToServer)                                               \
  X(kInitReply, 19, "INIT_REPLY", kNone, 0, kServerToWorker)                                       \
  /* payload the optimizer record → SET_OPTIMIZER_REPLY */                                       \
  X(kSetOptimizer, 20, "SET_OPTIMIZER", kFixed, kOptimizerRecordBytes, kWorkerToServer)            \
  X(kSetOptimizerReply, 21, "SET_OPTIMIZER_REPLY", kNone, 0, kServerToWorker)                      \
  /* PUSH and PUSH_PULL: learning_rate() for this gradient's round, 0 = the configured one */      \
  /* (a schedule; a round takes its first gradient's). */                                          \
  /* payload count × dtype → PUSH_ACK once received */                                          \
  X(kPush, 22, "PUSH", kData, 0, kWorkerToServer)                                                  \
  X(kPushAck, 23, "PUSH_ACK", kNone, 0, kServerToWorker)                                           \
  /* → PULL_REPLY once this worker's pushes are applied */                                       \
  X(kPull, 24, "PULL", kPull, 0, kWorkerToServer)                                                  \
  /* PUSH + PULL in one message */                                                                 \
  X(kPushPull, 25, "PUSH_PULL", kData, 0, kWorkerToServer)                                         \
  /* payload count f32 weights; round = slice version; round_workers(), late_dropped() */          \
  X(kPullReply, 26, "PULL_REPLY", kF32Reply, 0, kServerToWorker)                                   \
  /* CUDA IPC (worker and CUDA server on one host, device/ipc.h): slices stay in the worker's */   \
  /* GPU memory and the server reads or writes them in place; the payload is IpcRecords. */        \
  /* worker → server → DEVICE_INFO_REPLY; payload empty, or one IpcRecord of a probe buffer */ \
  /* that a CUDA server opens to prove IPC works (else ERROR) */                                   \
  X(kDeviceInfo, 27, "DEVICE_INFO", kBytes, 0, kWorkerToServer)                                    \
  /* payload lines: the server's device ("cpu" | "cuda:N"), its host's boot id */                  \
  X(kDeviceInfoReply, 28, "DEVICE_INFO_REPLY", kBytes, 0, kServerToWorker)                         \
  /* one record: the gradient → PUSH_ACK once the update has read it */                          \
  X(kPushIpc, 29, "PUSH_IPC", kIpc, kIpcRecordBytes, kWorkerToServer)                              \
  /* two records: the gradient, then the output → PULL_IPC_REPLY */                              \
  X(kPushPullIpc, 30, "PUSH_PULL_IPC", kIpc, 2 * kIpcRecordBytes, kWorkerToServer)                 \
  /* one record: the output (f32) → PULL_IPC_REPLY */                                            \
  X(kPullIpc, 31, "PULL_IPC", kF32Ipc, kIpcRecordBytes, kWorkerToServer)                           \
  /* no payload: the weights are in the worker's output; round = slice version */                  \
  X(kPullIpcReply, 32, "PULL_IPC_REPLY", kNone, 0, kServerToWorker)                                \
  /* Server replicas (psrun --replicas 2, ps/replica_link.h). */                                   \
  /* primary → backup: a slice's state after version `round`; part() 0: weights, 1: momentum */  \
  X(kReplicate, 33, "REPLICATE", kF32Data, 0, kServerToServer)                                     \
  /* primary → backup: count ReplicaCounts; makes version `round` of the slice the backup's */   \
  /* copy (with the REPLICATE parts of that version) → REPLICATE_ACK */                          \
  X(kReplicateCommit, 34, "REPLICATE_COMMIT", kRecords, kReplicaCountBytes, kServerToServer)       \
  X(kReplicateAck, 35, "REPLICATE_ACK", kNone, 0, kServerToServer)                                 \
  /* scheduler → server: lost_server(), promote_to(), round = the rank of the server this one */ \
  /* replicates to; payload its address (no line: none); total = the rank of the server that */    \
  /* replicates to this one (kAnyRank: none), key, offset = that server's credential */            \
  /* (credential_of) → REPLICA_SET_ACK once promoted and every slice's copy acknowledged */      \
  X(kReplicaSet, 36, "REPLICA_SET", kBytes, 0, kSchedulerToServer)                                 \
  X(kReplicaSetAck, 37, "REPLICA_SET_ACK", kNone, 0, kServerToScheduler)                           \
  /* scheduler → worker: the slices of server lost_server() are served by promote_to() now */    \
  X(kRoute, 38, "ROUTE", kNone, 0, kSchedulerToWorker)                                             \
  /* Versions (Worker::version): the coordinates of a slice, as a PULL's → VERSION_REPLY: */     \
  /* round = the slice's version, read without waiting for this worker's pushes */                 \
  X(kVersion, 39, "VERSION", kPull, 0, kWorkerToServer)                                            \
  X(kVersionReply, 40, "VERSION_REPLY", kNone, 0, kServerToWorker)                                 \
  /* Live metrics (psrun --metrics-port, ps/metrics.h): a process's counters, gauges and */        \
  /* histogram buckets on the heartbeat cadence, count MetricRecords; no reply */                  \
  X(kMetrics, 60, "METRICS", kRecords, kMetricRecordBytes,                                         \
    kServerToScheduler | kWorkerToScheduler)                                                       \
  /* Timeline (psrun --timeline, ps/timeline.h): count TimelineRecords on the scheduler's */       \
  /* clock; round = the sender's clock uncertainty in ns; no reply */                              \
  X(kTimeline, 61, "TIMELINE", kRecords, kTimelineRecordBytes,                                     \
    kServerToScheduler | kWorkerToScheduler)                                                       \
  /* → CLOCK_REPLY: round = the scheduler's clock in ns (ps/timeline.h) */                       \
  X(kClock, 62, "CLOCK", kNone, 0, kServerToScheduler | kWorkerToScheduler)                        \
  X(kClockReply, 63, "CLOCK_REPLY", kNone, 0, kSchedulerToServer | kSchedulerToWorker)             \
  /* Placement (issue 30): a server asks, at the first INIT of a slice it does not hold, whether   \
   */                                                                                              \
  /* the shard map places that slice here: key, slice(), offset, count, total as the INIT has */   \
  /* them → PLACEMENT_REPLY: served_by() = the server serving that slice now (kAnyRank: the */   \
  /* shard map has no such slice), asking_server() = the asker's rank, placed_on() = the */        \
  /* server the map placed it on before any loss (kAnyRank: no such slice) */                      \
  X(kPlacement, 70, "PLACEMENT", kNone, 0, kServerToScheduler)                                     \
  X(kPlacementReply, 71, "PLACEMENT_REPLY", kNone, 0, kSchedulerToServer)                          \
  /* Optimizer state (Worker::optimizer_state, ps/server_state.cc), on cpu servers. */             \
  /* The coordinates of a slice, as a PULL's; part() 1 (SGD's momentum or Adam's exp_avg) or */    \
  /* 2 (Adam's exp_avg_sq) → OPTIMIZER_STATE_REPLY at once, read between two updates */          \
  X(kOptimizerState, 85, "OPTIMIZER_STATE", kPull, 0, kWorkerToServer)                             \
  /* payload count f32: the part (zeros where the slice holds none); round = slice version, */     \
  /* state_kind() what the slice holds, total = Adam's step count (0 for SGD) */                   \
  X(kOptimizerStateReply, 86, "OPTIMIZER_STATE_REPLY", kF32Reply, 0, kServerToWorker)              \
  /* payload count f32: part() of a slice's state; round = Adam's step count (0 for SGD); */       \
  /* taken only between rounds (no gradient queued) → SET_OPTIMIZER_STATE_REPLY */               \
  X(kSetOptimizerState, 87, "SET_OPTIMIZER_STATE", kF32Data, 0, kWorkerToServer)                   \
  X(kSetOptimizerStateReply, 88, "SET_OPTIMIZER_STATE_REPLY", kNone, 0, kServerToWorker)

// The wire values of the rows, in table order. Each helper range of values (50-59, 60-69, ...)
// leaves a gap below it: the rows' values rise, but need not be consecutive.
inline constexpr std::uint8_t kMessageValues[] = {
#define PSRT_PS_MESSAGE_VALUE(e, value, name, body, bytes, routes) value,
    PSRT_PS_MESSAGES(PSRT_PS_MESSAGE_VALUE)
#undef PSRT_PS_MESSAGE_VALUE
};

enum class MsgType : std::uint8_t {
#define PSRT_PS_MESSAGE_ENUM(e, value, name, body, bytes, routes) e = value,
  PSRT_PS_MESSAGES(PSRT_PS_MESSAGE_ENUM)
  // The highest wire value (the last row's: rows rise, checked below).
  kLast = kMessageValues[std::size(kMessageValues) - 1],
#undef PSRT_PS_MESSAGE_ENUM
};
std::string_view to_string(MsgType t) noexcept;  // "PUSH_PULL"; "?" for a value not in the table

// Payload element type: the gradient types (psrt::GradType, with the same values) and kBytes for
// control payloads (text, tables, nonces).
enum class WireType : std::uint8_t {
  kF32 = static_cast<std::uint8_t>(GradType::kF32),
  kF16 = static_cast<std::uint8_t>(GradType::kF16),
  kBF16 = static_cast<std::uint8_t>(GradType::kBF16),
  kBytes = kNumGradTypes,
};
// The dtype byte of the wire format (kProtocolVersion): a GradType added without a new
// version would move kBytes.
static_assert(kNumGradTypes == 3 && static_cast<int>(WireType::kBytes) == 3,
              "the wire's dtype values are fixed: f32 0, f16 1, bf16 2, bytes 3");
// A gradient type's wire value (the same number). Throws psrt::Error (kInvalidArgument) for a
// value that is no GradType.
WireType to_wire(GradType t);
// The gradient type of a data payload. Throws psrt::Error (kInternal) for kBytes, which decode()
// never lets through on a data message.
GradType to_grad_type(WireType t);
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
  // The two argument words. Their meaning depends on the type (PSRT_PS_MESSAGES): read and write
  // them through the accessors below, which name it; only the codec and tests of raw wire words
  // touch them directly.
  std::uint32_t arg0 = 0;
  std::uint32_t arg1 = 0;

  // arg0 of the data path (INIT, PUSH, PULL, PUSH_PULL, the IPC messages and their replies) and
  // of PLACEMENT: the slice's index in the key's layout.
  std::uint32_t slice() const noexcept { return arg0; }
  void set_slice(std::uint32_t index) noexcept { arg0 = index; }
  // arg0 of HELLO and REGISTER: the sender's Role, as sent (check it before casting).
  std::uint32_t role_value() const noexcept { return arg0; }
  void set_role(Role r) noexcept { arg0 = static_cast<std::uint32_t>(r); }
  // arg1 of HELLO (the rank the sender proves) and REGISTER (the rank it asks for); kAnyRank
  // when it has none yet.
  std::uint32_t rank() const noexcept { return arg1; }
  void set_rank(std::uint32_t r) noexcept { arg1 = r; }
  // REGISTER_REPLY: the rank the scheduler gave (arg0) and the live workers (arg1).
  std::uint32_t assigned_rank() const noexcept { return arg0; }
  void set_assigned_rank(std::uint32_t r) noexcept { arg0 = r; }
  std::uint32_t live_workers() const noexcept { return arg1; }
  void set_live_workers(std::uint32_t n) noexcept { arg1 = n; }
  // arg0 of ERROR and SHUTDOWN. error_code(): an ERROR's code, kProtocol for a value that is no
  // ErrorCode (or kOk: an ERROR is never success). shutdown_code(): kOk when the job finished,
  // else the same as error_code().
  ErrorCode error_code() const noexcept {
    return arg0 != 0 && arg0 <= static_cast<std::uint32_t>(kLastErrorCode)
               ? static_cast<ErrorCode>(arg0)
               : ErrorCode::kProtocol;
  }
  ErrorCode shutdown_code() const noexcept { return arg0 == 0 ? ErrorCode::kOk : error_code(); }
  void set_error_code(ErrorCode c) noexcept { arg0 = static_cast<std::uint32_t>(c); }
  // arg1 of PUSH and PUSH_PULL: the learning rate for this gradient's round as fp32 bits; 0 = the
  // configured one.
  float learning_rate() const noexcept { return std::bit_cast<float>(arg1); }
  void set_learning_rate(float lr) noexcept { arg1 = std::bit_cast<std::uint32_t>(lr); }
  // REPLICA_SET and ROUTE: the server that was lost (arg0; kAnyRank: none) and the one that
  // serves its slices from now on (arg1; kAnyRank: none).
  std::uint32_t lost_server() const noexcept { return arg0; }
  void set_lost_server(std::uint32_t r) noexcept { arg0 = r; }
  std::uint32_t promote_to() const noexcept { return arg1; }
  void set_promote_to(std::uint32_t r) noexcept { arg1 = r; }
  // PLACEMENT_REPLY: the server that serves the slice asked about now (arg0; kAnyRank: the shard
  // map has no such slice) and the rank of the server that asked (arg1).
  std::uint32_t served_by() const noexcept { return arg0; }
  void set_served_by(std::uint32_t r) noexcept { arg0 = r; }
  std::uint32_t asking_server() const noexcept { return arg1; }
  void set_asking_server(std::uint32_t r) noexcept { arg1 = r; }
  // round of PLACEMENT_REPLY: the server the shard map placed the slice on, before any server
  // was lost (kAnyRank: no such slice). It differs from served_by() when that server was lost
  // and its backup serves the slice now.
  std::uint32_t placed_on() const noexcept {
    return round > kAnyRank ? kAnyRank : static_cast<std::uint32_t>(round);
  }
  void set_placed_on(std::uint32_t r) noexcept { round = r; }
  // arg1 of ERROR: 1 when the request reached a server the scheduler declared lost, which no
  // longer serves its slice (replicas): the worker re-sends it where the ROUTE of that server
  // points, as it does every request in flight to a lost server. 0 otherwise.
  bool reroute() const noexcept { return arg1 == 1; }
  void set_reroute(bool reroute) noexcept { arg1 = reroute ? 1 : 0; }
  // arg1 of REPLICATE: which part of the slice's state the payload is (0 weights, 1 SGD's momentum
  // or Adam's exp_avg, 2 Adam's exp_avg_sq).
  std::uint32_t part() const noexcept { return arg1; }
  void set_part(std::uint32_t p) noexcept { arg1 = p; }
  // request_id of REPLICATE part 2 (no reply is asked for): the slice's Adam step count.
  std::uint64_t adam_steps() const noexcept { return request_id; }
  void set_adam_steps(std::uint64_t n) noexcept { request_id = n; }
  // arg1 of INIT: what the servers do with the key's rounds (psrt::KeyUpdate: 0 the optimizer,
  // 1 mean only, 2 sum only); decode() refuses another value.
  std::uint32_t key_update() const noexcept { return arg1; }
  void set_key_update(std::uint32_t u) noexcept { arg1 = u; }
  // arg1 of PULL_REPLY and PULL_IPC_REPLY: the gradients in the update that made this version
  // (bits 0-23; 0 for the initial value) and the receiver's pushes of the slice dropped as late
  // since its previous reply of it (bits 24-31, saturating at 255; psrun --backup-workers).
  std::uint32_t round_workers() const noexcept { return arg1 & 0xffffffu; }
  std::uint32_t late_dropped() const noexcept { return arg1 >> 24; }
  void set_round_info(std::uint32_t workers, std::uint64_t dropped) noexcept {
    arg1 =
        (workers & 0xffffffu) | (static_cast<std::uint32_t>(dropped > 255 ? 255 : dropped) << 24);
  }
  // arg1 of OPTIMIZER_STATE_REPLY: what the slice's state holds (StateKind); decode() refuses
  // another value. The part() of OPTIMIZER_STATE and SET_OPTIMIZER_STATE is 1 or 2.
  std::uint32_t state_kind() const noexcept { return arg1; }
  void set_state_kind(std::uint32_t k) noexcept { arg1 = k; }
  // arg1 of INIT_REPLY: this INIT stored its value (the first init of the key in the job).
  bool stored() const noexcept { return arg1 != 0; }
  void set_stored(bool stored) noexcept { arg1 = stored ? 1 : 0; }
};

using HeaderBytes = std::array<std::byte, kHeaderBytes>;
HeaderBytes encode(const Header& h);

// What a slice's optimizer state holds (OPTIMIZER_STATE_REPLY's state_kind(); the layouts of
// ps/optimizer_state.h).
enum class StateKind : std::uint32_t { kNone = 0, kMomentum = 1, kAdam = 2 };
inline constexpr std::uint32_t kMaxStateKind = 2;

// The highest KeyUpdate value an INIT may carry (psrt::KeyUpdate::kSum).
inline constexpr std::uint32_t kMaxKeyUpdate = 2;

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

// One slice of a key as the scheduler placed it (kLocateReply payload record, 24 bytes).
struct SliceRecord {
  std::uint32_t server = 0;
  std::uint32_t index = 0;
  std::uint64_t offset = 0;
  std::uint64_t count = 0;
};
inline constexpr std::size_t kSliceRecordBytes = 24;
// One worker's counters on a replicated slice (REPLICATE_COMMIT record, 20 bytes): u32 rank,
// u64 applied (its clock), u64 pushes (its pushes the replicated version consumed). Codec:
// ps/session/replica_protocol.h.
inline constexpr std::size_t kReplicaCountBytes = 20;
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
// One value of a METRICS report (16 bytes; codec and meaning: ps/metrics.h).
inline constexpr std::size_t kMetricRecordBytes = 16;
// One event of a TIMELINE report (40 bytes; codec and meaning: ps/timeline.h).
inline constexpr std::size_t kTimelineRecordBytes = 40;
std::vector<std::byte> encode_members(std::span<const MemberRecord> members);
// Ranks assigned (not kAnyRank) and unique.
Status decode_members(std::span<const std::byte> bytes, std::vector<MemberRecord>& out);
// The credential in a REGISTER_REPLY's key and offset fields, and back.
void set_credential(Header& h, const Credential& c);
Credential credential_of(const Header& h);

// kSetOptimizer payload (40 bytes): lr, momentum, dampening, weight_decay (f32), flags (u32:
// bit 0 nesterov, bit 1 skip_nonfinite; other bits must be 0), max_grad_norm (f32, finite,
// >= 0), algorithm (u32: 0 SGD, 1 Adam, 2 AdamW), beta1, beta2, eps (f32). A peer of an older
// build is refused by the HELLO's protocol version (3), and a record of another size by the
// payload size check, with a message naming both sizes.
inline constexpr std::size_t kOptimizerRecordBytes = 40;
inline constexpr std::uint32_t kOptimizerNesterov = 1u << 0;
inline constexpr std::uint32_t kOptimizerSkipNonfinite = 1u << 1;
std::vector<std::byte> encode_optimizer(const OptimizerConfig& c);
// Checks the values as torch.optim.SGD/Adam/AdamW do (finite, >= 0, dampening <= 1, Nesterov's
// needs, betas in [0, 1), eps > 0; Adam and AdamW take no momentum, dampening or Nesterov) and
// the flags; errors are kProtocol for the size, kInvalidArgument for the values.
Status decode_optimizer(std::span<const std::byte> bytes, OptimizerConfig& out);

// device::IpcRecord on the wire: 64-byte memory handle, u64 offset, u64 allocation bytes,
// 64-byte event handle (the handle size is device::kIpcHandleBytes, which
// ps/session/protocol_device.h checks against this one). encode_ipc / decode_ipc:
// ps/session/protocol_device.h.
inline constexpr std::size_t kIpcHandleWireBytes = 64;
inline constexpr std::size_t kIpcRecordBytes = 2 * kIpcHandleWireBytes + 16;

// What a message's payload is (the `body` column of PSRT_PS_MESSAGES).
enum class Body : std::uint8_t {
  kNone,      // no payload
  kBytes,     // control bytes (dtype bytes), at most kMaxControlBytes
  kFixed,     // exactly `bytes` control bytes
  kRecords,   // count records of `bytes` control bytes each
  kData,      // a slice (offset, count, total) of count elements of a data dtype, sent in place
  kF32Data,   // the same, f32 only
  kF32Reply,  // count f32 elements sent in place, answering a slice (no slice coordinates)
  kPull,      // the coordinates of an f32 slice, no payload
  kIpc,       // a slice of a data dtype in the sender's GPU memory: `bytes` of IpcRecords
  kF32Ipc,    // the same, f32 only
};

// Who may send a message to whom (the `routes` column): a bit per sender → receiver pair of
// authenticated peers, or kHandshake for the messages the endpoint exchanges before that.
enum Route : std::uint8_t {
  kHandshake = 1u << 0,
  kServerToScheduler = 1u << 1,
  kWorkerToScheduler = 1u << 2,
  kSchedulerToServer = 1u << 3,
  kWorkerToServer = 1u << 4,
  kSchedulerToWorker = 1u << 5,
  kServerToWorker = 1u << 6,
  kServerToServer = 1u << 7,  // a primary and its backup (replicas)
  kEveryRoute = kServerToScheduler | kWorkerToScheduler | kSchedulerToServer | kWorkerToServer |
                kSchedulerToWorker | kServerToWorker | kServerToServer,
};

// One row of the message table.
struct MessageInfo {
  MsgType type;
  std::string_view name;
  Body body;
  std::size_t bytes;
  std::uint8_t routes;
};

// The table itself, in row order.
inline constexpr MessageInfo kMessages[] = {
#define PSRT_PS_MESSAGE_INFO(e, value, name, body, bytes, routes) \
  {MsgType::e, name, Body::body, bytes, static_cast<std::uint8_t>(routes)},
    PSRT_PS_MESSAGES(PSRT_PS_MESSAGE_INFO)
#undef PSRT_PS_MESSAGE_INFO
};

constexpr bool message_values_rise() {
  if (kMessageValues[0] < 1) return false;
  for (std::size_t i = 1; i < std::size(kMessageValues); ++i)
    if (kMessageValues[i] <= kMessageValues[i - 1]) return false;
  return true;
}
static_assert(message_values_rise(), "PSRT_PS_MESSAGES rows must have rising wire values >= 1");

// Wire value → 1 + its row in kMessages; 0 for a value no row has.
inline constexpr auto kMessageRow = [] {
  std::array<std::uint8_t, 256> row{};
  for (std::size_t i = 0; i < std::size(kMessageValues); ++i)
    row[kMessageValues[i]] = static_cast<std::uint8_t>(i + 1);
  return row;
}();

constexpr bool is_message_type(std::uint8_t value) noexcept {
  return kMessageRow[value] != 0;
}
// The row of `t`; t must be a type of the table (decode() guarantees it for received headers).
constexpr const MessageInfo& info(MsgType t) noexcept {
  return kMessages[kMessageRow[static_cast<std::uint8_t>(t)] - 1];
}
constexpr Body body_of(MsgType t) noexcept {
  return info(t).body;
}
// The handshake's messages (HELLO, CHALLENGE, AUTH, WELCOME), which the endpoint runs itself.
constexpr bool is_handshake(MsgType t) noexcept {
  return (info(t).routes & kHandshake) != 0;
}
// Whether the payload is data that the receiving handler places (Handler::place: a slice of a
// tensor, sent in place); other payloads are control bytes the endpoint receives itself.
constexpr bool carries_data(MsgType t) noexcept {
  const Body b = body_of(t);
  return b == Body::kData || b == Body::kF32Data || b == Body::kF32Reply;
}

// Addresses in kRegisterReply: '\n'-separated, each non-empty and printable.
std::vector<std::byte> encode_lines(std::span<const std::string> lines);
Status decode_lines(std::span<const std::byte> bytes, std::vector<std::string>& out);

inline std::span<const std::byte> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace session
}  // namespace psrt::ps
