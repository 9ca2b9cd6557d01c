// Runs the protocol fuzz body (and its libFuzzer entry point) over fixed inputs with any
// compiler, so the target stays compiled and its seeds stay valid in normal CI.
//
//   protocol_fuzz_corpus_test                 in-memory seeds and malformed inputs only
//   protocol_fuzz_corpus_test DIR             also: DIR's seed-* files equal the current seeds,
//                                             and every file in DIR runs without a crash
//   protocol_fuzz_corpus_test --write DIR     (re)writes the seed-* files into DIR
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "kernels/fused_sgd.h"
#include "ps/metrics.h"
#include "ps/session/protocol.h"
#include "ps/session/protocol_device.h"
#include "ps/timeline.h"
#include "tests/fuzz/protocol_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace psrt::ps::fuzz {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::byte>;

Bytes message(const Header& h, std::span<const std::byte> payload = {}) {
  const HeaderBytes b = encode(h);
  Bytes out(kHeaderBytes + payload.size());
  std::copy(b.begin(), b.end(), out.begin());
  std::copy(payload.begin(), payload.end(), out.begin() + kHeaderBytes);
  return out;
}

Header header(MsgType type, std::uint64_t request_id) {
  Header h;
  h.type = type;
  h.dtype = WireType::kBytes;
  h.request_id = request_id;
  return h;
}

Header data(MsgType type, WireType dtype, std::uint64_t offset, std::uint64_t count,
            std::uint64_t total) {
  Header h = header(type, 40 + static_cast<std::uint64_t>(type));
  h.dtype = dtype;
  h.key = 3;
  h.offset = offset;
  h.count = count;
  h.total = total;
  h.arg0 = 1;
  return h;
}

Bytes filled(std::size_t n, std::uint8_t first) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i)
    b[i] = std::byte(static_cast<std::uint8_t>(first + i));
  return b;
}

struct Seed {
  Bytes bytes;
  Outcome expected;
};

