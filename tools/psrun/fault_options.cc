#include "tools/psrun/fault_options.h"

#include <CLI/CLI.hpp>

#include "psrt/error.h"
#include "runtime/env_contract.h"

namespace psrt::psrun {

void add_fault_flags(CLI::App& app, FaultFlags& flags) {
  app.add_option(
         "--on-worker-loss", flags.on_worker_loss,
         "what a worker lost without leaving (killed, crashed, its host gone) does to the job: "
         "stop (the job ends naming it) | continue (it is dropped like a worker that "
         "left; rounds go on with the live workers); default PSRT_ON_WORKER_LOSS, else "
         "stop")
      ->check(CLI::IsMember({"stop", "continue"}));
  app.add_option("--max-restarts", flags.max_restarts,
                 "when the job fails (a process exits non-zero, is killed or lost), stop what is "
                 "left and start the whole job again from the latest complete checkpoint of "
                 "--checkpoint-dir, up to K times (PSRT_RESTART_COUNT and PSRT_RESUME_ROUND tell "
                 "the processes); 0 = never")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  app.add_option("--min-workers", flags.min_workers,
                 "with --max-restarts and --launcher ssh: a restart that finds hosts lost (not "
                 "answering ssh) goes on without their workers when at least M workers remain "
                 "(their servers move to the other hosts); the job resumes from its checkpoint "
                 "with fewer workers (PSRT_NUM_WORKERS), which re-shards the data (docs/"
                 "elastic.md); fewer than M left ends psrun naming both; 0 = move the lost "
                 "hosts' workers to the others instead")
      ->check(CLI::Range(0, 65536))
      ->capture_default_str();
}

void finish_fault_flags(FaultFlags& flags, const std::string& launcher) {
  if (flags.on_worker_loss.empty()) {
    flags.on_worker_loss = runtime::env_string("PSRT_ON_WORKER_LOSS");
    if (flags.on_worker_loss != "stop" && flags.on_worker_loss != "continue")
      throw Error(ErrorCode::kInvalidArgument,
                  "PSRT_ON_WORKER_LOSS='" + flags.on_worker_loss + "' is not stop or continue");
  }
  if (flags.on_worker_loss == "continue" && (launcher == "mpi" || launcher == "slurm"))
    throw Error(ErrorCode::kInvalidArgument,
                "--on-worker-loss continue needs --launcher local or ssh: with --launcher " +
                    launcher + " the engine ends the whole job when one of its processes fails");
}

void check_min_workers(const FaultFlags& flags, const std::string& launcher, int workers,
                       int backup_workers) {
  const int m = flags.min_workers;
  if (m == 0) return;
  auto refuse = [m](const std::string& why) {
    throw Error(ErrorCode::kInvalidArgument, "--min-workers " + std::to_string(m) + " " + why);
  };
  if (launcher != "ssh")
    refuse(
        "needs --launcher ssh: it acts when a restart finds hosts that no longer answer ssh "
        "(--launcher " +
        launcher + " has no hosts psrun can probe: its restarts run every worker again)");
  if (flags.max_restarts == 0)
    refuse("needs --max-restarts K: it says how a restart goes on after hosts are lost");
  if (m > workers)
    refuse("is more than the job's " + std::to_string(workers) + " workers (-n): give at most -n");
  if (m <= backup_workers)
    refuse("must be more than --backup-workers " + std::to_string(backup_workers) +
           ": a round needs at least one gradient beyond the backup workers");
}

}  // namespace psrt::psrun
