// psbench suite across namespace hosts: psbench (and psrun's scheduler) on host 0, the server on
// host 0, one worker on each of hosts 1 and 2 through psrun's ssh launcher. The JSON rows are
// those of the sweep, the ceiling is ucx_perftest between hosts 1 and 0 (where it is installed),
// and every worker's gradients crossed its own link.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#define PSRT_SCRATCH_PREFIX "psrt_suite_job_test_"
#include "tests/integration/job_runner.h"
#include "tests/multihost/netns_hosts.h"

namespace psrt::test {
namespace {

using namespace std::chrono_literals;

TEST(SuiteAcrossHosts, SshJobRowsAndTheBytesOnEachWorkersLink) {
  if (auto why = Hosts::unavailable(); !why.empty()) GTEST_SKIP() << why;
  Hosts hosts(3, {.sshd = true, .ipv6 = false});
  const auto json = scratch("suite.json");
  const std::vector<std::uint64_t> before{hosts.tx_bytes(1), hosts.tx_bytes(2)};
  const auto r = hosts.run_in(0,
                              {PSBENCH_PATH,
                               "suite",
                               "-b",
                               "64K",
                               "-e",
                               "1M",
                               "-f",
                               "16",
                               "--transports",
                               "tcp",
                               "-n",
                               "2",
                               "-s",
                               "1",
                               "--iters",
                               "3",
                               "--warmup",
                               "1",
                               "--link-gbps",
                               "1",
                               "--timeout",
                               "60",
                               "--json",
                               json.string(),
                               "--",
                               "--launcher",
                               "ssh",
                               "--ssh-args",
                               hosts.ssh_args_string(),
                               "-H",
                               hosts.address(1) + "," + hosts.address(2),
                               "--server-hosts",
                               hosts.address(0)},
                              90s);
  ASSERT_EQ(r.rc, 0) << r.out;
  // The ceiling: ucx_perftest between the server's host and the first other host, over ssh.
  const bool perftest = std::system("command -v ucx_perftest >/dev/null 2>&1") == 0;
  EXPECT_NE(r.out.find("psbench suite: ucx_perftest tag_bw ceiling for tcp from " +
                       hosts.address(1) + " to " + hosts.address(0)),
            std::string::npos)
      << r.out;
  const auto doc = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(doc["config"]["launcher"], "ssh");
  const auto& rows = doc["rows"];
  ASSERT_EQ(rows.size(), 2u) << doc.dump(1);
  const std::size_t sizes[] = {65536, 1048576};
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(rows[i]["size"], sizes[i]);
    EXPECT_EQ(rows[i]["workers"], 2);
    EXPECT_EQ(rows[i]["servers"], 1);
    EXPECT_GT(rows[i]["time_us_p50"].get<double>(), 0);
    if (perftest) {
      EXPECT_GT(rows[i]["ceiling_GBps"].get<double>(), 0) << r.out;
    } else {
      EXPECT_TRUE(rows[i]["ceiling_GBps"].is_null());
    }
    EXPECT_DOUBLE_EQ(rows[i]["bound_us"].get<double>(),
                     static_cast<double>(sizes[i]) / 125.0 * 2);  // 1 Gbit/s, N/S = 2
  }
  // Each worker pushed (warm-up + measured) rounds of both sizes over its own link.
  const std::uint64_t pushed = (1 + 3) * (65536 + 1048576);
  EXPECT_GE(hosts.tx_bytes(1) - before[0], pushed);
  EXPECT_GE(hosts.tx_bytes(2) - before[1], pushed);
}

}  // namespace
}  // namespace psrt::test
