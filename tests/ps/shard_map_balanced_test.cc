// The balanced cut (psrun without --partition-bytes): every server carries an equal share of a
// round's bytes, whatever the tensor sizes, within the bound ps/shard_map.h states.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "ps/shard_map.h"

namespace psrt::ps {
namespace {

constexpr std::size_t k4MiB = std::size_t{4} << 20;

struct Spread {
  std::uint64_t least = UINT64_MAX, most = 0;
  std::uint64_t gap() const { return most - least; }
};

Spread spread(const ShardMap& map) {
  Spread s;
  for (std::uint32_t i = 0; i < map.num_servers(); ++i) {
    s.least = std::min(s.least, map.bytes_on(i));
    s.most = std::max(s.most, map.bytes_on(i));
  }
  return s;
}

// The 784-1024-1024-10 MLP of perf/vs_ddp (7 454 760 bytes in six tensors), in the order
// autograd produces its gradients (last layer first).
const std::vector<std::uint64_t> kMlp = {10, 10240, 1024, 1048576, 1024, 802816};

TEST(ShardMapBalanced, TheMlpIsSpreadEvenlyOverEveryServerCount) {
  for (std::uint32_t servers : {1u, 2u, 3u, 4u, 8u}) {
    SCOPED_TRACE(testing::Message() << servers << " servers");
    ShardMap map(servers, Cut{k4MiB, servers});
    std::uint64_t key = 0, total = 0;
    for (std::uint64_t n : kMlp) {
      map.place(key++, n);
      total += n * 4;
    }
    ASSERT_EQ(total, 7454760u);
    const Spread s = spread(map);
    // The two big tensors add the same bytes to every server (one element apart); the four
    // small ones (41 KiB together) go where the load is lowest.
    EXPECT_LE(s.gap(), 10240u * 4) << "max " << s.most << " min " << s.least;
    EXPECT_LE(static_cast<double>(s.most), 1.05 * static_cast<double>(total) / servers + 1);
  }
}

TEST(ShardMapBalanced, OneBigTensorGivesEachOfFourServersAQuarter) {
  // The fixed 4 MiB cut makes two slices of a 7.45 MB tensor: two of four servers idle.
  ShardMap fixed(4, k4MiB);
  fixed.place(1, 1863690);
  EXPECT_EQ(fixed.bytes_on(2), 0u);
  ShardMap map(4, job_cut(k4MiB, true, 4, true));
  const auto& slices = map.place(1, 1863690);
  // Slices of at most 256 KiB (Cut::kPipelineSliceBytes): 29 at least, 8 groups of 4.
  ASSERT_EQ(slices.size(), 32u);
  std::vector<std::uint64_t> bytes(4);
  for (const auto& s : slices) {
    EXPECT_EQ(s.count, s.index < 10 ? 58241u : 58240u);  // 1863690 = 32 * 58240 + 10
    EXPECT_EQ(s.server, s.index % 4) << "each group of 4 slices spans the 4 servers";
    bytes[s.server] += s.count * 4;
  }
  EXPECT_EQ(bytes, (std::vector<std::uint64_t>{1863692, 1863692, 1863688, 1863688}));
  EXPECT_EQ(spread(map).gap(), 4u);
}

TEST(ShardMapBalanced, TensorsBeyondSServersTimesTheSliceLimitAreCutInGroupsOfS) {
  ShardMap map(3, Cut{16384, 3});            // at most 4096 elements a slice
  const auto& slices = map.place(1, 40000);  // 10 slices at least: 4 groups of 3
  ASSERT_EQ(slices.size(), 12u);
  std::vector<int> per_server(3);
  for (const auto& s : slices) {
    EXPECT_LE(s.count, 4096u);
    ++per_server[s.server];
  }
  EXPECT_EQ(per_server, (std::vector<int>{4, 4, 4}));
  EXPECT_LE(spread(map).gap(), 4u * 4);
}

TEST(ShardMapBalanced, OverUcxOneSlicePerServerUnlessPartitionBytesAsksForMore) {
  ShardMap map(4, job_cut(k4MiB, true, 4, false));
  EXPECT_EQ(map.place(1, 1863690).size(), 4u);
  EXPECT_EQ(map.place(2, std::uint64_t{5} << 20).size(), 8u);  // 20 MiB: 2 groups of 4 MiB
  EXPECT_EQ(spread(map).gap(), 4u);
}

TEST(ShardMapBalanced, KeysUpToTheSmallKeyBytesStayWhole) {
  const Cut cut = job_cut(k4MiB, true, 4, true);
  EXPECT_EQ(cut.small_key_bytes(), 65536u);
  EXPECT_EQ((Cut{k4MiB, 64}).small_key_bytes(), 64u * 4096);  // no cut slice under 4 KiB
  EXPECT_EQ(slice_count(16384, cut), 1u);                     // 64 KiB
  EXPECT_EQ(slice_count(16385, cut), 4u);
  EXPECT_EQ(slice_count(1 << 20, cut), 16u);  // 4 MiB in slices of 256 KiB
  EXPECT_EQ(slice_count(1 << 20, job_cut(1 << 16, true, 4, true)), 64u);  // a smaller limit
  EXPECT_EQ(slice_count(16385, job_cut(k4MiB, false, 4, true)), 1u);      // the fixed cut
  EXPECT_EQ(slice_count(16385, job_cut(k4MiB, true, 1, true)), 1u);       // one server: 256 KiB
  EXPECT_EQ(slice_count(1 << 20, job_cut(k4MiB, true, 1, true)), 16u);
}

// The bound of ps/shard_map.h on models of random tensor sizes, placed in random order: the
// servers' loads differ by less than small_key_bytes() plus one element per cut key.
TEST(ShardMapBalanced, LoadsDifferByLessThanOneSmallKeyWhateverTheSizes) {
  std::mt19937_64 rng(24);
  for (int trial = 0; trial < 200; ++trial) {
    const auto servers = static_cast<std::uint32_t>(1 + rng() % 12);
    const std::size_t partition = (rng() % 2) ? k4MiB : std::size_t{1} << (12 + rng() % 8);
    ShardMap map(servers, job_cut(partition, true, servers, (rng() % 2) != 0));
    const int keys = 1 + static_cast<int>(rng() % 80);
    std::uint64_t cut_keys = 0;
    for (int k = 0; k < keys; ++k) {
      // Sizes from 1 element to 16 M (log-uniform), as in real models.
      const std::uint64_t total = std::uint64_t{1} << (rng() % 24);
      const std::uint64_t n = std::max<std::uint64_t>(1, total + rng() % total);
      const auto& slices = map.place(static_cast<std::uint64_t>(k), n);
      if (n * 4 > map.cut().small_key_bytes()) ++cut_keys;
      // The cut is the pure function a server checks an INIT against.
      for (const auto& s : slices) {
        const auto b = slice_bounds(n, map.cut(), s.index);
        ASSERT_TRUE(b.has_value());
        EXPECT_EQ(b->offset, s.offset);
        EXPECT_EQ(b->count, s.count);
        EXPECT_LE(s.count * 4, std::max<std::size_t>(partition, 4));
      }
      EXPECT_FALSE(slice_bounds(n, map.cut(), slices.size()).has_value());
    }
    const Spread s = spread(map);
    EXPECT_LT(s.gap(), map.cut().small_key_bytes() + 4 * cut_keys)
        << trial << ": " << servers << " servers, " << keys << " keys: " << describe_load(map);
  }
}

TEST(ShardMapBalanced, ACutForAnotherServerCountIsRefused) {
  EXPECT_THROW(ShardMap(4, Cut{k4MiB, 3}), Error);
}

TEST(ShardMapBalanced, DescribeLoadNamesTheCutAndEveryServersBytes) {
  ShardMap map(2, Cut{k4MiB, 2});
  map.place(1, 100000);
  map.place(2, 10);
  EXPECT_EQ(describe_load(map),
            "shard map (balanced cut, slices <= 4194304 B): 2 keys in 3 slices; bytes per "
            "server: 200040 200000 (max/mean 1.000)");
}

}  // namespace
}  // namespace psrt::ps
