// Which samples each worker visits in an epoch.
#pragma once

#include <torch/types.h>

#include <cstdint>

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

}  // namespace psrt::pstrain
