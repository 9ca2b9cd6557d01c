// psrun's flags for what a failure does to the job: --on-worker-loss (PSRT_ON_WORKER_LOSS),
// --max-restarts and --min-workers.
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
  // --min-workers M: a restart that finds hosts lost (ssh) drops their workers instead of moving
  // them, when at least M workers remain; 0 moves them (tools/psrun/host_loss.h).
  int min_workers = 0;
};

void add_fault_flags(CLI::App& app, FaultFlags& flags);

// After parsing: fills the defaults from the environment and checks the flags against the
// launcher. Throws psrt::Error(kInvalidArgument) naming the flag and why (a bad
// PSRT_ON_WORKER_LOSS; continue with --launcher mpi or slurm, whose engine ends the whole job
// when one of its processes fails).
void finish_fault_flags(FaultFlags& flags, const std::string& launcher);

// Checks --min-workers against the job: only with --launcher ssh and --max-restarts, at most
// `workers`, more than `backup_workers`. Throws psrt::Error(kInvalidArgument) naming the flag,
// the cause and the fix.
void check_min_workers(const FaultFlags& flags, const std::string& launcher, int workers,
                       int backup_workers);

}  // namespace psrt::psrun
