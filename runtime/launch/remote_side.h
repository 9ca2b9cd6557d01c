// The remote end of an ssh-launched process: `psrun --internal-remote --keepalive-timeout-ms N
// -- COMMAND...`, started by sshd on a job's host. It ties COMMAND's life to psrun's:
//
//  - With `--cwd DIR` (psrun's working directory), COMMAND runs in DIR when this host has it, so
//    that `./prog` and relative arguments mean what they mean on psrun's host; else in the login
//    directory (said on stderr), and a program given relative to DIR (`./prog`, `bin/prog`) is
//    refused with exit status 127, naming the fix (an absolute path, or a shared directory).
//  - stdin (the ssh channel from psrun) first carries the environment, "NAME=VALUE" lines up to
//    an empty line, so that the job secret never appears on a command line; COMMAND gets the
//    login environment with those set on top.
//  - COMMAND runs in its own process group with stdin on /dev/null and dies with this process
//    (PR_SET_PDEATHSIG); its stdout/stderr go straight back through ssh.
//  - Afterwards stdin carries "\n" keepalives (psrun sends one a second) and "S<n>" lines: signal
//    n for COMMAND's process group (psrun forwarding SIGINT/SIGTERM).
//  - COMMAND's whole process group gets SIGKILL when stdin ends (psrun killed, ssh killed, the
//    connection dropped), when no keepalive came for the timeout (the link to psrun's host is
//    down: ssh may not notice for hours), or when this process gets SIGTERM/SIGHUP/SIGINT
//    (sshd closing the session). Each is said on stderr, naming this host.
//  - The exit status is COMMAND's (128 + n when killed by signal n, said on stderr since ssh
//    cannot pass a signal on); 1 when it was stopped for one of the reasons above.
#pragma once

namespace psrt::launch {

// argv: everything after "--internal-remote". Returns the process's exit status.
int run_remote_side(int argc, char** argv);

}  // namespace psrt::launch
