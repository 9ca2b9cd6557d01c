// psrun --launcher mpi: OpenMPI's mpirun starts the servers and workers (psrun --role-from-env)
// on 127.0.0.1: exact sums, a failed process named and the rest stopped, signals forwarded,
// --dry-run. Skips without mpirun (Debian openmpi-bin).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <string>

#define PSRT_SCRATCH_PREFIX "psrt_mpi_launch_test_"
#include "tests/integration/job_runner.h"

namespace {

using psrt::test::free_port;
using psrt::test::ProcessGroup;

bool have_mpirun() {
  return std::system("command -v mpirun > /dev/null 2>&1") == 0;
}

// Processes whose command line holds `marker` (other than this test); with `exact`, whose
// command line is exactly `marker` (arguments joined by spaces).
int running_with(const std::string& marker, bool exact = false) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos || pid == std::to_string(getpid()))
      continue;
    std::string cmd = psrt::test::slurp(e.path() / "cmdline");
    for (char& c : cmd)
      if (c == '\0') c = ' ';
    if (exact ? cmd == marker + " " : cmd.find(marker) != std::string::npos) ++n;
  }
  return n;
}

// Polls (bounded) until no process holds `marker`; true when none is left.
bool none_left(const std::string& marker) {
  for (int i = 0; i < 100; ++i) {
    if (running_with(marker) == 0) return true;
    ::usleep(50'000);
  }
  return false;
}

class MpiLaunch : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed (Debian openmpi-bin)";
  }
};

TEST_F(MpiLaunch, JobOnLocalhostIsExact) {
  auto r = psrt::test::run_psrun_bounded(
      "", "--launcher mpi -H 127.0.0.1:5 --transport tcp -n 3 -s 2 --lr 1",
      PS_WORKER_PATH " exact --rounds 3 --sizes 1,7,1000,4099,70001", std::chrono::seconds(60));
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count("PASS exact"), 3) << r.out;
  for (const char* who : {"[worker 0@", "[worker 1@", "[worker 2@", "[server 0@", "[server 1@"})
    EXPECT_GE(r.count(who), 1) << who << "\n" << r.out;
  EXPECT_EQ(r.count("rendezvous complete: 2 servers, 3 workers"), 1) << r.out;
}

TEST_F(MpiLaunch, FailedWorkerIsNamedTheRestStoppedNothingLeft) {
  const std::string marker = "psrt-mpi-fail-" + std::to_string(getpid());
  auto r = psrt::test::run_psrun_bounded(
      "", "--launcher mpi -n 3 -s 1",
      "/bin/sh -c 'if [ $PSRT_RANK = 1 ]; then echo boom; exit 3; fi; sleep 30' " + marker,
      std::chrono::seconds(60));
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_EQ(r.count("[worker 1@"), 1) << r.out;
  EXPECT_EQ(r.count("psrun: worker 1@"), 1) << r.out;
  EXPECT_EQ(r.count("exited with status 3; stopping the job"), 1) << r.out;
  EXPECT_EQ(r.count("psrun: mpirun (pid"), 1) << r.out;
  EXPECT_TRUE(none_left(marker));
}

