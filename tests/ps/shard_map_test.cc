// The scheduler's placement of keys: slice sizes, tiling, balance across servers, stability.
#include "ps/shard_map.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

namespace psrt::ps {
namespace {

// Checks the slices of a key of `total` values cut at `slice_elems`: in order, contiguous from 0
// to total, none larger than slice_elems, sizes within one of each other, servers in range.
void expect_tiling(const std::vector<SliceRecord>& slices, std::uint64_t total,
                   std::uint64_t slice_elems, std::uint32_t num_servers) {
  ASSERT_FALSE(slices.empty());
  EXPECT_EQ(slices.size(), (total + slice_elems - 1) / slice_elems)
      << "the fewest slices of at most " << slice_elems << " elements";
  std::uint64_t next = 0;
  std::uint64_t smallest = UINT64_MAX;
  std::uint64_t largest = 0;
  for (std::size_t i = 0; i < slices.size(); ++i) {
    const auto& s = slices[i];
    EXPECT_EQ(s.index, i);
    EXPECT_EQ(s.offset, next);
    EXPECT_GE(s.count, 1u);
    EXPECT_LE(s.count, slice_elems);
    EXPECT_LT(s.server, num_servers);
    smallest = std::min(smallest, s.count);
    largest = std::max(largest, s.count);
    next += s.count;
  }
  EXPECT_EQ(next, total);
  EXPECT_LE(largest - smallest, 1u) << "slices of one key have even sizes";
  // The decoder the worker runs accepts what the scheduler makes.
  std::vector<SliceRecord> decoded;
  Status st = decode_slices(encode_slices(slices), total, num_servers, decoded);
  EXPECT_TRUE(st.ok()) << st.message();
}

TEST(ShardMap, SlicesAreBoundedEvenAndTileTheKeyInOrder) {
  for (std::size_t partition_bytes : {std::size_t{4}, std::size_t{40}, std::size_t{42},
                                      std::size_t{4096}, std::size_t{4} << 20}) {
    const std::uint64_t slice_elems = partition_bytes / 4;
    ShardMap map(3, partition_bytes);
    std::uint64_t key = 0;
    for (std::uint64_t total : {1ull, 2ull, 9ull, 10ull, 11ull, 95ull, 1000ull, 12345ull}) {
      SCOPED_TRACE(testing::Message()
                   << "partition_bytes " << partition_bytes << " total " << total);
      expect_tiling(map.place(key++, total), total, slice_elems, 3);
    }
  }
}

TEST(ShardMap, SplitsEvenlyRatherThanLeavingARemainderSlice) {
  ShardMap map(2, 40);  // 10 elements per slice at most
  const auto& s = map.place(1, 21);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].count, 7u);
  EXPECT_EQ(s[1].count, 7u);
  EXPECT_EQ(s[2].count, 7u);
}

TEST(ShardMap, PartitionsBelowOneFloatHoldOneElement) {
  for (std::size_t partition_bytes : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
    ShardMap map(2, partition_bytes);
    expect_tiling(map.place(1, 5), 5, 1, 2);
  }
}

TEST(ShardMap, BalancesBytesAcrossServers) {
  constexpr std::uint32_t kServers = 3;
  constexpr std::size_t kPartition = 4096;
  ShardMap map(kServers, kPartition);
  std::mt19937_64 rng(20240611);
  std::uniform_int_distribution<std::uint64_t> size(1, 5000);
  std::vector<std::uint64_t> expected(kServers, 0);
  std::uint64_t all = 0;
  for (std::uint64_t key = 0; key < 100; ++key) {
    const std::uint64_t total = size(rng);
    all += total * 4;
    for (const auto& s : map.place(key * 7919, total))
      expected[s.server] += s.count * 4;
    std::uint64_t lo = UINT64_MAX;
    std::uint64_t hi = 0;
    for (std::uint32_t i = 0; i < kServers; ++i) {
      lo = std::min(lo, map.bytes_on(i));
      hi = std::max(hi, map.bytes_on(i));
    }
    ASSERT_LE(hi - lo, kPartition) << "after key " << key << ": loads differ by more than a slice";
  }
  std::uint64_t sum = 0;
  for (std::uint32_t i = 0; i < kServers; ++i) {
    EXPECT_EQ(map.bytes_on(i), expected[i]) << "server " << i;
    EXPECT_GT(map.bytes_on(i), 0u);
    sum += map.bytes_on(i);
  }
  EXPECT_EQ(sum, all);
  EXPECT_EQ(map.keys().size(), 100u);
}

