// Starting one process of a job (spawn.h) in its own process group, with stdout and stderr on
// pipes and stdin on /dev/null or a pipe, and exec failures reported to the parent instead of as
// exit 127.
#pragma once

#include <sys/types.h>

#include <csignal>
#include <span>
#include <string>

#include "runtime/launch/launcher.h"
#include "runtime/launch/unique_fd.h"

namespace psrt::launch::detail {

struct SpawnedChild {
  pid_t pid = -1;        // also the id of the child's process group
  UniqueFd stdout_read;  // read ends of the child's stdout/stderr: non-blocking, close-on-exec
  UniqueFd stderr_read;
  UniqueFd stdin_write;  // with spec.stdin_data: the write end of its stdin (non-blocking)
};

struct SpawnOutcome {
  SpawnedChild child;  // valid when error is empty
  // Why the process could not be started, for a user: "cannot run 'foo': No such file or
  // directory". When set, nothing is left running and nothing needs reaping.
  std::string error;
};

// Starts `spec` through spawn() (spawn.h) and returns once the child has exec'd its command or
// failed to. With spec.stdin_data, its stdin is a pipe that gets those bytes (whole: they must fit
// the pipe, 64 KiB) and stays open in stdin_write; otherwise stdin is /dev/null. The child gets
// psrun's environment with `spec.env` set on top, argv[0] looked up in PATH when it has no '/',
// a new process group whose id is its pid, spec.cpus, the signal mask `child_mask`, and SIG_DFL
// for every signal in `reset_to_default` (signals psrun handles or ignores only while it runs).
// Descriptors of psrun other than 0-2 are not inherited. The child gets SIGKILL when the calling
// thread ends (PR_SET_PDEATHSIG), so a SIGKILLed psrun leaves no process of its job behind: call
// it from a thread that lives as long as the job.
SpawnOutcome spawn_child(const ProcessSpec& spec, const sigset_t& child_mask,
                         std::span<const int> reset_to_default);

// How a process ended, as waitid() reports it.
struct ExitStatus {
  bool signaled = false;  // killed by a signal (code is the signal) or exited (code is its status)
  int code = 0;
  bool lost = false;  // something else in psrun reaped it first: how it ended is unknown
  bool success() const noexcept { return !lost && !signaled && code == 0; }
};

// "exited with status 3", "was killed by signal 9 (SIGKILL)".
std::string describe(const ExitStatus& status);

// "SIGKILL"; strsignal()'s text for signals without an abbreviation.
std::string signal_name(int sig);

}  // namespace psrt::launch::detail
