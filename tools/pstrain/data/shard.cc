#include "pstrain/data/shard.h"

#include <algorithm>
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

int64_t pool_size(const EpochPool& pool, int64_t n) {
  if (pool.empty()) return n;
  int64_t size = 0;
  for (const auto& span : pool)
    size += span.end - span.begin;
  return size;
}

torch::Tensor pool_shard(int64_t n, const EpochPool& pool, int rank, int world, uint64_t seed,
                         int64_t epoch) {
  if (pool.empty()) return epoch_shard(n, rank, world, seed, epoch);
  const int64_t size = pool_size(pool, n);
  check_world(size, world);
  if (rank < 0 || rank >= world) {
    throw Error(ErrorCode::kInvalidArgument, "data shard: rank " + std::to_string(rank) +
                                                 " is outside [0, " + std::to_string(world) + ")");
  }
  const torch::Tensor perm = epoch_shard(n, 0, 1, seed, epoch);
  std::vector<torch::Tensor> spans;
  for (const auto& span : pool)
    spans.push_back(perm.narrow(0, span.begin, span.end - span.begin));
  const int64_t part = size / world;
  return torch::cat(spans).narrow(0, rank * part, part).clone();
}

namespace {

// Positions [from, to) of the pool's samples, as spans of the permutation.
EpochPool sub_pool(const EpochPool& pool, int64_t n, int64_t from, int64_t to) {
  const EpochPool whole = {{0, n}};
  EpochPool out;
  int64_t at = 0;  // the pool position of span's first sample
  for (const auto& span : pool.empty() ? whole : pool) {
    const int64_t len = span.end - span.begin;
    const int64_t b = std::max(from, at), e = std::min(to, at + len);
    if (b < e) out.push_back({span.begin + (b - at), span.begin + (e - at)});
    at += len;
  }
  return out;
}

}  // namespace

EpochPool remaining_pool(const EpochPool& pool, int64_t n, int world, int64_t steps,
                         int64_t batch_size) {
  const int64_t size = pool_size(pool, n);
  const int64_t per = steps_per_epoch(size, world, batch_size);
  const int64_t part = size / world, batch = std::min(batch_size, part);
  EpochPool out;
  if (steps >= per) return out;
  for (int64_t p = 0; p < world; ++p)
    for (const auto& span : sub_pool(pool, n, p * part + steps * batch, p * part + per * batch))
      out.push_back(span);
  return out;
}

}  // namespace psrt::pstrain
