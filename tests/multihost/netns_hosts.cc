#include "tests/multihost/netns_hosts.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace psrt::test {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr const char* kBridge = "psrt-br";

[[noreturn]] void exec_argv(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  std::fprintf(stderr, "cannot run %s: %s\n", args[0], std::strerror(errno));
  ::_exit(127);
}

int exit_code(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Reads `fd` until EOF or `deadline`.
std::string read_until(int fd, Clock::time_point deadline) {
  std::string out;
  char buf[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

void must(const std::vector<std::string>& argv) {
  const auto r = run_command(argv);
  if (r.rc != 0) {
    std::string cmd;
    for (const auto& a : argv)
      cmd += a + " ";
    throw std::runtime_error("netns hosts: `" + cmd + "` failed (exit " + std::to_string(r.rc) +
                             "): " + r.out);
  }
}

bool has_cap_net_admin() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("CapEff:", 0) == 0) {
      const unsigned long long caps = std::strtoull(line.c_str() + 7, nullptr, 16);
      return (caps >> 12) & 1ULL;  // CAP_NET_ADMIN
    }
  }
  return false;
}

bool executable(const char* path) {
  return ::access(path, X_OK) == 0;
}

ino_t inode_of(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

}  // namespace

CommandResult run_command(const std::vector<std::string>& argv, milliseconds timeout) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return {-1, "pipe failed"};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    const int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    exec_argv(argv);
  }
  ::close(fds[1]);
  const auto deadline = Clock::now() + timeout;
  CommandResult r;
  r.out = read_until(fds[0], deadline);
  ::close(fds[0]);
  while (Clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      r.rc = exit_code(status);
      return r;
    }
    std::this_thread::sleep_for(milliseconds(5));
  }
  ::kill(-pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  r.rc = -1;
  r.out += "\n[killed after " + std::to_string(timeout.count()) + " ms]";
  return r;
}

std::string Hosts::unavailable(bool need_sshd) {
  const char* inside = std::getenv("PSRT_PRIVATE_NET");
  if (inside == nullptr || std::string(inside) != "1") {
    const char* why = std::getenv("PSRT_PRIVATE_NET_ERROR");
    return std::string(
               "multi-host tests need their own network and mount namespace: run them "
               "through tests/multihost/private_net.sh (ctest does)") +
           (why != nullptr ? std::string("; unshare --net --mount failed here: ") + why : "");
  }
  if (!has_cap_net_admin()) return "multi-host tests need CAP_NET_ADMIN (run as root)";
  if (!executable("/usr/sbin/ip") && !executable("/sbin/ip") && !executable("/bin/ip"))
    return "multi-host tests need iproute2 (`ip`): apt-get install iproute2";
  if (need_sshd && (!executable("/usr/sbin/sshd") || !executable("/usr/bin/ssh") ||
                    !executable("/usr/bin/ssh-keygen")))
    return "multi-host tests need sshd and ssh: apt-get install openssh-server openssh-client";
  return {};
}

