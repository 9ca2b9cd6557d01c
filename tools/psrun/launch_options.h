// psrun's flags for the engine launch backends (--launcher mpi|slurm): --mpirun-args and
// --srun-args here; -H/--hostfile/--dry-run are shared with --launcher ssh (ssh_options.h).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "runtime/launch/launcher.h"
#include "tools/psrun/ssh_options.h"

namespace CLI {  // NOLINT(readability-identifier-naming): CLI11 names it
class App;
}

namespace psrt::tools {

struct EngineFlags {
  std::string mpirun_args;  // --mpirun-args, split on spaces
  std::string srun_args;    // --srun-args, split on spaces
};

void add_engine_flags(CLI::App& app, EngineFlags& flags);

// Throws psrt::Error(kInvalidArgument) naming a flag that does not fit `launcher` (mpi or
// slurm): --server-hosts/--ssh-args (ssh only), -H/--hostfile with slurm, --mpirun-args without
// mpi, --srun-args without slurm.
void check_engine_flags(const std::string& launcher, const psrun::SshFlags& hosts,
                        const EngineFlags& flags);

// The job's hosts as far as psrun knows them before the engine places anything (mpi: -H /
// --hostfile; slurm: the allocation's SLURM_JOB_NODELIST), as a placement whose route the
// scheduler's interface follows; nullopt when unknown.
std::optional<psrun::Placement> engine_hosts(const std::string& launcher,
                                             const psrun::SshFlags& hosts);

// The mpi or slurm backend for these flags (-H/--hostfile/--dry-run from `hosts`).
std::unique_ptr<runtime::LaunchBackend> make_engine_backend(const std::string& launcher,
                                                            const psrun::SshFlags& hosts,
                                                            const EngineFlags& flags);

}  // namespace psrt::tools
