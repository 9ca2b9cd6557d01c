#include "runtime/launch/spawn.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string_view>

#include "runtime/launch/unique_fd.h"

extern char** environ;

namespace psrt::launch {
namespace {

using detail::UniqueFd;
using Step = SpawnFailure::Step;

// What the child writes on its status pipe when it cannot exec: the step that failed and errno.
struct ExecFailure {
  Step step;
  int error;
};

// A descriptor the child gets must be >= 3, so that putting one on 0, 1 or 2 with dup2() can
// never overwrite another that has not been moved yet (the caller may run with 0-2 closed).
bool move_above_stdio(UniqueFd& fd) {
  if (fd.get() > STDERR_FILENO) return true;
  const int moved = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
  if (moved < 0) return false;
  fd.reset(moved);
  return true;
}

// "K=V" strings: our environment less the names `changes` holds, then its sets in order.
std::vector<std::string> build_environment(const EnvChanges& changes) {
  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view kv(*entry);
    const std::string_view key = kv.substr(0, kv.find('='));
    const bool changed = std::any_of(changes.begin(), changes.end(),
                                     [&](const auto& change) { return change.first == key; });
    if (!changed) env.emplace_back(kv);
  }
  for (const auto& [name, value] : changes) {
    if (!value) continue;
    std::string& entry = env.emplace_back(name);
    entry += '=';
    entry += *value;
  }
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings)
    out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The CPUs a process is bound to, as sched_setaffinity takes them.
struct CpuSet {
  std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> set{nullptr, [](cpu_set_t* p) { CPU_FREE(p); }};
  std::size_t size = 0;
  // false when the set cannot be allocated; an empty `cpus` leaves it null (not bound).
  bool assign(const std::vector<int>& cpus) {
    if (cpus.empty()) return true;
    const int count = *std::max_element(cpus.begin(), cpus.end()) + 1;
    set.reset(CPU_ALLOC(count));
    if (!set) return false;
    size = CPU_ALLOC_SIZE(count);
    CPU_ZERO_S(size, set.get());
    for (const int c : cpus)
      if (c >= 0) CPU_SET_S(static_cast<std::size_t>(c), size, set.get());
    return true;
  }
  const cpu_set_t* get() const { return set.get(); }
};

// Everything the child needs, prepared before fork: it may not allocate after.
struct ChildPlan {
  char* const* argv;
  char* const* envp;
  int fds[3];  // for 0, 1, 2; -1: leave it as it is
  int status_pipe;
  const SpawnRequest* request;
  const sigset_t* mask;
  pid_t parent;
  const CpuSet* cpus;
};

[[noreturn]] void child_fail(int status_pipe, Step step) {
  const ExecFailure failure{step, errno};
  // A short write of 8 bytes to a pipe cannot happen; nothing else could be done about it here.
  (void)!::write(status_pipe, &failure, sizeof(failure));
  ::_exit(127);
}

// Runs in the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void exec_child(const ChildPlan& c) {
  const SpawnRequest& r = *c.request;
  if (r.die_with_parent) {
    // The signal follows the thread that forked. If the parent died between fork and here, the
    // child was already re-parented: no signal would come.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_fail(c.status_pipe, Step::kDeathSignal);
    if (::getppid() != c.parent) ::_exit(128 + SIGKILL);
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (const int sig : r.reset_to_default)
    ::sigaction(sig, &dfl, nullptr);
  if (r.own_group && ::setpgid(0, 0) != 0) child_fail(c.status_pipe, Step::kGroup);
  if (c.cpus->get() && ::sched_setaffinity(0, c.cpus->size, c.cpus->get()) != 0)
    child_fail(c.status_pipe, Step::kAffinity);
  for (int target = 0; target < 3; ++target)
    if (c.fds[target] >= 0 && ::dup2(c.fds[target], target) < 0)
      child_fail(c.status_pipe, Step::kDup);
  // The caller's own descriptors (sockets, log files, a test's capture files) stay with it. Best
  // effort: kernels before 5.11 lack the flag, and the descriptors are harmless if inherited.
  (void)::close_range(STDERR_FILENO + 1, ~0U, CLOSE_RANGE_CLOEXEC);
  ::sigprocmask(SIG_SETMASK, c.mask, nullptr);
  ::execvpe(c.argv[0], c.argv, c.envp);
  child_fail(c.status_pipe, Step::kExec);
}

// Waits for the child's exec: the status pipe closes (exec succeeded) or brings the failed step.
// On a failure, reaps the child.
std::optional<SpawnFailure> exec_failure(int status_fd, pid_t pid) {
  ExecFailure failure{};
  ssize_t n;
  do {
    n = ::read(status_fd, &failure, sizeof(failure));
  } while (n < 0 && errno == EINTR);
  if (n == 0) return std::nullopt;
  // The child reported a failure (or the pipe broke, which means it never reached exec).
  int status;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (n != static_cast<ssize_t>(sizeof(failure))) return SpawnFailure{Step::kSetup, EIO, ""};
  return SpawnFailure{failure.step, failure.error, ""};
}

// The caller's descriptor `fd` for the child (or /dev/null), in `keep` when it had to be moved
// or opened; -1 for kInheritFd.
bool child_fd(int fd, int flags, UniqueFd& keep, int& out) {
  if (fd == kInheritFd) {
    out = -1;
    return true;
  }
  if (fd == kNullFd) {
    keep.reset(::open("/dev/null", flags | O_CLOEXEC));
    if (!keep.valid() || !move_above_stdio(keep)) return false;
    out = keep.get();
    return true;
  }
  if (fd > STDERR_FILENO) {
    out = fd;
    return true;
  }
  keep.reset(::fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1));
  out = keep.get();
  return keep.valid();
}

