// Protocol invariants and lifetimes under attack or fault (issue 12): whole jobs on 127.0.0.1
// launched by psrun (the attacks themselves are in invariant_attacks.cc, run as worker rank 0),
// an in-process scheduler facing a server that refuses membership, and requests on dead
// connections. Every test here failed on the code before its fix.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#define PSRT_SCRATCH_PREFIX "psrt_invariants_test_"
#include "ps/scheduler.h"
#include "ps/session/endpoint.h"
#include "ps/session/requests.h"
#include "ps/shard_map.h"
#include "tests/integration/job_runner.h"
#include "transport/event_loop.h"
#include "transport/factory.h"

extern char** environ;

namespace psrt {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr const char* kSecret = "invariants-test-secret-0123456789";

using test::count;
using test::Run;
using test::scratch;
using test::slurp;

// `sh -c "PREFIX psrun ARGS -- ps_worker WORKER_ARGS"`, output captured; bounded by `timeout`
// (the whole process group is killed past it).
Run psrun(const std::string& prefix, const std::string& args, const std::string& worker_args,
          std::chrono::seconds timeout = 60s) {
  return test::run_psrun_bounded(prefix, args, PS_WORKER_PATH " " + worker_args, timeout);
}

const std::string kAttackJob = "--transport tcp -n 3 --aggregate sum --lr 1";

// --- Protocol invariants (5) ---

TEST(Invariants, MixedDtypesInOneRoundAreRefusedAndWeightsStayExact) {
  // An f16 push of a slice arrives while an f32 push of it is still arriving (half its payload
  // held back): the f16 one is refused naming both dtypes, the f32 one lands, and ranks 1 and 2
  // check every round of key 0 exactly. Before: the f16 push was admitted (the check looked
  // only at queued gradients), and an update would read the two as one dtype.
  auto r = psrun("", kAttackJob, "invariants --case dtype --rounds 5");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(count(r.out, "OK mixed dtype refused"), 1) << r.out;
  EXPECT_EQ(count(r.out, "OK the f32 push still arriving was taken"), 1) << r.out;
  EXPECT_EQ(count(r.out, "PASS invariants"), 3) << r.out;
}

TEST(Invariants, InitOutsideTheShardMapIsRefused) {
  auto r = psrun("", kAttackJob, "invariants --case init --rounds 5");
  EXPECT_EQ(r.rc, 0) << r.out;
  for (const char* check :
       {"OK INIT of half a slice refused", "OK INIT of a slice past the last refused",
        "OK INIT at another offset refused", "OK INIT of the shard map's slice accepted"})
    EXPECT_EQ(count(r.out, check), 1) << check << "\n" << r.out;
  EXPECT_EQ(count(r.out, "PASS invariants"), 3) << r.out;
}

TEST(Invariants, InitOfACutFromTheCheckpointManifestIsAccepted) {
  // The first run stops before any checkpoint round completes, so the second one (another
  // --partition-bytes, same directory) does not resume but keeps the manifest's cut: its INITs
  // differ from this run's cut and are taken because the manifest places them so.
  auto dir = scratch("manifest_cut");
  const std::string args = "--transport tcp -n 2 --lr 1 --checkpoint-every 100 --checkpoint-dir " +
                           dir.string() + " --partition-bytes ";
  auto first = psrun("", args + "4096", "exact --rounds 2 --sizes 7,5000");
  ASSERT_EQ(first.rc, 0) << first.out;
  auto second = psrun("", args + "8192", "exact --rounds 2 --sizes 7,5000");
  EXPECT_EQ(second.rc, 0) << second.out;
  EXPECT_EQ(count(second.out, "PASS exact"), 2) << second.out;
}

TEST(Invariants, RankOverflowIsRefusedAndTheJobGoesOn) {
  // Before: the joiner got rank 0xfffffffe, the next one 0xffffffff (= any rank), the server
  // refused that membership, the scheduler ignored the refusal, and the job died.
  auto r = psrun("", kAttackJob, "invariants --case rank --rounds 5");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(count(r.out, "OK rank 0xfffffffe refused"), 1) << r.out;
  EXPECT_EQ(count(r.out, "OK the next joiner got rank 3"), 1) << r.out;
  EXPECT_EQ(count(r.out, "PASS invariants"), 3) << r.out;
}

TEST(Invariants, SliceBoundsAreTheShardMapsCut) {
  for (std::size_t partition : {std::size_t{4}, std::size_t{4096}, std::size_t{4} << 20}) {
    ps::ShardMap map(3, partition);
    std::uint64_t key = 0;
    for (std::uint64_t total : {1ull, 2ull, 7ull, 1000ull, 1025ull, 4099ull, 1048579ull}) {
      if (partition == 4 && total > 1000) continue;  // more slices than a LOCATE_REPLY holds
      const auto& slices = map.place(key++, total);
      for (const auto& s : slices) {
        auto b = ps::slice_bounds(total, partition, s.index);
        ASSERT_TRUE(b.has_value()) << total << " " << s.index;
        EXPECT_EQ(b->offset, s.offset) << total << " " << s.index;
        EXPECT_EQ(b->count, s.count) << total << " " << s.index;
      }
      EXPECT_FALSE(ps::slice_bounds(total, partition, slices.size()).has_value());
    }
  }
  EXPECT_FALSE(ps::slice_bounds(0, 4096, 0).has_value());
  EXPECT_FALSE(ps::slice_bounds(std::uint64_t{1} << 40, 4, 0).has_value());
}

// A peer that answers REGISTER replies into `requests` and refuses every MEMBERSHIP.
class RefusingServer final : public ps::Handler {
 public:
  MutableBuffer place(ps::Peer&, const ps::Header&, std::size_t, std::uint64_t) override {
    throw Error(ErrorCode::kProtocol, "no data expected");
  }
  void on_message(ps::Peer& peer, const ps::Header& h, std::span<const std::byte> payload,
                  const transport::Placement&) override {
    if (h.type == ps::MsgType::kMembership)
      return peer.send_error(h.request_id, ErrorCode::kInvalidArgument,
                             "this server refuses every membership change", false);
    if (h.type == ps::MsgType::kShutdown)
      return requests.fail_all(
          Status(ErrorCode::kCancelled,
                 std::string(reinterpret_cast<const char*>(payload.data()), payload.size())));
    requests.complete(peer, h, payload);
  }
  void on_peer_closed(ps::Peer& peer, const Status& why) override { requests.fail_peer(peer, why); }
  ps::Requests requests;
};

TEST(Invariants, RefusedMembershipChangeStopsTheJobNamingTheServer) {
  ps::SchedulerConfig sc;
  sc.secret = kSecret;
  sc.num_servers = 1;
  sc.num_workers = 1;
  ps::Scheduler scheduler(sc);

  RefusingServer server, worker;
  auto server_ep = std::make_shared<ps::Endpoint>(kSecret, ps::Role::kServer, ps::Limits{});
  server_ep->set_handler(&server);
  auto server_t = transport::create_transport("tcp", server_ep);
  auto worker_ep = std::make_shared<ps::Endpoint>(kSecret, ps::Role::kWorker, ps::Limits{});
  worker_ep->set_handler(&worker);
  auto worker_t = transport::create_transport("tcp", worker_ep);

  auto to_sched =
      server_ep->connect(*server_t, scheduler.address(), 0, ps::Role::kScheduler, 0, 10s);
  ps::Header reg;
  reg.type = ps::MsgType::kRegister;
  reg.set_role(ps::Role::kServer);
  reg.set_rank(0);
  std::string address = "127.0.0.1:1";
  server.requests.call(*to_sched, reg, ps::encode_lines({&address, 1}), "REGISTER", 10s);

  // The worker completes the rendezvous; the membership change that admits it is refused.
  auto w = worker_ep->connect(*worker_t, scheduler.address(), 0, ps::Role::kScheduler, 0, 10s);
  reg.set_role(ps::Role::kWorker);
  std::string worker_error;
  std::thread registering([&] {
    try {
      worker.requests.call(*w, reg, {}, "REGISTER", 10s);
    } catch (const Error& e) {
      worker_error = e.what();
    }
  });
  Status ended = scheduler.wait(5s);
  registering.join();
  EXPECT_EQ(ended.code(), ErrorCode::kInvalidArgument) << ended.message();
  EXPECT_NE(ended.message().find("a membership change failed"), std::string::npos)
      << ended.message();
  EXPECT_NE(ended.message().find("this server refuses every membership change"), std::string::npos)
      << ended.message();
  // The worker was not admitted: it hears that the job stopped, with the cause.
  EXPECT_NE(worker_error.find("refuses every membership change"), std::string::npos)
      << worker_error;
  worker_t->shutdown();
  server_t->shutdown();
}

// --- No exception on a progress thread ends the process (1) ---

TEST(Invariants, ExceptionsOnAProgressThreadAreContained) {
  // A task, a completion, a deferred task and a timer that throw (std::bad_alloc as under a
  // memory limit, std::runtime_error, an int): each is logged and the loop goes on. Before:
  // std::terminate ended the process.
  transport::EventLoop loop("test", std::chrono::microseconds(0));
  loop.start();
  loop.post([] { throw std::bad_alloc(); });
  loop.complete([](const Status&) { throw std::runtime_error("a completion failed"); }, Status());
  loop.post([&loop] {
    loop.defer([] { throw 42; });
    loop.add_timer_on_loop(transport::EventLoop::Clock::now(),
                           [] { throw std::runtime_error("a timer failed"); });
  });
  std::this_thread::sleep_for(50ms);
  bool ran = false;
  loop.run_sync([&] { ran = true; });
  EXPECT_TRUE(ran);
  loop.stop();
}

// --- Teardown: a request whose send failed fails at once (4) ---

class Closes final : public ps::Handler {
 public:
  MutableBuffer place(ps::Peer&, const ps::Header&, std::size_t, std::uint64_t) override {
    throw Error(ErrorCode::kProtocol, "no data expected");
  }
  void on_message(ps::Peer& peer, const ps::Header& h, std::span<const std::byte> payload,
                  const transport::Placement&) override {
    requests.complete(peer, h, payload);
  }
  void on_peer_closed(ps::Peer& peer, const Status& why) override {
    requests.fail_peer(peer, why);
    std::lock_guard lock(mu);
    closed = true;
    cv.notify_all();
  }
  bool wait_closed() {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, 10s, [&] { return closed; });
  }
  ps::Requests requests;
  std::mutex mu;
  std::condition_variable cv;
  bool closed = false;
};

