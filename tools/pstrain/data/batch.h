// Assembling a training or evaluation batch from an in-memory data set.
#pragma once

#include <torch/types.h>

#include <cstdint>

#include "pstrain/data/dataset.h"

namespace psrt::pstrain {

struct Batch {
  ::torch::Tensor images;  // float32 [size, C, H, W], a new tensor (not a view of the data set)
  ::torch::Tensor labels;  // int64 [size]
};

// Gathers the samples shard[begin, begin + size) of `data` (shard: int64 sample indices, e.g.
// from epoch_shard). When data.augment, each sample i of the batch, in order, draws from a
// generator seeded with `seed`: a crop offset (dy, dx) uniform in [-4, 4]^2, then a flip bit
// with p = 0.5; the output is the sample zero-padded by 4, cropped back to HxW at (4+dy, 4+dx)
// and, if flipped, mirrored left-right:
//   out[c][y][x] = in[c][y + dy][(flip ? W - 1 - x : x) + dx], 0 outside the image.
// Pass a seed that differs per (epoch, step), e.g. mix_seed(mix_seed(seed, epoch), step), so that
// runs are reproducible. Without augmentation `seed` is unused.
//
// Throws psrt::Error (kInvalidArgument) when [begin, begin + size) is not inside the shard, size
// < 1, or an index is outside the data set. Thread-safe (reads `data` only).
Batch make_batch(const Dataset& data, const ::torch::Tensor& shard, int64_t begin, int64_t size,
                 uint64_t seed);

}  // namespace psrt::pstrain
