// A job across three namespace hosts (tests/multihost/netns_hosts.h) started by psrun
// --launcher mpi: psrun and its scheduler on host A, OpenMPI's mpirun reaching B and C through
// their sshd. Ranks 0..S-1 are the servers; --map-by node over "-H B:3,C:3" alternates the ranks:
// server 0 and workers 0, 2 on B, server 1 and workers 1, 3 on C (mpirun would put ranks on its
// own host first, so A only runs psrun). About half of every gradient crosses to the other host.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#define PSRT_SCRATCH_PREFIX "psrt_mpi_job_test_"
#include "tests/integration/job_runner.h"
#include "tests/multihost/netns_hosts.h"

namespace psrt::test {
namespace {

using namespace std::chrono_literals;

// psrt processes (psrun, ps_worker) left on any host.
int psrt_left(const Hosts& hosts) {
  int n = 0;
  for (int i = 0; i < hosts.size(); ++i)
    for (pid_t p : hosts.pids(i)) {
      std::error_code ec;
      const auto exe = std::filesystem::read_symlink("/proc/" + std::to_string(p) + "/exe", ec);
      if (!ec && (exe == PSRUN_PATH || exe == PS_WORKER_PATH)) ++n;
    }
  return n;
}

bool none_left(const Hosts& hosts) {
  for (int i = 0; i < 100; ++i) {
    if (psrt_left(hosts) == 0) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

TEST(MpiJob, ThreeHostsThroughMpirunSumExactlyAcrossTheLinks) {
  SKIP_WITHOUT_HOSTS();
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "mpirun not installed (Debian openmpi-bin)";
  Hosts hosts(3, {.sshd = true});
  const std::string a = hosts.address(0), b = hosts.address(1), c = hosts.address(2);
  const int rounds = 3;
  const long floats = 1 + 7 + 1000 + 4099 + 262147;
  const std::uint64_t rx_b = hosts.rx_bytes(1), rx_c = hosts.rx_bytes(2);
  // OpenMPI's own options by environment: its ssh (the fixture's key) and the bridge's subnet.
  const std::string env = "OMPI_MCA_plm_rsh_args='" + hosts.ssh_args_string() +
                          "' OMPI_MCA_oob_tcp_if_include=" + Hosts::cidr() +
                          " OMPI_MCA_btl_tcp_if_include=" + Hosts::cidr();
  ProcessGroup job(
      "exec " + hosts.exec_prefix(0) + " env " + env +
          " " PSRUN_PATH
          " --launcher mpi --transport tcp -n 4 -s 2 --lr 1 --partition-bytes 65536 -H " +
          b + ":3," + c + ":3 --mpirun-args '--map-by node' -- " +
          PS_WORKER_PATH " exact --rounds " + std::to_string(rounds) +
          " --sizes 1,7,1000,4099,262147",
      scratch("mpi.txt"));
  const int rc = job.wait(120s);
  const std::string out = job.out();
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(count(out, "PASS exact"), 4) << out;
  EXPECT_EQ(count(out, "rendezvous complete: 2 servers, 4 workers"), 1) << out;
  EXPECT_EQ(count(out, "scheduler at " + a + ":"), 1) << out;
  EXPECT_EQ(count(out, "server 0 registered at " + b + ":"), 1) << out;
  EXPECT_EQ(count(out, "server 1 registered at " + c + ":"), 1) << out;
  for (const char* placed :
       {"global rank 2 of 6 is worker 0 (local 1/3)", "global rank 5 of 6 is worker 3 (local 2/3)"})
    EXPECT_EQ(count(out, placed), 1) << placed << "\n" << out;
  // Each host's two workers push about half of their gradients to the other host's server (the
  // slices are spread over the servers by bytes): a quarter is a safe floor, far above control
  // traffic.
  const std::uint64_t grads = 2ull * rounds * static_cast<std::uint64_t>(floats) * 4;
  EXPECT_GT(hosts.rx_bytes(1) - rx_b, grads / 4) << out;
  EXPECT_GT(hosts.rx_bytes(2) - rx_c, grads / 4) << out;
  EXPECT_TRUE(none_left(hosts)) << "a psrt process was left on a host";
}

}  // namespace
}  // namespace psrt::test
