// Protocol invariants attacked by a peer that holds the job secret: worker rank 0 of a 3-worker
// tcp job (sum, lr 1) registers like any worker, runs one case, and unregisters; ranks 1 and 2
// check that their rounds of key 0 stayed exact.
//
//   dtype  a push of key 1 in f32 is left half-sent (a relay holds the rest of its payload), and
//          a push of the same slice in f16 arrives meanwhile: refused, the f32 one still lands
//   init   INITs of slices the shard map does not cut: refused; the map's own slice is accepted
//   rank   a joiner asking for rank 0xfffffffe is refused naming the limit; the next joiner gets
//          the next rank and leaves, and the job goes on
//   oom    under an address-space limit (psrun runs under ulimit -v), an INIT of a slice of
//          --partition-bytes cannot be allocated: the server answers "out of memory" and goes on
#include "tests/integration/invariant_attacks.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "ps/session/endpoint.h"
#include "ps/session/requests.h"
#include "tests/integration/raw_worker.h"
#include "tests/integration/relay.h"
#include "transport/factory.h"
#include "transport/socket.h"
#include "transport/tcp/frame.h"

namespace psrt::test {
namespace {

using namespace std::chrono_literals;

void expect(bool ok, const std::string& what) {
  expect_or_exit(ok, what, "invariant attack", /*flush=*/true);
}

// An authenticated worker-side handler: replies go to Requests.
using Client = RequestsHandler;

// Sends `h` with `payload` (its dtype kept) and waits (bounded) for the answer: ok for a reply,
// the error for an ERROR or a closed connection.
Status exchange(Client& client, ps::Peer& peer, ps::Header h, ConstBuffer payload,
                const std::string& what) {
  auto done = std::make_shared<std::promise<Status>>();
  auto result = done->get_future();
  h.request_id = client.requests.add(
      peer, what, [done](const Status& s, const ps::Header&, auto) { done->set_value(s); });
  const auto id = h.request_id;
  peer.send(h, {&payload, payload.size ? std::size_t{1} : 0}, [&client, id](const Status& s) {
    if (!s.ok()) client.requests.fail(id, s);
  });
  if (result.wait_for(20s) != std::future_status::ready)
    return Status(ErrorCode::kTimeout, what + ": no answer within 20 s");
  return result.get();
}

ps::Header data_header(ps::MsgType type, ps::WireType dtype, std::uint64_t key,
                       const ps::SliceRecord& s, std::uint64_t total) {
  ps::Header h;
  h.type = type;
  h.dtype = dtype;
  h.key = key;
  h.offset = s.offset;
  h.count = s.count;
  h.total = total;
  h.set_slice(s.index);
  return h;
}

}  // namespace

void run_invariant_attack(const std::string& which) {
  // Named references, not structured bindings: the lambdas below capture them, which clang 14
  // (clang-tidy's) does not accept for bindings.
  const JobEnv env = job_env();
  const std::string& backend = env.backend;
  const std::string& secret = env.secret;
  const std::string& scheduler_addr = env.scheduler;

  Client client;
  auto raw = connect_raw_worker(backend, secret, client, scheduler_addr);
  auto& endpoint = raw.endpoint;
  auto& t = raw.transport;
  auto& sched = raw.scheduler;
  auto reply = register_raw_worker(raw, client.requests);  // credential proven to servers
  std::vector<std::string> servers;
  expect(ps::decode_lines(reply.payload, servers).ok() && !servers.empty(), "registered");
  ps::Header barrier;
  barrier.type = ps::MsgType::kBarrier;
  client.requests.call(*sched, barrier, {}, "BARRIER", 60s);  // the others have run init()

  // LOCATE of a key of `total` elements: its slices.
  auto locate = [&](std::uint64_t key, std::uint64_t total) {
    ps::Header h;
    h.type = ps::MsgType::kLocate;
    h.key = key;
    h.total = total;
    auto r = client.requests.call(*sched, h, {}, "LOCATE", 10s);
    std::vector<ps::SliceRecord> slices;
    expect(ps::decode_slices(r.payload, total, static_cast<std::uint32_t>(servers.size()), slices)
               .ok(),
           "located key " + std::to_string(key));
    return slices;
  };
  auto server = [&](const std::string& address, std::uint32_t rank) {
    return endpoint->connect(*t, address, 0, ps::Role::kServer, rank, 10s);
  };

  if (which == "dtype") {
    constexpr std::uint64_t kTotal = 4096;
    const auto s = locate(1, kTotal).at(0);
    std::vector<float> zeros(kTotal, 0.f);
    const ConstBuffer f32{zeros.data(), zeros.size() * sizeof(float)};
    const ConstBuffer f16{zeros.data(), zeros.size() * 2};
    auto direct = server(servers[s.server], s.server);
    Status init =
        exchange(client, *direct, data_header(ps::MsgType::kInit, ps::WireType::kF32, 1, s, kTotal),
                 f32, "INIT of key 1");
    expect(init.ok(), "key 1 initialised: " + init.message());

    // The f32 push: its header and half of its payload reach the server, which places it.
    Relay relay(servers[s.server]);
    auto slow = server(relay.address(), s.server);
    relay.hold_after(transport::tcp::kFramePrefixBytes + ps::kHeaderBytes + f32.size / 2);
    auto first = std::async(std::launch::async, [&] {
      return exchange(client, *slow,
                      data_header(ps::MsgType::kPush, ps::WireType::kF32, 1, s, kTotal), f32,
                      "f32 PUSH of key 1");
    });
    expect(relay.wait_held(10s), "the f32 push is half-sent");
    std::this_thread::sleep_for(200ms);  // the server has read what arrived

    // The f16 push of the same slice, complete, while the f32 one is still arriving.
    Status mixed =
        exchange(client, *direct, data_header(ps::MsgType::kPush, ps::WireType::kF16, 1, s, kTotal),
                 f16, "f16 PUSH of key 1");
    expect(!mixed.ok() && has(mixed.message(), "is pushed as f32 by one worker and f16") &&
               has(mixed.message(), "push a key in one dtype"),
           "mixed dtype refused: " + mixed.message());
    relay.release();
    Status landed = first.get();
    expect(landed.ok(), "the f32 push still arriving was taken: " + landed.message());
  } else if (which == "init") {
    constexpr std::uint64_t kTotal = 10;
    const auto s = locate(2, kTotal).at(0);
    std::vector<float> values(kTotal, 7.f);
    auto crafted = [&](std::uint32_t index, std::uint64_t offset, std::uint64_t count) {
      auto peer = server(servers[s.server], s.server);
      ps::SliceRecord r{s.server, index, offset, count};
      return exchange(client, *peer,
                      data_header(ps::MsgType::kInit, ps::WireType::kF32, 2, r, kTotal),
                      {values.data(), count * sizeof(float)}, "crafted INIT of key 2");
    };
    Status half = crafted(0, 0, 5);
    expect(!half.ok() && has(half.message(), "but the shard map cuts it as [0, +10)"),
           "INIT of half a slice refused: " + half.message());
    Status extra = crafted(1, 5, 5);
    expect(!extra.ok() && has(extra.message(), "the shard map has no such slice"),
           "INIT of a slice past the last refused: " + extra.message());
    Status moved = crafted(0, 3, 7);
    expect(!moved.ok() && has(moved.message(), "shard map cuts it"),
           "INIT at another offset refused: " + moved.message());
    Status right = crafted(s.index, s.offset, s.count);
    expect(right.ok(), "INIT of the shard map's slice accepted: " + right.message());
  } else if (which == "rank") {
    auto join = [&](std::uint32_t want) {
      auto peer = endpoint->connect(*t, scheduler_addr, ps::kAnyRank, ps::Role::kScheduler, 0, 10s);
      ps::Header h;
      h.type = ps::MsgType::kRegister;
      h.set_role(ps::Role::kWorker);
      h.set_rank(want);
      std::string error;
      std::uint32_t rank = ps::kAnyRank;
      try {
        rank = client.requests.call(*peer, h, {}, "REGISTER", 10s).header.assigned_rank();
      } catch (const Error& e) {
        error = e.what();
      }
      return std::make_tuple(peer, rank, error);
    };
    auto [high, high_rank, high_error] = join(0xfffffffeu);
    expect(
        high_rank == ps::kAnyRank && has(high_error, "worker rank 4294967294 is above the limit"),
        "rank 0xfffffffe refused: " + high_error);
    auto [next, next_rank, next_error] = join(ps::kAnyRank);
    expect(next_error.empty() && next_rank == 3,
           "the next joiner got rank " + std::to_string(next_rank) + " " + next_error);
    ps::Header unreg;
    unreg.type = ps::MsgType::kUnregister;
    client.requests.call(*next, unreg, {}, "UNREGISTER of the joiner", 10s);
    expect(true, "the joiner left");
  } else if (which == "oom") {
    // This process sends the payload: lift its own soft limit (the servers keep theirs).
    rlimit as{};
    ::getrlimit(RLIMIT_AS, &as);
    as.rlim_cur = as.rlim_max;
    expect(::setrlimit(RLIMIT_AS, &as) == 0, "the attacker lifted its own address-space limit");
    const auto partition = std::stoull(std::getenv("PSRT_PARTITION_BYTES"));
    const std::uint64_t total = partition / sizeof(float);
    const auto s = locate(3, total).at(0);
    expect(s.count == total, "key 3 is one slice of " + std::to_string(partition) + " bytes");
    void* zeros =
        ::mmap(nullptr, partition, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    expect(zeros != MAP_FAILED, "mapped the payload");
    auto peer = server(servers[s.server], s.server);
    Status big =
        exchange(client, *peer, data_header(ps::MsgType::kInit, ps::WireType::kF32, 3, s, total),
                 {zeros, partition}, "INIT of key 3");
    // The server answers ERROR("... out of memory ...") and closes. This side is still sending
    // the payload, so it may see the close first (tcp: a reset; ucx: the closed endpoint) and
    // not the ERROR: the job test checks the server's own line naming the cause.
    expect(!big.ok(), "an INIT the server cannot allocate is refused: " + big.message());
    ::munmap(zeros, partition);
  } else {
    expect(false, "unknown invariant case " + which);
  }
  ps::Header unreg;
  unreg.type = ps::MsgType::kUnregister;
  client.requests.call(*sched, unreg, {}, "UNREGISTER", 10s);
  t->shutdown();
}

}  // namespace psrt::test
