// `psrun --role-from-env [--] COMMAND [ARGS...]`: the entry point of every process of a job that
// an engine (mpirun, srun, a Kubernetes pod) started. It takes its role from PSRT_ROLE or, when
// that is unset, from the engine's variables (runtime/engine_env.h): a server runs
// `psrun --internal-server`, a worker runs COMMAND, each as the one child of a LocalLauncher
// (output prefixed "[worker 1@HOST] ", signals forwarded, a failure named); global rank 0
// also hosts the scheduler in this process and stays until the job has ended.
#pragma once

#include <string>
#include <vector>

namespace psrt::psrun {

// Returns the process exit status: 0 when its role (and the job, on the scheduler's host) ended
// normally. Throws psrt::Error for a bad environment.
int run_role_from_env(const std::vector<std::string>& command, const std::string& self_exe);

}  // namespace psrt::psrun
