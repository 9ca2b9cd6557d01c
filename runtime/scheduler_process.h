// The scheduler's configuration, built in one place for every scheduler of a job: the one psrun
// runs and the one global rank 0 hosts in an engine-started job (runtime/engine_env.h).
#pragma once

#include <string>

#include "ps/scheduler.h"
#include "runtime/env_contract.h"

namespace psrt::runtime {

// The SchedulerConfig of a job from the variables its processes read (`job` over this process's
// environment; see env_string): counts from PSRT_NUM_SERVERS / PSRT_NUM_WORKERS, PSRT_TRANSPORT,
// PSRT_SECURE, PSRT_PARTITION_BYTES, PSRT_CHECKPOINT_DIR, PSRT_REPLICAS, PSRT_ON_WORKER_LOSS,
// PSRT_PEER_TIMEOUT_MS, the admission limits and the per-worker quotas; listens on `listen` with
// `secret`. psrun passes the variables it hands its servers and workers, so that its scheduler
// and they never disagree. Throws naming a bad variable.
ps::SchedulerConfig scheduler_config(const std::string& listen, const std::string& secret,
                                     const JobEnv& job = {});

}  // namespace psrt::runtime
