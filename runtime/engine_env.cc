#include "runtime/engine_env.h"

#include <fmt/core.h>
#include <sys/wait.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <tuple>

#include "psrt/error.h"
#include "runtime/worker_ranks.h"

namespace psrt::runtime {
namespace {

// The scheduler's port when neither PSRT_SCHEDULER_PORT nor the engine names one.
constexpr int kDefaultSchedulerPort = 7450;

Error bad(const std::string& what) {
  return Error(ErrorCode::kInvalidArgument, what);
}

// What an engine says before the role split: global rank, world, host-local rank and size, and
// where rank 0 (the scheduler's host) can be reached.
struct Global {
  std::string engine;
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string host;  // empty: the engine does not say
  int port = 0;      // 0: the engine does not say
  int servers = 0;   // > 0: the engine fixes the server count (TF_CONFIG's ps tasks)
};

int to_int(const std::string& name, const std::string& s, int min, int max, const char* fix) {
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || errno || *end || x < min || x > max)
    throw bad(fmt::format("{}='{}' is not an integer in [{}, {}]: {}", name, s, min, max, fix));
  return static_cast<int>(x);
}

int need_int(const EnvLookup& env, const char* name, const char* because, int min, int max,
             const char* fix) {
  auto v = env(name);
  if (!v) throw bad(fmt::format("{} is set but {} is not: {}", because, name, fix));
  return to_int(name, *v, min, max, fix);
}

int opt_int(const EnvLookup& env, const char* name, int fallback, int min, int max,
            const char* fix) {
  auto v = env(name);
  return v ? to_int(name, *v, min, max, fix) : fallback;
}

void check_rank(const Global& g, const char* rank_var, const char* size_var) {
  if (g.rank >= g.world)
    throw bad(fmt::format("{}={} is not below {}={}: the engine's rank and world size disagree",
                          rank_var, g.rank, size_var, g.world));
  if (g.local_rank >= g.local_size)
    throw bad(fmt::format("{}: local rank {} is not below local size {}", g.engine, g.local_rank,
                          g.local_size));
}

// The rank, world and local rank an engine names in its own variables (local size: see each
// engine), each checked; `fix` says how to start the job so that the engine sets them.
struct RankNames {
  const char* rank;
  const char* world;
  const char* local_rank;
};

Global ranks_from(const EnvLookup& env, const RankNames& n, const char* fix) {
  Global g;
  g.engine = n.rank;
  g.rank = to_int(n.rank, *env(n.rank), 0, 1 << 20, fix);
  g.world = need_int(env, n.world, n.rank, 1, 1 << 20, fix);
  g.local_rank = opt_int(env, n.local_rank, 0, 0, 1 << 20, fix);
  return g;
}

Global from_openmpi(const EnvLookup& env) {
  constexpr const char* kFix = "start the job with mpirun (OpenMPI sets it)";
  Global g = ranks_from(
      env, {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"}, kFix);
  g.local_size = opt_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, 1, 1 << 20, kFix);
  check_rank(g, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
  if (auto a = env("MASTER_ADDR")) g.host = *a;
  if (g.host.empty() && g.local_size == g.world) g.host = "127.0.0.1";  // every rank here
  if (g.host.empty() && !env("PSRT_SCHEDULER_HOST") && !env("PSRT_SCHEDULER"))
    throw bad(
        "OMPI_COMM_WORLD_RANK is set, but OpenMPI does not say where rank 0 (the "
        "scheduler's host) runs: pass it with `mpirun -x PSRT_SCHEDULER_HOST=HOST` (or "
        "MASTER_ADDR), or use psrun --launcher mpi");
  return g;
}

Global from_torch(const EnvLookup& env) {
  constexpr const char* kFix = "set RANK and WORLD_SIZE as PyTorchJob and torchrun do";
  Global g = ranks_from(env, {"RANK", "WORLD_SIZE", "LOCAL_RANK"}, kFix);
  g.local_size = opt_int(env, "LOCAL_WORLD_SIZE", 1, 1, 1 << 20, kFix);
  check_rank(g, "RANK", "WORLD_SIZE");
  if (auto a = env("MASTER_ADDR")) g.host = *a;
  if (g.host.empty() && !env("PSRT_SCHEDULER_HOST") && !env("PSRT_SCHEDULER"))
    throw bad(
        "RANK is set but MASTER_ADDR is not: set MASTER_ADDR to the host of rank 0 (it "
        "hosts the psrt scheduler), as PyTorchJob and torchrun do");
  return g;
}

// "host:port" -> host, port (the last ':' splits; "[v6]:port" keeps the brackets' content).
std::pair<std::string, int> split_host_port(const std::string& what, const std::string& hp) {
  auto colon = hp.rfind(':');
  if (colon == std::string::npos || colon == 0)
    throw bad(fmt::format("TF_CONFIG: '{}' in {} is not HOST:PORT", hp, what));
  std::string host = hp.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return {host, to_int("TF_CONFIG " + what, hp.substr(colon + 1), 1, 65535,
                       "give every task as HOST:PORT")};
}

std::vector<std::string> tf_tasks(const nlohmann::json& cluster, const char* type) {
  std::vector<std::string> out;
  if (!cluster.contains(type)) return out;
  const auto& list = cluster.at(type);
  if (!list.is_array())
    throw bad(fmt::format("TF_CONFIG: cluster.{} is not a list of \"HOST:PORT\"", type));
  for (const auto& t : list) {
    if (!t.is_string())
      throw bad(fmt::format("TF_CONFIG: cluster.{} holds {}, not a \"HOST:PORT\" string", type,
                            t.dump()));
    out.push_back(t.get<std::string>());
  }
  return out;
}

nlohmann::json parse_tf_config(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw bad(
        fmt::format("TF_CONFIG is not JSON ({}): it must look like "
                    "{{\"cluster\": {{\"ps\": [...], \"worker\": [...]}}, \"task\": "
                    "{{\"type\": \"worker\", \"index\": 0}}}}",
                    e.what()));
  }
  if (!j.is_object() || !j.contains("cluster") || !j["cluster"].is_object() ||
      !j.contains("task") || !j["task"].is_object() || !j["task"].contains("type") ||
      !j["task"]["type"].is_string() || !j["task"].contains("index") ||
      !j["task"]["index"].is_number_integer())
    throw bad(
        "TF_CONFIG needs an object \"cluster\" and a \"task\" with a string \"type\" and "
        "an integer \"index\" (as Kubeflow's TFJob sets it)");
  for (const auto& [type, _] : j["cluster"].items())
    if (type != "ps" && type != "chief" && type != "worker" && type != "evaluator")
      throw bad(
          fmt::format("TF_CONFIG: cluster.{} is no task type psrt knows (ps, chief, "
                      "worker)",
                      type));
  return j;
}

Global from_tf_config(const std::string& text) {
  const nlohmann::json j = parse_tf_config(text);
  const auto ps = tf_tasks(j["cluster"], "ps");
  const auto chief = tf_tasks(j["cluster"], "chief");
  const auto worker = tf_tasks(j["cluster"], "worker");
  const std::string type = j["task"]["type"].get<std::string>();
  const long long index = j["task"]["index"].get<long long>();
  if (ps.empty())
    throw bad(
        "TF_CONFIG has no ps task: psrt's servers are the ps tasks, add at least one "
        "(TFJob: a PS replica)");
  if (chief.size() + worker.size() == 0)
    throw bad("TF_CONFIG has no chief or worker task: add at least one worker");
  const std::vector<std::string>* mine = type == "ps"       ? &ps
                                         : type == "chief"  ? &chief
                                         : type == "worker" ? &worker
                                                            : nullptr;
  if (!mine)
    throw bad(
        fmt::format("TF_CONFIG task type '{}' has no psrt role: psrt runs ps (servers), "
                    "chief and worker (workers) tasks",
                    type));
  if (index < 0 || index >= static_cast<long long>(mine->size()))
    throw bad(fmt::format("TF_CONFIG task index {} is outside cluster.{} ({} tasks)", index, type,
                          mine->size()));
  Global g;
  g.engine = "TF_CONFIG";
  g.servers = static_cast<int>(ps.size());
  g.world = static_cast<int>(ps.size() + chief.size() + worker.size());
  const int i = static_cast<int>(index);
  g.rank = type == "ps"      ? i
           : type == "chief" ? g.servers + i
                             : g.servers + static_cast<int>(chief.size()) + i;
  std::tie(g.host, g.port) = split_host_port("cluster.ps[0]", ps[0]);
  return g;
}

// "2(x3),1" (SLURM_STEP_TASKS_PER_NODE) -> the count of node `node`.
int slurm_tasks_on_node(const std::string& spec, int node) {
  const std::string fix = "Slurm sets it as COUNT[(xREPEAT)],...";
  int seen = 0;
  std::size_t pos = 0;
  while (pos < spec.size()) {
    auto comma = spec.find(',', pos);
    std::string item = spec.substr(pos, comma == std::string::npos ? spec.npos : comma - pos);
    pos = comma == std::string::npos ? spec.size() : comma + 1;
    int repeat = 1;
    if (auto p = item.find("(x"); p != std::string::npos) {
      if (item.back() != ')')
        throw bad(fmt::format("SLURM_STEP_TASKS_PER_NODE='{}' is malformed: {}", spec, fix));
      repeat = to_int("SLURM_STEP_TASKS_PER_NODE", item.substr(p + 2, item.size() - p - 3), 1,
                      1 << 20, fix.c_str());
      item = item.substr(0, p);
    }
    const int count = to_int("SLURM_STEP_TASKS_PER_NODE", item, 1, 1 << 20, fix.c_str());
    if (node < seen + repeat) return count;
    seen += repeat;
  }
  throw bad(
      fmt::format("SLURM_NODEID={} has no entry in SLURM_STEP_TASKS_PER_NODE='{}'", node, spec));
}

Global from_slurm(const EnvLookup& env, const HostlistExpander& expand) {
  constexpr const char* kFix = "start the processes with srun inside an allocation";
  Global g = ranks_from(env, {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}, kFix);
  if (auto per_node = env("SLURM_STEP_TASKS_PER_NODE"))
    g.local_size =
        slurm_tasks_on_node(*per_node, opt_int(env, "SLURM_NODEID", 0, 0, 1 << 20, kFix));
  check_rank(g, "SLURM_PROCID", "SLURM_NTASKS");
  if (env("PSRT_SCHEDULER_HOST") || env("PSRT_SCHEDULER")) return g;
  auto nodes = env("SLURM_STEP_NODELIST");
  if (!nodes)
    throw bad(
        "SLURM_PROCID is set but SLURM_STEP_NODELIST is not: start the processes with "
        "srun (not in the batch script itself), or set PSRT_SCHEDULER_HOST");
  auto hosts = expand(*nodes);
  if (hosts.empty()) throw bad(fmt::format("SLURM_STEP_NODELIST='{}' names no host", *nodes));
  g.host = hosts.front();  // task 0 runs on the step's first node (block and cyclic alike)
  return g;
}

void check_counts(const EnvLookup& env, const Global& g, int servers) {
  if (servers >= g.world)
    throw bad(
        fmt::format("{} gives {} processes, which leaves no worker with {} servers: start "
                    "more processes or lower PSRT_NUM_SERVERS",
                    g.engine, g.world, servers));
  if (auto n = env("PSRT_NUM_WORKERS")) {
    const int want = to_int("PSRT_NUM_WORKERS", *n, 1, 1 << 20, "or leave it unset");
    if (want != g.world - servers)
      throw bad(
          fmt::format("PSRT_NUM_WORKERS={} contradicts {}: its {} processes less {} "
                      "servers are {} workers; unset PSRT_NUM_WORKERS or fix the counts",
                      want, g.engine, g.world, servers, g.world - servers));
  }
}

EngineJob split_roles(const EnvLookup& env, const Global& g) {
  int servers = opt_int(env, "PSRT_NUM_SERVERS", g.servers > 0 ? g.servers : 1, 1, 1 << 20,
                        "the number of servers among the engine's processes");
  if (g.servers > 0 && servers != g.servers)
    throw bad(
        fmt::format("PSRT_NUM_SERVERS={} contradicts TF_CONFIG's {} ps tasks: unset "
                    "PSRT_NUM_SERVERS (the ps tasks are the servers)",
                    servers, g.servers));
  check_counts(env, g, servers);
  EngineJob job;
  job.engine = g.engine;
  job.global_rank = g.rank;
  job.world_size = g.world;
  job.num_servers = servers;
  job.num_workers = g.world - servers;
  job.role = g.rank < servers ? "server" : "worker";
  job.rank = g.rank < servers ? g.rank : g.rank - servers;
  job.local_rank = g.local_rank;
  job.local_size = g.local_size;
  if (auto s = env("PSRT_SCHEDULER")) {
    job.scheduler = *s;
    return job;
  }
  job.hosts_scheduler = g.rank == 0;
  const std::string host = env("PSRT_SCHEDULER_HOST").value_or(g.host);
  int port = g.port ? g.port : opt_int(env, "MASTER_PORT", kDefaultSchedulerPort, 1, 65535, "");
  port = opt_int(env, "PSRT_SCHEDULER_PORT", port, 1, 65535, "a TCP port for the scheduler");
  job.scheduler =
      (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  return job;
}

}  // namespace

std::optional<EngineJob> engine_job_from(const EnvLookup& env, const HostlistExpander& expand) {
  if (env("PSRT_ROLE")) return std::nullopt;
  std::optional<Global> g;
  if (env("OMPI_COMM_WORLD_RANK"))
    g = from_openmpi(env);
  else if (env("RANK"))
    g = from_torch(env);
  else if (auto tf = env("TF_CONFIG"))
    g = from_tf_config(*tf);
  else if (env("SLURM_PROCID"))
    g = from_slurm(env, expand);
  if (!g) return std::nullopt;
  return split_roles(env, *g);
}

std::vector<std::string> slurm_hostnames(const std::string& list) {
  std::vector<std::string> hosts;
  if (list.find('[') == std::string::npos) {
    std::size_t pos = 0;
    while (pos <= list.size()) {
      auto comma = list.find(',', pos);
      if (comma == std::string::npos) comma = list.size();
      if (comma > pos) hosts.push_back(list.substr(pos, comma - pos));
      pos = comma + 1;
    }
    return hosts;
  }
  for (char c : list)
    if (!std::isalnum(static_cast<unsigned char>(c)) && !std::strchr("[]-,._", c))
      throw bad(fmt::format("SLURM_STEP_NODELIST='{}' is not a Slurm host list", list));
  std::unique_ptr<FILE, int (*)(FILE*)> p(
      ::popen(("scontrol show hostnames '" + list + "' 2>&1").c_str(), "r"), ::pclose);
  if (!p) throw Error(ErrorCode::kSystem, "cannot run scontrol show hostnames");
  std::string out;
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), p.get()))
    out.append(buf.data(), n);
  const int status = ::pclose(p.release());
  if (status != 0)
    throw bad(
        fmt::format("`scontrol show hostnames {}` failed ({}): is Slurm's scontrol on "
                    "PATH? Or set PSRT_SCHEDULER_HOST",
                    list, out.substr(0, out.find('\n'))));
  for (std::size_t pos = 0; pos < out.size();) {
    auto nl = out.find('\n', pos);
    if (nl == std::string::npos) nl = out.size();
    if (nl > pos) hosts.push_back(out.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return hosts;
}

std::vector<std::pair<std::string, std::string>> engine_job_env(const EngineJob& job) {
  std::vector<std::pair<std::string, std::string>> env = {
      {"PSRT_ROLE", job.role},
      {"PSRT_RANK", std::to_string(job.rank)},
      {"PSRT_NUM_SERVERS", std::to_string(job.num_servers)},
      {"PSRT_NUM_WORKERS", std::to_string(job.num_workers)},
      {"PSRT_SCHEDULER", job.scheduler}};
  if (job.role != "worker") {
    env.emplace_back("PSRT_LOCAL_RANK", std::to_string(job.local_rank));
    env.emplace_back("PSRT_LOCAL_SIZE", std::to_string(job.local_size));
    return env;
  }
  // A worker counts workers only: the servers the engine placed on its host are not GPUs' users.
  const LocalRank local =
      worker_local_rank(job.global_rank, job.num_servers, job.local_rank, job.local_size);
  for (auto& kv : worker_rank_env(job.rank, job.num_workers, local))
    env.push_back(std::move(kv));
  return env;
}

std::optional<EngineJob> adopt_engine_env() {
  auto job = engine_job_from(
      [](const char* name) -> std::optional<std::string> {
        const char* v = std::getenv(name);
        if (!v || !*v) return std::nullopt;
        return std::string(v);
      },
      slurm_hostnames);
  if (job)
    for (const auto& [k, v] : engine_job_env(*job))
      ::setenv(k.c_str(), v.c_str(), 1);
  return job;
}

}  // namespace psrt::runtime
