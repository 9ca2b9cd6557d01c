// psrun's flags for what a failure does to the job: --on-worker-loss (PSRT_ON_WORKER_LOSS) and
// --max-restarts.
#pragma once

#include <string>

namespace CLI {  // NOLINT(readability-identifier-naming): CLI11 names it
class App;
}

namespace psrt::psrun {

struct FaultFlags {
  std::string on_worker_loss;  // stop | continue; empty: PSRT_ON_WORKER_LOSS
  // A failed job (a process failed or was lost) is stopped and started again, from the latest
  // complete checkpoint of --checkpoint-dir, up to this many times.
  int max_restarts = 0;
};

void add_fault_flags(CLI::App& app, FaultFlags& flags);

// After parsing: fills the defaults from the environment and checks the flags against the
// launcher. Throws psrt::Error(kInvalidArgument) naming the flag and why (a bad
// PSRT_ON_WORKER_LOSS; continue with --launcher mpi or slurm, whose engine ends the whole job
// when one of its processes fails).
void finish_fault_flags(FaultFlags& flags, const std::string& launcher);

}  // namespace psrt::psrun
