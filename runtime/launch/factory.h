// The launch backends by name, each from the options it reads:
//
//   local   every process a child of psrun on this host (local_launcher.h)
//   ssh     each process on its ProcessSpec::host through ssh (ssh_launcher.h)
//   mpi     OpenMPI's mpirun starts them (engine_launcher.h)
//   slurm   srun starts them, inside an allocation (engine_launcher.h)
//
//   psrt::launch::LaunchOptions o;
//   o.hosts = "n1:2,n2:2";
//   return psrt::launch::make_launch_backend("mpi", o)->run(job);
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/launch/launcher.h"
#include "runtime/launch/ssh_launcher.h"

namespace psrt::launch {

struct LaunchOptions {
  std::string hosts;                    // mpi: mpirun's -H (ssh: ProcessSpec::host says where)
  std::string hostfile;                 // mpi: mpirun's --hostfile
  std::vector<std::string> ssh_args;    // ssh: before psrun's own ssh options
  std::vector<std::string> extra_args;  // mpi, slurm: given to mpirun / srun before the program
  std::string self;                     // ssh: psrun's path on every host
  std::string cwd;                      // ssh: where commands run on hosts that have it
  std::chrono::milliseconds keepalive_timeout{10'000};  // ssh (PSRT_PEER_TIMEOUT_MS)
  bool dry_run = false;  // mpi, slurm: print the engine's command, start nothing
};

// The ssh backend's options among `options` (for describe_ssh_job, ssh_launcher.h).
SshOptions ssh_options_of(const LaunchOptions& options);

// Throws psrt::Error(kInvalidArgument) naming the known backends for another name, and for
// `slurm` outside an allocation (engine_launcher.h).
std::unique_ptr<LaunchBackend> make_launch_backend(std::string_view name,
                                                   const LaunchOptions& options = {});

}  // namespace psrt::launch
