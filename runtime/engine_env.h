// Engine-started processes: a process that srun, mpirun, a Kubeflow TFJob/PyTorchJob pod or a
// Kubernetes Indexed Job started without PSRT_ROLE takes its role, rank, the job's counts and the
// scheduler's address from that engine's own environment (docs/environment.md has the table).
//
// Every engine gives a global rank g in a world of W processes. With S servers
// (PSRT_NUM_SERVERS, default 1; TF_CONFIG: its `ps` tasks), g < S is server g and g >= S is
// worker g - S, so N = W - S workers. Global rank 0 also hosts the scheduler, at the address the
// engine names for it, unless PSRT_SCHEDULER is set (then the scheduler runs elsewhere, e.g.
// inside `psrun --launcher mpi|slurm`, and no rank hosts it).
//
//   if (auto job = psrt::runtime::adopt_engine_env()) { ... PSRT_ROLE etc. are now set ... }
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace psrt::runtime {

struct EngineJob {
  std::string engine;  // the variables it came from: "OMPI_COMM_WORLD_RANK", "RANK", ...
  int global_rank = 0;
  int world_size = 1;
  std::string role;  // "server" | "worker"
  int rank = 0;      // among its role
  int num_servers = 1;
  int num_workers = 1;
  bool hosts_scheduler = false;  // global rank 0 and no PSRT_SCHEDULER
  std::string scheduler;         // host:port every process connects to
  int local_rank = 0;            // among the job's processes on this host
  int local_size = 1;
};

// Reads one variable; nullopt when unset or empty.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
// Expands a Slurm host list ("node[1-3],gpu7") to host names, in order.
using HostlistExpander = std::function<std::vector<std::string>(const std::string& list)>;

// The job the engine variables in `env` describe; nullopt when none are present (or PSRT_ROLE
// is set). Checked in this order, the innermost launcher first: OMPI_COMM_WORLD_RANK (OpenMPI),
// RANK (+ MASTER_ADDR, PyTorchJob / torchrun / Indexed Job), TF_CONFIG, SLURM_PROCID. Throws
// psrt::Error(kInvalidArgument) naming the variable and the fix when they are malformed or
// contradict each other (or PSRT_NUM_SERVERS / PSRT_NUM_WORKERS).
std::optional<EngineJob> engine_job_from(const EnvLookup& env, const HostlistExpander& expand);

// `scontrol show hostnames LIST`; a list without brackets is split on commas without scontrol.
std::vector<std::string> slurm_hostnames(const std::string& list);

// The PSRT_* variables an engine-started process of `job` runs with: PSRT_ROLE, PSRT_RANK,
// PSRT_NUM_SERVERS, PSRT_NUM_WORKERS, PSRT_SCHEDULER, PSRT_LOCAL_RANK, PSRT_LOCAL_SIZE.
std::vector<std::pair<std::string, std::string>> engine_job_env(const EngineJob& job);

// engine_job_from() on this process's environment; when it finds a job, sets engine_job_env()
// in the environment (children inherit it) and returns the job.
std::optional<EngineJob> adopt_engine_env();

}  // namespace psrt::runtime
