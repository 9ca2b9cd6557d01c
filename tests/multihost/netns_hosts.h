// Several "hosts" on one machine for multi-host tests: each host is a network namespace with
// its own network stack, joined to the others by a veth pair into one bridge, optionally running
// its own sshd. Every address is in the private range 10.9.0.0/24 (and fd09::/64 for IPv6).
//
// Safety: the fixture refuses to touch a network unless the test process runs inside its own
// network and mount namespace, i.e. was started through tests/multihost/private_net.sh
// (`unshare --net --mount`, a private tmpfs on /run/netns). The bridge, the veths and the
// namespaces then all live inside that throwaway namespace: nothing reaches the machine's own
// network, and the kernel removes all of it when the test process exits, even on SIGKILL (the
// home directory and /tmp are private tmpfs there too: ssh sessions run no real startup files). The
// destructor also stops every process of every host and every sshd, and deletes the namespaces.
//
//   SKIP_WITHOUT_HOSTS();                   // skips the test where hosts cannot be made
//   psrt::test::Hosts hosts(3, {.sshd = true});
//   hosts.address(1);                       // "10.9.0.12" (host i is 10.9.0.(11+i))
//   hosts.run_in(1, {"ip", "addr"});        // runs there, bounded; exit code and output
//   hosts.exec_prefix(1) + " ./server";     // "ip netns exec psrt-h1 ./server" for sh -c
//   hosts.ssh_command(2, "hostname");       // ssh from the test's own namespace to host 2
//   hosts.tx_bytes(1); hosts.rx_bytes(1);   // bytes host 1 sent / received over its link
//   hosts.link_down(2);                     // host 2 drops off the network (no RST, no FIN)
//   hosts.kill_all(2);                      // SIGKILL every process of host 2 (but its sshd)
//   hosts.pids(2);                          // the processes running in host 2's namespace
//
// The test's own process sits on the bridge as 10.9.0.1 (it reaches every host); host i is
// reached from the others at address(i). Hosts share the kernel, the filesystem, /dev/shm and
// the boot id: only the network stack is separate.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace psrt::test {

struct HostsOptions {
  bool sshd = false;  // start an sshd on port 22 of every host, reachable with ssh_args()
  bool ipv6 = true;   // also give every host fd09::(11+i)/64 (and the bridge fd09::1)
};

// A finished command: exit code (128 + signal when killed, -1 when it did not end in time).
struct CommandResult {
  int rc = -1;
  std::string out;  // stdout and stderr together
};

// Runs argv (no shell), output captured, killed (its process group) past `timeout`.
CommandResult run_command(const std::vector<std::string>& argv,
                          std::chrono::milliseconds timeout = std::chrono::seconds(20));

class Hosts {
 public:
  // Empty when hosts can be built here; otherwise why not (for GTEST_SKIP): not inside
  // private_net.sh, no CAP_NET_ADMIN, no `ip`, or no sshd when `need_sshd`.
  static std::string unavailable(bool need_sshd = true);

  // Builds `count` hosts (at most 32); throws std::runtime_error naming the failed step.
  Hosts(int count, HostsOptions options = {});
  ~Hosts();
  Hosts(const Hosts&) = delete;
  Hosts& operator=(const Hosts&) = delete;

  int size() const { return count_; }
  std::string name(int i) const;      // the namespace's name, e.g. "psrt-h1"
  std::string address(int i) const;   // "10.9.0.(11+i)"
  std::string address6(int i) const;  // "fd09::(11+i)" (when options.ipv6)
  static std::string bridge_address() { return "10.9.0.1"; }
  static std::string cidr() { return "10.9.0.0/24"; }
  static std::string interface_name() { return "eth0"; }  // every host's link

  // `ip netns exec NAME`, to put in front of a shell command that should run on host i.
  std::string exec_prefix(int i) const;
  // Runs argv on host i, bounded like run_command.
  CommandResult run_in(int i, const std::vector<std::string>& argv,
                       std::chrono::milliseconds timeout = std::chrono::seconds(20)) const;

  // ssh options that reach every host's sshd non-interactively (key, no host-key prompts,
  // BatchMode, no user config). Joined with spaces by ssh_args_string().
  std::vector<std::string> ssh_args() const;
  std::string ssh_args_string() const;
  // `ssh ARGS ADDRESS(i) -- CMD` as one shell command (from the test's namespace or any host).
  std::string ssh_command(int i, const std::string& cmd) const;

  // Bytes host i sent / received over its link (the veth's counters, read on the bridge side).
  std::uint64_t tx_bytes(int i) const;
  std::uint64_t rx_bytes(int i) const;
  // Takes host i's link down (packets are dropped silently, as with a pulled cable) / up.
  void link_down(int i);
  void link_up(int i);

  // The processes in host i's namespace (its sshd included); /proc scanned, namespace inodes.
  std::vector<pid_t> pids(int i) const;
  // The processes of host i other than its sshd daemon (what a job left there).
  std::vector<pid_t> job_pids(int i) const;
  // SIGKILLs every process of host i except its sshd daemon; how many were signalled.
  int kill_all(int i);

  std::filesystem::path dir() const { return dir_; }  // the fixture's temp dir (keys, configs)

 private:
  void build_network();
  void start_sshd(int i);
  void wait_for_port(const std::string& address, int port, std::chrono::milliseconds limit);
  void teardown() noexcept;
  std::uint64_t counter(int i, const char* which) const;
  ino_t namespace_inode(int i) const;

  int count_;
  HostsOptions options_;
  std::filesystem::path dir_;
  std::vector<pid_t> sshd_;
  std::vector<ino_t> ns_inode_;
};

}  // namespace psrt::test

// In a test body: skip it, saying why, where the hosts cannot be made (not root, not inside
// private_net.sh, no sshd). The test must include gtest.
#define SKIP_WITHOUT_HOSTS()                                                              \
  do {                                                                                    \
    if (auto why = ::psrt::test::Hosts::unavailable(); !why.empty()) GTEST_SKIP() << why; \
  } while (0)
