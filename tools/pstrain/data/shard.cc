#include "pstrain/data/shard.h"

#include <random>
#include <string>
#include <utility>

#include "psrt/error.h"
#include "pstrain/data/random.h"

namespace psrt::pstrain {
namespace {

void check_world(int64_t n, int world) {
  if (world < 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "data shard: world size must be at least 1, got " + std::to_string(world));
  }
  if (n < world) {
    throw Error(ErrorCode::kInvalidArgument,
                "data shard: " + std::to_string(n) + " samples cannot be split across " +
                    std::to_string(world) + " workers (need at least one sample each)");
  }
}

}  // namespace

torch::Tensor epoch_shard(int64_t n, int rank, int world, uint64_t seed, int64_t epoch) {
  check_world(n, world);
  if (rank < 0 || rank >= world) {
    throw Error(ErrorCode::kInvalidArgument, "data shard: rank " + std::to_string(rank) +
                                                 " is outside [0, " + std::to_string(world) + ")");
  }
  // Fisher-Yates with our own bounded draw: the permutation is fixed by (seed, epoch) alone,
  // whatever the standard library or LibTorch version.
  torch::Tensor perm = torch::arange(n, torch::kInt64);
  auto* p = perm.data_ptr<int64_t>();
  std::mt19937_64 rng(mix_seed(seed, static_cast<uint64_t>(epoch)));
  for (int64_t i = n - 1; i > 0; --i) {
    std::swap(p[i], p[uniform_below(rng, static_cast<uint64_t>(i) + 1)]);
  }
  const int64_t part = n / world;
  return perm.narrow(0, rank * part, part).clone();
}

int64_t steps_per_epoch(int64_t n, int world, int64_t batch_size) {
  check_world(n, world);
  if (batch_size < 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "data shard: batch size must be at least 1, got " + std::to_string(batch_size));
  }
  return std::max<int64_t>(1, (n / world) / batch_size);
}

}  // namespace psrt::pstrain
