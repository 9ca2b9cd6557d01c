// psrun --launcher slurm and srun-started processes on a real one-node Slurm cluster (slurmctld,
// slurmd, munged on a private socket) that this test starts in its scratch directory as root and
// stops at the end (tests/integration/slurm_cluster.sh). Skips when not root or without
// slurm-wlm/munge.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#define PSRT_SCRATCH_PREFIX "psrt_slurm_launch_test_"
#include "tests/integration/job_runner.h"

namespace {

namespace fs = std::filesystem;
using psrt::test::free_port;
using psrt::test::ProcessGroup;

// Processes whose command line holds `marker`, polled (bounded) until none is left.
bool none_left(const std::string& marker) {
  for (int i = 0; i < 100; ++i) {
    int n = 0;
    for (const auto& e : fs::directory_iterator("/proc")) {
      const std::string pid = e.path().filename();
      if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
      std::string cmd = psrt::test::slurp(e.path() / "cmdline");
      for (char& c : cmd)
        if (c == '\0') c = ' ';
      if (cmd.find(marker) != std::string::npos) ++n;
    }
    if (n == 0) return true;
    ::usleep(50'000);
  }
  return false;
}

class SlurmLaunch : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0 || ::access("/usr/sbin/slurmctld", X_OK) != 0 ||
        ::access("/usr/sbin/munged", X_OK) != 0) {
      skip_ = "needs root, slurm-wlm and munge (scripts/install_deps.sh)";
      return;
    }
    dir_ = psrt::test::scratch("cluster");
    fs::create_directories(dir_);
    const std::string start = std::string(SLURM_CLUSTER_SH) + " start " + dir_.string() + " " +
                              std::to_string(free_port()) + " " + std::to_string(free_port()) +
                              " > " + (dir_ / "start.log").string() + " 2>&1";
    started_ = true;
    if (std::system(("timeout 60 " + start).c_str()) != 0)
      failed_ = "the Slurm cluster did not start: " + psrt::test::slurp(dir_ / "start.log");
  }
  static void TearDownTestSuite() {
    if (started_)
      std::system(
          ("timeout 30 " + std::string(SLURM_CLUSTER_SH) + " stop " + dir_.string()).c_str());
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(failed_.empty()) << failed_;
  }
  // `sh -c CMD` with SLURM_CONF set, bounded; output captured.
  static psrt::test::Run run_in_cluster(const std::string& cmd, int seconds = 90) {
    auto log = psrt::test::scratch("out.txt");
    ProcessGroup job("export SLURM_CONF=" + (dir_ / "slurm.conf").string() + "; " + cmd, log);
    psrt::test::Run r;
    r.rc = job.wait(std::chrono::seconds(seconds));
    if (r.rc < 0) {
      r.rc = job.kill();
      ADD_FAILURE() << "did not end within " << seconds << " s";
    }
    r.out = psrt::test::slurp(log);
    return r;
  }

  static inline fs::path dir_;
  static inline bool started_ = false;
  static inline std::string skip_;
  static inline std::string failed_;
};

TEST_F(SlurmLaunch, SbatchTemplateJobIsExact) {
  const auto out = psrt::test::scratch("job.out");
  auto r = run_in_cluster("PSRUN=" PSRUN_PATH
                          " PSRT_SERVERS=2 PSRUN_ARGS='--transport tcp --lr 1' "
                          "sbatch --wait -n 5 --overcommit -o " +
                          out.string() +
                          " " DEPLOY_SBATCH " " PS_WORKER_PATH
                          " exact --rounds 3 --sizes 1,7,1000,4099");
  const std::string job = psrt::test::slurp(out);
  EXPECT_EQ(r.rc, 0) << r.out << job;
  EXPECT_EQ(psrt::test::count(job, "PASS exact"), 3) << job;
  EXPECT_EQ(psrt::test::count(job, "SLURM_PROCID: global rank 4 of 5 is worker 2"), 1) << job;
  EXPECT_EQ(psrt::test::count(job, "rendezvous complete: 2 servers, 3 workers"), 1) << job;
}

TEST_F(SlurmLaunch, FailedWorkerInSallocIsNamedAndNothingIsLeft) {
  const std::string marker = "psrt-slurm-fail-" + std::to_string(getpid());
  auto r = run_in_cluster("salloc -n 3 --overcommit " PSRUN_PATH
                          " --launcher slurm -n 2 -s 1 -- /bin/sh -c "
                          "'if [ $PSRT_RANK = 1 ]; then echo boom; exit 3; fi; sleep 30' " +
                          marker);
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("[worker 1@"), 1) << r.out;
  EXPECT_EQ(r.count("exited with status 3; stopping the job"), 1) << r.out;
  EXPECT_EQ(r.count("psrun: srun (pid"), 1) << r.out;
  EXPECT_TRUE(none_left(marker));
}

TEST_F(SlurmLaunch, SrunStartedProcessesWithoutPsrunJoinExactly) {
  // Rank 0 hosts the scheduler on the step's first node; the secret comes from a 0600 file.
  const auto secret = psrt::test::scratch("secret");
  std::ofstream(secret) << "srun-started-job-secret-0123456789abcdef\n";
  ::chmod(secret.c_str(), 0600);
  auto r =
      run_in_cluster("PSRT_SECRET_FILE=" + secret.string() +
                     " PSRT_SCHEDULER_PORT=" + std::to_string(free_port()) +
                     " PSRT_LR=1 srun -n 4 --overcommit --kill-on-bad-exit=1 " PSRUN_PATH
                     " --role-from-env -- " PS_WORKER_PATH " exact --rounds 3 --sizes 1,7,1000");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("PASS exact"), 3) << r.out;
  EXPECT_EQ(r.count("scheduler for 1 servers and 3 workers listening on 0.0.0.0:"), 1) << r.out;
}

}  // namespace