// One small valid message of each kind of body. The file names are the map keys.
std::map<std::string, Seed> seeds() {
  std::map<std::string, Seed> s;
  Header h = header(MsgType::kHello, 0);
  h.arg0 = static_cast<std::uint32_t>(Role::kWorker);
  h.arg1 = kAnyRank;
  s["seed-hello"] = {message(h, filled(kNonceBytes, 1)), Outcome::kHeaderOnly};
  s["seed-auth"] = {message(header(MsgType::kAuth, 0), filled(kDigestBytes, 9)),
                    Outcome::kHeaderOnly};
  h = header(MsgType::kError, 7);
  h.arg0 = static_cast<std::uint32_t>(ErrorCode::kInvalidArgument);
  s["seed-error"] = {message(h, as_bytes("unknown key 3")), Outcome::kHeaderOnly};

  h = header(MsgType::kRegister, 1);
  h.arg0 = static_cast<std::uint32_t>(Role::kServer);
  h.arg1 = kAnyRank;
  const std::vector<std::string> one = {"10.0.0.3:9100"};
  s["seed-register"] = {message(h, encode_lines(one)), Outcome::kStructuredAccepted};
  h = header(MsgType::kRegisterReply, 1);
  h.arg1 = 2;
  const std::vector<std::string> two = {"10.0.0.3:9100", "[::1]:9101"};
  s["seed-register-reply"] = {message(h, encode_lines(two)), Outcome::kStructuredAccepted};
  // A server's: its registration's credential in key and offset (issue 30).
  Credential credential;
  for (std::size_t i = 0; i < credential.size(); ++i)
    credential[i] = static_cast<std::byte>(0xa0 + i);
  h = header(MsgType::kRegisterReply, 1);
  set_credential(h, credential);
  s["seed-register-reply-server"] = {message(h, encode_lines(one)), Outcome::kStructuredAccepted};
  // REPLICA_SET: lost server 0 promoted on 1, backup 2 (round) at the address, primary 2
  // (total) with its credential (key, offset).
  h = header(MsgType::kReplicaSet, 11);
  h.set_lost_server(0);
  h.set_promote_to(1);
  h.round = 2;
  h.total = 2;
  set_credential(h, credential);
  s["seed-replica-set"] = {message(h, encode_lines(one)), Outcome::kStructuredAccepted};

  h = header(MsgType::kLocate, 2);
  h.key = 3;
  h.total = 10;
  s["seed-locate"] = {message(h), Outcome::kHeaderOnly};
  h = header(MsgType::kLocateReply, 2);
  h.key = 3;
  h.total = 10;
  h.count = 3;
  h.arg0 = 2;  // the number of servers the fuzz body checks the table against
  const std::vector<SliceRecord> slices = {{0, 0, 0, 4}, {1, 1, 4, 3}, {0, 2, 7, 3}};
  s["seed-locate-reply"] = {message(h, encode_slices(slices)), Outcome::kStructuredAccepted};

  h = header(MsgType::kMembership, 5);
  h.count = 3;
  const std::vector<MemberRecord> members = {{0, {}}, {1, {}}, {3, {}}};
  s["seed-membership"] = {message(h, encode_members(members)), Outcome::kStructuredAccepted};
  OptimizerConfig c;
  c.lr = 0.1f;
  c.momentum = 0.9f;
  c.nesterov = true;
  c.max_grad_norm = 5.f;
  c.skip_nonfinite = true;
  s["seed-set-optimizer"] = {message(header(MsgType::kSetOptimizer, 6), encode_optimizer(c)),
                             Outcome::kStructuredAccepted};
  OptimizerConfig adamw;
  adamw.algorithm = OptimizerAlgorithm::kAdamW;
  adamw.lr = 1e-3f;
  adamw.weight_decay = 0.01f;
  s["seed-set-optimizer-adamw"] = {
      message(header(MsgType::kSetOptimizer, 6), encode_optimizer(adamw)),
      Outcome::kStructuredAccepted};
  s["seed-barrier"] = {message(header(MsgType::kBarrier, 8)), Outcome::kHeaderOnly};

  s["seed-init"] = {message(data(MsgType::kInit, WireType::kF32, 0, 4, 4), filled(16, 0x3f)),
                    Outcome::kHeaderOnly};
  s["seed-push-f16"] = {message(data(MsgType::kPush, WireType::kF16, 2, 3, 8), filled(6, 0x3c)),
                        Outcome::kHeaderOnly};
  s["seed-push-pull-bf16"] = {
      message(data(MsgType::kPushPull, WireType::kBF16, 0, 2, 2), filled(4, 0x3f)),
      Outcome::kHeaderOnly};
  s["seed-pull"] = {message(data(MsgType::kPull, WireType::kF32, 5, 3, 8)), Outcome::kHeaderOnly};
  s["seed-pull-reply"] = {
      message(data(MsgType::kPullReply, WireType::kF32, 0, 2, 2), filled(8, 0x40)),
      Outcome::kHeaderOnly};
  h = data(MsgType::kOptimizerState, WireType::kF32, 2, 3, 8);
  h.set_part(2);
  s["seed-optimizer-state"] = {message(h), Outcome::kHeaderOnly};
  h = data(MsgType::kOptimizerStateReply, WireType::kF32, 0, 3, 3);
  h.set_state_kind(static_cast<std::uint32_t>(StateKind::kAdam));
  h.round = 4;
  s["seed-optimizer-state-reply"] = {message(h, filled(12, 0x3e)), Outcome::kHeaderOnly};
  h = data(MsgType::kSetOptimizerState, WireType::kF32, 2, 3, 8);
  h.set_part(1);
  h.round = 4;
  s["seed-set-optimizer-state"] = {message(h, filled(12, 0x3d)), Outcome::kHeaderOnly};
  device::IpcRecord r;
  for (std::size_t i = 0; i < device::kIpcHandleBytes; ++i) {
    r.memory[i] = std::byte(static_cast<std::uint8_t>(i));
    r.event[i] = std::byte(static_cast<std::uint8_t>(0x80 + i));
  }
  r.offset = 512;
  r.allocation_bytes = 1 << 20;
  const std::vector<device::IpcRecord> one_record = {r}, two_records = {r, r};
  s["seed-push-ipc"] = {
      message(data(MsgType::kPushIpc, WireType::kBF16, 2, 3, 8), encode_ipc(one_record)),
      Outcome::kStructuredAccepted};
  s["seed-push-pull-ipc"] = {
      message(data(MsgType::kPushPullIpc, WireType::kF32, 0, 2, 2), encode_ipc(two_records)),
      Outcome::kStructuredAccepted};
  s["seed-device-info-probe"] = {message(header(MsgType::kDeviceInfo, 10), encode_ipc(one_record)),
                                 Outcome::kHeaderOnly};
  const std::vector<std::string> info = {"cuda:0", "5f2d0c4e-7a1b-4c3d-9e8f-0a1b2c3d4e5f"};
  s["seed-device-info-reply"] = {message(header(MsgType::kDeviceInfoReply, 9), encode_lines(info)),
                                 Outcome::kStructuredAccepted};
  const std::vector<MetricRecord> metrics = {{Metric::kWorkerPushedBytes, 0, kAnyRank, 4096},
                                             {Metric::kSyncLagSeconds, 0, 2, 0.03}};
  h = header(MsgType::kMetrics, 0);
  h.count = metrics.size();
  s["seed-metrics"] = {message(h, encode_metrics(metrics)), Outcome::kStructuredAccepted};
  const std::vector<TimelineEvent> events = {{TimelineKind::kUpdate, 1, 7, 1000, 250, 3}};
  h = header(MsgType::kTimeline, 0);
  h.count = events.size();
  s["seed-timeline"] = {message(h, encode_timeline(events)), Outcome::kStructuredAccepted};
  h = header(MsgType::kPlacement, 11);
  h.key = 3;
  h.set_slice(1);
  h.offset = 4;
  h.count = 3;
  h.total = 10;
  s["seed-placement"] = {message(h), Outcome::kHeaderOnly};
  h = header(MsgType::kPlacementReply, 11);
  h.key = 3;
  h.set_served_by(1);
  h.set_asking_server(0);
  s["seed-placement-reply"] = {message(h), Outcome::kHeaderOnly};
  return s;
}

