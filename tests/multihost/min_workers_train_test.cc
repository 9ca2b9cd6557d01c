// psrun --min-workers with pstrain across hosts (network namespaces, netns_hosts.h, through each
// host's sshd): servers on host A, three pstrain workers on B, C and D with job checkpoints every
// 5 steps. D's link goes down once a checkpoint round is complete; the restart goes on with the
// workers of B and C, which resume from the latest complete round R and train the rest of R's
// epoch on the samples the three had not trained yet, then every later epoch cut for two. The
// samples of every epoch, rebuilt from the metrics lines the job kept (those of the first run up
// to R, all of the second), are each trained once: all 480 in every epoch but R's, whose new cut
// drops less than a batch per part.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#define PSRT_SCRATCH_PREFIX "psrt_min_workers_train_test_"
#include "pstrain/data/shard.h"
#include "tests/integration/job_runner.h"
#include "tests/multihost/netns_hosts.h"

namespace psrt::test {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
namespace fs = std::filesystem;

constexpr std::int64_t kSamples = 480, kBatch = 8, kEpochs = 3;
constexpr std::int64_t kPer3 = kSamples / 3 / kBatch, kPer2 = kSamples / 2 / kBatch;  // 20, 30

std::vector<json> steps_of(const fs::path& p) {
  std::vector<json> v;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) {
    auto j = json::parse(line);
    if (j.contains("loss")) v.push_back(j);
  }
  return v;
}

TEST(MinWorkersTrain, PstrainGoesOnWithTheHostsThatRemainAndTrainsEachSampleOnce) {
  SKIP_WITHOUT_HOSTS();
  Hosts hosts(4, {.sshd = true});
  const fs::path dir = scratch("train");
  fs::create_directories(dir);
  const fs::path ckpt = dir / "ckpt";
  ProcessGroup job(
      "exec " + hosts.exec_prefix(0) +
          " env PSRT_PEER_TIMEOUT_MS=3000 " PSRUN_PATH " --launcher ssh --ssh-args '" +
          hosts.ssh_args_string() +
          "' --transport tcp -n 3 -s 1 --checkpoint-every 5 --checkpoint-dir " + ckpt.string() +
          " --max-restarts 1 --min-workers 2 -H " + hosts.address(1) + "," + hosts.address(2) +
          "," + hosts.address(3) + " --server-hosts " + hosts.address(0) +
          " -- " PSTRAIN_PATH
          " --model lenet --dataset synthetic --synthetic-size 480 --batch-size 8 --epochs 3"
          " --threads 1 --lr-schedule none --log-every 1000 --slow-rank 0 --slow-factor 6"
          " --metrics " +
          (dir / "m{rank}.jsonl").string(),
      dir / "job.txt");
  const fs::path first_round = ckpt / "r000000000005" / "JOB";  // ps/checkpoint.cc round_dir
  const auto end = std::chrono::steady_clock::now() + 120s;
  while (!fs::exists(first_round) && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(fs::exists(first_round)) << job.out();
  hosts.link_down(3);
  ASSERT_EQ(job.wait(240s), 0) << job.out();
  const std::string out = job.out();
  EXPECT_EQ(count(out, "psrun: the restart runs 2 workers, not 3 (--min-workers 2)"), 1) << out;
  const std::string tag = "resumed from job checkpoint round ";
  const auto at = out.find(tag);
  ASSERT_NE(at, std::string::npos) << out;
  const std::int64_t resumed = std::stoll(out.substr(at + tag.size()));
  ASSERT_GE(resumed, 5) << out;
  ASSERT_EQ(resumed % 5, 0) << out;
  const std::int64_t cut_epoch = resumed / kPer3, done = resumed % kPer3;
  // The rest of R's epoch: 3 parts of 160 samples, each with 8 x done trained.
  const std::int64_t rest_steps = done == 0 ? 0 : (3 * (160 - kBatch * done) / 2) / kBatch;
  if (done > 0) {
    EXPECT_EQ(count(out, "epoch " + std::to_string(cut_epoch) + ": the " +
                             std::to_string(3 * (160 - kBatch * done)) +
                             " samples its 3 workers had not trained yet are cut in 2 parts"),
              1)
        << out;
  }
  const std::int64_t last = done == 0 ? resumed + (kEpochs - cut_epoch) * kPer2
                                      : resumed + rest_steps + (kEpochs - cut_epoch - 1) * kPer2;
  std::printf("resumed from round %lld (step %lld of epoch %lld) with 2 workers, last step %lld\n",
              static_cast<long long>(resumed), static_cast<long long>(done),
              static_cast<long long>(cut_epoch), static_cast<long long>(last));
  const pstrain::EpochPool rest = pstrain::remaining_pool({}, kSamples, 3, done, kBatch);

  std::map<std::int64_t, std::vector<std::int64_t>> samples;  // epoch -> the samples trained
  for (int rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE("worker " + std::to_string(rank));
    const auto steps = steps_of(dir / ("m" + std::to_string(rank) + ".jsonl"));
    ASSERT_FALSE(steps.empty());
    if (rank < 2) {
      EXPECT_EQ(steps.back()["step"].get<std::int64_t>(), last) << out;
    }
    for (const auto& s : steps) {
      const int world = s["world"].get<int>();
      const auto step = s["step"].get<std::int64_t>(), e = s["epoch"].get<std::int64_t>();
      if (world == 3 && step > resumed) continue;  // trained after R: lost with the restart
      EXPECT_TRUE(world == 3 || (world == 2 && rank < 2 && step > resumed)) << s.dump();
      EXPECT_EQ(s["part"].get<int>(), rank) << s.dump();
      const bool cut_again = world == 2 && e == cut_epoch;
      const auto shard =
          pstrain::pool_shard(kSamples, cut_again ? rest : pstrain::EpochPool{}, rank, world, 1, e);
      const auto b = s["batch"].get<std::int64_t>();
      for (std::int64_t i = b * kBatch; i < (b + 1) * kBatch; ++i)
        samples[e].push_back(shard[i].item<std::int64_t>());
    }
  }
  ASSERT_EQ(static_cast<std::int64_t>(samples.size()), kEpochs);
  for (auto& [e, seen] : samples) {
    SCOPED_TRACE("epoch " + std::to_string(e));
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end()) << "a sample twice";
    const std::int64_t expected =
        e == cut_epoch && done > 0 ? 3 * kBatch * done + 2 * kBatch * rest_steps : kSamples;
    EXPECT_EQ(static_cast<std::int64_t>(seen.size()), expected);
  }
}

}  // namespace
}  // namespace psrt::test
