// Helpers shared by the integration tests that run whole jobs (psrun + ps_worker) on 127.0.0.1:
// a per-process scratch directory (removed after the last test), reading files, counting
// matches, and running psrun (through std::system, bounded in a process group, or in the
// background).
//
// The including test defines PSRT_SCRATCH_PREFIX (the scratch directory's name before the pid,
// e.g. "psrt_job_test_"), and its target defines PSRUN_PATH.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#ifndef PSRT_SCRATCH_PREFIX
#error "define PSRT_SCRATCH_PREFIX before including tests/integration/job_runner.h"
#endif

namespace psrt::test {

// This process's scratch directory.
inline std::filesystem::path scratch_root() {
  return std::filesystem::temp_directory_path() /
         (PSRT_SCRATCH_PREFIX + std::to_string(::getpid()));
}

// Removes this process's scratch directory after the last test.
struct RemoveScratch : ::testing::Environment {
  void TearDown() override { std::filesystem::remove_all(scratch_root()); }
};
[[maybe_unused]] inline ::testing::Environment* const remove_scratch =
    ::testing::AddGlobalTestEnvironment(new RemoveScratch);

// A fresh (removed) path `name` in the scratch directory.
inline std::filesystem::path scratch(const std::string& name) {
  auto dir = scratch_root();
  std::filesystem::create_directories(dir);
  auto p = dir / name;
  std::filesystem::remove_all(p);
  return p;
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (auto p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1))
    ++n;
  return n;
}

// A finished psrun: exit code (128 + signal when killed), output, and how long it ran.
struct Run {
  int rc = -1;
  std::string out;
  double seconds = 0;
  int count(const std::string& needle) const { return psrt::test::count(out, needle); }
};

inline int exit_code(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// `PREFIX psrun ARGS -- WORKER` (PREFIX: environment assignments, `exec`, ...).
inline std::string psrun_command(const std::string& prefix, const std::string& args,
                                 const std::string& worker) {
  return prefix + " " + std::string(PSRUN_PATH) + " " + args + " -- " + worker;
}

// `sh -c CMD` in its own process group (output to `log` when given), so that the whole job can
// be killed on a failure: the group is killed at the end unless it was reaped.
class ProcessGroup {
 public:
  explicit ProcessGroup(const std::string& cmd, std::filesystem::path log = {})
      : log_(std::move(log)) {
    const std::string full = log_.empty() ? cmd : cmd + " > " + log_.string() + " 2>&1";
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::execl("/bin/sh", "sh", "-c", full.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;
  ~ProcessGroup() {
    if (pid_ > 0 && !reaped_) kill();
    for (pid_t c : children_)
      ::kill(c, SIGKILL);
  }
  pid_t pid() const { return pid_; }
  // The exit code (128 + signal when killed), or -1 when it did not end within `limit`.
  int wait(std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return exit_code(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }
  // Kills the whole group and reaps it; its exit code.
  int kill() {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    return exit_code(status);
  }
  // The shell's children once there are `n` of them (empty on timeout).
  std::vector<pid_t> wait_children(std::size_t n, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      std::istringstream in(
          slurp("/proc/" + std::to_string(pid_) + "/task/" + std::to_string(pid_) + "/children"));
      std::vector<pid_t> pids;
      for (pid_t p; in >> p;)
        pids.push_back(p);
      if (pids.size() >= n) {
        children_ = pids;
        return pids;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return {};
  }
  std::string out() const { return slurp(log_); }

 private:
  std::filesystem::path log_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  std::vector<pid_t> children_;
};

// Runs `ENV psrun ARGS -- WORKER` through std::system, output captured in scratch "out.txt".
inline Run run_psrun(const std::string& env, const std::string& args, const std::string& worker) {
  auto log = scratch("out.txt");
  const std::string cmd = psrun_command(env, args, worker) + " > " + log.string() + " 2>&1";
  const auto start = std::chrono::steady_clock::now();
  const int status = std::system(cmd.c_str());
  Run r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.rc = exit_code(status);
  r.out = slurp(log);
  return r;
}

// `sh -c "PREFIX exec psrun ARGS -- WORKER"` in its own process group, output captured in
// scratch "out.txt"; bounded by `timeout` (the whole group is killed past it, a test failure).
inline Run run_psrun_bounded(const std::string& prefix, const std::string& args,
                             const std::string& worker, std::chrono::seconds timeout) {
  auto log = scratch("out.txt");
  ProcessGroup job(psrun_command(prefix + " exec", args, worker), log);
  Run r;
  r.rc = job.wait(timeout);
  if (r.rc < 0) {
    r.rc = job.kill();
    ADD_FAILURE() << "psrun did not end within " << timeout.count() << " s";
  }
  r.out = slurp(log);
  return r;
}

// A TCP port on 127.0.0.1 that the kernel just handed out and took back: free for a scheduler
// the test starts, barring a race with another process.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) ADD_FAILURE() << "socket: " << std::strerror(errno);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    ADD_FAILURE() << "no free port on 127.0.0.1: " << std::strerror(errno);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace psrt::test
