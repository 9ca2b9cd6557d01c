// Server replicas (ps/replica_link.h) in one process: a scheduler with --replicas 2, two
// servers over real TCP on 127.0.0.1 and two psrt::Workers. After every round a worker has seen,
// each slice's copy on its backup equals the slice on its primary bit for bit (weights, momentum
// and version), in sync and async mode, with momentum and weight decay on.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ps/scheduler.h"
#include "psrt/psrt.h"
#include "replica_server.h"
#include "transport/factory.h"

namespace psrt::ps {
namespace {

using namespace std::chrono_literals;

constexpr const char* kSecret = "replica-unit-test-secret-0123456789abcdef";
// Keys of these sizes, cut into slices of 1024 values: slices on both servers.
const std::vector<std::size_t> kSizes = {5, 1000, 3000};

class ReplicaTest : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    const SchedulerConfig sc = replica_job_config(kSecret, 2, 2, 1024);
    scheduler = std::make_unique<Scheduler>(sc);
    ServerConfig config;
    config.mode = GetParam();
    servers = replica_servers(sc, config);
    for (auto& s : servers)
      s->start(scheduler->address());
  }
  void TearDown() override {
    servers.clear();
    scheduler.reset();
  }

  // One worker's whole run: init, the optimizer, `rounds` push_pulls of every key with
  // pseudo-random gradients. Returns the weights it pulled last, by key.
  std::vector<std::vector<float>> run_worker(int rounds) {
    WorkerOptions o;
    o.scheduler = scheduler->address();
    o.transport = "tcp";
    o.secret = kSecret;
    o.op_timeout = 30s;
    Worker w = Worker::join(o);
    w.set_optimizer({.lr = 0.01f, .momentum = 0.9f, .weight_decay = 1e-4f});
    std::vector<std::vector<float>> weights, grads;
    for (std::size_t k = 0; k < kSizes.size(); ++k) {
      std::vector<float> init(kSizes[k]);
      for (std::size_t i = 0; i < init.size(); ++i)
        init[i] = 0.1f * static_cast<float>(i % 13);
      w.init(k, init);
      weights.emplace_back(kSizes[k]);
      grads.emplace_back(kSizes[k]);
    }
    std::mt19937 rng(1234 + static_cast<unsigned>(w.rank()));
    std::normal_distribution<float> normal(0.f, 1.f);
    for (int t = 0; t < rounds; ++t) {
      std::vector<Handle> hs;
      for (std::size_t k = 0; k < kSizes.size(); ++k) {
        for (auto& g : grads[k])
          g = normal(rng);
        hs.push_back(w.push_pull(k, grads[k], weights[k]));
      }
      for (auto& h : hs)
        h.wait();
    }
    return weights;
  }

  // Every slice: held by exactly one server, copied on the other bit for bit.
  void expect_backups_equal_primaries(std::uint64_t min_version) {
    for (std::size_t k = 0; k < kSizes.size(); ++k) {
      const auto slices = (kSizes[k] + 1023) / 1024;
      for (std::uint32_t i = 0; i < slices; ++i) {
        int primaries = 0;
        for (std::size_t p = 0; p < 2; ++p) {
          auto held = servers[p]->server.held(k, i);
          if (!held) continue;
          ++primaries;
          auto copy = servers[1 - p]->server.copy(k, i);
          ASSERT_TRUE(copy) << "key " << k << " slice " << i << " has no copy on server " << 1 - p;
          EXPECT_GE(held->version, min_version) << "key " << k << " slice " << i;
          EXPECT_EQ(copy->version, held->version) << "key " << k << " slice " << i;
          ASSERT_FALSE(held->momentum.empty()) << "momentum 0.9 keeps a buffer";
          ASSERT_EQ(copy->weights.size(), held->weights.size());
          ASSERT_EQ(copy->momentum.size(), held->momentum.size());
          EXPECT_EQ(std::memcmp(copy->weights.data(), held->weights.data(),
                                held->weights.size() * sizeof(float)),
                    0)
              << "key " << k << " slice " << i << ": the backup's weights differ";
          EXPECT_EQ(std::memcmp(copy->momentum.data(), held->momentum.data(),
                                held->momentum.size() * sizeof(float)),
                    0)
              << "key " << k << " slice " << i << ": the backup's momentum differs";
        }
        EXPECT_EQ(primaries, 1) << "key " << k << " slice " << i;
      }
    }
  }

  std::unique_ptr<Scheduler> scheduler;
  std::vector<std::unique_ptr<ReplicaServer>> servers;
};

TEST_P(ReplicaTest, BackupsEqualPrimariesBitForBitAfterEveryRound) {
  constexpr int kRounds = 20;
  auto a = std::async(std::launch::async, [&] { return run_worker(kRounds); });
  auto b = std::async(std::launch::async, [&] { return run_worker(kRounds); });
  ASSERT_EQ(a.wait_for(60s), std::future_status::ready);
  ASSERT_EQ(b.wait_for(60s), std::future_status::ready);
  const auto wa = a.get(), wb = b.get();
  // Sync: every slice took 20 rounds; async: 40 single-gradient updates. The last pull was
  // answered only once its version was on the backup: no wait before comparing.
  expect_backups_equal_primaries(GetParam() == Mode::kSync ? kRounds : 2 * kRounds);
  if (GetParam() == Mode::kSync) {
    EXPECT_EQ(wa, wb) << "sync workers see the same weights";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ReplicaTest, ::testing::Values(Mode::kSync, Mode::kAsync),
                         [](const auto& info) {
                           return info.param == Mode::kSync ? std::string("Sync")
                                                            : std::string("Async");
                         });

}  // namespace
}  // namespace psrt::ps
