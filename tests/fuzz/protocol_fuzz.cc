// libFuzzer target for the PS message decoder (ps/session/protocol.cc): the bytes a peer sends
// before anything else checks them. Build and run with clang (from the repository root):
//
//   CXX=clang++ CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
//   cmake --build build-fuzz --target protocol_fuzz &&
//   build-fuzz/bin/protocol_fuzz -max_total_time=60 tests/fuzz/corpus
//
// libFuzzer adds the inputs it finds to the first corpus directory (tests/fuzz/corpus/.gitignore
// keeps them out of git; only the seed-* files are checked in) and writes a crashing input to
// ./crash-<sha1>. To keep the checked-in directory clean, name a scratch directory first:
//   mkdir -p build-fuzz/corpus &&
//   build-fuzz/bin/protocol_fuzz -max_total_time=60 build-fuzz/corpus tests/fuzz/corpus
// Replay a crash with `build-fuzz/bin/protocol_fuzz crash-<sha1>`. The target is built with
// address and undefined-behaviour sanitizers that abort on the first report, so UB is a crash.
//
// protocol_fuzz_corpus_test runs the same run_one() over the seeds with any compiler;
// `protocol_fuzz_corpus_test --write tests/fuzz/corpus` regenerates the seeds after a protocol
// change.
#include "tests/fuzz/protocol_fuzz.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ps/metrics.h"
#include "ps/session/protocol.h"
#include "ps/session/protocol_device.h"
#include "ps/session/replica_protocol.h"
#include "ps/timeline.h"

namespace psrt::ps::fuzz {
namespace {

// A broken invariant is a finding: abort so that libFuzzer saves the input.
void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "protocol_fuzz: invariant broken: %s\n", what);
  std::abort();
}

bool same_bytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

void check_data_header(const Header& h, std::size_t payload_size) {
  require(h.dtype != WireType::kBytes, "a data message with a byte dtype");
  (void)to_grad_type(h.dtype);  // throws (an uncaught exception: a crash) for a byte dtype
  if (h.type != MsgType::kPullReply && h.type != MsgType::kOptimizerStateReply) {
    require(h.count >= 1, "a data slice of 0 elements");
    require(h.offset < h.total && h.count <= h.total - h.offset, "a slice outside its tensor");
  }
  const bool no_payload =
      h.type == MsgType::kPull || h.type == MsgType::kVersion || h.type == MsgType::kOptimizerState;
  if (h.type != MsgType::kPush && h.type != MsgType::kPushPull)
    require(h.dtype == WireType::kF32, "a data message other than a push with a non-f32 dtype");
  if (h.type == MsgType::kOptimizerState || h.type == MsgType::kSetOptimizerState)
    require(h.part() == 1 || h.part() == 2, "an optimizer state part other than 1 or 2");
  if (h.type == MsgType::kOptimizerStateReply)
    require(h.state_kind() <= kMaxStateKind, "an optimizer state of an unknown kind");
  require(h.count <= Limits{}.max_data_bytes / wire_size(h.dtype), "a slice above the limit");
  const std::size_t want = no_payload ? 0 : h.count * wire_size(h.dtype);
  require(payload_size == want, "a data payload of another size than count x dtype");
}

Outcome check_slices(const Header& h, std::span<const std::byte> payload) {
  std::vector<SliceRecord> slices;
  // LOCATE_REPLY leaves arg0 unused; let the fuzzer pick the number of servers through it.
  if (!decode_slices(payload, h.total, h.arg0, slices).ok()) return Outcome::kStructuredRejected;
  require(slices.size() == h.count, "a slice table of another length than its count");
  std::uint64_t next = 0;
  for (std::size_t i = 0; i < slices.size(); ++i) {
    const auto& s = slices[i];
    require(s.server < h.arg0, "a slice on a server out of range");
    require(s.index == i && s.offset == next && s.count >= 1, "slices that do not tile");
    require(s.count <= h.total - next, "a slice past the end of its tensor");
    next += s.count;
  }
  require(next == h.total, "slices that do not cover their tensor");
  require(same_bytes(encode_slices(slices), payload), "a slice table that does not re-encode");
  return Outcome::kStructuredAccepted;
}

