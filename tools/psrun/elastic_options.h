// psrun's flags for jobs whose workers change pace or number (docs/elastic.md):
// --backup-workers (PSRT_BACKUP_WORKERS), --join-file and --join (tools/psrun/join.h).
#pragma once

#include <string>

namespace CLI {  // NOLINT(readability-identifier-naming): CLI11 names it
class App;
}

namespace psrt::psrun {

struct ElasticFlags {
  // Sync rounds run once all but this many workers' gradients arrived; late ones are dropped.
  // -1: PSRT_BACKUP_WORKERS.
  int backup_workers = -1;
  std::string join_file;  // --join-file: where the job's worker environment is written
  std::string join;       // --join: run COMMAND as a worker joining the job of this file
};

void add_elastic_flags(CLI::App& app, ElasticFlags& flags);

// After parsing: fills the defaults from the environment and checks the flags against the job.
// Throws psrt::Error(kInvalidArgument) naming the flag and why (backup workers outside sync
// mode, as many as the workers, or with --replicas 2).
void finish_elastic_flags(ElasticFlags& flags, const std::string& mode, int workers, int replicas);

}  // namespace psrt::psrun
