// ps::Server and ps::Scheduler in one process, driven through their handlers by raw worker
// endpoints over real TCP on 127.0.0.1 (no psrun, no child processes): sync rounds give exact
// weights, SSP holds a fast worker within its bound, a worker that leaves changes the rounds, a
// lost worker stops the job naming it, and bad messages are refused with the state unchanged.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../integration/raw_worker.h"
#include "../integration/relay.h"
#include "ps/checkpoint.h"
#include "ps/job_checkpoint.h"
#include "ps/scheduler.h"
#include "ps/server.h"
#include "ps/session/protocol.h"
#include "ps/session/requests.h"
#include "transport/factory.h"
#include "transport/tcp/frame.h"

namespace psrt::ps {
namespace {

using namespace std::chrono_literals;

constexpr const char* kSecret = "server-scheduler-unit-test-secret-0123456789";
constexpr std::uint64_t kKey = 7;
const std::vector<float> kInit = {1.f, 2.f, 3.f, 4.f};

using Answer = std::pair<Status, Header>;

// A server registered with the scheduler, as runtime/server_process.cc wires one.
struct TestServer {
  explicit TestServer(ServerConfig config) : server(std::move(config)) {}
  ~TestServer() {
    if (transport) transport->shutdown();
    server.stop();
  }

  void start(const std::string& scheduler_address, std::uint32_t rank = 0) {
    server.on_control = [this](const Header& h, std::span<const std::byte> payload) {
      std::lock_guard lock(mu);
      if (h.type == MsgType::kShutdown) {
        shutdown = std::string(reinterpret_cast<const char*>(payload.data()), payload.size());
        cv.notify_all();
      } else if (scheduler) {
        requests.complete(*scheduler, h, payload);
      }
    };
    endpoint = std::make_shared<Endpoint>(kSecret, Role::kServer, Limits{});
    endpoint->set_self_rank(rank);
    endpoint->set_handler(&server);
    transport = transport::create_transport("tcp", endpoint);
    server.set_transport(*transport);
    address = transport->listen("127.0.0.1:0");
    auto peer = endpoint->connect(*transport, scheduler_address, 0, Role::kScheduler, 0, 10s);
    {
      std::lock_guard lock(mu);
      scheduler = peer;
    }
    Header reg;
    reg.type = MsgType::kRegister;
    reg.set_role(Role::kServer);
    reg.set_rank(rank);
    requests.call(*peer, reg, encode_lines({&address, 1}), "REGISTER", 10s);
  }

  // The SHUTDOWN message the scheduler (or the server itself) sent, once one came.
  std::optional<std::string> wait_shutdown(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu);
    cv.wait_for(lock, timeout, [&] { return shutdown.has_value(); });
    return shutdown;
  }

  Server server;
  Requests requests;
  std::mutex mu;
  std::condition_variable cv;
  std::shared_ptr<Peer> scheduler;      // guarded by mu
  std::optional<std::string> shutdown;  // guarded by mu
  std::shared_ptr<Endpoint> endpoint;
  std::unique_ptr<transport::Transport> transport;
  std::string address;
};

// A worker's replies go to `requests`; a PULL_REPLY lands where its request said, any other data
// message in a buffer of its own under the endpoint's cookie (byte payloads such as
// REGISTER_REPLY and ERROR the endpoint receives itself).
class WorkerHandler : public Handler {
 public:
  MutableBuffer place(Peer& peer, const Header& h, std::size_t size,
                      std::uint64_t cookie) override {
    if (h.type == MsgType::kPullReply || h.type == MsgType::kOptimizerStateReply) {
      // A held reply's payload is not read (bounded: 30 s), so the server's send of it stays
      // in flight, as to a worker that reads slowly.
      std::unique_lock lock(mu_);
      if (hold_) {
        ++held_;
        held_cv_.notify_all();
        held_cv_.wait_for(lock, 30s, [&] { return !hold_; });
      }
      lock.unlock();
      return requests.dest(peer, h.request_id, size);
    }
    auto buf = std::make_unique<std::vector<std::byte>>(size);
    MutableBuffer dest{buf->data(), size};
    std::lock_guard lock(mu_);
    buffers_[cookie] = std::move(buf);
    return dest;
  }
  void on_message(Peer& peer, const Header& h, std::span<const std::byte> payload,
                  const transport::Placement& p) override {
    requests.complete(peer, h, payload);
    std::lock_guard lock(mu_);
    buffers_.erase(p.cookie);
  }
  void on_peer_closed(Peer& peer, const Status& why) override { requests.fail_peer(peer, why); }
  void hold_replies() {
    std::lock_guard lock(mu_);
    hold_ = true;
  }
  // True once a held reply's header arrived (within `timeout`).
  bool wait_held(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return held_cv_.wait_for(lock, timeout, [&] { return held_ > 0; });
  }
  void release_replies() {
    std::lock_guard lock(mu_);
    hold_ = false;
    held_cv_.notify_all();
  }
  Requests requests;

 private:
  std::condition_variable held_cv_;
  bool hold_ = false;  // guarded by mu_
  int held_ = 0;       // guarded by mu_
  std::mutex mu_;
  std::map<std::uint64_t, std::unique_ptr<std::vector<std::byte>>> buffers_;
};

// A worker made of a raw endpoint: registered with the scheduler, connected to the server.
struct TestWorker {
  ~TestWorker() { stop(); }
  void stop() {
    if (raw.transport) raw.transport->shutdown();
  }