Outcome check_ranks(const Header& h, std::span<const std::byte> payload) {
  std::vector<MemberRecord> members;
  if (!decode_members(payload, members).ok()) return Outcome::kStructuredRejected;
  require(members.size() == h.count, "a member list of another length than its count");
  require(std::none_of(members.begin(), members.end(),
                       [](const MemberRecord& m) { return m.rank == kAnyRank; }),
          "an unassigned rank in a member list");
  require(same_bytes(encode_members(members), payload), "a member list that does not re-encode");
  return Outcome::kStructuredAccepted;
}

Outcome check_optimizer(std::span<const std::byte> payload) {
  OptimizerConfig c;
  if (!decode_optimizer(payload, c).ok()) return Outcome::kStructuredRejected;
  require(c.lr >= 0.f && c.lr <= 3.4e38f && c.momentum >= 0.f && c.momentum <= 3.4e38f &&
              c.weight_decay >= 0.f && c.weight_decay <= 3.4e38f && c.dampening >= 0.f &&
              c.dampening <= 1.f && c.max_grad_norm >= 0.f && c.max_grad_norm <= 3.4e38f,
          "an optimizer value out of range");
  require(!c.nesterov || (c.momentum > 0.f && c.dampening == 0.f),
          "Nesterov without momentum or with dampening");
  require(c.algorithm == OptimizerAlgorithm::kSgd ||
              (c.beta1 >= 0.f && c.beta1 < 1.f && c.beta2 >= 0.f && c.beta2 < 1.f && c.eps > 0.f &&
               c.eps <= 3.4e38f && c.momentum == 0.f && c.dampening == 0.f && !c.nesterov),
          "Adam with betas or eps out of range, or with SGD's fields");
  require(same_bytes(encode_optimizer(c), payload), "an optimizer record that does not re-encode");
  return Outcome::kStructuredAccepted;
}

Outcome check_lines(std::span<const std::byte> payload) {
  std::vector<std::string> lines;
  if (!decode_lines(payload, lines).ok()) return Outcome::kStructuredRejected;
  for (const auto& line : lines) {
    require(!line.empty(), "an empty address line");
    for (char c : line)
      require(c >= 0x21 && c <= 0x7e, "a non-printable address byte");
  }
  require(same_bytes(encode_lines(lines), payload), "an address list that does not re-encode");
  return Outcome::kStructuredAccepted;
}

// REPLICATE_COMMIT: every worker's counters on the replicated version, as the backup reads them.
Outcome check_counts(const Header& h, std::span<const std::byte> payload) {
  std::vector<ReplicaCount> counts;
  if (!decode_counts(payload, counts).ok()) return Outcome::kStructuredRejected;
  require(counts.size() == h.count, "replica counters of another length than their count");
  require(same_bytes(encode_counts(counts), payload), "replica counters that do not re-encode");
  return Outcome::kStructuredAccepted;
}

// METRICS and TIMELINE: a process's report to the scheduler, as the scheduler reads it.
Outcome check_metrics(const Header& h, std::span<const std::byte> payload) {
  std::vector<MetricRecord> records;
  if (!decode_metrics(payload, records).ok()) return Outcome::kStructuredRejected;
  require(records.size() == h.count, "metrics records of another length than their count");
  for (const auto& r : records)
    require(std::isfinite(r.value) && r.value >= 0, "a metric value that is not finite and >= 0");
  require(same_bytes(encode_metrics(records), payload), "metrics records that do not re-encode");
  return Outcome::kStructuredAccepted;
}

Outcome check_timeline(const Header& h, std::span<const std::byte> payload) {
  std::vector<TimelineEvent> events;
  if (!decode_timeline(payload, events).ok()) return Outcome::kStructuredRejected;
  require(events.size() == h.count, "timeline records of another length than their count");
  for (const auto& e : events)
    require(e.dur_ns >= 0 && e.kind < TimelineKind::kCount, "a timeline event out of range");
  require(same_bytes(encode_timeline(events), payload), "timeline records that do not re-encode");
  return Outcome::kStructuredAccepted;
}

