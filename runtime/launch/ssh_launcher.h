// The `ssh` launch backend: every server and worker of the job runs on its ProcessSpec::host,
// started through `ssh HOST` (non-interactive, BatchMode=yes) as
//
//   ssh [--ssh-args] -T -o BatchMode=yes -o ServerAliveInterval=S -o ServerAliveCountMax=3 HOST
//       -- exec PSRUN --internal-remote --cwd DIR --keepalive-timeout-ms T -- COMMAND ARGS...
//
// PSRUN is this psrun's own path: psrun and COMMAND must be at the same paths on every host (a
// shared filesystem or the same install, as with mpirun). DIR is psrun's working directory:
// COMMAND runs there on a host that has it (relative paths mean the same as on psrun's host),
// else in the login directory, where a program given relative to DIR is refused. The environment
// (the spec's PSRT_* variables, the job secret among them, and psrun's own PSRT_* and UCX_*
// variables) goes over ssh's stdin, never on a command line; runtime/launch/remote_side.h describes
// the remote end. The local ssh processes are run by the local backend (local_launcher.h), so
// output, failures and the end of the job behave as there, plus:
//  - output lines are prefixed "[worker 3@host]"; a failure names the process and its host;
//    ssh's own exit status 255 (cannot connect, connection lost) is said as such;
//  - SIGINT/SIGTERM reach the remote command as the same signal (a line on stdin); SIGKILL of
//    the local ssh (at the end of the job, or when psrun itself is SIGKILLed: the ssh processes
//    die with it) closes the connection, and the remote side then kills COMMAND's process group;
//  - a host whose link goes down is noticed by ssh within ServerAliveInterval * 3 (S is
//    PSRT_PEER_TIMEOUT_MS / 3, at least 1 s) on psrun's side, and within T (PSRT_PEER_TIMEOUT_MS)
//    on the remote side, which stops its command when psrun's keepalives stop coming.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "runtime/launch/launcher.h"

namespace psrt::launch {

struct SshOptions {
  std::vector<std::string> ssh_args;  // before psrun's own options: they win (ssh keeps the first)
  std::string remote_psrun;           // psrun's path on every host
  std::chrono::milliseconds keepalive_timeout{10'000};
  std::string ssh = "ssh";  // the ssh client program
  // Non-empty: the remote command runs in this directory where the host has it (--cwd,
  // remote_side.h): psrun's working directory.
  std::string cwd{};
};

// The local process that runs `remote` on remote.host through ssh (label "LABEL@HOST", the
// environment on stdin). Throws psrt::Error(kInvalidArgument) for a spec without a host or an
// environment value with a newline.
ProcessSpec ssh_process(const ProcessSpec& remote, const SshOptions& options);

// What --dry-run prints: per host, each process's ssh command line and the names and values of
// the environment it gets on stdin (the secret shown as <secret: N characters>).
std::string describe_ssh_job(const JobSpec& job, const SshOptions& options);

class SshLauncher final : public LaunchBackend {
 public:
  explicit SshLauncher(SshOptions options) : options_(std::move(options)) {}
  std::string_view name() const override { return "ssh"; }
  int run(const JobSpec& job) override;

 private:
  SshOptions options_;
};

}  // namespace psrt::launch