  void connect(const std::string& scheduler_address) {
    raw = test::connect_raw_worker("tcp", kSecret, handler, scheduler_address);
  }
  void register_worker() {
    rank = test::register_raw_worker(raw, handler.requests).header.assigned_rank();
  }
  void connect_server(const std::string& address, std::uint32_t server_rank = 0) {
    server = raw.endpoint->connect(*raw.transport, address, rank, Role::kServer, server_rank, 10s);
  }
  // LOCATE of `key` (placed on first sight): its slices, as the scheduler's shard map has them.
  std::vector<SliceRecord> locate(std::uint64_t key, std::uint64_t total) {
    Header h;
    h.type = MsgType::kLocate;
    h.key = key;
    h.total = total;
    auto reply = handler.requests.call(*raw.scheduler, h, {}, "LOCATE", 10s);
    std::vector<SliceRecord> slices;
    EXPECT_TRUE(decode_slices(reply.payload, total, 8, slices).ok());
    return slices;
  }

  // Sends `h` (with `data` as its payload) to the server; a PULL_REPLY's weights land in `out`.
  std::future<Answer> start(Header h, std::span<const float> data = {},
                            std::vector<float>* out = nullptr) {
    auto promise = std::make_shared<std::promise<Answer>>();
    auto future = promise->get_future();
    MutableBuffer dest;
    if (out) dest = {out->data(), out->size() * sizeof(float)};
    h.request_id = handler.requests.add(
        *server, std::string(to_string(h.type)),
        [promise](const Status& s, const Header& r, std::span<const std::byte>) {
          promise->set_value({s, r});
        },
        dest);
    ConstBuffer b{data.data(), data.size_bytes()};
    const auto id = h.request_id;
    server->send(h, data.empty() ? std::span<const ConstBuffer>{} : std::span(&b, 1),
                 [this, id](const Status& s) {
                   if (!s.ok()) handler.requests.fail(id, s);
                 });
    return future;
  }
  static Answer wait(std::future<Answer>& f) {
    if (f.wait_for(10s) != std::future_status::ready)
      return {Status(ErrorCode::kTimeout, "no answer within 10 s"), Header{}};
    return f.get();
  }

  static Header slice_header(MsgType type, std::size_t count = kInit.size()) {
    Header h;
    h.type = type;
    h.dtype = WireType::kF32;
    h.key = kKey;
    h.set_slice(0);
    h.count = count;
    h.total = count;
    return h;
  }
  Answer init() {
    locate(kKey, kInit.size());
    Header h = slice_header(MsgType::kInit);
    h.dtype = WireType::kF32;
    auto f = start(h, kInit);
    return wait(f);
  }
  Answer push(std::vector<float> grad, float lr = 0.f, std::size_t count = kInit.size(),
              std::uint64_t key = kKey) {
    Header h = slice_header(MsgType::kPush, count);
    h.key = key;
    h.dtype = WireType::kF32;
    h.set_learning_rate(lr);
    auto f = start(h, grad);
    return wait(f);
  }
  // The slice's weights and version (the reply's round).
  std::pair<std::vector<float>, std::uint64_t> pull() {
    std::vector<float> out(kInit.size(), -99.f);
    auto f = start(slice_header(MsgType::kPull), {}, &out);
    auto [status, reply] = wait(f);
    EXPECT_TRUE(status.ok()) << status.message();
    return {out, reply.round};
  }
  Answer control(MsgType type) {
    Header h;
    h.type = type;
    return wait_call(raw.scheduler, h);
  }
  Answer wait_call(const std::shared_ptr<Peer>& peer, Header h) {
    auto promise = std::make_shared<std::promise<Answer>>();
    auto future = promise->get_future();
    h.request_id = handler.requests.add(
        *peer, std::string(to_string(h.type)),
        [promise](const Status& s, const Header& r, std::span<const std::byte>) {
          promise->set_value({s, r});
        });
    peer->send(h);
    return wait(future);
  }

  WorkerHandler handler;
  test::RawWorker raw;
  std::shared_ptr<Peer> server;
  std::uint32_t rank = 0;
};

// A scheduler, one server and `workers` workers, rendezvous done and the key initialised.
class ServerSchedulerTest : public ::testing::Test {
 protected:
  void start(int workers, Mode mode = Mode::kSync, std::uint64_t staleness = 0, bool average = true,
             int threads = 1) {
    SchedulerConfig sc;
    sc.secret = kSecret;
    sc.num_servers = num_servers;
    // Every test key is one slice (the servers check no cut: ServerConfig::partition_bytes 0).
    sc.partition_bytes = std::size_t{1} << 30;
    if (configure_scheduler) configure_scheduler(sc);
    sc.num_workers = static_cast<std::uint32_t>(workers);
    scheduler = std::make_unique<Scheduler>(sc);
    ServerConfig config;
    config.mode = mode;
    config.staleness = staleness;
    config.sgd.lr = 0.5f;
    config.average = average;
    config.threads = threads;
    config.checkpoint_dir = checkpoint_dir;
    if (configure) configure(config);
    server = std::make_unique<TestServer>(config);
    server->start(scheduler->address());
    for (std::uint32_t r = 1; r < num_servers; ++r) {
      other_servers.push_back(std::make_unique<TestServer>(config));
      other_servers.back()->start(scheduler->address(), r);
    }
    for (int i = 0; i < workers; ++i) {
      worker.push_back(std::make_unique<TestWorker>());
      worker.back()->connect(scheduler->address());
    }
    // Each REGISTER is answered once all workers are in: register them side by side.
    std::vector<std::future<void>> registered;
    for (auto& w : worker)
      registered.push_back(std::async(std::launch::async, [&w] { w->register_worker(); }));
    for (auto& r : registered)
      r.get();
    std::sort(worker.begin(), worker.end(), [](auto& a, auto& b) { return a->rank < b->rank; });
    for (auto& w : worker)
      w->connect_server(server->address);
    auto [status, reply] = worker[0]->init();
    ASSERT_TRUE(status.ok()) << status.message();
    ASSERT_TRUE(reply.stored()) << "the first INIT stores the slice";
  }