Hosts::Hosts(int count, HostsOptions options) : count_(count), options_(options) {
  if (count < 1 || count > 32) throw std::invalid_argument("netns hosts: 1 to 32 hosts");
  if (auto why = unavailable(options.sshd); !why.empty()) throw std::runtime_error(why);
  static int serial = 0;
  dir_ = fs::temp_directory_path() /
         ("psrt_hosts_" + std::to_string(::getpid()) + "_" + std::to_string(serial++));
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  try {
    build_network();
    if (options_.sshd) {
      must({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", (dir_ / "host_key").string()});
      must({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", (dir_ / "id").string()});
      fs::copy_file(dir_ / "id.pub", dir_ / "authorized_keys");
      fs::create_directories("/run/sshd");  // sshd's privilege-separation directory
      for (int i = 0; i < count_; ++i)
        start_sshd(i);
      for (int i = 0; i < count_; ++i)
        wait_for_port(address(i), 22, std::chrono::seconds(10));
    }
  } catch (...) {
    teardown();
    throw;
  }
}

Hosts::~Hosts() {
  teardown();
}

std::string Hosts::name(int i) const {
  return "psrt-h" + std::to_string(i);
}
std::string Hosts::address(int i) const {
  return "10.9.0." + std::to_string(11 + i);
}
std::string Hosts::address6(int i) const {
  return "fd09::" + std::to_string(11 + i);
}
std::string Hosts::exec_prefix(int i) const {
  return "ip netns exec " + name(i);
}

void Hosts::build_network() {
  must({"ip", "link", "set", "lo", "up"});
  must({"ip", "link", "add", kBridge, "type", "bridge"});
  must({"ip", "addr", "add", bridge_address() + "/24", "dev", kBridge});
  if (options_.ipv6) must({"ip", "-6", "addr", "add", "fd09::1/64", "dev", kBridge, "nodad"});
  must({"ip", "link", "set", kBridge, "up"});
  for (int i = 0; i < count_; ++i) {
    const std::string ns = name(i), veth = "vb" + std::to_string(i);
    must({"ip", "netns", "add", ns});
    ns_inode_.push_back(inode_of("/run/netns/" + ns));
    must({"ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns});
    must({"ip", "link", "set", veth, "master", kBridge});
    must({"ip", "link", "set", veth, "up"});
    must({"ip", "-n", ns, "link", "set", "lo", "up"});
    must({"ip", "-n", ns, "addr", "add", address(i) + "/24", "dev", "eth0"});
    if (options_.ipv6)
      must({"ip", "-n", ns, "-6", "addr", "add", address6(i) + "/64", "dev", "eth0", "nodad"});
    must({"ip", "-n", ns, "link", "set", "eth0", "up"});
  }
}

void Hosts::start_sshd(int i) {
  const fs::path config = dir_ / ("sshd_" + std::to_string(i) + ".conf");
  std::ofstream(config) << "Port 22\nListenAddress " << address(i)
                        << (options_.ipv6 ? "\nListenAddress " + address6(i) : "") << "\nHostKey "
                        << (dir_ / "host_key").string() << "\nAuthorizedKeysFile "
                        << (dir_ / "authorized_keys").string()
                        << "\nPidFile none\nStrictModes no\nUsePAM no\nPermitRootLogin "
                           "prohibit-password\nPasswordAuthentication no\n"
                           "KbdInteractiveAuthentication no\nLogLevel ERROR\n"
                           "MaxStartups 100\nMaxSessions 100\n";
  const std::string log = (dir_ / ("sshd_" + std::to_string(i) + ".log")).string();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    exec_argv(
        {"ip", "netns", "exec", name(i), "/usr/sbin/sshd", "-D", "-e", "-f", config.string()});
  }
  sshd_.push_back(pid);
}

void Hosts::wait_for_port(const std::string& address, int port, milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, address.c_str(), &sa.sin_addr);
  while (Clock::now() < deadline) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
    ::close(fd);
    if (ok) return;
    std::this_thread::sleep_for(milliseconds(20));
  }
  throw std::runtime_error("netns hosts: nothing listens on " + address + ":" +
                           std::to_string(port) + " after " + std::to_string(limit.count()) +
                           " ms (sshd log in " + dir_.string() + ")");
}

CommandResult Hosts::run_in(int i, const std::vector<std::string>& argv,
                            milliseconds timeout) const {
  std::vector<std::string> full = {"ip", "netns", "exec", name(i)};
  full.insert(full.end(), argv.begin(), argv.end());
  return run_command(full, timeout);
}

std::vector<std::string> Hosts::ssh_args() const {
  return {"-F", "/dev/null",
          "-i", (dir_ / "id").string(),
          "-o", "IdentitiesOnly=yes",
          "-o", "StrictHostKeyChecking=no",
          "-o", "UserKnownHostsFile=/dev/null",
          "-o", "BatchMode=yes",
          "-o", "LogLevel=ERROR",
          "-o", "ConnectTimeout=5"};
}

std::string Hosts::ssh_args_string() const {
  std::string s;
  for (const auto& a : ssh_args())
    s += (s.empty() ? "" : " ") + a;
  return s;
}

std::string Hosts::ssh_command(int i, const std::string& cmd) const {
  return "ssh " + ssh_args_string() + " " + address(i) + " -- '" + cmd + "'";
}

std::uint64_t Hosts::counter(int i, const char* which) const {
  const std::string path = "/sys/class/net/vb" + std::to_string(i) + "/statistics/" + which;
  std::ifstream in(path);
  std::uint64_t v = 0;
  if (!(in >> v)) throw std::runtime_error("netns hosts: cannot read " + path);
  return v;
}

// The bridge side of the pair sees the host's traffic mirrored: what it receives, the host sent.
std::uint64_t Hosts::tx_bytes(int i) const {
  return counter(i, "rx_bytes");
}
std::uint64_t Hosts::rx_bytes(int i) const {
  return counter(i, "tx_bytes");
}

void Hosts::link_down(int i) {
  must({"ip", "link", "set", "vb" + std::to_string(i), "down"});
}
void Hosts::link_up(int i) {
  must({"ip", "link", "set", "vb" + std::to_string(i), "up"});
}

ino_t Hosts::namespace_inode(int i) const {
  return ns_inode_.at(static_cast<std::size_t>(i));
}

std::vector<pid_t> Hosts::pids(int i) const {
  std::vector<pid_t> out;
  const ino_t want = namespace_inode(i);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string n = e.path().filename().string();
    if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos) continue;
    if (want != 0 && inode_of("/proc/" + n + "/ns/net") == want) out.push_back(std::stoi(n));
  }
  return out;
}

std::vector<pid_t> Hosts::job_pids(int i) const {
  std::vector<pid_t> out;
  const pid_t daemon = i < static_cast<int>(sshd_.size()) ? sshd_[static_cast<std::size_t>(i)] : -1;
  for (pid_t p : pids(i))
    if (p != daemon) out.push_back(p);
  return out;
}

int Hosts::kill_all(int i) {
  int n = 0;
  for (pid_t p : job_pids(i))
    n += ::kill(p, SIGKILL) == 0 ? 1 : 0;
  return n;
}

void Hosts::teardown() noexcept {
  try {
    for (int i = 0; i < static_cast<int>(ns_inode_.size()); ++i)
      for (pid_t p : pids(i))
        ::kill(p, SIGKILL);
    for (pid_t p : sshd_)
      ::waitpid(p, nullptr, 0);
    sshd_.clear();
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    for (int i = 0; i < static_cast<int>(ns_inode_.size()); ++i)
      while (!pids(i).empty() && Clock::now() < deadline)
        std::this_thread::sleep_for(milliseconds(10));
    // Deleting a veth end deletes the pair at once; a deleted namespace's devices go later.
    for (int i = 0; i < static_cast<int>(ns_inode_.size()); ++i) {
      run_command({"ip", "link", "del", "vb" + std::to_string(i)}, std::chrono::seconds(5));
      run_command({"ip", "netns", "del", name(i)}, std::chrono::seconds(5));
    }
    ns_inode_.clear();
    run_command({"ip", "link", "del", kBridge}, std::chrono::seconds(5));
    std::error_code ec;
    fs::remove_all(dir_, ec);
  } catch (...) {
  }
}

}  // namespace psrt::test
