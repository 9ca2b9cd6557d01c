// The `local` launch backend: every process of the job is a child of psrun on this host.
//
//   psrt::launch::LocalLauncher launcher;          // prefixed output to psrun's stdout/stderr
//   psrt::launch::JobSpec job;
//   job.services.push_back({"scheduler", {"psrt-scheduler"}, {{"PSRT_ROLE", "scheduler"}}});
//   job.workers.push_back({"worker 0", {"python", "train.py"}, {{"PSRT_RANK", "0"}}});
//   return launcher.run(job);                       // psrun's exit status
#pragma once

#include <unistd.h>

#include <string_view>

#include "runtime/launch/launcher.h"

namespace psrt::launch {

// How run() treats the processes, beyond LaunchBackend::run's contract:
//  - Services start first, in order, then workers; a process that cannot be started ("cannot run
//    'foo': No such file or directory") fails the job before the rest start.
//  - Each process runs in its own process group, with stdin on /dev/null (a spec with stdin_data:
//    a pipe that gets those bytes; a relay spec also gets a keepalive line every second and
//    SIGINT/SIGTERM/SIGHUP as "S<n>" lines instead of signals, see ProcessSpec). Signals meant for
//    the job (a terminal's Ctrl-C reaches psrun alone) go to the whole group of every process.
//  - Each line a process writes to stdout (stderr) appears on out_fd (err_fd) as
//    "[<label>] <line>\n", whole; a last line without newline is written with one.
//  - The job fails at the first process that exits non-zero or by a signal. A service that exits
//    with status 0 while workers still run fails it too, unless every worker exits 0 within
//    service_grace of that (a scheduler that releases the workers from their final barrier exits
//    as they do, and may be seen to exit first). Exactly one line on err_fd says which process:
//    "psrun: server 0 (pid 1234) exited with status 0; stopping the job". The rest get SIGTERM,
//    then SIGKILL after kill_grace. run() returns 1, or 128+signal after a forwarded signal.
//  - A worker whose ProcessSpec::may_fail is set and that fails is reported ("psrun: worker 2 (pid
//  1234) was
//    killed by signal 9 (SIGKILL); the job goes on without it (--on-worker-loss continue)")
//    and the rest go on; "every worker exited 0" below then means every worker that did not
//    fail, and the job fails as above only when the last worker fails.
//  - When every worker exited 0, job.on_workers_done runs (on the calling thread; an exception
//    from it fails the job), then services that have not exited after service_grace are named on
//    err_fd ("psrun: warning: ...") and stopped the same way; run() still returns 0. A service that
//    exits non-zero or by a signal after the workers are done fails the job.
//  - A second SIGINT/SIGTERM while the job is stopping sends SIGKILL at once.
//  - Before run() returns, every process group it created gets SIGKILL (this ends what the
//    processes left running in the background) and every child is reaped. The only wait without
//    a deadline is for a write to a blocking out_fd/err_fd.
// run() blocks the calling thread. While it runs it owns the process's SIGINT, SIGTERM, SIGHUP,
// SIGCHLD and SIGPIPE dispositions (restored on return; signals already ignored stay ignored), so
// one run() at a time per process: a second concurrent call throws psrt::Error(kInvalidArgument).
// A spec with an empty argv or a bad env name throws psrt::Error(kInvalidArgument) before anything
// starts.
class LocalLauncher final : public LaunchBackend {
 public:
  // out_fd/err_fd: where prefixed output and psrun's own messages go; not owned, must stay open
  // while run() runs.
  explicit LocalLauncher(int out_fd = STDOUT_FILENO, int err_fd = STDERR_FILENO) noexcept
      : out_fd_(out_fd), err_fd_(err_fd) {}

  std::string_view name() const override { return "local"; }
  int run(const JobSpec& job) override;

 private:
  int out_fd_;
  int err_fd_;
};

}  // namespace psrt::launch