  void TearDown() override {
    worker.clear();
    other_servers.clear();
    server.reset();
    scheduler.reset();
  }

  std::string checkpoint_dir;  // the server's (--checkpoint-dir); set before start()
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<TestServer> server;                      // rank 0
  std::uint32_t num_servers = 1;                           // set before start()
  std::vector<std::unique_ptr<TestServer>> other_servers;  // ranks 1, 2, ...
  std::vector<std::unique_ptr<TestWorker>> worker;
  std::function<void(ServerConfig&)> configure;  // applied to the server's config by start()
  std::function<void(SchedulerConfig&)> configure_scheduler;  // likewise, the scheduler's
};

TEST_F(ServerSchedulerTest, SyncRoundAppliesTheMeanOfEveryWorkersGradient) {
  start(2);
  EXPECT_EQ(worker[0]->rank, 0u);
  EXPECT_EQ(worker[1]->rank, 1u);
  ASSERT_TRUE(worker[0]->push({1, 1, 1, 1}).first.ok());
  // The round waits for worker 1, and worker 0's pull waits for the round (read-your-writes).
  std::vector<float> out(kInit.size(), -99.f);
  auto pull = worker[0]->start(TestWorker::slice_header(MsgType::kPull), {}, &out);
  EXPECT_EQ(pull.wait_for(200ms), std::future_status::timeout) << "a round ran without worker 1";
  ASSERT_TRUE(worker[1]->push({3, 3, 3, 3}).first.ok());
  auto [status, reply] = TestWorker::wait(pull);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(reply.round, 1u);
  EXPECT_EQ(out, (std::vector<float>{0, 1, 2, 3}));
  // w - lr * mean(g) = w - 0.5 * 2: exact in float.
  for (auto& w : worker) {
    auto [weights, version] = w->pull();
    EXPECT_EQ(weights, (std::vector<float>{0, 1, 2, 3}));
    EXPECT_EQ(version, 1u);
  }
  // A second round with this round's learning rate from the PUSH (0.25).
  ASSERT_TRUE(worker[0]->push({4, 0, 4, 0}, 0.25f).first.ok());
  ASSERT_TRUE(worker[1]->push({0, 4, 0, 4}, 0.25f).first.ok());
  auto [weights, version] = worker[1]->pull();
  EXPECT_EQ(weights, (std::vector<float>{-0.5f, 0.5f, 1.5f, 2.5f}));
  EXPECT_EQ(version, 2u);
}

TEST_F(ServerSchedulerTest, SspKeepsAFastWorkerWithinTheStalenessBound) {
  start(2, Mode::kSsp, 1);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(worker[0]->push({1, 1, 1, 1}).first.ok());
  // Worker 0's first two gradients run at once (clocks 0 and 1, within 1 of worker 1's 0); the
  // third would put it 2 updates ahead of worker 1: it waits, and so does worker 0's pull of its
  // own pushes.
  std::vector<float> out(kInit.size(), -99.f);
  auto pull = worker[0]->start(TestWorker::slice_header(MsgType::kPull), {}, &out);
  EXPECT_EQ(pull.wait_for(300ms), std::future_status::timeout)
      << "the pull returned while worker 0 was past the staleness bound";
  // Worker 1 catches up one step: its gradient and worker 0's third are applied, each alone (no
  // averaging across workers in SSP): w - 0.5 * (1 + 1 + 3 + 1) per element.
  ASSERT_TRUE(worker[1]->push({3, 3, 3, 3}).first.ok());
  auto [status, reply] = TestWorker::wait(pull);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(reply.round, 4u);
  EXPECT_EQ(out, (std::vector<float>{-2, -1, 0, 1}));
}

// Initialises `key` as `count` copies of `value` through worker w.
void init_key(TestWorker& w, std::uint64_t key, std::size_t count, float value) {
  w.locate(key, count);
  Header h = TestWorker::slice_header(MsgType::kInit, count);
  h.key = key;
  const std::vector<float> data(count, value);
  auto f = w.start(h, data);
  auto [status, reply] = TestWorker::wait(f);
  ASSERT_TRUE(status.ok()) << status.message();
}

// The pipeline (ps/update_stage.h): an update does not wait for a reply still sending the
// previous version to another worker, and never writes the buffer that reply is sent from.
TEST_F(ServerSchedulerTest, AnUpdateNeitherWaitsForNorTearsAReplyInFlight) {
  start(2, Mode::kAsync);
  // 32 MiB: more than both sockets' buffers (4 MiB each, doubled by the kernel), so most of
  // the reply is still in the server's weights while worker 0 does not read.
  constexpr std::uint64_t kBig = 50;
  constexpr std::size_t kCount = std::size_t{8} << 20;
  init_key(*worker[0], kBig, kCount, 1.f);
  worker[0]->handler.hold_replies();
  struct Release {  // also when an assertion below ends the test early
    WorkerHandler& h;
    ~Release() { h.release_replies(); }
  } release{worker[0]->handler};
  Header pull = TestWorker::slice_header(MsgType::kPull, kCount);
  pull.key = kBig;
  std::vector<float> held(kCount, -99.f);
  auto held_reply = worker[0]->start(pull, {}, &held);
  ASSERT_TRUE(worker[0]->handler.wait_held(10s)) << "the reply to worker 0 never started";
  // Worker 1's gradient is applied and its pull answered while worker 0's reply is in flight.
  Header push = TestWorker::slice_header(MsgType::kPushPull, kCount);
  push.key = kBig;
  const std::vector<float> grad(kCount, 1.f);
  std::vector<float> out(kCount, -99.f);
  auto applied = worker[1]->start(push, grad, &out);
  // 20 s: ample for 32 MiB under ThreadSanitizer, and less than the 30 s worker 0 is held.
  ASSERT_EQ(applied.wait_for(20s), std::future_status::ready)
      << "the update waited for the reply sending the weights to worker 0";
  auto [status, reply] = applied.get();
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(reply.round, 1u);
  EXPECT_EQ(std::count(out.begin(), out.end(), 0.5f), static_cast<long>(kCount));  // 1 - 0.5 * 1
  // A second update: the replies to worker 0 (version 0) and worker 1 (version 1) are done or
  // still sending from the other buffer; it must not write version 0's.
  auto again = worker[1]->start(push, grad, &out);
  ASSERT_EQ(again.wait_for(20s), std::future_status::ready);
  EXPECT_EQ(again.get().second.round, 2u);
  EXPECT_EQ(std::count(out.begin(), out.end(), 0.f), static_cast<long>(kCount));
  // Worker 0 gets version 0 whole: no element of a later version.
  worker[0]->handler.release_replies();
  auto [held_status, held_header] = TestWorker::wait(held_reply);
  ASSERT_TRUE(held_status.ok()) << held_status.message();
  EXPECT_EQ(held_header.round, 0u);
  EXPECT_EQ(std::count(held.begin(), held.end(), 1.f), static_cast<long>(kCount))
      << "the reply in flight was written by an update: element "
      << (std::find_if(held.begin(), held.end(), [](float v) { return v != 1.f; }) - held.begin());
}

// With --server-threads to spare, a large slice's update is split between threads: every element,
// at the parts' edges too, gets exactly its own gradients (1M + 5 elements, 3 threads: parts of
// 349504, 349504 and 349509 elements on 64-element boundaries).
TEST_F(ServerSchedulerTest, ALargeSliceSplitBetweenThreadsIsUpdatedExactly) {
  start(2, Mode::kSync, 0, true, 3);
  constexpr std::uint64_t kLarge = 60;
  constexpr std::size_t kCount = (std::size_t{1} << 20) + 5;
  Header init = TestWorker::slice_header(MsgType::kInit, kCount);
  init.key = kLarge;
  std::vector<float> w0(kCount), g0(kCount), g1(kCount);
  for (std::size_t i = 0; i < kCount; ++i) {
    w0[i] = static_cast<float>(i % 13);
    g0[i] = static_cast<float>(i % 7);
    g1[i] = static_cast<float>(i % 7 + 2);
  }
  worker[0]->locate(kLarge, kCount);
  auto f = worker[0]->start(init, w0);
  ASSERT_TRUE(TestWorker::wait(f).first.ok());
  Header h = TestWorker::slice_header(MsgType::kPushPull, kCount);
  h.key = kLarge;
  std::vector<float> out0(kCount, -99.f), out1(kCount, -99.f);
  auto a = worker[0]->start(h, g0, &out0);
  auto b = worker[1]->start(h, g1, &out1);
  ASSERT_TRUE(TestWorker::wait(a).first.ok());
  ASSERT_TRUE(TestWorker::wait(b).first.ok());
  // w - 0.5 * mean(g) = i % 13 - 0.5 * (i % 7 + 1): exact in float.
  std::size_t wrong = 0, first = kCount;
  for (std::size_t i = 0; i < kCount; ++i) {
    const float want = static_cast<float>(i % 13) - 0.5f * static_cast<float>(i % 7 + 1);
    if (out0[i] != want || out1[i] != want) {
      if (first == kCount) first = i;
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0u) << "first wrong element " << first;
}

// On-demand checkpoints only (--checkpoint-dir, --checkpoint-every 0): the update of a small
// slice whose round a worker requested writes its file on the compute pool, never on the
// progress thread, which goes on answering meanwhile. The write is held up as a stalled disk
// would: its temporary file is a FIFO that nobody reads, so opening it blocks until the test
// opens the other end. (The write then fails at fsync, which a FIFO refuses; the server logs
// that and applies the round.)
TEST_F(ServerSchedulerTest, ARequestedCheckpointIsNeverWrittenOnTheProgressThread) {
  checkpoint_dir =
      (std::filesystem::temp_directory_path() / ("psrt_ondemand_" + std::to_string(::getpid())))
          .string();
  std::filesystem::remove_all(checkpoint_dir);
  request_checkpoint(checkpoint_dir, 1);
  const std::string slice_file = slice_checkpoint_path(checkpoint_dir, 1, kKey, 0);
  const std::string held = slice_file + ".tmp";
  ASSERT_EQ(::mkdir(checkpoint_round_dir(checkpoint_dir, 1).c_str(), 0700), 0);
  ASSERT_EQ(::mkfifo(held.c_str(), 0600), 0) << held;
  // Opening the FIFO's other end lets the write go on. It stays open until the server is gone
  // (a write into a FIFO nobody holds open raises SIGPIPE), whatever the test found.
  struct HeldWrite {
    std::vector<std::unique_ptr<TestWorker>>& workers;
    std::unique_ptr<TestServer>& server;
    std::string fifo, dir;
    int fd = -1;
    void release() {
      if (fd < 0) fd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    }
    ~HeldWrite() {
      release();
      workers.clear();
      server.reset();
      if (fd >= 0) ::close(fd);
      std::filesystem::remove_all(dir);
    }
  } write{worker, server, held, checkpoint_dir};
  start(1);
  auto push =
      worker[0]->start(TestWorker::slice_header(MsgType::kPush), std::vector<float>{2, 2, 2, 2});
  // Round 1's update is now blocked opening its checkpoint file: a VERSION is answered at once
  // all the same, with the round before it.
  auto version = worker[0]->start(TestWorker::slice_header(MsgType::kVersion));
  const bool answered = version.wait_for(5s) == std::future_status::ready;
  EXPECT_TRUE(answered) << "no VERSION reply while a requested checkpoint was being written: the "
                           "update (and the write) ran on the progress thread";
  if (answered) {
    auto [status, reply] = version.get();
    EXPECT_TRUE(status.ok()) << status.message();
    EXPECT_EQ(reply.round, 0u) << "round 1 was published before its checkpoint was written";
  }
  write.release();
  ASSERT_TRUE(TestWorker::wait(push).first.ok());
  auto [weights, round] = worker[0]->pull();
  EXPECT_EQ(weights, (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(round, 1u);
}

// 40 keys in flight per worker and round, as a model's gradients: the sums stay exact in every
// mode, on slices updated inline (64 KiB) and on the compute pool (256 KiB), and no reply mixes
// two versions.
class ServerPipelineModes : public ServerSchedulerTest,
                            public ::testing::WithParamInterface<Mode> {};

TEST_P(ServerPipelineModes, FortyKeysInFlightSumExactly) {
  // The sum of the gradients (not their mean): the result is the same however async and SSP
  // group them, w - 0.5 * (1 + 3) per round.
  start(2, GetParam(), 1, /*average=*/false);
  constexpr int kKeys = 40, kRounds = 3;
  auto count_of = [](int j) { return j % 2 ? std::size_t{16384} : std::size_t{65536 + 3}; };
  for (int j = 0; j < kKeys; ++j)
    init_key(*worker[0], 100 + j, count_of(j), 100.f + static_cast<float>(j));
  auto run = [&](int w) {
    const float g = w == 0 ? 1.f : 3.f;
    std::vector<std::vector<float>> grads, outs;
    for (int j = 0; j < kKeys; ++j) {
      grads.emplace_back(count_of(j), g);
      outs.emplace_back(count_of(j), -99.f);
    }
    for (int r = 1; r <= kRounds; ++r) {
      std::vector<std::future<Answer>> ops;
      for (int j = 0; j < kKeys; ++j) {
        Header h = TestWorker::slice_header(MsgType::kPushPull, count_of(j));
        h.key = 100 + j;
        ops.push_back(worker[w]->start(h, grads[j], &outs[j]));
      }
      for (int j = 0; j < kKeys; ++j) {
        auto [status, reply] = TestWorker::wait(ops[j]);
        ASSERT_TRUE(status.ok()) << status.message();
        const auto& o = outs[j];
        // One version, whole: every element moved by the same multiple of 0.5.
        ASSERT_EQ(std::count(o.begin(), o.end(), o[0]), static_cast<long>(o.size()))
            << "worker " << w << " key " << j << " round " << r;
        if (GetParam() == Mode::kSync) {
          EXPECT_EQ(reply.round, static_cast<std::uint64_t>(r));
          EXPECT_EQ(o[0], 100.f + static_cast<float>(j) - 2.f * static_cast<float>(r));
        }
      }
    }
  };
  auto other = std::async(std::launch::async, run, 1);
  run(0);
  other.get();
  for (int j = 0; j < kKeys; ++j) {
    Header h = TestWorker::slice_header(MsgType::kPull, count_of(j));
    h.key = 100 + j;
    std::vector<float> out(count_of(j), -99.f);
    auto f = worker[1]->start(h, {}, &out);
    auto [status, reply] = TestWorker::wait(f);
    ASSERT_TRUE(status.ok()) << status.message();
    const float want = 100.f + static_cast<float>(j) - 2.f * kRounds;
    EXPECT_EQ(std::count(out.begin(), out.end(), want), static_cast<long>(out.size()))
        << "key " << j << ": " << out[0] << " instead of " << want;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ServerPipelineModes,
                         ::testing::Values(Mode::kSync, Mode::kAsync, Mode::kSsp),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST_F(ServerSchedulerTest, AWorkerThatLeavesNoLongerHoldsTheRounds) {
  start(2);
  auto [status, reply] = worker[1]->control(MsgType::kUnregister);
  ASSERT_TRUE(status.ok()) << status.message();
  // The server knows before the reply came (the scheduler waits for its MEMBERSHIP_ACK): worker
  // 0 rounds alone now, and worker 1's connection is refused what it sends.
  auto refused = worker[1]->push({3, 3, 3, 3});
  EXPECT_EQ(refused.first.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.first.message().find("no longer a live member"), std::string::npos)
      << refused.first.message();
  ASSERT_TRUE(worker[0]->push({2, 2, 2, 2}).first.ok());
  auto [weights, version] = worker[0]->pull();
  EXPECT_EQ(weights, (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(version, 1u);
  EXPECT_EQ(scheduler->wait(0ms).code(), ErrorCode::kTimeout) << "the job goes on";
}

TEST_F(ServerSchedulerTest, ALostWorkerStopsTheJobNamingIt) {
  start(2);
  worker[1]->stop();  // its connections close without an UNREGISTER
  const Status ended = scheduler->wait(10s);
  EXPECT_EQ(ended.code(), ErrorCode::kPeerFailed) << ended.message();
  EXPECT_NE(ended.message().find("worker 1"), std::string::npos) << ended.message();
  EXPECT_NE(ended.message().find("lost"), std::string::npos) << ended.message();
  auto shutdown = server->wait_shutdown(10s);
  ASSERT_TRUE(shutdown.has_value()) << "the server got no SHUTDOWN";
  EXPECT_EQ(*shutdown, ended.message());
}

TEST_F(ServerSchedulerTest, BadMessagesAreRefusedAndChangeNothing) {
  start(1);
  auto expect_refused = [&](const Answer& a, ErrorCode code, const std::string& text) {
    EXPECT_EQ(a.first.code(), code) << a.first.message();
    EXPECT_NE(a.first.message().find(text), std::string::npos) << a.first.message();
  };
  // Refused at placement: the server replies ERROR and closes the connection (the close may
  // overtake the ERROR); the worker connects again each time.
  auto expect_dropped = [&](const Answer& a, ErrorCode code, const std::string& text) {
    EXPECT_FALSE(a.first.ok()) << "accepted: " << text;
    if (a.first.code() != ErrorCode::kConnectionClosed) expect_refused(a, code, text);
    worker[0]->connect_server(server->address);
  };
  expect_dropped(worker[0]->push({1, 1, 1}, 0.f, 3), ErrorCode::kInvalidArgument, "wrong length");
  expect_dropped(worker[0]->push({1, 1, 1, 1}, 0.f, 4, kKey + 1), ErrorCode::kNotFound,
                 "unknown key 8");
  expect_dropped(worker[0]->push({1, 1, 1, 1}, -1.f), ErrorCode::kInvalidArgument,
                 "learning rate -1");
  // A second INIT of the same key as another shape.
  Header init = TestWorker::slice_header(MsgType::kInit, 3);
  init.dtype = WireType::kF32;
  const std::vector<float> three = {9, 9, 9};
  auto f = worker[0]->start(init, three);
  expect_refused(TestWorker::wait(f), ErrorCode::kInvalidArgument, "but it exists as");
  auto [weights, version] = worker[0]->pull();
  EXPECT_EQ(weights, kInit) << "a refused message changed the weights";
  EXPECT_EQ(version, 0u);
  // The server still works: one good round.
  ASSERT_TRUE(worker[0]->push({2, 2, 2, 2}).first.ok());
  auto [after, v1] = worker[0]->pull();
  EXPECT_EQ(after, (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(v1, 1u);
  // The scheduler: a second REGISTER on one connection, it closes that connection, so last.
  Header reg;
  reg.type = MsgType::kRegister;
  reg.set_role(Role::kWorker);
  expect_refused(worker[0]->wait_call(worker[0]->raw.scheduler, reg), ErrorCode::kProtocol,
                 "REGISTER twice");
}

// OPTIMIZER_STATE of part `part` (1: momentum, 2: Adam's exp_avg_sq): the answer, and the part.
std::pair<Answer, std::vector<float>> read_state(TestWorker& w, std::uint32_t part) {
  Header h = TestWorker::slice_header(MsgType::kOptimizerState);
  h.set_part(part);
  std::vector<float> out(kInit.size(), -99.f);
  auto f = w.start(h, {}, &out);
  Answer a = TestWorker::wait(f);
  return {a, out};
}

Answer store_state(TestWorker& w, std::uint32_t part, const std::vector<float>& values) {
  Header h = TestWorker::slice_header(MsgType::kSetOptimizerState);
  h.set_part(part);
  auto f = w.start(h, values);
  return TestWorker::wait(f);
}

// The optimizer state read and stored through the wire (psrt.torch's state_dict() in server
// mode): SGD's momentum after a round, a stored one that the next round continues from, and a
// store refused while a gradient of the next round is queued or for a part SGD does not have.
TEST_F(ServerSchedulerTest, OptimizerStateIsReadAndStoredBetweenRounds) {
  configure = [](ServerConfig& c) { c.sgd.momentum = 0.5f; };
  start(2);
  auto [none, zeros] = read_state(*worker[0], 1);
  ASSERT_TRUE(none.first.ok()) << none.first.message();
  EXPECT_EQ(none.second.state_kind(), static_cast<std::uint32_t>(StateKind::kNone));
  EXPECT_EQ(zeros, (std::vector<float>{0, 0, 0, 0}));
  ASSERT_TRUE(worker[0]->push({1, 1, 1, 1}).first.ok());
  ASSERT_TRUE(worker[1]->push({3, 3, 3, 3}).first.ok());
  EXPECT_EQ(worker[0]->pull().second, 1u);
  // torch's first SGD step: buf = mean(g) = 2; w = w - 0.5 * 2.
  auto [read, momentum] = read_state(*worker[1], 1);
  ASSERT_TRUE(read.first.ok()) << read.first.message();
  EXPECT_EQ(read.second.state_kind(), static_cast<std::uint32_t>(StateKind::kMomentum));
  EXPECT_EQ(read.second.round, 1u);
  EXPECT_EQ(momentum, (std::vector<float>{2, 2, 2, 2}));
  auto [second, unused] = read_state(*worker[1], 2);
  ASSERT_TRUE(second.first.ok());
  EXPECT_EQ(unused, (std::vector<float>{0, 0, 0, 0}));

  ASSERT_TRUE(store_state(*worker[0], 1, {1, 1, 1, 1}).first.ok());
  const Answer sgd_part2 = store_state(*worker[0], 2, {1, 1, 1, 1});
  EXPECT_EQ(sgd_part2.first.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(sgd_part2.first.message().find("the job's optimizer is SGD, which keeps only a "
                                           "momentum buffer"),
            std::string::npos)
      << sgd_part2.first.message();
  ASSERT_TRUE(worker[0]->push({2, 2, 2, 2}).first.ok());
  const Answer queued = store_state(*worker[1], 1, {7, 7, 7, 7});
  EXPECT_EQ(queued.first.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(queued.first.message().find("key 7 slice 0 has gradients queued or an update "
                                        "running: load the optimizer state between rounds"),
            std::string::npos)
      << queued.first.message();
  ASSERT_TRUE(worker[1]->push({2, 2, 2, 2}).first.ok());
  // From the stored buffer: buf = 0.5 * 1 + 2 = 2.5; w = {0, 1, 2, 3} - 0.5 * 2.5.
  auto [weights, version] = worker[0]->pull();
  EXPECT_EQ(version, 2u);
  EXPECT_EQ(weights, (std::vector<float>{-1.25f, -0.25f, 0.75f, 1.75f}));
  EXPECT_EQ(read_state(*worker[0], 1).second, (std::vector<float>{2.5f, 2.5f, 2.5f, 2.5f}));
}

}  // namespace
}  // namespace psrt::ps

namespace psrt::ps {
namespace {

// INIT as an attacker holding the secret sends it (issue 30, item 2; label security): past the
// worker's quotas, and from a connection whose rank is no longer its registration's.
class InitSecurity : public ServerSchedulerTest {
 protected:
  // An INIT of `key` (4 values, one slice) as the shard map has it, LOCATEd first; `located`
  // false: sent without a LOCATE, as an attacker may.
  Answer init_key(TestWorker& w, std::uint64_t key, bool located = true) {
    if (located) w.locate(key, kInit.size());
    Header h = TestWorker::slice_header(MsgType::kInit);
    h.key = key;
    auto f = w.start(h, kInit);
    return TestWorker::wait(f);
  }
};

TEST_F(InitSecurity, InitsPastTheWorkersKeyQuotaAreRefused) {
  configure = [](ServerConfig& c) { c.max_keys_per_worker = 3; };
  start(1);  // key kKey: the first of three
  EXPECT_TRUE(init_key(*worker[0], 100).first.ok());
  EXPECT_TRUE(init_key(*worker[0], 101).first.ok());
  EXPECT_TRUE(init_key(*worker[0], kKey).first.ok()) << "a key it stored already is no new key";
  const auto [status, reply] = init_key(*worker[0], 102);
  EXPECT_FALSE(status.ok()) << "a fourth key was stored";
  EXPECT_NE(status.message().find("PSRT_MAX_KEYS_PER_WORKER=3"), std::string::npos)
      << status.message();
  EXPECT_FALSE(server->server.held(102, 0)) << "the refused key is not held";
}

TEST_F(InitSecurity, AnInitFromARankThatLeftIsRefused) {
  start(2);
  // Worker 1 unregisters; its connection to the server stays open.
  Header bye;
  bye.type = MsgType::kUnregister;
  worker[1]->handler.requests.call(*worker[1]->raw.scheduler, bye, {}, "UNREGISTER", 10s);
  const auto [status, reply] = init_key(*worker[1], 200, /*located=*/false);
  EXPECT_FALSE(status.ok()) << "a worker that left stored a key";
  EXPECT_NE(status.message().find("no longer a live member"), std::string::npos)
      << status.message();
  EXPECT_FALSE(server->server.held(200, 0));
}

// The INIT obeys the shard map's placement, not only its cut: a key no LOCATE placed is stored
// nowhere, and a slice is stored only on the server the map names (no second, divergent copy).
TEST_F(InitSecurity, AnInitOfAKeyNeverLocatedIsRefused) {
  start(1);
  const auto [status, reply] = init_key(*worker[0], 300, /*located=*/false);
  EXPECT_EQ(status.code(), ErrorCode::kInvalidArgument) << status.message();
  EXPECT_NE(status.message().find("INIT of key 300 slice 0 as [0, +4) of 4: the shard map has no "
                                  "such slice (the key was never located"),
            std::string::npos)
      << status.message();
  EXPECT_FALSE(server->server.held(300, 0)) << "a key never located was stored";
  EXPECT_FALSE(reply.reroute()) << "a refusal a worker would re-send elsewhere";
  // Once located, the same INIT is stored; a later one of the same slice asks nothing.
  EXPECT_TRUE(init_key(*worker[0], 300).first.ok());
  EXPECT_TRUE(server->server.held(300, 0));
  const auto [again, again_reply] = init_key(*worker[0], 300, /*located=*/false);
  EXPECT_TRUE(again.ok()) << again.message();
  EXPECT_FALSE(again_reply.stored());
}

TEST_F(InitSecurity, AnInitOnAServerTheMapDoesNotNameIsRefused) {
  num_servers = 2;
  start(1);  // key kKey: on server 0, the least loaded (lowest rank on ties)
  const auto slices = worker[0]->locate(400, kInit.size());
  ASSERT_EQ(slices.size(), 1u);
  ASSERT_EQ(slices[0].server, 1u) << "the second key goes to the server holding nothing";
  // The attacker INITs key 400 on server 0, which the map does not name, then kKey's slice on
  // server 1: both refused, naming the server the map places each on.
  const auto [wrong, r0] = init_key(*worker[0], 400);
  EXPECT_EQ(wrong.code(), ErrorCode::kInvalidArgument) << wrong.message();
  EXPECT_NE(wrong.message().find("INIT of key 400 slice 0 on server 0, but the shard map places "
                                 "that slice on server 1"),
            std::string::npos)
      << wrong.message();
  // No server was lost: a refusal that stands, not one a worker re-sends where a ROUTE points.
  EXPECT_FALSE(r0.reroute());
  EXPECT_FALSE(server->server.held(400, 0)) << "a divergent copy was stored on server 0";
  auto& server1 = *other_servers.at(0);
  TestWorker& w = *worker[0];
  w.connect_server(server1.address, 1);
  const std::vector<float> other = {9, 9, 9, 9};
  auto f = w.start(TestWorker::slice_header(MsgType::kInit), other);
  const auto [copy, r1] = TestWorker::wait(f);
  EXPECT_NE(copy.message().find("places that slice on server 0"), std::string::npos)
      << copy.message();
  EXPECT_FALSE(r1.reroute());
  EXPECT_FALSE(server1.server.held(kKey, 0)) << "a second copy of key 7 was stored on server 1";
  // Where the map names it, key 400 is stored.
  EXPECT_TRUE(init_key(w, 400).first.ok());
  EXPECT_TRUE(server1.server.held(400, 0));
}

// A server that lost the scheduler stores no new slice (nothing can confirm its placement); without
// replicas no ROUTE follows, so the refusal stands (reroute() false). (A server that never had a
// scheduler is unreachable to a worker: its credential comes with the scheduler's MEMBERSHIP.)
TEST_F(InitSecurity, AnInitAfterTheServerLostTheSchedulerIsRefused) {
  start(1);
  ASSERT_TRUE(scheduler->close_server_for_test(0));
  const auto stopped = server->wait_shutdown(10s);
  ASSERT_TRUE(stopped) << "the server kept the scheduler";
  EXPECT_NE(stopped->find("lost the scheduler"), std::string::npos) << *stopped;
  const auto [status, reply] = init_key(*worker[0], 500, /*located=*/false);
  EXPECT_EQ(status.code(), ErrorCode::kInvalidArgument) << status.message();
  EXPECT_NE(status.message().find("refused INIT: INIT of key 500 slice 0: this server lost the "
                                  "scheduler, which alone confirms a slice's placement"),
            std::string::npos)
      << status.message();
  EXPECT_EQ(status.message().find("re-sends"), std::string::npos) << status.message();
  EXPECT_FALSE(reply.reroute()) << "a refusal a worker would re-send elsewhere";
  EXPECT_FALSE(server->server.held(500, 0));
}

// The checkpoint MANIFEST is written off the scheduler's progress thread, in batches (issue 30):
// a LOCATE is answered while a MANIFEST write is stalled (its temporary file is a FIFO nobody
// reads, as a hung disk would be), and a write that fails stops the job naming the MANIFEST.
TEST_F(InitSecurity, ALocateIsAnsweredWhileTheManifestWriteIsStalled) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("psrt_manifest_" + std::to_string(::getpid())))
          .string();
  std::filesystem::remove_all(dir);
  configure_scheduler = [&](SchedulerConfig& c) { c.checkpoint_dir = dir; };
  start(1);
  // A barrier is answered once the keys placed before it (kKey) are in the MANIFEST.
  ASSERT_TRUE(worker[0]->control(MsgType::kBarrier).first.ok());
  ASSERT_TRUE(std::filesystem::exists(dir + "/MANIFEST"));
  const std::string held = dir + "/MANIFEST.tmp";
  ASSERT_EQ(::mkfifo(held.c_str(), 0600), 0) << held;
  struct Release {  // lets the stalled write go on (and fail), whatever the test found
    std::string fifo, dir;
    int fd = -1;
    void release() {
      if (fd < 0) fd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    }
    ~Release() {
      release();
      if (fd >= 0) ::close(fd);
      std::filesystem::remove_all(dir);
    }
  } write{held, dir};
  auto located = std::async(std::launch::async, [&] {
    for (std::uint64_t key = 1000; key < 1100; ++key)
      worker[0]->locate(key, 4);
  });
  EXPECT_EQ(located.wait_for(5s), std::future_status::ready)
      << "LOCATE waited for the MANIFEST write: it runs on the scheduler's progress thread";
  write.release();
  located.wait();
  // The stalled write fails at fsync (a FIFO refuses it): the job stops, naming the MANIFEST.
  const Status ended = scheduler->wait(10s);
  EXPECT_NE(ended.message().find("cannot write the checkpoint MANIFEST"), std::string::npos)
      << ended.message();
  worker.clear();
  server.reset();
  scheduler.reset();
}

// Pushes still arriving count against a worker's max_queued (issue 30): each holds its payload's
// memory from the moment it was placed. A relay leaves one push half-sent.
TEST_F(InitSecurity, PushesStillArrivingCountAgainstMaxQueued) {
  configure = [](ServerConfig& c) { c.max_queued = 2; };
  start(2);  // sync: worker 0's pushes wait for worker 1's
  TestWorker& w = *worker[0];
  test::Relay relay(server->address);
  w.connect_server(relay.address());
  relay.hold_after(transport::tcp::kFramePrefixBytes + kHeaderBytes + 8);  // half of 16 bytes
  auto arriving = w.start(TestWorker::slice_header(MsgType::kPush), std::vector<float>{1, 1, 1, 1});
  ASSERT_TRUE(relay.wait_held(10s));
  std::this_thread::sleep_for(200ms);  // the server has placed what arrived
  w.connect_server(server->address);
  EXPECT_TRUE(w.push({1, 1, 1, 1}).first.ok()) << "queued 0, arriving 1: within 2";
  const auto [refused, reply] = w.push({1, 1, 1, 1});
  EXPECT_EQ(refused.code(), ErrorCode::kInvalidArgument) << refused.message();
  EXPECT_NE(refused.message().find("worker 0 has 2 gradients of key 7 slice 0 waiting or arriving"),
            std::string::npos)
      << refused.message();
  relay.release();
  EXPECT_TRUE(TestWorker::wait(arriving).first.ok()) << "the push held back landed";
}

// Many authenticated connections of one rank (each could pin a half-sent 4 MiB push) are
// capped: Admission::max_per_rank.
TEST_F(InitSecurity, OneRankHoldsAtMostFourConnectionsToAServer) {
  start(1);
  std::vector<std::shared_ptr<Peer>> extra;
  Status refused;
  for (int i = 0; i < 8 && refused.ok(); ++i) {
    try {
      extra.push_back(worker[0]->raw.endpoint->connect(*worker[0]->raw.transport, server->address,
                                                       worker[0]->rank, Role::kServer, 0, 10s));
    } catch (const Error& e) {
      refused = Status(e);
    }
  }
  EXPECT_EQ(extra.size(), 3u) << "connections beside the first one the server accepted";
  EXPECT_NE(refused.message().find("already holds 4 authenticated connections"), std::string::npos)
      << refused.message();
}

}  // namespace
}  // namespace psrt::ps
