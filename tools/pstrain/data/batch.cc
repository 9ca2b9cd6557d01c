#include "pstrain/data/batch.h"

#include <algorithm>
#include <random>
#include <string>

#include "psrt/error.h"
#include "pstrain/data/random.h"

namespace psrt::pstrain {
namespace {

constexpr int64_t kPad = 4;

// A randomly cropped and flipped copy of `batch` ([B, C, H, W] float, contiguous).
torch::Tensor augment(const torch::Tensor& batch, uint64_t seed) {
  torch::Tensor out = torch::empty_like(batch);
  const int64_t count = batch.size(0);
  const int64_t channels = batch.size(1);
  const int64_t height = batch.size(2);
  const int64_t width = batch.size(3);
  const float* src = batch.data_ptr<float>();
  auto* dst = out.data_ptr<float>();
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t dy = static_cast<int64_t>(uniform_below(rng, 2 * kPad + 1)) - kPad;
    const int64_t dx = static_cast<int64_t>(uniform_below(rng, 2 * kPad + 1)) - kPad;
    const bool flip = (rng() >> 63) != 0;
    for (int64_t c = 0; c < channels; ++c) {
      const float* plane = src + (i * channels + c) * height * width;
      float* out_plane = dst + (i * channels + c) * height * width;
      for (int64_t y = 0; y < height; ++y) {
        float* row = out_plane + y * width;
        const int64_t sy = y + dy;
        if (sy < 0 || sy >= height) {
          std::fill(row, row + width, 0.0f);
          continue;
        }
        const float* src_row = plane + sy * width;
        for (int64_t x = 0; x < width; ++x) {
          const int64_t sx = (flip ? width - 1 - x : x) + dx;
          row[x] = (sx >= 0 && sx < width) ? src_row[sx] : 0.0f;
        }
      }
    }
  }
  return out;
}

}  // namespace

Batch make_batch(const Dataset& data, const torch::Tensor& shard, int64_t begin, int64_t size,
                 uint64_t seed) {
  if (shard.dim() != 1 || shard.scalar_type() != torch::kInt64) {
    throw Error(ErrorCode::kInvalidArgument, "make_batch: the shard must be an int64 vector");
  }
  if (size < 1 || begin < 0 || begin + size > shard.size(0)) {
    throw Error(ErrorCode::kInvalidArgument, "make_batch: samples [" + std::to_string(begin) +
                                                 ", " + std::to_string(begin + size) +
                                                 ") are not inside the shard of " +
                                                 std::to_string(shard.size(0)));
  }
  const torch::Tensor indices = shard.narrow(0, begin, size);
  const int64_t n = data.images.size(0);
  const int64_t* idx = indices.data_ptr<int64_t>();
  const int64_t stride = indices.stride(0);
  for (int64_t i = 0; i < size; ++i) {
    if (idx[i * stride] < 0 || idx[i * stride] >= n) {
      throw Error(ErrorCode::kInvalidArgument,
                  "make_batch: sample index " + std::to_string(idx[i * stride]) +
                      " is outside the " + std::to_string(n) + " samples of '" + data.name + "'");
    }
  }
  Batch batch{data.images.index_select(0, indices), data.labels.index_select(0, indices)};
  if (data.augment) batch.images = augment(batch.images, seed);
  return batch;
}

}  // namespace psrt::pstrain