// Inputs the decoders must refuse, each through a different check.
std::map<std::string, Seed> malformed() {
  std::map<std::string, Seed> m;
  const auto all = seeds();
  m["empty"] = {{}, Outcome::kRejected};
  m["short header"] = {filled(10, 0), Outcome::kRejected};
  Bytes b = all.at("seed-barrier").bytes;
  b[0] = std::byte{'X'};
  m["bad magic"] = {b, Outcome::kRejected};
  b = all.at("seed-barrier").bytes;
  b[6] = std::byte{0xff};
  m["unknown type"] = {b, Outcome::kRejected};
  b = all.at("seed-push-f16").bytes;
  b.pop_back();
  m["short data payload"] = {b, Outcome::kRejected};
  b = all.at("seed-barrier").bytes;
  b.push_back(std::byte{0});
  m["payload on BARRIER"] = {b, Outcome::kRejected};
  b = all.at("seed-locate-reply").bytes;
  b[56] = std::byte{1};  // arg0: one server, but the table uses server 1
  m["slice on a missing server"] = {b, Outcome::kStructuredRejected};
  b = all.at("seed-register-reply").bytes;
  b[kHeaderBytes] = std::byte{'\n'};
  m["empty address line"] = {b, Outcome::kStructuredRejected};
  b = all.at("seed-membership").bytes;
  for (std::size_t i = 0; i < 4; ++i)
    b[kHeaderBytes + i] = std::byte{0xff};
  m["unassigned rank"] = {b, Outcome::kStructuredRejected};
  b = all.at("seed-set-optimizer").bytes;
  b[kHeaderBytes + 3] = std::byte{0xbf};  // lr becomes negative
  m["negative lr"] = {b, Outcome::kStructuredRejected};
  b = all.at("seed-push-ipc").bytes;
  for (std::size_t i = 0; i < 8; ++i)
    b[kHeaderBytes + 72 + i] = std::byte{0};  // allocation 0
  m["IPC offset outside its allocation"] = {b, Outcome::kStructuredRejected};
  b = all.at("seed-set-optimizer").bytes;
  b[kHeaderBytes + 16] = std::byte{0x04};  // a flag bit no build defines
  m["unknown optimizer flag"] = {b, Outcome::kStructuredRejected};
  b = all.at("seed-set-optimizer").bytes;
  b[kHeaderBytes + 23] = std::byte{0xff};  // max_grad_norm becomes a NaN
  m["NaN max_grad_norm"] = {b, Outcome::kStructuredRejected};
  return m;
}

