#include "runtime/launch/remote_side.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "psrt/error.h"
#include "runtime/launch/child_process.h"
#include "runtime/launch/spawn.h"
#include "runtime/placement/env_place.h"

namespace psrt::launch {
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

// COMMAND in its own process group, dying with this process, stdin on /dev/null, stdout and
// stderr straight to ssh, `env` ("NAME=VALUE"; a bare NAME removes it, as putenv does) on top of
// the login environment, bound to `cpus` (empty: unbound). -1 when it could not be started,
// having said why; `status` is then this process's exit status.
pid_t start_command(char** argv, const std::vector<std::string>& env, const std::vector<int>& cpus,
                    int& status) {
  launch::SpawnRequest r;
  for (char** a = argv; *a != nullptr; ++a)
    r.argv.emplace_back(*a);
  for (const auto& kv : env) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos)
      r.env.emplace_back(kv, std::nullopt);
    else
      r.env.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  r.in = launch::kNullFd;
  r.own_group = true;
  r.die_with_parent = true;
  r.cpus = cpus;
  sigset_t none;
  ::sigemptyset(&none);
  r.mask = &none;
  static constexpr int kIgnored[] = {SIGPIPE};  // ignored here, default for the command
  r.reset_to_default = kIgnored;
  const launch::Spawned s = launch::spawn(r);
  if (!s.failure) return s.pid;
  const std::string cause = std::strerror(s.failure->error);
  switch (s.failure->step) {
    case launch::SpawnFailure::Step::kExec:
      say(std::string("cannot run '") + argv[0] + "': " + cause);
      status = 127;
      break;
    case launch::SpawnFailure::Step::kAffinity:
      say(std::string("cannot bind '") + argv[0] + "' to its CPUs: sched_setaffinity: " + cause +
          " (psrun --bind none leaves processes unbound)");
      status = 127;
      break;
    default:
      say(launch::describe(*s.failure, argv[0], cpus));
      status = 1;
  }
  return -1;
}

// Into psrun's working directory `cwd` when this host has it (a shared filesystem, or the same
// path on each host, as mpirun does). Without it, COMMAND runs in the login directory, said on
// stderr, unless `program` is a path relative to `cwd`: false then, having said why and the fix.
bool enter(const std::string& cwd, const std::string& program) {
  if (::chdir(cwd.c_str()) == 0) return true;
  const std::string why = std::strerror(errno);
  if (!program.empty() && program.front() != '/' && program.find('/') != std::string::npos) {
    say("the program '" + program + "' is relative to psrun's working directory " + cwd +
        ", which this host lacks (" + why +
        "): give the program's absolute path, or start psrun from a directory every host has "
        "at the same path (a shared filesystem); not starting the command");
    return false;
  }
  char here[4096] = {};
  say("psrun's working directory " + cwd + " is not on this host (" + why +
      "): the command runs in " + (::getcwd(here, sizeof here - 1) ? here : "the login directory") +
      ", where relative paths resolve");
  return true;
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
  std::string cwd;
  int i = 0;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (a == "--keepalive-timeout-ms" && i + 1 < argc) {
      keepalive_timeout = milliseconds(std::max(100L, std::atol(argv[++i])));
    } else if (a == "--cwd" && i + 1 < argc) {
      cwd = argv[++i];
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
  if (!cwd.empty() && !enter(cwd, argv[i + 1])) return 127;
  int status = 1;
  const pid_t pid = start_command(argv + i + 1, env, cpus, status);
  if (pid < 0) return status;
  return supervise(pid, keepalive_timeout, rest);
}

}  // namespace psrt::launch
