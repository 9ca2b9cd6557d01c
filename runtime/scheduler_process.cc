#include "runtime/scheduler_process.h"

#include "runtime/env_contract.h"
#include "runtime/server_process.h"

namespace psrt::runtime {

ps::SchedulerConfig scheduler_config_from_env(const std::string& listen,
                                              const std::string& secret) {
  ps::SchedulerConfig sc;
  sc.transport = env_string("PSRT_TRANSPORT");
  sc.listen = listen;
  sc.secret = secret;
  sc.secure = env_bool("PSRT_SECURE");
  sc.num_servers = static_cast<std::uint32_t>(env_int("PSRT_NUM_SERVERS", 1, 1 << 20));
  sc.num_workers = static_cast<std::uint32_t>(env_int("PSRT_NUM_WORKERS", 1, 1 << 20));
  sc.partition_bytes = static_cast<std::size_t>(env_int("PSRT_PARTITION_BYTES", 4, 1LL << 31));
  sc.checkpoint_dir = env_string("PSRT_CHECKPOINT_DIR");
  sc.replicas = static_cast<std::uint32_t>(env_int("PSRT_REPLICAS", 1, 2));
  sc.heartbeat_timeout = env_ms("PSRT_PEER_TIMEOUT_MS");
  if (env_string("PSRT_ON_WORKER_LOSS") == "continue")
    sc.worker_loss = ps::SchedulerConfig::WorkerLoss::kContinue;
  sc.admission = admission_from_env(sc.num_servers + sc.num_workers);
  sc.max_keys_per_worker =
      static_cast<std::size_t>(env_int("PSRT_MAX_KEYS_PER_WORKER", 1, 1LL << 40));
  sc.max_slices_per_worker =
      static_cast<std::size_t>(env_int("PSRT_MAX_SLICES_PER_WORKER", 1, 1LL << 40));
  sc.max_control_per_sec =
      static_cast<std::uint32_t>(env_int("PSRT_MAX_CONTROL_PER_SEC", 1, 1LL << 30));
  return sc;
}

}  // namespace psrt::runtime
