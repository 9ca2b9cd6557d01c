#include "runtime/env_contract.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "psrt/error.h"

namespace psrt::runtime {

const std::vector<EnvVar>& env_contract() {
  static const std::vector<EnvVar> vars = {
      {"PSRT_ROLE", "worker", "all",
       "scheduler | server | worker; unset in a process an engine started (srun, mpirun, "
       "TF_CONFIG, "
       "RANK/WORLD_SIZE): derived from the engine's variables (docs/environment.md)"},
      {"PSRT_RANK", "-1", "server, worker", "rank among its role; -1 = any free rank (workers)"},
      {"PSRT_NUM_WORKERS", "1", "all", "workers at job start (N)"},
      {"PSRT_NUM_SERVERS", "1", "all", "servers (S)"},
      {"PSRT_SCHEDULER", "", "server, worker", "host:port of the scheduler"},
      {"PSRT_SCHEDULER_HOST", "", "engine-started",
       "host of global rank 0, which hosts the scheduler (default: the engine's: MASTER_ADDR, "
       "TF_CONFIG's ps[0], the first host of SLURM_STEP_NODELIST; docs/environment.md)"},
      {"PSRT_SCHEDULER_PORT", "7450", "engine-started",
       "port of the scheduler that global rank 0 hosts (default: MASTER_PORT, TF_CONFIG's ps[0] "
       "port, else 7450)"},
      {"PSRT_LOCAL_RANK", "", "worker",
       "set by psrun on every launcher: a worker's rank among the workers on its host (servers "
       "not counted; pick a GPU with it); a server's among the job's processes there"},
      {"PSRT_LOCAL_SIZE", "", "worker",
       "set by psrun on every launcher: the workers on this host (a server: the processes)"},
      {"RANK", "", "worker", "set by psrun for workers, as torchrun does: PSRT_RANK"},
      {"WORLD_SIZE", "", "worker", "set by psrun for workers, as torchrun does: the workers (N)"},
      {"LOCAL_RANK", "", "worker", "set by psrun for workers, as torchrun does: PSRT_LOCAL_RANK"},
      {"LOCAL_WORLD_SIZE", "", "worker",
       "set by psrun for workers, as torchrun does: PSRT_LOCAL_SIZE"},
      {"PSRT_TRANSPORT", "tcp", "all", "ucx | tcp"},
      {"PSRT_SECRET", "", "all",
       "per-job secret for HMAC-SHA256 authentication (at least 32 characters)"},
      {"PSRT_SECRET_FILE", "", "all",
       "file holding the job secret (chmod 600), read when PSRT_SECRET is not set"},
      {"PSRT_SECURE", "0", "all",
       "1 = secure mode (psrun --secure): every message sealed with AES-256-GCM under "
       "per-connection keys from PSRT_SECRET"},
      {"PSRT_HOST", "", "server",
       "address a server listens on and advertises (default: by PSRT_INTERFACE, else the "
       "address of the interface whose route reaches the scheduler)"},
      {"PSRT_INTERFACE", "", "server, psrun",
       "NAME (eth0) or CIDR (10.0.0.0/24): the interface whose address servers and psrun's "
       "scheduler listen on and advertise; default: the one that routes to the scheduler "
       "(psrun --interface)"},
      {"PSRT_MODE", "sync", "server", "sync | async | ssp"},
      {"PSRT_STALENESS", "0", "server", "ssp: max rounds a worker may run ahead of the slowest"},
      {"PSRT_AGGREGATE", "mean", "server", "mean | sum of the gradients of a round"},
      {"PSRT_OPTIMIZER", "sgd", "server",
       "sgd | adam | adamw: the servers' optimizer (until a worker calls set_optimizer)"},
      {"PSRT_LR", "0.01", "server", "learning rate (until a worker calls set_optimizer)"},
      {"PSRT_MOMENTUM", "0", "server", "SGD momentum"},
      {"PSRT_DAMPENING", "0", "server", "SGD dampening"},
      {"PSRT_WEIGHT_DECAY", "0", "server",
       "weight decay: L2 for sgd and adam, decoupled for adamw"},
      {"PSRT_BETAS", "0.9,0.999", "server", "Adam/AdamW betas B1,B2"},
      {"PSRT_EPS", "1e-08", "server", "Adam/AdamW eps"},
      {"PSRT_NESTEROV", "0", "server", "1 = Nesterov momentum"},
      {"PSRT_MAX_GRAD_NORM", "0", "server, worker",
       "> 0: clip each update's gradient to this L2 norm (servers: per slice, not the whole "
       "model; psrt.torch: torch's norm over the whole model, in sum mode)"},
      {"PSRT_SKIP_NONFINITE", "0", "server",
       "1 = skip an update whose gradient holds a NaN/Inf (weights and momentum unchanged)"},
      {"PSRT_PARTITION_BYTES", "4194304", "scheduler, server", "max bytes of one slice"},
      {"PSRT_SHARDING", "balanced", "scheduler, server",
       "balanced: every tensor above 64 KiB cut evenly over all servers | fixed: slices of "
       "PSRT_PARTITION_BYTES (psrun --sharding; without it fixed when --partition-bytes is given)"},
      {"PSRT_CHECKPOINT_DIR", "", "scheduler, server, worker",
       "checkpoint directory (empty = none; workers: where request_checkpoint() asks)"},
      {"PSRT_CHECKPOINT_EVERY", "0", "server", "checkpoint every R versions of a slice"},
      {"PSRT_SERVER_THREADS", "1", "server", "update threads per server"},
      {"PSRT_REPLICAS", "1", "scheduler, server",
       "1 | 2: every slice also on a backup server (psrun --replicas)"},
      {"PSRT_BACKUP_WORKERS", "0", "server, psrun",
       "sync: a round runs once all but this many workers' gradients arrived; late ones are "
       "dropped (psrun --backup-workers, docs/elastic.md)"},
      {"PSRT_SERVER_DEVICE", "cpu", "server",
       "cpu | cuda | cuda:N: where slices live and updates run"},
      {"PSRT_BIND", "", "psrun",
       "none | numa | core: how psrun binds a job's processes (psrun --bind); unset = "
       "core when the host has a core per process, else numa"},
      {"PSRT_GPU", "", "worker",
       "set by psrun for a worker on a host with GPUs (local and ssh jobs: psrun's placement; "
       "mpi, slurm, Kubernetes: psrun --role-from-env): this worker's CUDA device (cuda:N in its "
       "CUDA_VISIBLE_DEVICES numbering), by its rank among the workers on its host"},
      {"PSRT_PLACE", "", "server, worker",
       "set by psrun --launcher ssh: ROLE,LOCAL,WORKERS,SERVERS of the process on its host; the "
       "remote side binds it there by that host's topology (psrun --bind)"},
      {"PSRT_CUDA_IPC", "1", "worker",
       "0 = never share GPU buffers with CUDA servers on this host (stage through host memory)"},
      {"PSRT_SERVER_TRACE", "", "server",
       "file: one JSON line per applied update (+ grad_norm, clip_coef, skipped when the guard "
       "or clipping is on; into_spare when it did not wait for replies still sending)"},
      {"PSRT_METRICS", "0", "server, worker",
       "set by psrun --metrics-port: 1 = report live metrics to the scheduler every heartbeat"},
      {"PSRT_METRICS_PORT", "", "psrun, scheduler",
       "port of the job's Prometheus endpoint on the scheduler's host (psrun --metrics-port; "
       "the engine-started forms read it on the rank that hosts the scheduler)"},
      {"PSRT_TIMELINE", "0", "server, worker",
       "set by psrun --timeline: 1 = record every send, reply, wait, receive, update and pull "
       "reply per key and slice, sent to the scheduler at the end"},
      {"PSRT_OP_TIMEOUT_MS", "300000", "worker", "bound on every worker operation"},
      {"PSRT_SEND_WINDOW", "auto", "worker",
       "gradient bytes a worker keeps in flight to one server (sent, not yet acknowledged as "
       "received); further slices wait, the first-used keys (the first layers) first; 0 = no "
       "bound; auto = 262144 over tcp and over ucx with UCX_TLS=tcp (no RDMA transport named), no "
       "bound over UCX's RDMA and shared memory (docs/performance.md)"},
      {"PSRT_CONNECT_TIMEOUT_MS", "30000", "server, worker", "bound on connecting + handshake"},
      {"PSRT_HEARTBEAT_MS", "1000", "server, worker", "heartbeat interval"},
      {"PSRT_SPIN_US", "100", "server, worker",
       "progress threads busy-poll this long after an event before sleeping (0 = never; psrun "
       "sets 0 when its workers + servers are at least the host's cores)"},
      {"PSRT_PEER_TIMEOUT_MS", "10000", "scheduler", "a peer silent this long is lost"},
      {"PSRT_ON_WORKER_LOSS", "stop", "scheduler, psrun",
       "stop | continue: a lost worker ends the job, or is dropped like one that left and the "
       "rounds go on with the live workers (psrun --on-worker-loss)"},
      {"PSRT_HANDSHAKE_TIMEOUT_MS", "5000", "scheduler, server",
       "an accepted connection that has not authenticated by then is closed"},
      {"PSRT_MAX_UNAUTHENTICATED", "512", "scheduler, server",
       "accepted connections not yet authenticated, in total; more are closed at once (raised "
       "to the job's processes + 16)"},
      {"PSRT_MAX_UNAUTHENTICATED_PER_HOST", "128", "scheduler, server",
       "the same per remote IP address (raised to the job's processes + 16)"},
      {"PSRT_MAX_KEYS_PER_WORKER", "65536", "scheduler, server",
       "new keys one worker may place (LOCATE with a size) and store on one server (INIT); "
       "beyond, LOCATE or INIT fails naming this"},
      {"PSRT_MAX_SLICES_PER_WORKER", "1048576", "scheduler, server",
       "slices of the new keys one worker may place, and store on one server; beyond, LOCATE or "
       "INIT fails naming this"},
      {"PSRT_MAX_CONTROL_PER_SEC", "100000", "scheduler",
       "control messages per second one peer may send the scheduler (burst: one second's "
       "worth); beyond, it is disconnected naming this"},
      {"PSRT_RESTART_COUNT", "0", "worker, server",
       "set by psrun: how many times psrun --max-restarts restarted this job (0: the first run)"},
      {"PSRT_RESUME_ROUND", "0", "worker, server",
       "set by psrun: the checkpoint round this run of the job resumes from (0: from the start)"},
      {"PSRT_LOG_LEVEL", "info", "all", "debug | info | warn | error"},
      {"PSRT_CPU_ISA", "", "server", "cap the update's ISA: scalar | avx2 | avx512"},
  };
  return vars;
}

void print_env_help(std::ostream& out) {
  out << fmt::format("{:<24} {:<10} {:<18} {}\n", "variable", "default", "read by", "meaning");
  for (const auto& v : env_contract())
    out << fmt::format("{:<24} {:<10} {:<18} {}\n", v.name, *v.fallback ? v.fallback : "-",
                       v.readers, v.meaning);
}

namespace {

const EnvVar& declared(const char* name) {
  for (const auto& v : env_contract())
    if (std::strcmp(v.name, name) == 0) return v;
  throw Error(ErrorCode::kInternal, fmt::format("{} is not in the env contract", name));
}

Error malformed(const char* name, const std::string& value, const char* want) {
  return Error(ErrorCode::kInvalidArgument,
               fmt::format("{}='{}' is not {} (see psrun --help-env)", name, value, want));
}

}  // namespace

std::string env_string(const char* name, const JobEnv& job) {
  const EnvVar& v = declared(name);
  // The last setting wins, as in the environment a launcher builds from `job`.
  const auto last = std::find_if(job.rbegin(), job.rend(),
                                 [name](const auto& setting) { return setting.first == name; });
  if (last != job.rend()) return last->second.empty() ? v.fallback : last->second;
  if (const char* s = std::getenv(name); s && *s) return s;
  return v.fallback;
}

std::int64_t env_int(const char* name, std::int64_t min, std::int64_t max, const JobEnv& job) {
  std::string s = env_string(name, job);
  if (s.empty())
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{} is not set; run the program under psrun", name));
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(s.c_str(), &end, 10);
  if (errno || *end || x < min || x > max)
    throw malformed(name, s, fmt::format("an integer in [{}, {}]", min, max).c_str());
  return x;
}

float env_float(const char* name) {
  std::string s = env_string(name);
  char* end = nullptr;
  float x = std::strtof(s.c_str(), &end);
  if (s.empty() || *end || !std::isfinite(x)) throw malformed(name, s, "a finite number");
  return x;
}

bool env_bool(const char* name, const JobEnv& job) {
  std::string s = env_string(name, job);
  if (s == "1" || s == "true") return true;
  if (s == "0" || s == "false" || s.empty()) return false;
  throw malformed(name, s, "0 or 1");
}

bool balanced_cut_from_env(const JobEnv& job) {
  const std::string s = env_string("PSRT_SHARDING", job);
  if (s == "balanced") return true;
  if (s == "fixed") return false;
  throw malformed("PSRT_SHARDING", s, "balanced or fixed");
}

std::chrono::milliseconds env_ms(const char* name, const JobEnv& job) {
  return std::chrono::milliseconds(env_int(name, 1, std::int64_t{1} << 40, job));
}

}  // namespace psrt::runtime
