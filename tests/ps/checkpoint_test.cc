// Server checkpoints: slice files (round trip, every corruption named), the manifest, and the
// choice of the round to resume from.
#include "ps/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ps/optimizer_state.h"
#include "ps/shard_map.h"
#include "tests/ps/checkpoint_test_util.h"

namespace psrt::ps {
namespace {

namespace fs = std::filesystem;
using namespace psrt::ps::test;  // NOLINT(google-build-using-namespace): the shared values

class Checkpoint : public testing::Test {
 protected:
  void SetUp() override { dir_ = test_dir("psrt_unit_ckpt_"); }
  void TearDown() override { fs::remove_all(dir_); }

  // Expects `f` to throw a psrt::Error naming `path` and `needle`.
  template <typename F>
  static void expect_unusable(F&& f, const std::string& path, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one naming '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      const std::string what = e.what();
      EXPECT_NE(what.find("'" + path + "'"), std::string::npos) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
    }
  }

  std::string dir_;
};

TEST_F(Checkpoint, SliceRoundTripsWithoutMomentum) {
  write_slice_checkpoint(dir_, kKey, kSlice, kTotal, 8, kWeights, {});
  const std::string path = slice_checkpoint_path(dir_, 8, kKey, kSlice.index);
  EXPECT_TRUE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(fs::file_size(path), 64 + kWeights.size() * 4);
  SliceState s = read_slice_checkpoint(dir_, 8, kKey, kSlice, kTotal);
  EXPECT_EQ(s.version, 8u);
  EXPECT_EQ(s.weights, kWeights);
  EXPECT_TRUE(s.momentum.empty());
}

TEST_F(Checkpoint, SliceRoundTripsWithMomentum) {
  write_slice_checkpoint(dir_, kKey, kSlice, kTotal, 16, kWeights, kMomentum);
  SliceState s = read_slice_checkpoint(dir_, 16, kKey, kSlice, kTotal);
  EXPECT_EQ(s.version, 16u);
  EXPECT_EQ(s.weights, kWeights);
  ASSERT_EQ(s.momentum.size(), kMomentum.size());
  for (std::size_t i = 0; i < kMomentum.size(); ++i)
    EXPECT_EQ(std::bit_cast<std::uint32_t>(s.momentum[i]),
              std::bit_cast<std::uint32_t>(kMomentum[i]))
        << "momentum " << i;
}

// Adam's state (ps/optimizer_state.h: exp_avg, exp_avg_sq, the step count in two floats' bits)
// comes back byte for byte, flagged as Adam's (bit 1), and its size is checked.
TEST_F(Checkpoint, SliceRoundTripsWithAdamState) {
  std::vector<float> state(adam_state_floats(kWeights.size()));
  for (std::size_t i = 0; i < state.size(); ++i)
    state[i] = 0.25f * static_cast<float>(i) - 1.f;
  set_adam_steps(state, kWeights.size(), (std::uint64_t{7} << 32) | 12345u);
  write_slice_checkpoint(dir_, kKey, kSlice, kTotal, 24, kWeights, state);
  const std::string path = slice_checkpoint_path(dir_, 24, kKey, kSlice.index);
  EXPECT_EQ(fs::file_size(path), 64 + (kWeights.size() + state.size()) * 4);
  const auto bytes = read_file(path);
  EXPECT_EQ(bytes[20], 2) << "flag bit 1: Adam's state";
  SliceState s = read_slice_checkpoint(dir_, 24, kKey, kSlice, kTotal);
  EXPECT_EQ(s.weights, kWeights);
  ASSERT_EQ(s.momentum.size(), state.size());
  EXPECT_EQ(std::memcmp(s.momentum.data(), state.data(), state.size() * 4), 0);
  EXPECT_EQ(adam_steps(s.momentum, kWeights.size()), (std::uint64_t{7} << 32) | 12345u);
  write_file(path, {bytes.begin(), bytes.end() - 4});
  expect_unusable([&] { read_slice_checkpoint(dir_, 24, kKey, kSlice, kTotal); }, path,
                  "truncated optimizer state");
}

TEST_F(Checkpoint, PathsNameTheRoundKeyAndSlice) {
  EXPECT_EQ(slice_checkpoint_path("/ck", 12, 7, 3), "/ck/r000000000012/k7-s3.slice");
}

TEST_F(Checkpoint, AFlippedByteIsAChecksumMismatch) {
  write_slice_checkpoint(dir_, kKey, kSlice, kTotal, 8, kWeights, kMomentum);
  const std::string path = slice_checkpoint_path(dir_, 8, kKey, kSlice.index);
  const auto good = read_file(path);
  for (std::size_t at :
       {std::size_t{64}, std::size_t{64 + 4 * 5 - 1}, std::size_t{64 + 4 * 5}, good.size() - 1}) {
    auto bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    write_file(path, bad);
    SCOPED_TRACE(testing::Message() << "byte " << at);
    expect_unusable([&] { read_slice_checkpoint(dir_, 8, kKey, kSlice, kTotal); }, path,
                    "checksum mismatch");
  }
}

TEST_F(Checkpoint, TruncatedAndOverlongFilesAreNamed) {
  write_slice_checkpoint(dir_, kKey, kSlice, kTotal, 8, kWeights, kMomentum);
  const std::string path = slice_checkpoint_path(dir_, 8, kKey, kSlice.index);
  const auto good = read_file(path);
  auto read = [&] { read_slice_checkpoint(dir_, 8, kKey, kSlice, kTotal); };
  write_file(path, {good.begin(), good.begin() + 10});
  expect_unusable(read, path, "truncated header");
  write_file(path, {good.begin(), good.begin() + 64 + 8});
  expect_unusable(read, path, "truncated weights");
  write_file(path, {good.begin(), good.end() - 1});
  expect_unusable(read, path, "truncated optimizer state");
  auto longer = good;
  longer.push_back('x');
  write_file(path, longer);
  expect_unusable(read, path, "trailing bytes");
  write_file(path, {});
  expect_unusable(read, path, "truncated");
}

TEST_F(Checkpoint, AnotherKeyOrSliceIsRefused) {
  write_slice_checkpoint(dir_, kKey, kSlice, kTotal, 8, kWeights, {});
  const std::string path = slice_checkpoint_path(dir_, 8, kKey, kSlice.index);
  // No file for key 43.
  const std::string other = slice_checkpoint_path(dir_, 8, kKey + 1, kSlice.index);
  expect_unusable([&] { read_slice_checkpoint(dir_, 8, kKey + 1, kSlice, kTotal); }, other,
                  "cannot open it");
  // Key 42's file under key 43's name.
  fs::copy_file(path, other);
  expect_unusable([&] { read_slice_checkpoint(dir_, 8, kKey + 1, kSlice, kTotal); }, other,
                  "it holds key 42 slice 2, but its name says key 43 slice 2");
  // The manifest says another offset, count or total.
  SliceRecord moved = kSlice;
  moved.offset = 101;
  expect_unusable([&] { read_slice_checkpoint(dir_, 8, kKey, moved, kTotal); }, path,
                  "another slice");
  expect_unusable([&] { read_slice_checkpoint(dir_, 8, kKey, kSlice, kTotal + 1); }, path,
                  "another slice");
  // Not a checkpoint at all.
  auto bytes = read_file(path);
  bytes[0] = 'X';
  write_file(path, bytes);
  expect_unusable([&] { read_slice_checkpoint(dir_, 8, kKey, kSlice, kTotal); }, path,
                  "not a psrt slice checkpoint");
}

TEST_F(Checkpoint, RemoveDeletesTheFileAndTheEmptyRound) {
  write_slice_checkpoint(dir_, 1, {0, 0, 0, 1}, 2, 4, std::vector<float>{1.f}, {});
  write_slice_checkpoint(dir_, 1, {0, 1, 1, 1}, 2, 4, std::vector<float>{2.f}, {});
  remove_slice_checkpoint(dir_, 4, 1, 0);
  EXPECT_FALSE(fs::exists(slice_checkpoint_path(dir_, 4, 1, 0)));
  EXPECT_TRUE(fs::exists(fs::path(slice_checkpoint_path(dir_, 4, 1, 1)).parent_path()));
  remove_slice_checkpoint(dir_, 4, 1, 1);
  EXPECT_FALSE(fs::exists(fs::path(slice_checkpoint_path(dir_, 4, 1, 1)).parent_path()));
}

void expect_same_placements(const ShardMap& a, const ShardMap& b) {
  ASSERT_EQ(a.keys().size(), b.keys().size());
  for (const auto& [key, entry] : a.keys()) {
    ASSERT_NE(b.find(key), nullptr) << "key " << key;
    EXPECT_EQ(b.total(key), entry.first) << "key " << key;
    const auto& other = *b.find(key);
    ASSERT_EQ(other.size(), entry.second.size()) << "key " << key;
    for (std::size_t i = 0; i < other.size(); ++i) {
      EXPECT_EQ(other[i].server, entry.second[i].server);
      EXPECT_EQ(other[i].index, entry.second[i].index);
      EXPECT_EQ(other[i].offset, entry.second[i].offset);
      EXPECT_EQ(other[i].count, entry.second[i].count);
    }
  }
  for (std::uint32_t s = 0; s < a.num_servers(); ++s)
    EXPECT_EQ(a.bytes_on(s), b.bytes_on(s));
}

TEST_F(Checkpoint, ManifestRoundTrips) {
  ShardMap map(3, 40);
  map.place(1, 95);
  map.place(0xffffffffffffull, 1);
  map.place(7, 30);
  write_manifest(dir_, map);
  EXPECT_FALSE(fs::exists(dir_ + "/MANIFEST.tmp"));
  ShardMap restored(3, 40);
  ASSERT_TRUE(read_manifest(dir_, restored));
  expect_same_placements(map, restored);
}

TEST_F(Checkpoint, MissingManifestIsNotAnError) {
  ShardMap map(3, 40);
  EXPECT_FALSE(read_manifest(dir_, map));
  EXPECT_TRUE(map.keys().empty());
}

TEST_F(Checkpoint, UnusableManifestsAreNamed) {
  ShardMap map(3, 40);
  map.place(1, 25);
  write_manifest(dir_, map);
  const std::string path = dir_ + "/MANIFEST";
  ShardMap two(2, 40);
  expect_unusable([&] { read_manifest(dir_, two); }, path, "written by a job with 3 servers");

  const auto good = read_file(path);
  std::string text(good.begin(), good.end());
  ShardMap fresh(3, 40);
  write_file(path, {'x', '\n'});
  expect_unusable([&] { read_manifest(dir_, fresh); }, path, "bad first line");
  std::string garbled = text + "1 25 zz\n";
  write_file(path, {garbled.begin(), garbled.end()});
  expect_unusable([&] { read_manifest(dir_, fresh); }, path, "malformed line");
  // A slice missing from the middle of key 1.
  std::string gap = "psrt-manifest 1 servers 3\n1 25 0 0 0 9\n1 25 2 2 18 7\n";
  write_file(path, {gap.begin(), gap.end()});
  expect_unusable([&] { read_manifest(dir_, fresh); }, path, "key 1:");
  // A server this job does not have.
  std::string far = "psrt-manifest 1 servers 3\n1 25 0 5 0 25\n";
  write_file(path, {far.begin(), far.end()});
  expect_unusable([&] { read_manifest(dir_, fresh); }, path, "on server 5 of 3");
  EXPECT_TRUE(fresh.keys().empty());
}

// Known gap (reported, not fixed here): a manifest cut inside the last record is read as if the
// record were absent, so a key whose only line is cut off silently disappears. Enable once
// read_manifest() tells a clean end of file from a partial record.
TEST_F(Checkpoint, ManifestCutInsideARecordIsRefused) {
  std::string text = "psrt-manifest 1 servers 1\n1 4 0 0 0 4\n2 4 0 0";
  fs::create_directories(dir_);
  write_file(dir_ + "/MANIFEST", {text.begin(), text.end()});
  ShardMap map(1, 40);
  expect_unusable([&] { read_manifest(dir_, map); }, dir_ + "/MANIFEST", "malformed");
}

void write_round(const std::string& dir, const ShardMap& map, std::uint64_t round,
                 std::uint64_t skip_key = UINT64_MAX, std::uint32_t skip_index = 0) {
  for (const auto& [key, entry] : map.keys())
    for (const auto& s : entry.second) {
      if (key == skip_key && s.index == skip_index) continue;
      std::vector<float> w(s.count, static_cast<float>(round));
      write_slice_checkpoint(dir, key, s, entry.first, round, w, {});
    }
}

std::uint64_t latest_complete_round(const std::string& dir, const ShardMap& map) {
  return find_resume_round(dir, map).round;
}

TEST_F(Checkpoint, LatestCompleteRoundHasEverySlice) {
  ShardMap map(2, 40);
  map.place(1, 25);  // 3 slices
  map.place(2, 5);   // 1 slice
  EXPECT_EQ(latest_complete_round(dir_, map), 0u) << "no directory yet";
  write_round(dir_, map, 2);
  write_round(dir_, map, 3, 1, 2);
  write_round(dir_, map, 4, 2, 0);
  EXPECT_EQ(latest_complete_round(dir_, map), 2u);
  // Things that are not round directories are ignored.
  fs::create_directories(dir_ + "/r99");
  fs::create_directories(dir_ + "/rabcdefghijkl");
  write_file(dir_ + "/r000000000009.txt", {'x'});
  EXPECT_EQ(latest_complete_round(dir_, map), 2u);
  // Completing round 4 makes it the latest.
  write_slice_checkpoint(dir_, 2, (*map.find(2))[0], 5, 4, std::vector<float>(5, 4.f), {});
  EXPECT_EQ(latest_complete_round(dir_, map), 4u);
  // Rounds are compared as numbers, not names: 10 is later than 4.
  write_round(dir_, map, 10);
  EXPECT_EQ(latest_complete_round(dir_, map), 10u);
}

TEST_F(Checkpoint, NoRoundIsCompleteForAnEmptyMap) {
  ShardMap map(2, 40);
  fs::create_directories(dir_ + "/r000000000005");
  EXPECT_EQ(latest_complete_round(dir_, map), 0u);
}

}  // namespace
}  // namespace psrt::ps