const char* name_of(Outcome o) {
  switch (o) {
    case Outcome::kRejected:
      return "rejected";
    case Outcome::kHeaderOnly:
      return "header only";
    case Outcome::kStructuredAccepted:
      return "structured payload accepted";
    case Outcome::kStructuredRejected:
      return "structured payload rejected";
  }
  return "?";
}

int failures = 0;

void expect(const std::string& name, const Seed& seed) {
  const Outcome got = run_one(seed.bytes);
  // The libFuzzer entry point itself, on the same bytes.
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(seed.bytes.data()),
                         seed.bytes.size());
  if (got != seed.expected) {
    std::fprintf(stderr, "FAIL %s: %s, expected %s\n", name.c_str(), name_of(got),
                 name_of(seed.expected));
    ++failures;
  }
}

Bytes read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> chars{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  Bytes b(chars.size());
  for (std::size_t i = 0; i < chars.size(); ++i)
    b[i] = std::byte(static_cast<unsigned char>(chars[i]));
  return b;
}

int write_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  for (const auto& [name, seed] : seeds()) {
    std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(seed.bytes.data()),
              static_cast<std::streamsize>(seed.bytes.size()));
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", (dir / name).c_str());
      return 1;
    }
  }
  std::printf("wrote %zu seeds to %s\n", seeds().size(), dir.c_str());
  return 0;
}

// The checked-in seeds are the current ones (so a protocol change cannot leave the fuzzer
// starting from stale inputs), and every other file in the directory runs without a crash.
void check_directory(const fs::path& dir) {
  const auto want = seeds();
  std::size_t others = 0;
  for (const auto& [name, seed] : want) {
    if (!fs::exists(dir / name)) {
      std::fprintf(stderr, "FAIL %s is missing from %s\n", name.c_str(), dir.c_str());
      ++failures;
    } else if (read_file(dir / name) != seed.bytes) {
      std::fprintf(stderr, "FAIL %s in %s is stale: run `protocol_fuzz_corpus_test --write %s`\n",
                   name.c_str(), dir.c_str(), dir.c_str());
      ++failures;
    }
  }
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name.starts_with('.') || want.count(name)) continue;
    const Bytes b = read_file(entry.path());
    run_one(b);
    ++others;
  }
  std::printf("%s: %zu seeds checked, %zu other inputs ran\n", dir.c_str(), want.size(), others);
}

}  // namespace
}  // namespace psrt::ps::fuzz

int main(int argc, char** argv) {
  using namespace psrt::ps::fuzz;
  if (argc == 3 && std::string(argv[1]) == "--write") return write_seeds(argv[2]);
  if (argc > 2) {
    std::fprintf(stderr, "usage: %s [--write] [CORPUS_DIR]\n", argv[0]);
    return 2;
  }
  std::size_t n = 0;
  for (const auto& inputs : {seeds(), malformed()}) {
    for (const auto& [name, seed] : inputs) {
      expect(name, seed);
      ++n;
    }
  }
  if (argc == 2) check_directory(argv[1]);
  std::printf("protocol_fuzz_corpus_test: %zu in-memory inputs, %d failures\n", n, failures);
  return failures == 0 ? 0 : 1;
}