Outcome check_ipc(const Header& h, std::span<const std::byte> payload) {
  require(h.dtype != WireType::kBytes, "a CUDA IPC message with a byte dtype");
  require(h.count >= 1 && h.offset < h.total && h.count <= h.total - h.offset,
          "a CUDA IPC slice outside its tensor");
  require(h.type != MsgType::kPullIpc || h.dtype == WireType::kF32,
          "PULL_IPC with a non-f32 dtype");
  const std::size_t n = h.type == MsgType::kPushPullIpc ? 2 : 1;
  require(payload.size() == n * kIpcRecordBytes, "CUDA IPC records of another size");
  std::vector<device::IpcRecord> records;
  if (!decode_ipc(payload, n, records).ok()) return Outcome::kStructuredRejected;
  for (const auto& r : records)
    require(r.offset < r.allocation_bytes, "a CUDA IPC offset outside its allocation");
  require(same_bytes(encode_ipc(records), payload), "CUDA IPC records that do not re-encode");
  return Outcome::kStructuredAccepted;
}

}  // namespace

Outcome run_one(std::span<const std::byte> input) {
  const auto header = input.first(std::min(input.size(), kHeaderBytes));
  const auto payload = input.subspan(header.size());
  Header h;
  if (Status s = decode(header, payload.size(), Limits{}, h); !s.ok()) {
    require(s.code() == ErrorCode::kProtocol && !s.message().empty(),
            "a rejection that is not kProtocol with a message");
    return Outcome::kRejected;
  }
  require(header.size() == kHeaderBytes, "a short header accepted");
  // decode() reads every field and keeps it, so encoding the result gives the same bytes back.
  const HeaderBytes again = encode(h);
  require(same_bytes(again, header), "a header that does not re-encode to its bytes");
  require(to_string(h.type) != "?", "an accepted type without a name");

  switch (h.type) {
    case MsgType::kHello:
    case MsgType::kChallenge:
    case MsgType::kAuth:
    case MsgType::kWelcome:
      require(payload.size() == kNonceBytes && payload.size() == kDigestBytes,
              "a handshake payload of another size than 32");
      return Outcome::kHeaderOnly;
    case MsgType::kError:
    case MsgType::kShutdown:
    case MsgType::kDeviceInfo:
      require(payload.size() <= kMaxControlBytes, "a text payload above the control limit");
      return Outcome::kHeaderOnly;
    case MsgType::kRegister:
    case MsgType::kRegisterReply:
    case MsgType::kDeviceInfoReply:
    case MsgType::kReplicaSet:  // the new backup's address, or no line
      require(payload.size() <= kMaxControlBytes, "an address list above the control limit");
      return check_lines(payload);
    case MsgType::kLocateReply:
      return check_slices(h, payload);
    case MsgType::kMembership:
      return check_ranks(h, payload);
    case MsgType::kSetOptimizer:
      return check_optimizer(payload);
    case MsgType::kPushIpc:
    case MsgType::kPushPullIpc:
    case MsgType::kPullIpc:
      return check_ipc(h, payload);
    case MsgType::kInit:
    case MsgType::kPush:
    case MsgType::kPushPull:
    case MsgType::kPull:
    case MsgType::kVersion:
    case MsgType::kPullReply:
    case MsgType::kReplicate:
    case MsgType::kOptimizerState:
    case MsgType::kOptimizerStateReply:
    case MsgType::kSetOptimizerState:
      check_data_header(h, payload.size());
      return Outcome::kHeaderOnly;
    case MsgType::kReplicateCommit:
      return check_counts(h, payload);
    case MsgType::kMetrics:
      return check_metrics(h, payload);
    case MsgType::kTimeline:
      return check_timeline(h, payload);
    default:
      require(payload.empty(), "a payload on a type that carries none");
  }
  return Outcome::kHeaderOnly;
}

}  // namespace psrt::ps::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  psrt::ps::fuzz::run_one({reinterpret_cast<const std::byte*>(data), size});
  return 0;
}
