#include "child_command.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <thread>

#include "base/sys_check.h"
#include "psrt/error.h"
#include "runtime/launch/spawn.h"

namespace psrt::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Started through runtime/launch/spawn.h, stdout and stderr to `out_fd` (-1: /dev/null).
pid_t spawn(const std::vector<std::string>& argv, const EnvChanges& env, int out_fd) {
  launch::SpawnRequest r;
  r.argv = argv;
  r.env = env;
  r.in = launch::kNullFd;
  r.out = r.err = out_fd >= 0 ? out_fd : launch::kNullFd;
  const launch::Spawned s = launch::spawn(r);
  if (s.failure) {
    throw Error(ErrorCode::kSystem,
                "cannot start " + argv.at(0) + ": " + std::strerror(s.failure->error));
  }
  return s.pid;
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
