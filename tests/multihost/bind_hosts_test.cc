// psrun --launcher ssh binds every process on its own host (PSRT_PLACE, planned by the remote
// side with that host's hwloc topology): a worker and a server sharing a namespace host get
// cores of their own, read back from /proc/self/status of the real processes.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#define PSRT_SCRATCH_PREFIX "psrt_bind_hosts_test_"
#include "runtime/placement/placement.h"
#include "runtime/placement/topology.h"
#include "tests/integration/job_runner.h"
#include "tests/multihost/netns_hosts.h"

namespace psrt::test {
namespace {

using namespace std::chrono_literals;

TEST(BindHosts, EveryProcessIsBoundOnItsHost) {
  if (auto why = Hosts::unavailable(); !why.empty()) GTEST_SKIP() << why;
  Hosts hosts(3, {.sshd = true});
  const std::string a1 = hosts.address(1), a2 = hosts.address(2);
  // Host 1: worker 0 and server 0; host 2: worker 1. The namespaces share this machine's cores.
  const auto topo = placement::read_topology();
  const auto one = placement::place(topo, {1, 1, placement::Bind::kCore, std::nullopt});
  const auto alone = placement::place(topo, {1, 0, placement::Bind::kCore, std::nullopt});
  const std::string server = placement::cpu_list(one.places[0].cpus);
  const std::string worker0 = placement::cpu_list(one.places[1].cpus);
  const std::string worker1 = placement::cpu_list(alone.places[0].cpus);

  const std::string cmd =
      "exec " + hosts.exec_prefix(0) + " " PSRUN_PATH " --launcher ssh --ssh-args '" +
      hosts.ssh_args_string() + "' --transport tcp -n 2 -s 1 -H " + a1 + "," + a2 +
      " --server-hosts " + a1 +
      " --bind core -- sh -c 'echo \"mine $(grep Cpus_allowed_list /proc/self/status | cut "
      "-f2)\"'";
  ProcessGroup job(cmd, scratch("bind_hosts.txt"));
  const int rc = job.wait(90s);
  if (rc < 0) job.kill();
  const std::string out = job.out();
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[worker 0@" + a1 + "] mine " + worker0 + "\n"), std::string::npos) << out;
  EXPECT_NE(out.find("[worker 1@" + a2 + "] mine " + worker1 + "\n"), std::string::npos) << out;
  EXPECT_NE(out.find("placement: server 0 here (bind core): cores " + server + ", NUMA "),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("placement: worker 0 here (bind core): cores " + worker0 + ", NUMA "),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("placement: worker 0 here (bind core): cores " + worker1 + ", NUMA "),
            std::string::npos)
      << out;
}

}  // namespace
}  // namespace psrt::test
