// Which address each role listens on and advertises, across namespace hosts: the route to the
// scheduler by default (never loopback to another host), --interface by name or CIDR, IPv6, and
// a worker that cannot reach the scheduler failing within PSRT_CONNECT_TIMEOUT_MS naming the
// address and the interface it tried. Also psrun's ssh command line (--dry-run, bad -H/hostfile).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#define PSRT_SCRATCH_PREFIX "psrt_addresses_test_"
#include "base/interfaces.h"
#include "tests/integration/job_runner.h"
#include "tests/multihost/netns_hosts.h"

namespace psrt::test {
namespace {

using namespace std::chrono_literals;

TEST(Addresses, TheDefaultIsTheRouteToThePeerNeverLoopback) {
  SKIP_WITHOUT_HOSTS();
  Hosts hosts(2, {.sshd = false});
  // This process sits on the bridge: the route to a host leaves through the bridge's address.
  const InterfaceAddress a = choose_address("", hosts.address(1));
  EXPECT_EQ(a.address, Hosts::bridge_address());
  EXPECT_EQ(a.name, "psrt-br");
  EXPECT_EQ(choose_address("", hosts.address6(1)).address, "fd09::1");
  EXPECT_EQ(choose_address(Hosts::cidr(), "").address, Hosts::bridge_address());
  EXPECT_EQ(choose_address("fd09::/64", "").address, "fd09::1");
  EXPECT_EQ(choose_address("psrt-br", "").address, Hosts::bridge_address());
  EXPECT_EQ(choose_address("", "127.0.0.1").address, "127.0.0.1");
}

// An ssh job whose hosts are given by IPv6 address: every role listens and connects over IPv6.
TEST(Addresses, AJobRunsOverIpv6) {
  SKIP_WITHOUT_HOSTS();
  Hosts hosts(3, {.sshd = true});
  const auto log = scratch("ipv6.txt");
  ProcessGroup job("exec " + hosts.exec_prefix(0) + " " PSRUN_PATH " --launcher ssh --ssh-args '" +
                       hosts.ssh_args_string() + "' --transport tcp -n 2 -s 2 --lr 1 -H [" +
                       hosts.address6(1) + "],[" + hosts.address6(2) +
                       "] -- " PS_WORKER_PATH " exact --rounds 2 --sizes 7,4099",
                   log);
  const int rc = job.wait(90s);
  const std::string out = job.out();
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(count(out, "PASS exact"), 2) << out;
  EXPECT_NE(out.find("scheduler at [" + hosts.address6(0) + "]:"), std::string::npos) << out;
  EXPECT_NE(out.find("listening on [" + hosts.address6(1) + "]:"), std::string::npos) << out;
}

// --interface by CIDR: the scheduler and the servers (PSRT_INTERFACE passed on) use it.
TEST(Addresses, InterfaceByCidrIsUsedByTheSchedulerAndTheServers) {
  SKIP_WITHOUT_HOSTS();
  Hosts hosts(3, {.sshd = true});
  const auto log = scratch("cidr.txt");
  ProcessGroup job("exec " + hosts.exec_prefix(0) + " " PSRUN_PATH " --launcher ssh --ssh-args '" +
                       hosts.ssh_args_string() + "' --interface " + Hosts::cidr() +
                       " --transport tcp -n 2 -s 2 --lr 1 -H " + hosts.address(1) + "," +
                       hosts.address(2) + " -- " PS_WORKER_PATH " exact --rounds 1 --sizes 7",
                   log);
  const int rc = job.wait(90s);
  const std::string out = job.out();
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("scheduler at " + hosts.address(0) + ":"), std::string::npos) << out;
  EXPECT_NE(out.find("(interface eth0)"), std::string::npos) << out;
  EXPECT_NE(out.find("listening on " + hosts.address(1) + ":"), std::string::npos) << out;
  EXPECT_NE(out.find("listening on " + hosts.address(2) + ":"), std::string::npos) << out;
}

TEST(Addresses, AnUnreachableSchedulerFailsInTheConnectTimeoutNamingAddressAndInterface) {
  SKIP_WITHOUT_HOSTS();
  Hosts hosts(2, {.sshd = false});
  hosts.link_down(1);
  const auto start = std::chrono::steady_clock::now();
  const auto r =
      hosts.run_in(1,
                   {"env", "PSRT_SCHEDULER=" + hosts.address(0) + ":9", "PSRT_TRANSPORT=tcp",
                    "PSRT_SECRET=a-secret-of-at-least-32-characters-0123456789",
                    "PSRT_CONNECT_TIMEOUT_MS=1500", PS_WORKER_PATH, "exact", "--rounds", "1"},
                   30s);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("cannot reach scheduler at " + hosts.address(0) +
                       ":9 (from interface eth0 (" + hosts.address(1) + "))"),
            std::string::npos)
      << r.out;
  EXPECT_LT(seconds, 1.5 + 2.0) << r.out;
}

