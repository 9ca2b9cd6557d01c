// The host fixture itself: hosts reach each other only over their links, ssh works into each,
// the byte counters count what crossed, link_down cuts a host off, kill_all empties a host, and
// nothing is left after the fixture is gone.
#include "tests/multihost/netns_hosts.h"

#include <gtest/gtest.h>

#include <string>

namespace psrt::test {
namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
    s.pop_back();
  return s;
}

TEST(NetnsHosts, SshReachesEachHostInItsOwnNamespaceAndCountersSeeTheBytes) {
  SKIP_WITHOUT_HOSTS();
  Hosts hosts(3, {.sshd = true});
  const auto before_tx = hosts.tx_bytes(2), before_rx = hosts.rx_bytes(2);
  // From host 0, ssh to host 2: the command runs in host 2's namespace (its own eth0 address).
  const auto r = hosts.run_in(
      0,
      {"sh", "-c", hosts.ssh_command(2, "ip -4 -o addr show dev eth0; head -c 200000 /dev/zero")});
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find(hosts.address(2) + "/24"), std::string::npos) << r.out;
  EXPECT_GT(hosts.tx_bytes(2) - before_tx, 200000u);  // the zeros crossed host 2's link
  EXPECT_GT(hosts.rx_bytes(2) - before_rx, 1000u);
  // Host 1 took no part: only neighbour discovery may have touched it.
  EXPECT_LT(hosts.tx_bytes(1), 10000u);
  // The hosts share the filesystem and the boot id, not the network namespace.
  const auto here = hosts.run_in(1, {"readlink", "/proc/self/ns/net"});
  const auto there = hosts.run_in(2, {"readlink", "/proc/self/ns/net"});
  EXPECT_NE(trim(here.out), trim(there.out));
}

TEST(NetnsHosts, IPv6AddressesWork) {
  SKIP_WITHOUT_HOSTS();
  Hosts hosts(2, {.sshd = true});
  const std::string cmd = "ssh " + hosts.ssh_args_string() + " " + hosts.address6(1) +
                          " -- ip -6 -o addr show dev eth0";
  const auto r = hosts.run_in(0, {"sh", "-c", cmd});
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find(hosts.address6(1) + "/64"), std::string::npos) << r.out;
}

TEST(NetnsHosts, LinkDownCutsTheHostOffAndLinkUpRestoresIt) {
  SKIP_WITHOUT_HOSTS();
  Hosts hosts(2, {.sshd = true});
  hosts.link_down(1);
  const std::string cmd =
      "ssh " + hosts.ssh_args_string() + " -o ConnectTimeout=1 " + hosts.address(1) + " -- true";
  const auto down = hosts.run_in(0, {"sh", "-c", cmd});
  EXPECT_EQ(down.rc, 255) << down.out;  // ssh's own failure: no route through the dead link
  hosts.link_up(1);
  const auto up = hosts.run_in(0, {"sh", "-c", cmd});
  EXPECT_EQ(up.rc, 0) << up.out;
}

TEST(NetnsHosts, KillAllEmptiesAHostButKeepsItsSshd) {
  SKIP_WITHOUT_HOSTS();
  Hosts hosts(2, {.sshd = true});
  // A process left running on host 1 through ssh, and one started there directly.
  const auto r = hosts.run_in(
      0, {"sh", "-c", hosts.ssh_command(1, "setsid sleep 300 </dev/null >/dev/null 2>&1 &")});
  ASSERT_EQ(r.rc, 0) << r.out;
  ASSERT_EQ(std::system((hosts.exec_prefix(1) + " sleep 300 &").c_str()), 0);
  bool two = false;
  for (int i = 0; i < 200 && !two; ++i, usleep(10000))
    two = hosts.job_pids(1).size() >= 2;
  ASSERT_TRUE(two);
  EXPECT_GE(hosts.kill_all(1), 2);
  bool empty = false;
  for (int i = 0; i < 200 && !empty; ++i, usleep(10000))
    empty = hosts.job_pids(1).empty();
  EXPECT_TRUE(empty);
  EXPECT_EQ(hosts.pids(1).size(), 1u);  // the sshd daemon
  EXPECT_EQ(hosts.run_in(0, {"sh", "-c", hosts.ssh_command(1, "true")}).rc, 0);
}

TEST(NetnsHosts, NothingIsLeftAfterTheFixture) {
  SKIP_WITHOUT_HOSTS();
  std::filesystem::path dir;
  {
    Hosts hosts(2, {.sshd = true});
    dir = hosts.dir();
    ASSERT_TRUE(std::filesystem::exists(dir));
  }
  EXPECT_FALSE(std::filesystem::exists(dir));
  EXPECT_EQ(run_command({"ip", "netns", "list"}).out, "");
  EXPECT_NE(run_command({"ip", "link", "show", "psrt-br"}).rc, 0);
}

}  // namespace
}  // namespace psrt::test
