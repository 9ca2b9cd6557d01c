// Launch backends: start the processes of one job, watch them, and stop them together.
// `local` runs everything on this host; ssh/mpi/slurm backends implement the same interface;
// factory.h makes each by name.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace psrt::launch {

// Members have default initialisers so that designated initialisers may leave them out.
struct ProcessSpec {
  std::string label{};              // "scheduler", "server 0", "worker 3": prefixes output
  std::vector<std::string> argv{};  // argv[0] is looked up in PATH when it has no '/'
  std::vector<std::pair<std::string, std::string>> env{};  // set on top of psrun's environment
  std::string host{};  // where it runs, for placement and messages; empty = this host
  // Non-empty: the process's stdin is a pipe from psrun that gets these bytes at start and then
  // stays open for the whole job (the ssh backend sends the environment this way, never on a
  // command line). Empty: stdin is /dev/null.
  std::string stdin_data{};
  // The process relays for a remote one (ssh): psrun writes a keepalive "\n" to its stdin every
  // second, sends it SIGINT/SIGTERM/SIGHUP as a line "S<number>\n" on stdin instead of a signal
  // (the remote side forwards it), and only SIGKILL as a signal. Needs stdin_data.
  bool relay = false;
  // false: its output lines pass through as they are, for a process that prefixes its own
  // (mpirun or srun running `psrun --role-from-env`, whose lines say role, rank and host).
  bool prefix_output = true;
  // Non-empty: the process is bound to these CPUs (OS indexes) before exec (sched_setaffinity);
  // psrun's placement (runtime/placement/) fills it for processes on this host.
  std::vector<int> cpus{};
  // A process the job survives losing: a server with --replicas 2 (its backup takes over), a
  // worker with --on-worker-loss continue (the rounds go on with the others). Its failure is
  // reported on stderr and the job goes on; a job whose workers all failed fails all the same.
  bool may_fail = false;
};

struct JobSpec {
  // Started first, in order; expected to exit by themselves once every worker is done.
  std::vector<ProcessSpec> services;
  // The user's COMMAND, N copies.
  std::vector<ProcessSpec> workers;
  // After the last worker exits 0, services get this long to exit before they are stopped.
  std::chrono::milliseconds service_grace{10'000};
  // Runs once when every worker has exited 0, before the services' grace period starts (psrun
  // uses it to tell the servers the job is over).
  std::function<void()> on_workers_done;
  // Runs once, on the calling thread, when the job starts to stop before its end: a process
  // failed (`why` is the line psrun reports, without "psrun: ") or psrun got a signal. psrun uses
  // it to stop the scheduler with that reason, so every process gets SHUTDOWN naming it.
  std::function<void(const std::string& why)> on_stopping;
  // Between SIGTERM and SIGKILL when stopping processes.
  std::chrono::milliseconds kill_grace{3'000};
};

class LaunchBackend {
 public:
  virtual ~LaunchBackend() = default;
  virtual std::string_view name() const = 0;
  // Runs the job to its end and returns psrun's exit status: 0 when every worker exited 0 (and
  // services exited within service_grace), otherwise non-zero after reporting on stderr which
  // process failed and how ("psrun: worker 3 (pid 1234) was killed by signal 9 (SIGKILL);
  // stopping the job") and stopping the rest. SIGINT/SIGTERM received by psrun are forwarded to
  // every process; the job then ends with status 128+signal.
  virtual int run(const JobSpec& job) = 0;
};

}  // namespace psrt::launch
