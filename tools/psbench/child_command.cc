#include "child_command.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <map>
#include <thread>

#include "base/sys_check.h"
#include "psrt/error.h"

extern char** environ;

namespace psrt::bench {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> merged_environment(const EnvChanges& changes) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [name, value] : changes) {
    if (value) {
      env[name] = *value;
    } else {
      env.erase(name);
    }
  }
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [name, value] : env) {
    std::string kv = name;
    kv += '=';
    kv += value;
    out.push_back(std::move(kv));
  }
  return out;
}

// posix_spawnp with stdout and stderr to `out_fd` (-1: /dev/null).
pid_t spawn(const std::vector<std::string>& argv, const EnvChanges& env, int out_fd) {
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  cargv.reserve(args.size() + 1);
  for (auto& a : args)
    cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::vector<std::string> envs = merged_environment(env);
  std::vector<char*> cenv;
  cenv.reserve(envs.size() + 1);
  for (auto& e : envs)
    cenv.push_back(e.data());
  cenv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  if (out_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, out_fd, STDERR_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  }
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, cargv[0], &actions, nullptr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    throw Error(ErrorCode::kSystem, "cannot start " + argv[0] + ": " + std::strerror(rc));
  }
  return pid;
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// waitpid until `deadline`; the exit code, or nullopt if it is still running.
std::optional<int> reap_until(pid_t pid, Clock::time_point deadline) {
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return exit_code(status);
    if (r < 0 && errno != EINTR) return -1;
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

CommandOutput run_bounded(const std::vector<std::string>& argv, const EnvChanges& env,
                          std::chrono::milliseconds timeout) {
  int pipefd[2];
  PSRT_SYS_CHECK(::pipe2(pipefd, O_CLOEXEC));
  pid_t pid = -1;
  try {
    pid = spawn(argv, env, pipefd[1]);
  } catch (...) {
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    throw;
  }
  ::close(pipefd[1]);
  CommandOutput result;
  const auto deadline = Clock::now() + timeout;
  char buf[65536];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      result.timed_out = true;
      break;
    }
    pollfd p{pipefd[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    const ssize_t n = ::read(pipefd[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // every writer closed it: the job is over
    result.out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(pipefd[0]);
  if (result.timed_out) ::kill(pid, SIGTERM);
  auto code = reap_until(
      pid, Clock::now() + (result.timed_out ? std::chrono::seconds(10) : std::chrono::seconds(30)));
  if (!code) {
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    code = exit_code(status);
  }
  result.exit_code = *code;
  return result;
}

BackgroundCommand::BackgroundCommand(const std::vector<std::string>& argv, const EnvChanges& env)
    : pid_(spawn(argv, env, -1)) {}

bool BackgroundCommand::wait_exit(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return true;
  if (reap_until(pid_, Clock::now() + timeout)) {
    pid_ = -1;
    return true;
  }
  return false;
}

BackgroundCommand::~BackgroundCommand() {
  if (pid_ > 0 && !wait_exit(std::chrono::milliseconds(0))) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

}  // namespace psrt::bench