class DeadConnection : public ::testing::TestWithParam<std::string> {};

TEST_P(DeadConnection, CallFailsAtOnceWithTheSendError) {
  Closes acceptor, client;
  auto acc_ep = std::make_shared<ps::Endpoint>(kSecret, ps::Role::kScheduler, ps::Limits{});
  acc_ep->set_handler(&acceptor);
  auto acc_t = transport::create_transport(GetParam(), acc_ep);
  const auto address = acc_t->listen("127.0.0.1:0");
  auto cl_ep = std::make_shared<ps::Endpoint>(kSecret, ps::Role::kWorker, ps::Limits{});
  cl_ep->set_handler(&client);
  auto cl_t = transport::create_transport(GetParam(), cl_ep);
  auto peer = cl_ep->connect(*cl_t, address, 0, ps::Role::kScheduler, 0, 10s);
  acc_t->shutdown();  // the scheduler is gone
  ASSERT_TRUE(client.wait_closed());

  // BARRIER's timeout is minutes in a job; its send fails, so must the call, now.
  ps::Header barrier;
  barrier.type = ps::MsgType::kBarrier;
  const auto start = Clock::now();
  try {
    client.requests.call(*peer, barrier, {}, "BARRIER", 20s);
    ADD_FAILURE() << "BARRIER on a closed connection succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kConnectionClosed) << e.what();
    EXPECT_NE(std::string(e.what()).find("BARRIER"), std::string::npos) << e.what();
  }
  const auto took = Clock::now() - start;
  EXPECT_LT(took, 5s);  // the call's timeout is 20 s
  std::printf(
      "the call failed after %lld ms\n",
      static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  EXPECT_EQ(client.requests.size(), 0u);
  cl_t->shutdown();
}

INSTANTIATE_TEST_SUITE_P(Backends, DeadConnection,
                         ::testing::ValuesIn(transport::available_backends()));

// --- Faults: memory limits, a killed or paused psrun (4, 7) ---

// A psrun started in the background, output to a file.
class Background : public test::ProcessGroup {
 public:
  Background(const std::vector<std::pair<std::string, std::string>>& env, const std::string& args,
             const std::string& worker_args)
      : ProcessGroup(
            test::psrun_command(assignments(env) + "exec", args, PS_WORKER_PATH " " + worker_args),
            scratch("bg.txt")) {}

 private:
  static std::string assignments(const std::vector<std::pair<std::string, std::string>>& env) {
    std::string s;
    for (const auto& [k, v] : env)
      s.append(k).append("=").append(v).append(" ");
    return s;
  }
};

// Gone: no such process, or a zombie that only waits for its new parent to reap it.
bool gone(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');
  return stat.empty() ||
         (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z');
}

TEST(InvariantsFault, ChildrenDieWithAKilledPsrun) {
  // 1 server + 2 workers pushing; psrun is SIGKILLed and cannot stop them itself. Before: the
  // workers outlived it by the peer timeout (10 s).
  Background job({}, "--transport tcp -n 2 --mode async --lr 1", "async --rounds 100000");
  auto children = job.wait_children(3, 10s);
  ASSERT_EQ(children.size(), 3u) << job.out();
  std::this_thread::sleep_for(300ms);  // the job is running
  ASSERT_EQ(::kill(job.pid(), SIGKILL), 0);
  EXPECT_EQ(job.wait(5s), 128 + SIGKILL);
  const auto deadline = Clock::now() + 1s;
  std::set<pid_t> left(children.begin(), children.end());
  while (!left.empty() && Clock::now() < deadline) {
    std::erase_if(left, gone);
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(left.empty()) << left.size() << " of psrun's children outlived it by 1 s";
}

TEST(InvariantsFault, PausedSchedulerDoesNotCondemnLivePeers) {
  // psrun (the scheduler) is stopped for 2.5 times the peer timeout while the job runs; its
  // peers went on sending heartbeats that it could not read. Before: it declared them lost.
  Background job({{"PSRT_PEER_TIMEOUT_MS", "1000"}, {"PSRT_HEARTBEAT_MS", "200"}},
                 "--transport tcp -n 2 --mode async --lr 1", "async --rounds 1500 --sizes 1000");
  ASSERT_EQ(job.wait_children(3, 10s).size(), 3u) << job.out();
  std::this_thread::sleep_for(500ms);
  ASSERT_EQ(::kill(job.pid(), SIGSTOP), 0);
  std::this_thread::sleep_for(2500ms);
  ASSERT_EQ(::kill(job.pid(), SIGCONT), 0);
  const int rc = job.wait(40s);
  const auto out = job.out();
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(count(out, "PASS async"), 2) << out;
  EXPECT_EQ(count(out, "no heartbeat"), 0) << out;
  EXPECT_GE(count(out, "every peer gets a fresh 1000 ms"), 1) << out;  // it saw its pause
}

class InvariantsFaultOom : public ::testing::TestWithParam<std::string> {};

TEST_P(InvariantsFaultOom, OutOfMemoryOnAServerRefusesThatMessageOnly) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ASan/TSan reserve more address space than the limit this test sets";
#endif
  // Every process runs under a 1 GiB address-space limit; rank 0 INITs a slice of 1 GiB (the
  // partition size): the server cannot allocate it. Before: std::bad_alloc escaped the
  // progress thread, the server aborted and the job died.
  auto r = psrun(
      "ulimit -S -v 1048576 &&",
      "--transport " + GetParam() + " -n 3 --aggregate sum --lr 1 --partition-bytes 1073741824",
      "invariants --case oom --rounds 5");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(count(r.out, "OK an INIT the server cannot allocate is refused"), 1) << r.out;
  // The server's own line: "ERROR [server 0] worker 0 (127.0.0.1:P): cannot take the message:
  // out of memory (...)".
  EXPECT_EQ(count(r.out, "): cannot take the message: out of memory (an allocation failed"), 1)
      << r.out;
  EXPECT_EQ(count(r.out, "PASS invariants"), 3) << r.out;
}

INSTANTIATE_TEST_SUITE_P(Backends, InvariantsFaultOom,
                         ::testing::ValuesIn(transport::available_backends()));

}  // namespace
}  // namespace psrt
