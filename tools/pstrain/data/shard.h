// Which samples each worker visits in an epoch.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace psrt::pstrain {

// The sample indices (int64 [n / world]) worker `rank` of `world` visits in `epoch`: one
// permutation of [0, n) drawn from (seed, epoch) — identical on every worker — cut into `world`
// contiguous equal parts of n / world each; rank r takes part r. The remainder n % world (the
// permutation's tail) is dropped so every worker takes the same number of steps.
// Throws psrt::Error (kInvalidArgument) when world < 1, rank is outside [0, world) or n < world.
::torch::Tensor epoch_shard(int64_t n, int rank, int world, uint64_t seed, int64_t epoch);

// Steps per epoch for a worker: (n / world) / batch_size, at least 1 (the last partial batch
// is dropped; a shard smaller than one batch makes one step of min(batch_size, n / world)). Throws
// psrt::Error (kInvalidArgument) when world < 1, batch_size < 1 or n < world.
int64_t steps_per_epoch(int64_t n, int world, int64_t batch_size);

// Positions [begin, end) of an epoch's permutation.
struct PoolSpan {
  int64_t begin = 0;
  int64_t end = 0;
  bool operator==(const PoolSpan&) const = default;
};
// The samples an epoch is cut from, as positions of its permutation, in order; empty: the whole
// permutation (every epoch of a job whose workers did not change within it). A job resumed
// mid-epoch with another number of workers (psrun --min-workers) cuts the rest of the epoch from
// the samples its workers had not trained yet (remaining_pool).
using EpochPool = std::vector<PoolSpan>;

// How many samples `pool` holds (n for the whole permutation).
int64_t pool_size(const EpochPool& pool, int64_t n);
// epoch_shard of a pool: its samples (in pool order) cut into `world` contiguous equal parts,
// the remainder dropped; rank r takes part r. The whole permutation's is epoch_shard's, bit for
// bit. Throws as epoch_shard does (n read as the pool's size).
::torch::Tensor pool_shard(int64_t n, const EpochPool& pool, int rank, int world, uint64_t seed,
                           int64_t epoch);
// The samples of `pool` that its `world` workers had not trained after `steps` steps each with
// --batch-size `batch_size`: of each part (in part order) the batches from step `steps` to the
// part's last step (steps_per_epoch of the pool); the samples an epoch drops (a part's
// remainder) stay dropped. Empty when the epoch's steps are done.
EpochPool remaining_pool(const EpochPool& pool, int64_t n, int world, int64_t steps,
                         int64_t batch_size);

}  // namespace psrt::pstrain
