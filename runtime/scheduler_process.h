// The scheduler role outside psrun: the SchedulerConfig the PSRT_* environment describes, for
// the rank that hosts the scheduler in an engine-started job (runtime/engine_env.h).
#pragma once

#include <string>

#include "ps/scheduler.h"

namespace psrt::runtime {

// Counts from PSRT_NUM_SERVERS / PSRT_NUM_WORKERS, PSRT_TRANSPORT, PSRT_SECURE,
// PSRT_PARTITION_BYTES, PSRT_CHECKPOINT_DIR, PSRT_PEER_TIMEOUT_MS, the admission limits and the
// per-worker quotas; listens on `listen` with `secret`. Throws naming a bad variable.
ps::SchedulerConfig scheduler_config_from_env(const std::string& listen, const std::string& secret);

}  // namespace psrt::runtime
