// An INIT that reaches a server the scheduler declared lost while its process still runs
// (psrun --replicas 2, issue 30): the scheduler's PLACEMENT_REPLY says the slice is served by the
// lost server's backup now, so the lost server refuses the INIT with reroute(), and the worker
// re-sends it where the scheduler's ROUTE points, as every request in flight to a lost server.
// The race is driven, not hoped for: the scheduler loses server 1 while its connection stays
// open (Scheduler::lose_server_for_test), and every REPLICA_SET of that loss (so the ROUTE, sent
// once all are acknowledged) is held until server 1 has answered the worker's INIT. The same
// holds where the scheduler closed server 1's connection (Scheduler::close_server_for_test, as a
// missed heartbeat does), with the INIT parked at server 1 or arriving after.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ps/scheduler.h"
#include "psrt/psrt.h"
#include "replica_server.h"

namespace psrt::ps {
namespace {

using namespace std::chrono_literals;

constexpr const char* kSecret = "replica-init-route-test-secret-0123456789ab";
constexpr std::size_t kSlice = 1024;
constexpr Key kKey = 7;

// Releases the held REPLICA_SETs (so the ROUTE) once, also when an assertion ends a test early.
struct Release {
  std::promise<void>& p;
  bool done = false;
  void operator()() {
    if (!std::exchange(done, true)) p.set_value();
  }
  ~Release() { (*this)(); }
};

// Every server holds each REPLICA_SET of server 1's loss until `release` (bounded: a failing
// test does not hang), so no ROUTE leaves the scheduler before it.
void hold_routes(std::vector<std::unique_ptr<ReplicaServer>>& servers,
                 const std::shared_future<void>& release) {
  for (auto& s : servers)
    s->server.before_replicating = [release](std::uint32_t lost) {
      if (lost == 1) (void)release.wait_for(30s);
    };
}

WorkerOptions worker_options(const Scheduler& scheduler) {
  WorkerOptions o;
  o.scheduler = scheduler.address();
  o.transport = "tcp";
  o.secret = kSecret;
  o.op_timeout = 30s;
  return o;
}

// Key kKey's three slices of ones (slice 1 on server 2, which took over server 1's slices),
// after 4 SGD rounds of one worker: every round subtracts lr * g = 0.5 * 0.25 exactly.
void expect_sgd_rounds(Worker& w, const std::vector<std::unique_ptr<ReplicaServer>>& servers) {
  constexpr int kRounds = 4;
  const std::vector<float> grad(3 * kSlice, 0.25f);
  std::vector<float> out(grad.size(), -1.f);
  for (int t = 0; t < kRounds; ++t)
    w.push_pull(kKey, grad, out).wait();
  for (std::size_t i = 0; i < out.size(); ++i)
    ASSERT_EQ(out[i], 0.5f) << "value " << i;
  for (std::uint32_t slice = 0; slice < 3; ++slice) {
    const std::uint32_t serving = slice == 1 ? 2 : slice;
    const auto held = servers[serving]->server.held(kKey, slice);
    ASSERT_TRUE(held) << "slice " << slice << " on server " << serving;
    EXPECT_EQ(held->version, static_cast<std::uint64_t>(kRounds)) << "slice " << slice;
    EXPECT_EQ(held->weights, std::vector<float>(kSlice, 0.5f)) << "slice " << slice;
  }
}

// Server 1 refused the INIT before any ROUTE could leave the scheduler: once the ROUTE is let go
// (here), the INIT completes, on server 2 alone, and 4 SGD rounds follow.
void finish_on_the_route(std::future<void>& init, Release& release_routes, Worker& w,
                         const std::vector<std::unique_ptr<ReplicaServer>>& servers,
                         Scheduler& scheduler) {
  release_routes();
  ASSERT_EQ(init.wait_for(30s), std::future_status::ready) << "the INIT never completed";
  ASSERT_NO_THROW(init.get());
  EXPECT_FALSE(servers[1]->server.held(kKey, 1)) << "the lost server stored the slice";
  ASSERT_TRUE(servers[2]->server.held(kKey, 1)) << "the INIT never reached server 2";

  expect_sgd_rounds(w, servers);
  w.shutdown();
  EXPECT_TRUE(scheduler.wait(10s).ok());
}

TEST(ReplicaInitRoute, AnInitRefusedByALostServerIsResentToTheServerServingItsSlices) {
  // Three servers: the key's three slices go to servers 0, 1 and 2 (the least loaded, lowest
  // rank on ties); when server 1 is lost, server 2 (the next live one) takes over its slices.
  // The hooks' state first: it outlives the servers that call them.
  std::promise<void> release_promise;
  const std::shared_future<void> release = release_promise.get_future().share();
  std::promise<Header> refused_promise;
  auto refused = refused_promise.get_future();
  std::atomic<bool> answered{false};
  const SchedulerConfig sc = replica_job_config(kSecret, 3, 1, kSlice);
  Scheduler scheduler(sc);
  auto servers = replica_servers(sc);
  hold_routes(servers, release);
  servers[1]->server.after_placement = [&](const Header& reply) {
    if (reply.key == kKey && !answered.exchange(true)) refused_promise.set_value(reply);
  };
  Release release_routes{release_promise};
  for (auto& s : servers)
    s->start(scheduler.address());

  Worker w = Worker::join(worker_options(scheduler));
  w.set_optimizer({.lr = 0.5f});

  ASSERT_TRUE(scheduler.lose_server_for_test(1));
  const std::vector<float> value(3 * kSlice, 1.f);
  auto init = std::async(std::launch::async, [&] { w.init(kKey, value); });
  ASSERT_EQ(refused.wait_for(30s), std::future_status::ready)
      << "server 1 never asked the scheduler where slice 1 goes";
  const Header reply = refused.get();
  EXPECT_EQ(reply.asking_server(), 1u);
  EXPECT_EQ(reply.placed_on(), 1u) << "the shard map placed slice 1 on server 1";
  EXPECT_EQ(reply.served_by(), 2u) << "server 2 serves server 1's slices since the loss";
  finish_on_the_route(init, release_routes, w, servers, scheduler);
}

// The loss as production takes it (a missed heartbeat): the scheduler closes server 1's
// connection while an INIT of slice 1 is parked at server 1, waiting for the PLACEMENT_REPLY
// (dropped here, so that it stays parked). Server 1 refuses it, kPeerFailed with reroute(),
// and the worker re-sends it where the ROUTE points.
TEST(ReplicaInitRoute, AnInitParkedWhenTheSchedulerClosesTheServerIsResentOnTheRoute) {
  std::promise<void> release_promise;
  const std::shared_future<void> release = release_promise.get_future().share();
  std::promise<void> asked_promise;
  auto asked = asked_promise.get_future();
  std::promise<Header> refused_promise;
  auto refused = refused_promise.get_future();
  std::atomic<bool> dropped{false}, answered{false};
  const SchedulerConfig sc = replica_job_config(kSecret, 3, 1, kSlice);
  Scheduler scheduler(sc);
  scheduler.drop_placement_reply = [&](std::uint32_t server, const Header& h) {
    if (server != 1 || h.key != kKey || h.slice() != 1) return false;
    if (!dropped.exchange(true)) asked_promise.set_value();
    return true;
  };
  auto servers = replica_servers(sc);
  hold_routes(servers, release);
  servers[1]->server.after_init_refused = [&](const Header& init, const Header& error) {
    if (init.key == kKey && !answered.exchange(true)) refused_promise.set_value(error);
  };
  Release release_routes{release_promise};
  for (auto& s : servers)
    s->start(scheduler.address());

  Worker w = Worker::join(worker_options(scheduler));
  w.set_optimizer({.lr = 0.5f});
  const std::vector<float> value(3 * kSlice, 1.f);
  auto init = std::async(std::launch::async, [&] { w.init(kKey, value); });
  ASSERT_EQ(asked.wait_for(30s), std::future_status::ready)
      << "server 1 never asked the scheduler where slice 1 goes";
  ASSERT_TRUE(scheduler.close_server_for_test(1));
  ASSERT_EQ(refused.wait_for(30s), std::future_status::ready)
      << "server 1 never answered the parked INIT";
  const Header error = refused.get();
  EXPECT_EQ(error.error_code(), ErrorCode::kPeerFailed);
  EXPECT_TRUE(error.reroute()) << "a refusal the worker does not re-send";
  EXPECT_EQ(init.wait_for(0s), std::future_status::timeout) << "the INIT ended on the refusal";
  finish_on_the_route(init, release_routes, w, servers, scheduler);
}

// An INIT that reaches server 1 after the scheduler closed its connection (the server's process
// runs on): server 1 can no longer ask where the slice goes, refuses it with reroute(), and the
// worker re-sends it where the ROUTE points.
TEST(ReplicaInitRoute, AnInitReachingAServerThatLostTheSchedulerIsResentOnTheRoute) {
  std::promise<void> release_promise;
  const std::shared_future<void> release = release_promise.get_future().share();
  std::promise<void> lost_promise;
  auto lost = lost_promise.get_future();
  std::promise<Header> refused_promise;
  auto refused = refused_promise.get_future();
  std::atomic<bool> stopped{false}, answered{false};
  const SchedulerConfig sc = replica_job_config(kSecret, 3, 1, kSlice);
  Scheduler scheduler(sc);
  auto servers = replica_servers(sc);
  hold_routes(servers, release);
  // Server 1 stops its part of the job on losing the scheduler, after refusing what waited.
  servers[1]->on_shutdown = [&](const Header&) {
    if (!stopped.exchange(true)) lost_promise.set_value();
  };
  servers[1]->server.after_init_refused = [&](const Header& init, const Header& error) {
    if (init.key == kKey && !answered.exchange(true)) refused_promise.set_value(error);
  };
  Release release_routes{release_promise};
  for (auto& s : servers)
    s->start(scheduler.address());

  Worker w = Worker::join(worker_options(scheduler));
  w.set_optimizer({.lr = 0.5f});
  ASSERT_TRUE(scheduler.close_server_for_test(1));
  ASSERT_EQ(lost.wait_for(30s), std::future_status::ready) << "server 1 kept the scheduler";
  const std::vector<float> value(3 * kSlice, 1.f);
  auto init = std::async(std::launch::async, [&] { w.init(kKey, value); });
  ASSERT_EQ(refused.wait_for(30s), std::future_status::ready) << "server 1 never answered the INIT";
  const Header error = refused.get();
  EXPECT_EQ(error.error_code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(error.reroute()) << "a refusal the worker does not re-send";
  EXPECT_EQ(init.wait_for(0s), std::future_status::timeout) << "the INIT ended on the refusal";
  finish_on_the_route(init, release_routes, w, servers, scheduler);
}

}  // namespace
}  // namespace psrt::ps
