#include "runtime/launch/remote_side.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "psrt/error.h"
#include "runtime/launch/child_process.h"
#include "runtime/placement/env_place.h"

namespace psrt::runtime {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

volatile std::sig_atomic_t g_stop_signal = 0;
void on_stop_signal(int sig) {
  g_stop_signal = sig;
}

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

void say(const std::string& what) {
  const std::string line = "psrt remote (" + host_name() + "): " + what + "\n";
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

// Reads stdin until an empty line or the deadline: the environment block. Whatever follows it in
// the buffer is left in `rest`. False on EOF or timeout.
bool read_environment(milliseconds limit, std::vector<std::string>& env, std::string& rest) {
  const auto deadline = Clock::now() + limit;
  std::string buf;
  for (;;) {
    std::size_t start = 0;
    for (std::size_t nl; (nl = buf.find('\n', start)) != std::string::npos; start = nl + 1) {
      if (nl == start) {
        rest = buf.substr(nl + 1);
        return true;
      }
      env.push_back(buf.substr(start, nl - start));
    }
    buf.erase(0, start);
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char chunk[4096];
    const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buf.append(chunk, static_cast<std::size_t>(n));
  }
}

// `cpus` (empty: unbound) as sched_setaffinity takes them, set up before fork.
pid_t start_command(char** argv, std::vector<std::string>& env, const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const int c : cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(137);
  ::setpgid(0, 0);
  ::signal(SIGPIPE, SIG_DFL);
  const int null_fd = ::open("/dev/null", O_RDONLY);
  ::dup2(null_fd, STDIN_FILENO);
  for (auto& kv : env)
    ::putenv(kv.data());
  if (!cpus.empty() && ::sched_setaffinity(0, sizeof(set), &set) != 0) {
    say(std::string("cannot bind '") + argv[0] + "' to its CPUs: sched_setaffinity: " +
        std::strerror(errno) + " (psrun --bind none leaves processes unbound)");
    ::_exit(127);
  }
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execvp(argv[0], argv);
  say(std::string("cannot run '") + argv[0] + "': " + std::strerror(errno));
  ::_exit(127);
}

// Acts on the lines psrun sent; false once stdin has ended.
bool read_control(pid_t group, std::string& pending, Clock::time_point& last_keepalive) {
  char chunk[1024];
  const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) return false;
  pending.append(chunk, static_cast<std::size_t>(n));
  for (std::size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1)) {
    last_keepalive = Clock::now();
    if (pending[0] == 'S') {
      const int sig = std::atoi(pending.c_str() + 1);
      if (sig > 0 && sig < 65) ::kill(-group, sig);
    }
  }
  return true;
}

int exit_status_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  const int sig = WTERMSIG(status);
  say("the command was killed by signal " + std::to_string(sig) + " (" + detail::signal_name(sig) +
      ")");
  return 128 + sig;
}

// Watches stdin, the keepalives, stop signals and the command until one of them ends the job.
int supervise(pid_t pid, milliseconds keepalive_timeout, std::string pending) {
  auto last_keepalive = Clock::now();
  const auto stop = [&](const std::string& why) {
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    say(why + "; killed the command's process group");
    return 1;
  };
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      ::kill(-pid, SIGKILL);  // what it left running in its group
      return exit_status_of(status);
    }
    if (g_stop_signal != 0)
      return stop("got " + detail::signal_name(g_stop_signal) + " (the ssh session ended)");
    if (Clock::now() - last_keepalive > keepalive_timeout)
      return stop("no keepalive from psrun for " + std::to_string(keepalive_timeout.count()) +
                  " ms (the link to psrun's host is down, or psrun is stuck)");
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0 && !read_control(pid, pending, last_keepalive))
      return stop("psrun's connection closed (psrun ended or was killed, or ssh dropped)");
  }
}

}  // namespace

int run_remote_side(int argc, char** argv) {
  milliseconds keepalive_timeout{10'000};
  int i = 0;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (a == "--keepalive-timeout-ms" && i + 1 < argc) {
      keepalive_timeout = milliseconds(std::max(100L, std::atol(argv[++i])));
    } else {
      say("unknown option '" + a +
          "' (psrun --internal-remote is started by psrun --launcher ssh)");
      return 2;
    }
  }
  if (i + 1 >= argc) {
    say("no command after --");
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  for (int sig : {SIGTERM, SIGHUP, SIGINT})
    ::sigaction(sig, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> env;
  std::string rest;
  if (!read_environment(keepalive_timeout, env, rest)) {
    say("psrun sent no environment on stdin within " + std::to_string(keepalive_timeout.count()) +
        " ms; not starting the command");
    return 1;
  }
  // A process of an ssh job psrun placed (PSRT_PLACE): bound where this host's topology says.
  std::vector<int> cpus;
  try {
    if (auto place = placement::place_from_env(env)) {
      cpus = place->cpus;
      env.insert(env.end(), place->env.begin(), place->env.end());
      say("placement: " + place->row);
    }
  } catch (const Error& e) {
    say(std::string("placement: ") + e.what() + "; not starting the command");
    return 1;
  }
  const pid_t pid = start_command(argv + i + 1, env, cpus);
  if (pid < 0) {
    say(std::string("fork: ") + std::strerror(errno));
    return 1;
  }
  return supervise(pid, keepalive_timeout, rest);
}

}  // namespace psrt::runtime
