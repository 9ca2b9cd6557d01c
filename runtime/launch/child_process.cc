#include "runtime/launch/child_process.h"

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
#include <optional>
#include <string>
#include <vector>

namespace psrt::runtime::detail {
namespace {

// What the child writes on its error pipe when it cannot exec: the step that failed and errno.
struct ExecFailure {
  int step;
  int error;
};
enum SetupStep : int {
  kStepSetpgid = 1,
  kStepDup = 2,
  kStepExec = 3,
  kStepDeathSignal = 4,
  kStepAffinity = 5
};

// Every descriptor the child receives must be >= 3, so that putting one on 0, 1 or 2 with dup2()
// can never overwrite another that has not been moved yet (psrun may run with 0-2 closed).
bool move_above_stdio(UniqueFd& fd) {
  if (fd.get() > STDERR_FILENO) return true;
  const int moved = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
  if (moved < 0) return false;
  fd.reset(moved);
  return true;
}

bool make_pipe(UniqueFd& read_end, UniqueFd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  read_end.reset(fds[0]);
  write_end.reset(fds[1]);
  return move_above_stdio(read_end) && move_above_stdio(write_end);
}

// "K=V" strings: psrun's environment with the spec's variables replacing or adding to it.
std::vector<std::string> build_environment(const ProcessSpec& spec) {
  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view kv(*entry);
    const std::string_view key = kv.substr(0, kv.find('='));
    bool overridden = false;
    for (const auto& [name, value] : spec.env) {
      overridden = overridden || name == key;
    }
    if (!overridden) env.emplace_back(kv);
  }
  for (const auto& [name, value] : spec.env) {
    std::string& entry = env.emplace_back(name);
    entry += '=';
    entry += value;
  }
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) {
    out.push_back(s.data());
  }
  out.push_back(nullptr);
  return out;
}

[[noreturn]] void child_fail(int error_pipe, int step) {
  const ExecFailure failure{step, errno};
  // A short write to a pipe of 8 bytes cannot happen; nothing else could be done about it here.
  (void)!::write(error_pipe, &failure, sizeof(failure));
  ::_exit(127);
}

// Runs in the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void exec_child(char* const* argv, char* const* envp, int null_fd, int out_fd,
                             int err_fd, int error_pipe, const sigset_t& child_mask,
                             std::span<const int> reset_to_default, pid_t launcher,
                             const cpu_set_t* cpus, std::size_t cpus_size) {
  // The child dies with psrun, even when psrun is SIGKILLed and cannot stop it. The signal
  // follows the thread that forked (the launcher's, which lives as long as the job). If psrun
  // died between fork and here, the child was already re-parented: no signal would come.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_fail(error_pipe, kStepDeathSignal);
  if (::getppid() != launcher) ::_exit(128 + SIGKILL);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (const int sig : reset_to_default) {
    ::sigaction(sig, &dfl, nullptr);
  }
  if (::setpgid(0, 0) != 0) child_fail(error_pipe, kStepSetpgid);
  if (cpus && ::sched_setaffinity(0, cpus_size, cpus) != 0) child_fail(error_pipe, kStepAffinity);
  if (::dup2(null_fd, STDIN_FILENO) < 0 || ::dup2(out_fd, STDOUT_FILENO) < 0 ||
      ::dup2(err_fd, STDERR_FILENO) < 0) {
    child_fail(error_pipe, kStepDup);
  }
  // psrun's own descriptors (sockets, log files, a test's capture files) stay with psrun. Best
  // effort: kernels before 5.11 lack the flag, and the descriptors are harmless if inherited.
  (void)::close_range(STDERR_FILENO + 1, ~0U, CLOSE_RANGE_CLOEXEC);
  ::sigprocmask(SIG_SETMASK, &child_mask, nullptr);
  ::execvpe(argv[0], argv, envp);
  child_fail(error_pipe, kStepExec);
}

// The CPUs a process is bound to (ProcessSpec::cpus), as sched_setaffinity takes them.
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

std::string quoted(const std::string& s) {
  return "'" + s + "'";
}

