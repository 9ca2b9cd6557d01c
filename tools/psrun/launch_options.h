// psrun's flags for the engine launch backends (--launcher mpi|slurm): --mpirun-args and
// --srun-args here; -H/--hostfile/--dry-run are shared with --launcher ssh (ssh_options.h). And
// what every backend of runtime/launch/factory.h is made from: psrun's flags as LaunchOptions.
#pragma once

#include <optional>
#include <string>

#include "runtime/launch/factory.h"
#include "runtime/launch/host_assignment.h"
#include "tools/psrun/ssh_options.h"

namespace CLI {  // NOLINT(readability-identifier-naming): CLI11 names it
class App;
}

namespace psrt::psrun {

struct EngineFlags {
  std::string mpirun_args;  // --mpirun-args, split on spaces
  std::string srun_args;    // --srun-args, split on spaces
};

void add_engine_flags(CLI::App& app, EngineFlags& flags);

// Throws psrt::Error(kInvalidArgument) naming a flag that does not fit `launcher` (mpi or
// slurm): --server-hosts/--ssh-args (ssh only), -H/--hostfile with slurm, --mpirun-args without
// mpi, --srun-args without slurm.
void check_engine_flags(const std::string& launcher, const SshFlags& hosts,
                        const EngineFlags& flags);

// The job's hosts as far as psrun knows them before the engine places anything (mpi: -H /
// --hostfile; slurm: the allocation's SLURM_JOB_NODELIST), as a placement whose route the
// scheduler's interface follows; nullopt when unknown.
std::optional<launch::HostAssignment> engine_hosts(const std::string& launcher,
                                                   const SshFlags& hosts);

// The options of `launcher`'s backend (runtime/launch/factory.h) from psrun's flags: -H,
// --hostfile and --dry-run for mpi, --ssh-args for ssh, --mpirun-args / --srun-args; `self` is
// psrun's own path (what every host of an ssh job runs), the ssh keepalive timeout
// PSRT_PEER_TIMEOUT_MS, and psrun's working directory where the ssh job's commands run.
launch::LaunchOptions launch_options(const std::string& launcher, const SshFlags& hosts,
                                     const EngineFlags& flags, const std::string& self);

}  // namespace psrt::psrun
