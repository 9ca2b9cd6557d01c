// A Slurm cluster over three namespace hosts (tests/multihost/netns_hosts.h): slurmctld and
// munged in the test's own namespace (the bridge, 10.9.0.1), one slurmd per host, started by
// tests/integration/slurm_cluster.sh and stopped at the end. A job submitted with sbatch --wait
// through deploy/slurm/psrt.sbatch: psrun in the batch step on the first node, one srun step
// with the servers on the first node and the workers on the other two; exact sums, and the links'
// byte counters show the gradients crossed.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#define PSRT_SCRATCH_PREFIX "psrt_slurm_job_test_"
#include "tests/integration/job_runner.h"
#include "tests/multihost/netns_hosts.h"

namespace psrt::test {
namespace {

using namespace std::chrono_literals;

// The machine's cgroup layout (v1 controllers on a tmpfs, or cgroup2), mounted again on a
// namespace host's own /sys/fs/cgroup.
constexpr const char* kMountCgroups =
    "if grep -q \" /sys/fs/cgroup cgroup2 \" /proc/1/mounts; then "
    "mount -t cgroup2 psrt-cgroup /sys/fs/cgroup; else "
    "mount -t tmpfs psrt-cgroup /sys/fs/cgroup && for c in cpuset memory freezer devices; do "
    "mkdir -p /sys/fs/cgroup/$c && mount -t cgroup -o $c psrt-$c /sys/fs/cgroup/$c; done && mkdir "
    "-p /sys/fs/cgroup/systemd && "
    "mount -t cgroup -o none,name=systemd psrt-systemd /sys/fs/cgroup/systemd; fi";

struct Cluster {
  std::filesystem::path dir;
  ~Cluster() { run_command({SLURM_CLUSTER_SH, "stop", dir.string()}, 30s); }
};

TEST(SlurmJob, ThreeNodeClusterRunsTheSbatchTemplateExactly) {
  if (auto why = Hosts::unavailable(/*need_sshd=*/false); !why.empty()) GTEST_SKIP() << why;
  if (::geteuid() != 0 || ::access("/usr/sbin/slurmctld", X_OK) != 0 ||
      ::access("/usr/sbin/munged", X_OK) != 0)
    GTEST_SKIP() << "needs root, slurm-wlm and munge (scripts/install_deps.sh)";
  Hosts hosts(3, {.sshd = false});

  Cluster cluster{scratch("cluster")};
  std::filesystem::create_directories(cluster.dir);
  const std::string conf = (cluster.dir / "slurm.conf").string();
  auto started = run_command(
      {SLURM_CLUSTER_SH, "start", cluster.dir.string(), "6817", "6818", Hosts::bridge_address(),
       "h0=" + hosts.address(0), "h1=" + hosts.address(1), "h2=" + hosts.address(2)},
      60s);
  ASSERT_EQ(started.rc, 0) << started.out;
  for (int i = 0; i < 3; ++i) {
    auto d = run_command({"sh", "-c",
                          // slurmd needs a cgroup filesystem: `ip netns exec` gives the host a
                          // fresh /sys in a mount namespace of its own, so mount one there.
                          "SLURM_CONF=" + conf + " " + hosts.exec_prefix(i) + " sh -c '" +
                              kMountCgroups + " && exec slurmd -N h" + std::to_string(i) + "'"},
                         30s);
    ASSERT_EQ(d.rc, 0) << d.out << slurp(cluster.dir / ("slurmd.h" + std::to_string(i) + ".log"));
  }
  std::string idle;
  for (int i = 0; i < 300 && idle != "3"; ++i) {
    idle = run_command({"sh", "-c", "SLURM_CONF=" + conf + " sinfo -h -t idle -o %D"}, 10s).out;
    while (!idle.empty() && (idle.back() == '\n' || idle.back() == ' '))
      idle.pop_back();
    if (idle != "3") std::this_thread::sleep_for(100ms);
  }
  ASSERT_EQ(idle, "3") << slurp(cluster.dir / "slurmctld.log");

  const std::uint64_t tx1 = hosts.tx_bytes(1), tx2 = hosts.tx_bytes(2);
  const auto out = scratch("job.out");
  auto r = run_command(
      {"sh", "-c",
       "SLURM_CONF=" + conf +
           " PSRUN=" PSRUN_PATH
           " PSRT_SERVERS=2 PSRUN_ARGS='--transport tcp --lr 1 --interface eth0' "
           "timeout 120 sbatch --wait -N 3 -n 6 --overcommit -o " +
           out.string() +
           " " DEPLOY_SBATCH " " PS_WORKER_PATH " exact --rounds 3 --sizes 1,7,1000,4099,262147"},
      150s);
  const std::string job = slurp(out);
  EXPECT_EQ(r.rc, 0) << r.out << job;
  EXPECT_EQ(count(job, "PASS exact"), 4) << job;
  EXPECT_EQ(count(job, "rendezvous complete: 2 servers, 4 workers"), 1) << job;
  EXPECT_EQ(count(job, "scheduler at " + hosts.address(0) + ":"), 1) << job;
  // srun's block distribution: ranks 0-1 (the servers) on h0, workers 0-1 on h1, 2-3 on h2.
  EXPECT_EQ(count(job, "server 0 registered at " + hosts.address(0) + ":"), 1) << job;
  EXPECT_EQ(count(job, "server 1 registered at " + hosts.address(0) + ":"), 1) << job;
  EXPECT_EQ(count(job, "global rank 5 of 6 is worker 3 (local 1/2)"), 1) << job;
  // So every gradient of h1's and h2's two workers crosses their links to h0.
  const std::uint64_t grads = 2ull * 3 * (1 + 7 + 1000 + 4099 + 262147) * 4;
  EXPECT_GT(hosts.tx_bytes(1) - tx1, grads) << job;
  EXPECT_GT(hosts.tx_bytes(2) - tx2, grads) << job;
}

}  // namespace
}  // namespace psrt::test
