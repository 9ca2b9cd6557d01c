// What a worker is told about its place in the job, on every launcher: torchrun's variables
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) and PSRT_LOCAL_RANK / PSRT_LOCAL_SIZE, all
// counting workers only (servers on the same host are not counted), so that a script picks
// its GPU, its DataLoader shard and its log rank as it does under torchrun.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace psrt::runtime {

struct LocalRank {
  int rank = 0;  // among the workers on its host
  int size = 1;  // workers on its host
};

// Worker i runs on hosts[i] (empty: this host); its LocalRank, in rank order per host.
std::vector<LocalRank> local_ranks(const std::vector<std::string>& hosts);

// Under an engine that numbers all the job's processes (mpirun, srun) with servers first (global
// ranks 0..servers-1), a worker's LocalRank from its engine-local rank and size, assuming block
// placement (each host runs consecutive global ranks: OpenMPI's and Slurm's default).
LocalRank worker_local_rank(int global_rank, int servers, int engine_local_rank,
                            int engine_local_size);

// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, PSRT_LOCAL_RANK, PSRT_LOCAL_SIZE.
std::vector<std::pair<std::string, std::string>> worker_rank_env(int rank, int workers,
                                                                 LocalRank local);

}  // namespace psrt::runtime
