#include "runtime/scheduler_process.h"

#include "runtime/server_process.h"

namespace psrt::runtime {

ps::SchedulerConfig scheduler_config(const std::string& listen, const std::string& secret,
                                     const JobEnv& job) {
  ps::SchedulerConfig sc;
  sc.transport = env_string("PSRT_TRANSPORT", job);
  sc.listen = listen;
  sc.secret = secret;
  sc.secure = env_bool("PSRT_SECURE", job);
  sc.num_servers = static_cast<std::uint32_t>(env_int("PSRT_NUM_SERVERS", 1, 1 << 20, job));
  sc.num_workers = static_cast<std::uint32_t>(env_int("PSRT_NUM_WORKERS", 1, 1 << 20, job));
  sc.partition_bytes = static_cast<std::size_t>(env_int("PSRT_PARTITION_BYTES", 4, 1LL << 31, job));
  sc.balanced_cut = balanced_cut_from_env(job);
  sc.checkpoint_dir = env_string("PSRT_CHECKPOINT_DIR", job);
  sc.replicas = static_cast<std::uint32_t>(env_int("PSRT_REPLICAS", 1, 2, job));
  sc.heartbeat_timeout = env_ms("PSRT_PEER_TIMEOUT_MS", job);
  if (env_string("PSRT_ON_WORKER_LOSS", job) == "continue")
    sc.worker_loss = ps::SchedulerConfig::WorkerLoss::kContinue;
  sc.admission = admission_from_env(sc.num_servers + sc.num_workers, job);
  sc.max_keys_per_worker =
      static_cast<std::size_t>(env_int("PSRT_MAX_KEYS_PER_WORKER", 1, 1LL << 40, job));
  sc.max_slices_per_worker =
      static_cast<std::size_t>(env_int("PSRT_MAX_SLICES_PER_WORKER", 1, 1LL << 40, job));
  sc.max_control_per_sec =
      static_cast<std::uint32_t>(env_int("PSRT_MAX_CONTROL_PER_SEC", 1, 1LL << 30, job));
  return sc;
}

}  // namespace psrt::runtime
