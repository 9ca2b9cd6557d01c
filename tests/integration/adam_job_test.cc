// AdamW on the servers in whole jobs (psrun, ps_worker adam): every round's weights equal the
// fused kernel replayed by the workers, bit for bit, through a checkpoint resume and a replica
// failover; and a checkpoint written by another optimizer refuses to resume, by name.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>

#define PSRT_SCRATCH_PREFIX "psrt_adam_job_test_"
#include "tests/integration/job_runner.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using JobRun = psrt::test::Run;
using psrt::test::scratch;

const std::string kAdamW =
    " --optimizer adamw --lr 0.01 --betas 0.9,0.99 --eps 1e-6 --weight-decay 0.05 ";

JobRun job(const std::string& args, const std::string& worker_args) {
  return psrt::test::run_psrun_bounded("", args, PS_WORKER_PATH " " + worker_args, 90s);
}

std::string checkpointed(const fs::path& dir) {
  return "--transport tcp -n 2 -s 2 --partition-bytes 4096 --checkpoint-every 4 "
         "--checkpoint-dir " +
         dir.string();
}

// Killed after round 10: round 8 is the latest on disk; the rerun resumes there and every round
// 9..16 equals the kernel's replay bit for bit (moments and step count restored).
TEST(AdamJob, CheckpointResumeIsBitExact) {
  const fs::path dir = scratch("resume");
  const JobRun first = job(checkpointed(dir) + kAdamW, "adam --rounds 16 --kill-after 10");
  EXPECT_NE(first.rc, 0) << first.out;
  EXPECT_EQ(first.count("KILLING after round 10"), 1) << first.out;
  ASSERT_TRUE(fs::exists(dir / "r000000000008")) << first.out;
  const JobRun second = job(checkpointed(dir) + kAdamW, "adam --rounds 16");
  EXPECT_EQ(second.rc, 0) << second.out;
  EXPECT_EQ(second.count("RESUMED 8, 8 rounds bit for bit"), 2) << second.out;
  EXPECT_EQ(second.count("PASS adam"), 2) << second.out;

  // The same checkpoint under SGD with momentum: refused, naming the state and the optimizer.
  const JobRun sgd = job(checkpointed(dir) + " --lr 0.1 --momentum 0.9 ", "adam --rounds 20");
  EXPECT_NE(sgd.rc, 0) << sgd.out;
  EXPECT_NE(sgd.out.find("holds Adam/AdamW moments and step count after 16 updates, but the "
                         "job's optimizer is sgd: the checkpoint or replica was written by "
                         "another optimizer"),
            std::string::npos)
      << sgd.out;
}

// A checkpoint of plain SGD (no state) does not go on as AdamW.
TEST(AdamJob, AnSgdCheckpointRefusesToResumeAsAdamW) {
  const fs::path dir = scratch("sgd");
  const JobRun first = job(checkpointed(dir) + " --lr 1 ", "resume --rounds 6 --kill-after 5");
  EXPECT_NE(first.rc, 0) << first.out;
  ASSERT_TRUE(fs::exists(dir / "r000000000004")) << first.out;
  const JobRun adam = job(checkpointed(dir) + kAdamW, "adam --rounds 8");
  EXPECT_NE(adam.rc, 0) << adam.out;
  EXPECT_NE(adam.out.find("holds no optimizer state after 4 updates, but the job's optimizer is "
                          "adamw"),
            std::string::npos)
      << adam.out;
  EXPECT_EQ(adam.count("PASS adam"), 0) << adam.out;
}

// --replicas 2: server 1 is SIGKILLed with round 8 in flight; its backup goes on from its copy of
// the moments and step count, and every round equals the kernel's replay bit for bit.
TEST(AdamJob, ReplicaFailoverIsBitExact) {
  const JobRun r = job("--transport tcp -n 3 -s 2 --replicas 2 --partition-bytes 4096" + kAdamW,
                       "adam --rounds 20 --sizes 7,1000,4099 --kill-server 1 --kill-after 8");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("KILLING server 1"), 1) << r.out;
  EXPECT_EQ(r.count("RESUMED 0, 20 rounds bit for bit"), 3) << r.out;
  EXPECT_EQ(r.count("PASS adam"), 3) << r.out;
}

}  // namespace
