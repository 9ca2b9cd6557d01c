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

}  // namespace psrt::psrun
