// The signals psrun acts on while a local job runs: SIGINT, SIGTERM and SIGHUP (to forward) and
// SIGCHLD (to notice exits), turned into readable bytes on a self-pipe so that the job's poll()
// loop sees them. The handler only sets a flag and writes one byte.
#pragma once

#include <csignal>
#include <vector>

#include "runtime/launch/unique_fd.h"

namespace psrt::launch::detail {

class SignalWatch {
 public:
  // Installs the handlers (process-wide; SA_RESTART) and ignores SIGPIPE, so that a closed
  // stdout does not kill psrun while it owns children. A signal that was ignored when this was
  // constructed stays ignored (psrun under nohup, or started in the background by a script).
  // Throws psrt::Error(kInvalidArgument) when another SignalWatch exists in the process, and
  // psrt::Error(kSystem) when the self-pipe cannot be made.
  SignalWatch();
  // Puts back the dispositions found at construction.
  ~SignalWatch();
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;

  // Readable whenever a signal has arrived since the last drain_wakeups().
  int wake_fd() const noexcept { return wake_read_.get(); }
  void drain_wakeups();

  // SIGINT/SIGTERM/SIGHUP received since the last call, each once, in that order.
  std::vector<int> take_received();

  // Signals whose disposition this changed: a child resets them to SIG_DFL before exec.
  const std::vector<int>& changed() const noexcept { return changed_; }

 private:
  struct Saved {
    int sig;
    struct sigaction action;
  };
  UniqueFd wake_read_;
  UniqueFd wake_write_;
  std::vector<Saved> saved_;
  std::vector<int> changed_;
};

}  // namespace psrt::launch::detail
