#include "runtime/launch/child_process.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "runtime/launch/spawn.h"

namespace psrt::launch::detail {
namespace {

bool make_pipe(UniqueFd& read_end, UniqueFd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  read_end.reset(fds[0]);
  write_end.reset(fds[1]);
  return true;
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
    outcome.error = "cannot start '" + command + "': " + what + ": " + std::strerror(errno);
    return std::move(outcome);
  };
  UniqueFd in_read, in_write, out_read, out_write, err_read, err_write;
  if ((!spec.stdin_data.empty() && !make_pipe(in_read, in_write)) ||
      !make_pipe(out_read, out_write) || !make_pipe(err_read, err_write)) {
    return system_error("pipe");
  }
  SpawnRequest request;
  request.argv = spec.argv;
  request.env.reserve(spec.env.size());
  for (const auto& [name, value] : spec.env)
    request.env.emplace_back(name, value);
  request.in = in_read.valid() ? in_read.get() : kNullFd;
  request.out = out_write.get();
  request.err = err_write.get();
  request.own_group = true;
  request.die_with_parent = true;
  request.cpus = spec.cpus;
  request.mask = &child_mask;
  request.reset_to_default = reset_to_default;
  const Spawned spawned = spawn(request);
  if (spawned.failure) {
    outcome.error = launch::describe(*spawned.failure, command, spec.cpus);
    return outcome;
  }
  out_write.reset();
  err_write.reset();
  in_read.reset();
  for (UniqueFd* fd : {&out_read, &err_read}) {
    const int flags = ::fcntl(fd->get(), F_GETFL);
    ::fcntl(fd->get(), F_SETFL, flags | O_NONBLOCK);
  }
  if (in_write.valid()) write_stdin(in_write.get(), spec.stdin_data);
  outcome.child.pid = spawned.pid;
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

}  // namespace psrt::launch::detail
