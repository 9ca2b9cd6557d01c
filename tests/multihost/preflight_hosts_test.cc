// psrun --preflight --launcher ssh across network-namespace hosts (netns_hosts.h): one table per
// host, each host connecting to the port psrun holds where its scheduler would listen; a
// scheduler address the hosts cannot reach, and a UCX_TLS no host can serve, fail naming the
// hosts.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>

#define PSRT_SCRATCH_PREFIX "psrt_preflight_hosts_test_"
#include "tests/integration/job_runner.h"
#include "tests/multihost/netns_hosts.h"

namespace psrt::test {
namespace {

using namespace std::chrono_literals;

#define SKIP_WITHOUT_HOSTS()                                                \
  do {                                                                      \
    if (auto why = Hosts::unavailable(); !why.empty()) GTEST_SKIP() << why; \
  } while (0)

// psrun --preflight on host 0 for a job on hosts 1 and 2; its exit code and output.
psrt::test::Run preflight_on_host0(const Hosts& hosts, const std::string& env,
                                   const std::string& args) {
  const std::string cmd = "exec " + hosts.exec_prefix(0) + " env " + env + " " PSRUN_PATH +
                          " --preflight --launcher ssh --ssh-args '" + hosts.ssh_args_string() +
                          "' -n 2 -H " + hosts.address(1) + "," + hosts.address(2) + " " + args;
  ProcessGroup job(cmd, scratch("preflight.txt"));
  psrt::test::Run r;
  r.rc = job.wait(90s);
  if (r.rc < 0) {
    r.rc = job.kill();
    ADD_FAILURE() << "psrun --preflight did not end within 90 s";
  }
  r.out = job.out();
  return r;
}

bool host_has_rdma() {
  std::error_code ec;
  return std::filesystem::exists("/sys/class/infiniband", ec) &&
         !std::filesystem::is_empty("/sys/class/infiniband", ec);
}

TEST(PreflightHosts, EveryHostChecksAndReachesTheSchedulerPort) {
  SKIP_WITHOUT_HOSTS();
  Hosts hosts(3, {.sshd = true});
  const psrt::test::Run r = preflight_on_host0(hosts, "PSRT_LOG_LEVEL=info", "--transport tcp");
  EXPECT_EQ(r.rc, 0) << r.out;
  for (int i : {1, 2}) {
    EXPECT_EQ(r.count("preflight: host " + hosts.address(i) + "\n"), 1) << r.out;
    EXPECT_EQ(r.count("preflight: " + hosts.address(i) + " passes\n"), 1) << r.out;
  }
  // Each host connected to host 0's address, where the scheduler would listen.
  EXPECT_EQ(r.count("  PASS  the scheduler's port " + hosts.address(0) + ":"), 2) << r.out;
  EXPECT_EQ(r.count("preflight: every host passes (2)\n"), 1) << r.out;
}

TEST(PreflightHosts, ASchedulerAddressTheHostsCannotReachFailsOnEach) {
  SKIP_WITHOUT_HOSTS();
  Hosts hosts(3, {.sshd = true});
  // Loopback is host 0's own: the other hosts' 127.0.0.1 has nothing listening.
  const psrt::test::Run r = preflight_on_host0(hosts, "", "--transport tcp --interface lo");
  EXPECT_EQ(r.rc, 1) << r.out;
  for (int i : {1, 2}) {
    const std::string line =
        "[preflight@" + hosts.address(i) + "]   FAIL  the scheduler's port 127.0.0.1:";
    const auto at = r.out.find(line);
    ASSERT_NE(at, std::string::npos) << r.out;
    const std::string rest = r.out.substr(at, r.out.find('\n', at) - at);
    EXPECT_NE(rest.find(" is not reachable: connect 127.0.0.1:"), std::string::npos) << rest;
    EXPECT_TRUE(rest.ends_with(": Connection refused")) << rest;
  }
  EXPECT_EQ(
      r.count("preflight: 2 of 2 hosts fail: " + hosts.address(1) + ", " + hosts.address(2) + "\n"),
      1)
      << r.out;
}

TEST(PreflightHosts, UcxRcFailsOnHostsWithoutRdmaNamingTheDevice) {
  SKIP_WITHOUT_HOSTS();
#ifndef PSRT_TEST_HAVE_UCX
  GTEST_SKIP() << "built without UCX";
#endif
  if (host_has_rdma()) GTEST_SKIP() << "this machine has an RDMA device";
  Hosts hosts(3, {.sshd = true});
  const psrt::test::Run r = preflight_on_host0(hosts, "UCX_TLS=rc", "--transport ucx");
  EXPECT_EQ(r.rc, 1) << r.out;
  // UCX_TLS travels to every host with psrun's own UCX_* variables.
  EXPECT_EQ(r.count("  FAIL  UCX_TLS=rc needs an RDMA device (InfiniBand or RoCE) and this host "
                    "has none ("),
            2)
      << r.out;
  EXPECT_EQ(r.count("preflight: 2 of 2 hosts fail: "), 1) << r.out;
}

}  // namespace
}  // namespace psrt::test
