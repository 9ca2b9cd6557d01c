#include "runtime/worker_ranks.h"

#include <algorithm>
#include <map>

namespace psrt::runtime {

std::vector<LocalRank> local_ranks(const std::vector<std::string>& hosts) {
  std::map<std::string, int> count;
  for (const auto& h : hosts)
    ++count[h];
  std::map<std::string, int> next;
  std::vector<LocalRank> out;
  out.reserve(hosts.size());
  for (const auto& h : hosts)
    out.push_back({next[h]++, count[h]});
  return out;
}

LocalRank worker_local_rank(int global_rank, int servers, int engine_local_rank,
                            int engine_local_size) {
  const int first = global_rank - engine_local_rank;  // this host's first global rank
  const int servers_here =
      std::clamp(std::min(servers, first + engine_local_size) - first, 0, engine_local_size);
  return {std::max(0, engine_local_rank - servers_here),
          std::max(1, engine_local_size - servers_here)};
}

std::vector<std::pair<std::string, std::string>> worker_rank_env(int rank, int workers,
                                                                 LocalRank local) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(workers)},
          {"LOCAL_RANK", std::to_string(local.rank)},
          {"LOCAL_WORLD_SIZE", std::to_string(local.size)},
          {"PSRT_LOCAL_RANK", std::to_string(local.rank)},
          {"PSRT_LOCAL_SIZE", std::to_string(local.size)}};
}

}  // namespace psrt::runtime
