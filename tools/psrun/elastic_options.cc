#include "tools/psrun/elastic_options.h"

#include <CLI/CLI.hpp>

#include "ps/consistency.h"
#include "runtime/env_contract.h"

namespace psrt::psrun {

void add_elastic_flags(CLI::App& app, ElasticFlags& flags) {
  app.add_option("--backup-workers", flags.backup_workers,
                 "sync mode: apply a round as soon as all but B workers' gradients arrived (the "
                 "mean divides by those applied); a gradient that arrives for a round already "
                 "applied is dropped and its worker pulls the new weights (docs/elastic.md); "
                 "default PSRT_BACKUP_WORKERS, else 0 (every round waits for every worker)")
      ->check(CLI::Range(0, 4095));
  app.add_option("--join-file", flags.join_file,
                 "write the job's worker environment (scheduler, secret, ...; chmod 600) to "
                 "FILE once the scheduler listens, for workers that join the running job with "
                 "psrun --join FILE; removed when the job ends");
  app.add_option("--join", flags.join,
                 "run COMMAND as one more worker of the running job whose --join-file is FILE: "
                 "it joins at a round boundary, pulls the current weights and takes part from "
                 "the next round (docs/elastic.md); every other job flag is ignored");
}

void finish_elastic_flags(ElasticFlags& flags, const std::string& mode, int workers, int replicas) {
  if (flags.backup_workers < 0)
    flags.backup_workers = static_cast<int>(runtime::env_int("PSRT_BACKUP_WORKERS", 0, 4095));
  ps::check_backup_workers(ps::parse_mode(mode), static_cast<std::uint32_t>(flags.backup_workers),
                           static_cast<std::uint32_t>(workers),
                           static_cast<std::uint32_t>(replicas));
}

}  // namespace psrt::psrun