TEST(ShardMap, TheSameKeyKeepsItsPlacement) {
  ShardMap map(3, 40);
  const auto& first = map.place(7, 100);
  const std::vector<SliceRecord> copy = first;
  const std::uint64_t load0 = map.bytes_on(0);
  map.place(8, 55);
  const auto& again = map.place(7, 100);
  EXPECT_EQ(&again, &first);
  ASSERT_EQ(again.size(), copy.size());
  for (std::size_t i = 0; i < copy.size(); ++i) {
    EXPECT_EQ(again[i].server, copy[i].server);
    EXPECT_EQ(again[i].offset, copy[i].offset);
    EXPECT_EQ(again[i].count, copy[i].count);
  }
  ShardMap fresh(3, 40);
  fresh.place(7, 100);
  EXPECT_EQ(fresh.bytes_on(0), load0) << "placing a known key again adds no load";

  ASSERT_NE(map.find(7), nullptr);
  EXPECT_EQ(map.find(7), &first);
  EXPECT_EQ(map.find(9), nullptr);
  EXPECT_EQ(map.total(7), 100u);
  EXPECT_EQ(map.total(8), 55u);
  EXPECT_EQ(map.total(9), 0u);
}

TEST(ShardMap, AnotherSizeForAKnownKeyIsRefused) {
  ShardMap map(2, 40);
  map.place(7, 100);
  const std::uint64_t load = map.bytes_on(0) + map.bytes_on(1);
  try {
    map.place(7, 101);
    FAIL() << "a second size for key 7 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string what = e.what();
    EXPECT_NE(what.find("key 7 was initialised with 100 elements, not 101"), std::string::npos)
        << what;
  }
  EXPECT_EQ(map.bytes_on(0) + map.bytes_on(1), load);
  EXPECT_EQ(map.total(7), 100u);
}

TEST(ShardMap, RefusesEmptyKeysAndJobsWithoutServers) {
  ShardMap map(2, 40);
  try {
    map.place(3, 0);
    FAIL() << "a key of 0 elements was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("key 3 with 0 elements"), std::string::npos);
  }
  EXPECT_EQ(map.find(3), nullptr);
  try {
    ShardMap none(0, 40);
    FAIL() << "a map without servers was built";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

TEST(ShardMap, SmallKeySetsSpreadOverServers) {
  ShardMap map(4, std::size_t{4} << 20);
  std::set<std::uint32_t> servers;
  for (std::uint64_t key = 0; key < 4; ++key) {
    const auto& s = map.place(key, 1);
    ASSERT_EQ(s.size(), 1u);
    servers.insert(s[0].server);
  }
  EXPECT_EQ(servers.size(), 4u) << "4 one-element keys on 4 servers land on 4 servers";
  for (std::uint32_t i = 0; i < 4; ++i)
    EXPECT_EQ(map.bytes_on(i), 4u);
}

TEST(ShardMap, RestoreAddsThePlacementAndItsLoad) {
  ShardMap map(2, 40);
  map.restore(5, 30, {{1, 0, 0, 15}, {1, 1, 15, 15}});
  EXPECT_EQ(map.bytes_on(0), 0u);
  EXPECT_EQ(map.bytes_on(1), 120u);
  EXPECT_EQ(map.total(5), 30u);
  // The restored key keeps its placement; new keys go to the lighter server.
  EXPECT_EQ(map.place(5, 30)[0].server, 1u);
  EXPECT_EQ(map.place(6, 10)[0].server, 0u);
}

}  // namespace
}  // namespace psrt::ps

// Regression: a LOCATE total from the network used to reach vector::reserve unchecked
// (std::length_error / bad_alloc escaping the scheduler's progress thread).
TEST(ShardMapLimits, HugeTotalsAreRefusedWithPsrtError) {
  psrt::ps::ShardMap map(2, 4);
  for (std::uint64_t total : {std::uint64_t{1} << 62, std::uint64_t{1} << 63, ~std::uint64_t{0}}) {
    try {
      map.place(1, total);
      FAIL() << "accepted " << total;
    } catch (const psrt::Error& e) {
      EXPECT_EQ(e.code(), psrt::ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("raise --partition-bytes"), std::string::npos);
    }
  }
  EXPECT_EQ(map.find(1), nullptr);
}
