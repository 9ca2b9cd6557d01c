// An INIT that reaches a server the scheduler declared lost while its process still runs
// (psrun --replicas 2, issue 30): the scheduler's PLACEMENT_REPLY says the slice is served by the
// lost server's backup now, so the lost server refuses the INIT with reroute(), and the worker
// re-sends it where the scheduler's ROUTE points, as every request in flight to a lost server.
// The race is driven, not hoped for: the scheduler loses server 1 while its connection stays
// open (Scheduler::lose_server_for_test), and every REPLICA_SET of that loss (so the ROUTE, sent
// once all are acknowledged) is held until server 1 has answered the worker's INIT.
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
  for (auto& s : servers)
    s->server.before_replicating = [release](std::uint32_t lost) {
      if (lost == 1) (void)release.wait_for(30s);  // bounded: a failing test does not hang
    };
  servers[1]->server.after_placement = [&](const Header& reply) {
    if (reply.key == kKey && !answered.exchange(true)) refused_promise.set_value(reply);
  };
  struct Release {  // also when an assertion ends the test early
    std::promise<void>& p;
    bool done = false;
    void operator()() {
      if (!std::exchange(done, true)) p.set_value();
    }
    ~Release() { (*this)(); }
  } release_routes{release_promise};
  for (auto& s : servers)
    s->start(scheduler.address());

  WorkerOptions o;
  o.scheduler = scheduler.address();
  o.transport = "tcp";
  o.secret = kSecret;
  o.op_timeout = 30s;
  Worker w = Worker::join(o);
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
  // Server 1 answered (refused) the INIT before any ROUTE could leave the scheduler: the INIT
  // completes only once the ROUTE sent it to server 2.
  release_routes();
  ASSERT_EQ(init.wait_for(30s), std::future_status::ready) << "the INIT never completed";
  ASSERT_NO_THROW(init.get());
  EXPECT_FALSE(servers[1]->server.held(kKey, 1)) << "the lost server stored the slice";
  ASSERT_TRUE(servers[2]->server.held(kKey, 1)) << "the INIT never reached server 2";

  // SGD, one worker: every round subtracts lr * g = 0.5 * 0.25 exactly.
  constexpr int kRounds = 4;
  const std::vector<float> grad(value.size(), 0.25f);
  std::vector<float> out(value.size(), -1.f);
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
  w.shutdown();
  EXPECT_TRUE(scheduler.wait(10s).ok());
}

}  // namespace
}  // namespace psrt::ps