std::string quoted(const std::string& s) {
  return "'" + s + "'";
}

}  // namespace

Spawned spawn(const SpawnRequest& request) {
  Spawned outcome;
  const auto setup_error = [&](const char* what) {
    outcome.failure = SpawnFailure{Step::kSetup, errno, what};
    return outcome;
  };
  // Everything that allocates happens here, before fork.
  std::vector<std::string> args = request.argv;
  (void)args.at(0);
  std::vector<std::string> env = build_environment(request.env);
  const std::vector<char*> argv = c_strings(args);
  const std::vector<char*> envp = c_strings(env);
  CpuSet cpus;
  if (!cpus.assign(request.cpus)) return setup_error("CPU_ALLOC");
  UniqueFd kept[3];
  int fds[3];
  const int in_flags[3] = {O_RDONLY, O_WRONLY, O_WRONLY};
  const int given[3] = {request.in, request.out, request.err};
  for (int i = 0; i < 3; ++i)
    if (!child_fd(given[i], in_flags[i], kept[i], fds[i]))
      return setup_error(given[i] == kNullFd ? "open /dev/null" : "fcntl");
  int status_fds[2];
  if (::pipe2(status_fds, O_CLOEXEC) != 0) return setup_error("pipe");
  UniqueFd status_read(status_fds[0]), status_write(status_fds[1]);
  if (!move_above_stdio(status_write)) return setup_error("fcntl");

  // Signals stay blocked from fork until the child has reset its dispositions: otherwise a signal
  // for the caller could run the caller's handler inside the child.
  sigset_t all, previous;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  const ChildPlan plan{argv.data(),        envp.data(), {fds[0], fds[1], fds[2]},
                       status_write.get(), &request,    request.mask ? request.mask : &previous,
                       ::getpid(),         &cpus};
  const pid_t pid = ::fork();
  if (pid == 0) exec_child(plan);
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) {
    outcome.failure = SpawnFailure{Step::kFork, fork_errno, "fork"};
    return outcome;
  }
  // Also here, so that the group exists before this returns whichever side runs first. EACCES
  // means the child has exec'd, which it does only after its own setpgid.
  if (request.own_group) (void)::setpgid(pid, pid);
  status_write.reset();
  outcome.failure = exec_failure(status_read.get(), pid);
  if (!outcome.failure) outcome.pid = pid;
  return outcome;
}

std::string describe(const SpawnFailure& failure, const std::string& command,
                     const std::vector<int>& cpus) {
  const std::string cause = std::strerror(failure.error);
  switch (failure.step) {
    case Step::kExec:
      return "cannot run " + quoted(command) + ": " + cause;
    case Step::kDeathSignal:
      return "cannot start " + quoted(command) + ": prctl(PR_SET_PDEATHSIG): " + cause;
    case Step::kAffinity:
      return "cannot start " + quoted(command) + ": binding it to CPUs " +
             fmt::format("{}", fmt::join(cpus, ",")) + " failed: sched_setaffinity: " + cause +
             " (CPUs this host lacks or psrun may not use; psrun --bind none leaves processes "
             "unbound)";
    case Step::kGroup:
      return "cannot start " + quoted(command) + ": setpgid: " + cause;
    case Step::kSetup:
    case Step::kFork:
      if (!failure.what.empty())
        return "cannot start " + quoted(command) + ": " + failure.what + ": " + cause;
      break;
    case Step::kDup:
      break;
  }
  return "cannot start " + quoted(command) + ": " + cause;
}

}  // namespace psrt::launch