TEST_F(MpiLaunch, SigtermReachesEveryRankAndNothingIsLeft) {
  const std::string marker = "psrt-mpi-term-" + std::to_string(getpid());
  auto log = psrt::test::scratch("term.txt");
  ProcessGroup job(psrt::test::psrun_command("exec", "--launcher mpi -n 2 -s 1",
                                             "/bin/sh -c 'sleep 30' " + marker),
                   log);
  // Both workers' shells run once mpirun has started every rank. A shell forks for `sleep`, and
  // the child holds the shell's command line until it execs: wait for exactly two.
  const std::string shell = "/bin/sh -c sleep 30 " + marker;
  for (int i = 0; i < 200 && running_with(shell, true) != 2; ++i)
    ::usleep(50'000);
  ASSERT_EQ(running_with(shell, true), 2) << psrt::test::slurp(log);
  ::kill(job.pid(), SIGTERM);
  EXPECT_EQ(job.wait(std::chrono::seconds(30)), 128 + SIGTERM) << psrt::test::slurp(log);
  EXPECT_TRUE(none_left(marker));
}

TEST_F(MpiLaunch, DryRunPrintsTheCommandStartsNothingAndHidesTheSecret) {
  const std::string secret = "dry-run-secret-0123456789abcdef0123456789";
  auto r = psrt::test::run_psrun_bounded("PSRT_SECRET=" + secret,
                                         "--launcher mpi --dry-run -H a:2,b:3 -n 3 -s 2",
                                         "/bin/false", std::chrono::seconds(30));
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.count(secret), 0) << r.out;
  EXPECT_EQ(r.count("PSRT_SECRET=<secret>"), 1) << r.out;
  EXPECT_EQ(r.count(std::string(::geteuid() == 0 ? "mpirun --allow-run-as-root " : "mpirun ") +
                    "--oversubscribe --bind-to none --mca rtc_hwloc_vmhole none -np 5 -H a:2,b:3 "
                    "-x PSRT_SCHEDULER"),
            1)
      << r.out;
  EXPECT_EQ(r.count(" -x PSRT_SECRET -x "), 1) << r.out;
  EXPECT_EQ(r.count(" --role-from-env -- /bin/false\n"), 1) << r.out;
  EXPECT_EQ(r.count("ranks 0-1: server 0-1 (psrun --internal-server); ranks 2-4: worker 0-2"), 1)
      << r.out;
}

TEST_F(MpiLaunch, MpirunAloneStartsAJobWhoseRankZeroHostsTheScheduler) {
  // No psrun launcher: mpirun starts `psrun --role-from-env` on every rank, the secret by name.
  auto log = psrt::test::scratch("alone.txt");
  const std::string port = std::to_string(free_port());
  ProcessGroup job(
      "PSRT_SECRET=mpirun-alone-secret-0123456789abcdef0123 PSRT_LR=1 PSRT_NUM_SERVERS=2 "
      "PSRT_TRANSPORT=tcp MASTER_PORT=" +
          port + " exec mpirun " + std::string(::geteuid() == 0 ? "--allow-run-as-root " : "") +
          "--oversubscribe --bind-to none --mca rtc_hwloc_vmhole none -np 5 -x PSRT_SECRET -x "
          "PSRT_LR -x PSRT_NUM_SERVERS "
          "-x PSRT_TRANSPORT -x MASTER_PORT " PSRUN_PATH " --role-from-env -- " PS_WORKER_PATH
          " exact --rounds 3 --sizes 1,7,1000",
      log);
  const int rc = job.wait(std::chrono::seconds(60));
  const std::string out = psrt::test::slurp(log);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(psrt::test::count(out, "PASS exact"), 3) << out;
  EXPECT_EQ(
      psrt::test::count(out, "scheduler for 2 servers and 3 workers listening on 0.0.0.0:" + port),
      1)
      << out;
}

TEST(LaunchFlags, HostFlagsWithoutAnEngineAreRefused) {
  auto r = psrt::test::run_psrun_bounded("", "-H a:2 -n 1", "/bin/true", std::chrono::seconds(30));
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_EQ(r.count("-H, --hostfile and --dry-run also work with --launcher mpi"), 1) << r.out;
  auto m = psrt::test::run_psrun_bounded("", "--launcher slurm -H a:2 -n 1", "/bin/true",
                                         std::chrono::seconds(30));
  EXPECT_EQ(m.rc, 1) << m.out;
  EXPECT_EQ(m.count("-H/--hostfile/--mpirun-args need --launcher mpi or ssh"), 1) << m.out;
  auto s = psrt::test::run_psrun_bounded("unset SLURM_JOB_ID;", "--launcher slurm -n 1",
                                         "/bin/true", std::chrono::seconds(30));
  EXPECT_EQ(s.rc, 1) << s.out;
  EXPECT_EQ(s.count("--launcher slurm runs inside a Slurm allocation (SLURM_JOB_ID is not set)"), 1)
      << s.out;
}

}  // namespace
