// The `mpi` and `slurm` launch backends: the engine (OpenMPI's mpirun, Slurm's srun) starts one
// process per server and worker, each `psrun --role-from-env -- COMMAND`, which takes its role
// from the engine's rank (runtime/engine_env.h: global ranks 0..S-1 are the servers, the rest
// the workers) and prefixes its own output ("[worker 3@node2] ..."). The scheduler stays in psrun
// (PSRT_SCHEDULER is set, so no rank hosts one).
//
//   auto mpi = psrt::launch::make_mpi_launcher({.host_args = {"-H", "n1:2,n2:2"}});
//   return mpi->run(job);  // job as psrun builds it for the local backend
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/launch/launcher.h"

namespace psrt::launch {

struct EngineLaunchOptions {
  std::vector<std::string> host_args;   // mpi: {"-H", "a:2,b:2"} or {"--hostfile", F}
  std::vector<std::string> extra_args;  // given to mpirun / srun before the program
  bool dry_run = false;                 // print what would be started, start nothing
  std::string program;                  // "mpirun" / "srun" unless set (a path, for tests)
};

// The engine's command line (argv) and the environment it is given, for `job` as psrun builds
// it for the local backend: its services are the servers (argv[0] is psrun itself), its workers
// the N copies of COMMAND, each with the job's PSRT_* environment plus PSRT_ROLE/PSRT_RANK.
// Throws psrt::Error(kInvalidArgument) for a job with no worker or no server.
ProcessSpec mpirun_spec(const JobSpec& job, const EngineLaunchOptions& options);
ProcessSpec srun_spec(const JobSpec& job, const EngineLaunchOptions& options);

// Runs the engine's one command under a LocalLauncher (its output passes through unprefixed;
// psrun names the engine when it fails), or with dry_run prints the command, the environment
// names it passes and the rank layout to stdout and returns 0. OpenMPI as root gets
// --allow-run-as-root; `slurm` needs an allocation (SLURM_JOB_ID), else throws saying how to get
// one.
std::unique_ptr<LaunchBackend> make_mpi_launcher(EngineLaunchOptions options);
std::unique_ptr<LaunchBackend> make_slurm_launcher(EngineLaunchOptions options);

}  // namespace psrt::launch