// psrun's ssh command line, without hosts: --dry-run prints the placement and per host what
// would run (no secret), bad host lists are refused naming the cause.
std::string psrun_out(const std::string& args, int* rc) {
  const auto log = scratch("psrun.txt");
  const int status =
      std::system(("PSRT_SECRET=dry-run-secret-0123456789-0123456789-0123 " PSRUN_PATH " " + args +
                   " > " + log.string() + " 2>&1")
                      .c_str());
  *rc = exit_code(status);
  return slurp(log);
}

TEST(PsrunSsh, DryRunPrintsPerHostWhatWouldStartWithoutTheSecret) {
  const auto hostfile = scratch("hostfile");
  std::ofstream(hostfile) << "# two hosts\nnode-a slots=2\nnode-b   # one slot\n";
  int rc = 0;
  const std::string out = psrun_out(
      "--launcher ssh --hostfile " + hostfile.string() +
          " --server-hosts node-s -n 3 -s 2 --interface lo --port 7000 --ssh-args '-p 2222' "
          "--dry-run -- /bin/prog 'an arg'",
      &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("  node-s: server 0, server 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("  node-a: worker 0, worker 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("  node-b: worker 1\n"), std::string::npos) << out;
  for (const char* host : {"host node-s:\n", "host node-a:\n", "host node-b:\n"})
    EXPECT_EQ(count(out, host), 1) << host << "\n" << out;
  EXPECT_NE(out.find("  worker 2: ssh -p 2222 -o BatchMode=yes"), std::string::npos) << out;
  // The remote command runs in psrun's working directory where the host has it (--cwd).
  EXPECT_NE(out.find(" -T node-a -- 'exec " PSRUN_PATH " --internal-remote --cwd " +
                     std::filesystem::current_path().string() +
                     " --keepalive-timeout-ms 10000 -- /bin/prog '\\''an arg'\\'''"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("PSRT_SCHEDULER=127.0.0.1:7000"), std::string::npos) << out;
  const std::string secret = "dry-run-secret-0123456789-0123456789-0123";
  EXPECT_NE(out.find("PSRT_SECRET=<secret: " + std::to_string(secret.size()) + " characters>"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("dry-run-secret"), std::string::npos) << out;
}

TEST(PsrunSsh, BadHostListsAreRefusedNamingTheCause) {
  const auto bad_file = scratch("bad_hostfile");
  std::ofstream(bad_file) << "node-a slots=2\nnode-b slotz=3\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--launcher ssh -H a:2,b:2 -n 5", "5 workers do not fit into the 4 slots"},
      {"--launcher ssh -H a:x", "slots 'x' is not a number"},
      {"--launcher ssh --hostfile /nonexistent/hosts", "cannot read '/nonexistent/hosts'"},
      {"--launcher ssh --hostfile " + bad_file.string(), "line 2: unknown 'slotz=3'"},
      {"--launcher ssh -n 1", "needs the hosts: either -H"},
      {"-H a:2 -n 1", "need --launcher ssh"},
  };
  for (const auto& [args, want] : cases) {
    int rc = 0;
    const std::string out = psrun_out(args + " --interface lo --dry-run -- /bin/true", &rc);
    EXPECT_NE(rc, 0) << args << "\n" << out;
    EXPECT_NE(out.find(want), std::string::npos) << args << "\n" << out;
  }
}

}  // namespace
}  // namespace psrt::test
