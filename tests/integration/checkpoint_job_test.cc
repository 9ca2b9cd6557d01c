// Whole jobs (psrun, 2 servers, 2 ps_workers on 127.0.0.1) resumed from checkpoint directories
// an attacker or a bad disk has changed: the job falls back to the newest valid round, checks
// its weights exactly and logs which round it skipped and why; and psrun refuses a secret file
// others can read.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#define PSRT_SCRATCH_PREFIX "psrt_ckpt_job_test_"
#include "tests/integration/job_runner.h"

namespace {

namespace fs = std::filesystem;

using psrt::test::Run;
using psrt::test::scratch;

Run psrun(const std::string& args, const std::string& worker_args) {
  return psrt::test::run_psrun("", args, PS_WORKER_PATH " " + worker_args);
}

std::string job_args(const fs::path& dir) {
  return "--transport tcp -n 2 -s 2 --lr 1 --partition-bytes 4096 --checkpoint-every 2 "
         "--checkpoint-dir " +
         dir.string();
}

// A job killed after round 4: rounds 2 and 4 are on disk.
fs::path killed_job(const std::string& name) {
  auto dir = scratch(name);
  auto first = psrun(job_args(dir), "resume --rounds 8 --kill-after 4 --sizes 7,5000");
  EXPECT_NE(first.rc, 0) << first.out;
  EXPECT_EQ(first.count("KILLING after round 4"), 1) << first.out;
  EXPECT_TRUE(fs::exists(dir / "r000000000002")) << first.out;
  EXPECT_TRUE(fs::exists(dir / "r000000000004")) << first.out;
  return dir;
}

// Key 0 (7 elements, one slice) of `round`.
fs::path slice_file(const fs::path& dir, int round) {
  return dir / ("r00000000000" + std::to_string(round)) / "k0-s0.slice";
}

void expect_resumed_from_2(const fs::path& dir, const std::string& why) {
  auto second = psrun(job_args(dir), "resume --rounds 8 --sizes 7,5000");
  EXPECT_EQ(second.rc, 0) << second.out;
  EXPECT_EQ(second.count("RESUMED 2"), 2) << second.out;
  EXPECT_EQ(second.count("PASS resume"), 2) << second.out;
  EXPECT_EQ(second.count("checkpoint round 4 in " + dir.string() + " skipped: checkpoint '" +
                         slice_file(dir, 4).string() + "' is unusable: " + why),
            1)
      << second.out;
  EXPECT_EQ(second.count("resuming from checkpoint round 2 in " + dir.string()), 1) << second.out;
  // The skipped round is kept aside, out of the way of the round 4 this job wrote again.
  EXPECT_EQ(second.count("skipped round moved to " + (dir / "r000000000004.skipped").string()), 1)
      << second.out;
  EXPECT_TRUE(fs::exists(dir / "r000000000004.skipped" / "k0-s0.slice"));
}

TEST(JobCheckpointSecurity, ADamagedLatestRoundResumesFromThePreviousOneAndSaysWhy) {
  auto dir = killed_job("damaged");
  // What the servers wrote is private to the job's user.
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    struct stat st {};
    ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, e.is_directory() ? 0700u : 0600u) << e.path();
  }
  std::fstream f(slice_file(dir, 4), std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(64 + 4 * 3);  // a weight
  f.put('\x7f');
  f.close();
  expect_resumed_from_2(dir, "checksum mismatch");
}

TEST(JobCheckpointSecurity, AnOlderValidFileCopiedIntoTheLatestRoundIsRefused) {
  auto dir = killed_job("copied");
  fs::copy_file(slice_file(dir, 2), slice_file(dir, 4), fs::copy_options::overwrite_existing);
  expect_resumed_from_2(dir, "round mismatch: it holds round 2 but lies in round 4's directory");
}

TEST(JobCheckpointSecurity, NoValidRoundLeftStopsTheJobNamingEachRound) {
  auto dir = killed_job("none");
  fs::resize_file(slice_file(dir, 2), 10);
  fs::resize_file(slice_file(dir, 4), 10);
  auto second = psrun(job_args(dir), "resume --rounds 8 --sizes 7,5000");
  EXPECT_NE(second.rc, 0) << second.out;
  EXPECT_EQ(second.count("no checkpoint round in '" + dir.string() + "' can be resumed from"), 1)
      << second.out;
  EXPECT_EQ(second.count("round 4: checkpoint '" + slice_file(dir, 4).string() +
                         "' is unusable: truncated header"),
            1)
      << second.out;
  EXPECT_EQ(second.count("PASS resume"), 0) << second.out;
}

TEST(PsrunSecurity, ASecretFileOthersCanReadIsRefusedWithTheFix) {
  auto secret = scratch("secret");
  std::ofstream(secret) << "0123456789abcdef0123456789abcdef\n";
  fs::permissions(secret, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                              fs::perms::others_read);
  auto r =
      psrun("--transport tcp -n 1 --lr 1 --secret-file " + secret.string(), "exact --rounds 1");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("the secret file '" + secret.string() +
                    "' is accessible to group or others (mode 0644); make it private to its "
                    "owner: chmod 600 '" +
                    secret.string() + "'"),
            1)
      << r.out;
  EXPECT_EQ(r.count("PASS exact"), 0) << r.out;
  fs::permissions(secret, fs::perms::owner_read | fs::perms::owner_write);
  r = psrun("--transport tcp -n 1 --lr 1 --secret-file " + secret.string(), "exact --rounds 1");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("PASS exact"), 1) << r.out;
}

// A short job secret can be guessed offline from one observed handshake: psrun refuses one
// shorter than 32 characters from PSRT_SECRET (as from a file), naming the variable and the fix;
// the old minimum was 16, so a 16-character secret ran the job.
TEST(PsrunSecurity, AShortSecretInTheEnvironmentIsRefusedWithTheFix) {
  auto r = psrun("--transport tcp -n 1 --lr 1", "exact --rounds 1");  // random secret: control
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("PASS exact"), 1) << r.out;
  ::setenv("PSRT_SECRET", "0123456789abcdef", 1);
  r = psrun("--transport tcp -n 1 --lr 1", "exact --rounds 1");
  ::unsetenv("PSRT_SECRET");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("the job secret from PSRT_SECRET has 16 characters; use at least 32"), 1)
      << r.out;
  EXPECT_EQ(r.count("PASS exact"), 0) << r.out;
}

}  // namespace
