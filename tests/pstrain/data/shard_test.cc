#include "pstrain/data/shard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "psrt/error.h"
#include "test_files.h"

namespace psrt::pstrain {
namespace {

using testing::int_values;

// The parts of all `world` ranks concatenated in rank order.
std::vector<int64_t> all_parts(int64_t n, int world, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> out;
  for (int rank = 0; rank < world; ++rank) {
    const std::vector<int64_t> part = int_values(epoch_shard(n, rank, world, seed, epoch));
    EXPECT_EQ(static_cast<int64_t>(part.size()), n / world) << "rank " << rank;
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

TEST(EpochShard, PartsAreDisjointAndCoverThePermutationPrefix) {
  for (const auto& [n, world] :
       {std::pair<int64_t, int>{1000, 1}, {1000, 3}, {1003, 4}, {7, 7}, {60000, 8}}) {
    const std::vector<int64_t> parts = all_parts(n, world, 42, 3);
    ASSERT_EQ(static_cast<int64_t>(parts.size()), world * (n / world));
    // Disjoint, all in [0, n).
    std::set<int64_t> seen(parts.begin(), parts.end());
    EXPECT_EQ(seen.size(), parts.size()) << "n " << n << " world " << world;
    EXPECT_GE(*seen.begin(), 0);
    EXPECT_LT(*seen.rbegin(), n);
    // World 1 sees the whole permutation; its prefix is exactly the ranks' union in order.
    const std::vector<int64_t> perm = int_values(epoch_shard(n, 0, 1, 42, 3));
    ASSERT_EQ(static_cast<int64_t>(perm.size()), n);
    EXPECT_EQ(std::set<int64_t>(perm.begin(), perm.end()).size(), static_cast<size_t>(n));
    EXPECT_TRUE(std::equal(parts.begin(), parts.end(), perm.begin()))
        << "n " << n << " world " << world;
  }
}

TEST(EpochShard, SameOnRepeatedCalls) {
  EXPECT_EQ(int_values(epoch_shard(5000, 2, 4, 7, 1)), int_values(epoch_shard(5000, 2, 4, 7, 1)));
}

TEST(EpochShard, ShuffledNotIdentity) {
  const std::vector<int64_t> perm = int_values(epoch_shard(1000, 0, 1, 7, 0));
  int64_t fixed = 0;
  for (int64_t i = 0; i < 1000; ++i)
    fixed += perm[i] == i ? 1 : 0;
  EXPECT_LT(fixed, 10);  // a random permutation has ~1 fixed point
}

TEST(EpochShard, DifferentEpochsAndSeedsDiffer) {
  const std::vector<int64_t> base = int_values(epoch_shard(1000, 1, 2, 7, 0));
  EXPECT_NE(base, int_values(epoch_shard(1000, 1, 2, 7, 1)));
  EXPECT_NE(base, int_values(epoch_shard(1000, 1, 2, 8, 0)));
  EXPECT_NE(int_values(epoch_shard(1000, 1, 2, 7, 1)), int_values(epoch_shard(1000, 1, 2, 8, 0)));
}

TEST(EpochShard, Dtype) {
  EXPECT_EQ(epoch_shard(10, 0, 2, 1, 0).scalar_type(), torch::kInt64);
}

TEST(EpochShard, RankOutOfRange) {
  EXPECT_PSRT_ERROR(epoch_shard(100, 4, 4, 1, 0), ErrorCode::kInvalidArgument,
                    "rank 4 is outside [0, 4)");
  EXPECT_PSRT_ERROR(epoch_shard(100, -1, 4, 1, 0), ErrorCode::kInvalidArgument,
                    "rank -1 is outside [0, 4)");
}

TEST(EpochShard, FewerSamplesThanWorkers) {
  EXPECT_PSRT_ERROR(epoch_shard(3, 0, 4, 1, 0), ErrorCode::kInvalidArgument,
                    "3 samples cannot be split across 4 workers");
  EXPECT_PSRT_ERROR(epoch_shard(3, 0, 0, 1, 0), ErrorCode::kInvalidArgument,
                    "world size must be at least 1, got 0");
}

TEST(StepsPerEpoch, DropsThePartialBatchButTakesAtLeastOne) {
  EXPECT_EQ(steps_per_epoch(60000, 1, 64), 937);  // 60000 / 64 = 937.5
  EXPECT_EQ(steps_per_epoch(60000, 8, 64), 117);  // 7500 / 64 = 117.2
  EXPECT_EQ(steps_per_epoch(1003, 4, 10), 25);    // 250 / 10
  EXPECT_EQ(steps_per_epoch(100, 4, 64), 1);      // 25 < 64
  EXPECT_PSRT_ERROR(steps_per_epoch(100, 4, 0), ErrorCode::kInvalidArgument,
                    "batch size must be at least 1, got 0");
  EXPECT_PSRT_ERROR(steps_per_epoch(3, 4, 1), ErrorCode::kInvalidArgument,
                    "3 samples cannot be split across 4 workers");
}

// The samples each of `world` workers trains in steps [from, to) of a pool cut for them.
std::vector<int64_t> trained(const EpochPool& pool, int world, int64_t from, int64_t to,
                             int64_t batch) {
  std::vector<int64_t> out;
  for (int rank = 0; rank < world; ++rank) {
    const std::vector<int64_t> part = int_values(pool_shard(1000, pool, rank, world, 7, 2));
    out.insert(out.end(), part.begin() + from * batch, part.begin() + to * batch);
  }
  return out;
}

TEST(EpochPool, TheWholePermutationIsEpochShardBitForBit) {
  EXPECT_EQ(pool_size({}, 1000), 1000);
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_EQ(int_values(pool_shard(1000, {}, rank, 3, 7, 2)),
              int_values(epoch_shard(1000, rank, 3, 7, 2)));
}

// 1000 samples, batch 10: 3 workers train 33 steps of 333-sample parts (330 each). After 5
// steps the 2 workers that remain train the 3 x 280 samples not trained yet, in 42 steps each:
// the epoch trains exactly the 990 samples it would have trained with 3, each once. Cut again
// after 7 of those steps, for 1 worker, the rest is again what had not been trained.
TEST(EpochPool, TheRestOfAnEpochIsCutForFewerWorkersAndEverySampleTrainsOnce) {
  const EpochPool rest = remaining_pool({}, 1000, 3, 5, 10);
  EXPECT_EQ(rest, (EpochPool{{50, 330}, {383, 663}, {716, 996}}));
  EXPECT_EQ(pool_size(rest, 1000), 840);
  EXPECT_EQ(steps_per_epoch(pool_size(rest, 1000), 2, 10), 42);
  std::vector<int64_t> seen = trained({}, 3, 0, 5, 10);
  const std::vector<int64_t> after = trained(rest, 2, 0, 42, 10);
  seen.insert(seen.end(), after.begin(), after.end());
  std::vector<int64_t> planned = trained({}, 3, 0, 33, 10);
  std::sort(seen.begin(), seen.end());
  std::sort(planned.begin(), planned.end());
  EXPECT_EQ(seen.size(), 990u);
  EXPECT_EQ(seen, planned);

  const EpochPool again = remaining_pool(rest, 1000, 2, 7, 10);
  EXPECT_EQ(again, (EpochPool{{120, 330}, {383, 523}, {593, 663}, {716, 996}}));
  std::vector<int64_t> twice = trained(rest, 2, 0, 7, 10);
  const std::vector<int64_t> last = trained(again, 1, 0, 70, 10);
  twice.insert(twice.end(), last.begin(), last.end());
  std::vector<int64_t> rest_planned = after;
  std::sort(twice.begin(), twice.end());
  std::sort(rest_planned.begin(), rest_planned.end());
  EXPECT_EQ(twice, rest_planned);

  EXPECT_TRUE(remaining_pool({}, 1000, 3, 33, 10).empty());  // the epoch's steps are done
  EXPECT_TRUE(remaining_pool(rest, 1000, 2, 50, 10).empty());
}

}  // namespace
}  // namespace psrt::pstrain