// Waits for the child's exec: the status pipe closes (exec succeeded) or brings the failed
// step. On a failure, reaps the child and returns the message naming the step and the cause.
std::optional<std::string> exec_failure(int status_fd, pid_t pid, const std::string& command,
                                        const std::vector<int>& cpus) {
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
  const int error = n == static_cast<ssize_t>(sizeof(failure)) ? failure.error : EIO;
  switch (n == static_cast<ssize_t>(sizeof(failure)) ? failure.step : 0) {
    case kStepExec:
      return "cannot run " + quoted(command) + ": " + std::strerror(error);
    case kStepDeathSignal:
      return "cannot start " + quoted(command) +
             ": prctl(PR_SET_PDEATHSIG): " + std::strerror(error);
    case kStepAffinity: {
      const std::string list = fmt::format("{}", fmt::join(cpus, ","));
      return "cannot start " + quoted(command) + ": binding it to CPUs " + list +
             " failed: sched_setaffinity: " + std::strerror(error) +
             " (CPUs this host lacks or psrun may not use; psrun --bind none leaves processes "
             "unbound)";
    }
    case kStepSetpgid:
      return "cannot start " + quoted(command) + ": setpgid: " + std::strerror(error);
    default:
      return "cannot start " + quoted(command) + ": " + std::strerror(error);
  }
}

// Writes `data` into the child's stdin pipe, then makes the pipe non-blocking.
void write_stdin(int fd, const std::string& data) {
  // Fits the empty pipe (64 KiB) whole: the write cannot block.
  const char* p = data.data();
  std::size_t left = data.size();
  while (left > 0) {
    const ssize_t w = ::write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;  // the child already exited: its exit is reported as usual
    p += w;
    left -= static_cast<std::size_t>(w);
  }
  const int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

}  // namespace

SpawnOutcome spawn_child(const ProcessSpec& spec, const sigset_t& child_mask,
                         std::span<const int> reset_to_default) {
  SpawnOutcome outcome;
  const std::string& command = spec.argv.at(0);
  const auto system_error = [&](const char* what) {
    outcome.error = "cannot start " + quoted(command) + ": " + what + ": " + std::strerror(errno);
    return std::move(outcome);
  };

  // Everything that allocates happens here, before fork.
  std::vector<std::string> args = spec.argv;
  std::vector<std::string> env = build_environment(spec);
  const std::vector<char*> argv = c_strings(args);
  const std::vector<char*> envp = c_strings(env);
  CpuSet cpus;
  if (!cpus.assign(spec.cpus)) return system_error("CPU_ALLOC");
  UniqueFd null_fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!null_fd.valid() || !move_above_stdio(null_fd)) return system_error("open /dev/null");
  UniqueFd in_read, in_write;
  if (!spec.stdin_data.empty()) {
    if (!make_pipe(in_read, in_write)) return system_error("pipe");
    null_fd = std::move(in_read);  // the child's stdin
  }
  UniqueFd out_read, out_write, err_read, err_write, status_read, status_write;
  if (!make_pipe(out_read, out_write) || !make_pipe(err_read, err_write) ||
      !make_pipe(status_read, status_write)) {
    return system_error("pipe");
  }

  // Signals stay blocked from fork until the child has reset its dispositions: otherwise a signal
  // for the job could run psrun's handler inside the child.
  sigset_t all, previous;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  const pid_t launcher = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    exec_child(argv.data(), envp.data(), null_fd.get(), out_write.get(), err_write.get(),
               status_write.get(), child_mask, reset_to_default, launcher, cpus.get(), cpus.size);
  }
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) {
    errno = fork_errno;
    return system_error("fork");
  }
  // Also here, so that the group exists before this returns whichever side runs first. EACCES
  // means the child has exec'd, which it does only after its own setpgid.
  (void)::setpgid(pid, pid);

  out_write.reset();
  err_write.reset();
  status_write.reset();
  if (auto error = exec_failure(status_read.get(), pid, command, spec.cpus)) {
    outcome.error = std::move(*error);
    return outcome;
  }

  for (UniqueFd* fd : {&out_read, &err_read}) {
    const int flags = ::fcntl(fd->get(), F_GETFL);
    ::fcntl(fd->get(), F_SETFL, flags | O_NONBLOCK);
  }
  null_fd.reset();
  if (in_write.valid()) write_stdin(in_write.get(), spec.stdin_data);
  outcome.child.pid = pid;
  outcome.child.stdin_write = std::move(in_write);
  outcome.child.stdout_read = std::move(out_read);
  outcome.child.stderr_read = std::move(err_read);
  return outcome;
}

std::string signal_name(int sig) {
  if (const char* abbrev = ::sigabbrev_np(sig)) return std::string("SIG") + abbrev;
  const char* text = ::strsignal(sig);
  return text != nullptr ? std::string(text) : "signal " + std::to_string(sig);
}

std::string describe(const ExitStatus& status) {
  if (status.lost) return "exited with an unknown status (reaped outside the launcher)";
  if (status.signaled) {
    return "was killed by signal " + std::to_string(status.code) + " (" + signal_name(status.code) +
           ")";
  }
  return "exited with status " + std::to_string(status.code);
}

}  // namespace psrt::runtime::detail
