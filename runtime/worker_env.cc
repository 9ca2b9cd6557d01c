// Worker::from_env: the worker side of the env contract.
#include <fmt/core.h>

#include "ps/metrics.h"
#include "ps/session/auth.h"
#include "ps/timeline.h"
#include "psrt/psrt.h"
#include "runtime/engine_env.h"
#include "runtime/env_contract.h"
#include "runtime/job_secret.h"

namespace psrt {

Worker Worker::from_env() {
  using namespace runtime;
  if (auto job = adopt_engine_env(); job && (job->role != "worker" || job->hosts_scheduler))
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("{}: global rank {} is {}{} in this job, not a plain worker: start "
                    "every rank as `psrun --role-from-env -- PROGRAM` (docs/environment.md)",
                    job->engine, job->global_rank, job->role == "worker" ? "a worker" : "a server",
                    job->hosts_scheduler ? " and hosts the scheduler" : ""));
  WorkerOptions o;
  o.scheduler = env_string("PSRT_SCHEDULER");
  if (o.scheduler.empty())
    throw Error(ErrorCode::kInvalidArgument,
                "PSRT_SCHEDULER is not set: start this program with psrun (psrun -n 2 -- PROGRAM)");
  o.transport = env_string("PSRT_TRANSPORT");
  o.secret = job_secret(NoSecret::kRefuse);
  o.rank = static_cast<int>(env_int("PSRT_RANK", -1, 1 << 20));
  o.op_timeout = env_ms("PSRT_OP_TIMEOUT_MS");
  o.connect_timeout = env_ms("PSRT_CONNECT_TIMEOUT_MS");
  o.heartbeat = env_ms("PSRT_HEARTBEAT_MS");
  o.spin = std::chrono::microseconds(env_int("PSRT_SPIN_US", 0, 1'000'000));
  o.cuda_ipc = env_bool("PSRT_CUDA_IPC");
  o.secure = env_bool("PSRT_SECURE");
  o.send_window = env_string("PSRT_SEND_WINDOW") == "auto"
                      ? -1
                      : env_int("PSRT_SEND_WINDOW", 0, std::int64_t{1} << 40);
  o.checkpoint_dir = env_string("PSRT_CHECKPOINT_DIR");
  ps::enable_metrics(env_bool("PSRT_METRICS") || !env_string("PSRT_METRICS_PORT").empty());
  ps::enable_timeline(env_bool("PSRT_TIMELINE"));
  return join(o);
}

}  // namespace psrt
