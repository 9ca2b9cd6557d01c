// The round a restarted job resumes from, when the latest round is damaged: each kind of damage
// makes the job fall back to the newest complete, valid round and says why; when no round is
// usable and one was damaged, the job is refused with every round's reason. Never the wrong
// round in silence.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "ps/checkpoint.h"
#include "ps/job_checkpoint.h"
#include "ps/shard_map.h"
#include "tests/ps/checkpoint_test_util.h"

namespace psrt::ps {
namespace {

namespace fs = std::filesystem;
using namespace psrt::ps::test;  // NOLINT(google-build-using-namespace): the shared values

class CheckpointResume : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = test_dir("psrt_sec_resume_");
    map_.place(1, 25);  // 3 slices of 10, 10, 5 (partition 40 bytes)
    map_.place(2, 5);   // 1 slice
  }
  void TearDown() override { fs::remove_all(dir_); }

 public:  // for the damage functions
  void write_round(std::uint64_t round) {
    for (const auto& [key, entry] : map_.keys())
      for (const auto& s : entry.second)
        write_slice_checkpoint(dir_, key, s, entry.first, round,
                               std::vector<float>(s.count, static_cast<float>(round)), {});
  }
  // Key 1 slice 1's file of `round`.
  std::string victim(std::uint64_t round) const { return slice_checkpoint_path(dir_, round, 1, 1); }

  std::string dir_;
  ShardMap map_{2, 40};
};

struct Damage {
  const char* name;
  std::function<void(CheckpointResume&, const std::string& file)> apply;
  const char* why;  // in SkippedRound::why
};

TEST_F(CheckpointResume, ADamagedLatestRoundFallsBackToThePreviousOneAndSaysWhy) {
  const std::vector<Damage> damages = {
      {"a flipped weight bit",
       [](auto&, const std::string& f) {
         auto b = read_file(f);
         b[70] ^= 0x01;
         write_file(f, b);
       },
       "checksum mismatch"},
      {"the header's version changed",
       [](auto&, const std::string& f) {
         auto b = read_file(f);
         b[48] = 5;
         write_file(f, b);
       },
       "round mismatch: it holds round 5"},
      {"round 2's valid file copied into round 4",
       [](CheckpointResume& t, const std::string& f) {
         fs::copy_file(t.victim(2), f, fs::copy_options::overwrite_existing);
       },
       "round mismatch: it holds round 2 but lies in round 4's directory"},
      {"another slice's valid file under this name",
       [](CheckpointResume& t, const std::string& f) {
         fs::copy_file(slice_checkpoint_path(t.dir_, 4, 1, 0), f,
                       fs::copy_options::overwrite_existing);
       },
       "it holds key 1 slice 0, but its name says key 1 slice 1"},
      {"truncated", [](auto&, const std::string& f) { fs::resize_file(f, 70); },
       "truncated weights"},
      {"empty", [](auto&, const std::string& f) { fs::resize_file(f, 0); }, "truncated header"},
      {"trailing bytes",
       [](auto&, const std::string& f) { fs::resize_file(f, fs::file_size(f) + 4); },
       "trailing bytes"},
      {"a directory under the file's name",
       [](auto&, const std::string& f) {
         fs::remove(f);
         fs::create_directory(f);
       },
       "not a regular file"},
      {"format 1",
       [](auto&, const std::string& f) {
         auto b = read_file(f);
         b[4] = 1;
         write_file(f, b);
       },
       "checkpoint format 1 is from an older psrt"},
  };
  for (const auto& d : damages) {
    SCOPED_TRACE(d.name);
    fs::remove_all(dir_);
    write_round(2);
    write_round(4);
    d.apply(*this, victim(4));
    const ResumePoint p = find_resume_round(dir_, map_);
    EXPECT_EQ(p.round, 2u);
    ASSERT_EQ(p.skipped.size(), 1u);
    EXPECT_EQ(p.skipped[0].round, 4u);
    EXPECT_TRUE(p.skipped[0].damaged);
    EXPECT_NE(p.skipped[0].why.find(victim(4)), std::string::npos) << p.skipped[0].why;
    EXPECT_NE(p.skipped[0].why.find(d.why), std::string::npos) << p.skipped[0].why;
  }
}

TEST_F(CheckpointResume, SeveralDamagedRoundsAreAllSkippedNewestFirst) {
  write_round(2);
  write_round(4);
  write_round(6);
  fs::resize_file(victim(6), 0);
  fs::copy_file(victim(2), victim(4), fs::copy_options::overwrite_existing);
  const ResumePoint p = find_resume_round(dir_, map_);
  EXPECT_EQ(p.round, 2u);
  ASSERT_EQ(p.skipped.size(), 2u);
  EXPECT_EQ(p.skipped[0].round, 6u);
  EXPECT_EQ(p.skipped[1].round, 4u);
  EXPECT_NE(p.skipped[1].why.find("round mismatch"), std::string::npos) << p.skipped[1].why;
}

TEST_F(CheckpointResume, SkippedRoundsAreSetAsideSoTheyCannotMixWithNewFiles) {
  write_round(2);
  write_round(4);
  write_round(6);
  fs::resize_file(victim(6), 0);
  fs::remove(victim(4));
  fs::create_directories(dir_ + "/r000000000006.skipped");  // from an earlier resume
  const ResumePoint p = find_resume_round(dir_, map_);
  ASSERT_EQ(p.round, 2u);
  const auto moved = set_aside_rounds(dir_, p.skipped);
  ASSERT_EQ(moved.size(), 2u);
  EXPECT_EQ(moved[0], dir_ + "/r000000000006.skipped.1");
  EXPECT_EQ(moved[1], dir_ + "/r000000000004.skipped");
  EXPECT_EQ(fs::file_size(moved[0] + "/k1-s1.slice"), 0u) << "moved, not deleted";
  EXPECT_FALSE(fs::exists(dir_ + "/r000000000004"));
  EXPECT_FALSE(fs::exists(dir_ + "/r000000000006"));
  // The resumed job writes round 4's missing file first and dies: round 4 stays incomplete
  // instead of being completed by the old run's files.
  const auto& missing = (*map_.find(1))[1];
  write_slice_checkpoint(dir_, 1, missing, 25, 4, std::vector<float>(missing.count, 9.f), {});
  const ResumePoint again = find_resume_round(dir_, map_);
  EXPECT_EQ(again.round, 2u);
  ASSERT_EQ(again.skipped.size(), 1u);
  EXPECT_EQ(again.skipped[0].round, 4u);
  EXPECT_FALSE(again.skipped[0].damaged);
}

TEST_F(CheckpointResume, AnIncompleteLatestRoundIsSkippedWithTheMissingFile) {
  write_round(2);
  write_round(4);
  fs::remove(victim(4));
  const ResumePoint p = find_resume_round(dir_, map_);
  EXPECT_EQ(p.round, 2u);
  ASSERT_EQ(p.skipped.size(), 1u);
  EXPECT_FALSE(p.skipped[0].damaged);
  EXPECT_NE(p.skipped[0].why.find("incomplete: no file for key 1 slice 1"), std::string::npos)
      << p.skipped[0].why;
}

TEST_F(CheckpointResume, NoUsableRoundAfterDamageIsAnErrorListingEveryRound) {
  write_round(2);
  write_round(4);
  fs::remove(victim(4));           // incomplete
  fs::resize_file(victim(2), 10);  // damaged
  try {
    const ResumePoint p = find_resume_round(dir_, map_);
    ADD_FAILURE() << "resumed from round " << p.round;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string what = e.what();
    EXPECT_NE(what.find("no checkpoint round in '" + dir_ + "' can be resumed from"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("round 4: incomplete"), std::string::npos) << what;
    EXPECT_NE(what.find("round 2: checkpoint '" + victim(2) + "' is unusable: truncated header"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("remove '" + dir_ + "' to start the job afresh"), std::string::npos)
        << what;
  }
}

TEST_F(CheckpointResume, OnlyIncompleteRoundsStartAfreshAndSaySo) {
  write_round(2);
  fs::remove(victim(2));
  const ResumePoint p = find_resume_round(dir_, map_);
  EXPECT_EQ(p.round, 0u);
  ASSERT_EQ(p.skipped.size(), 1u);
  EXPECT_FALSE(p.skipped[0].damaged);
}

// Job checkpoints (ps/job_checkpoint.h): a round of the whole job is declared complete (JOB) only
// when every worker's part and every slice is on disk, and a marked directory resumes only from
// such a round.
class JobCheckpoint : public CheckpointResume {
 protected:
  void write_parts(std::uint64_t round, std::uint32_t workers) {
    for (std::uint32_t w = 0; w < workers; ++w) {
      const std::string text =
          "part of worker " + std::to_string(w) + " at " + std::to_string(round);
      write_worker_part(dir_, round, w, std::as_bytes(std::span(text)));
    }
  }
  void complete(std::uint64_t round) { complete_job_round(dir_, round, 2, 2, 40); }
};

TEST_F(JobCheckpoint, ARoundIsDeclaredCompleteOnlyOnceEveryPartIsOnDisk) {
  write_manifest(dir_, map_);
  write_round(2);
  write_parts(2, 1);  // worker 1's part is missing
  try {
    complete(2);
    ADD_FAILURE() << "declared complete without worker 1's part";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("worker 1 wrote no part ('" +
                                         worker_part_path(dir_, 2, 1) + "')"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(job_manifest_path(dir_, 2)));
  write_parts(2, 2);
  complete(2);
  EXPECT_TRUE(fs::exists(job_manifest_path(dir_, 2)));
  std::string why;
  EXPECT_TRUE(job_round_complete(dir_, 2, &why)) << why;
  const auto part = read_worker_part(dir_, 2, 1);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(part.data()), part.size()),
            "part of worker 1 at 2");
  // A slice the servers have not written: not complete either.
  write_round(4);
  fs::remove(victim(4));
  write_parts(4, 2);
  EXPECT_THROW(complete(4), Error);
  EXPECT_FALSE(fs::exists(job_manifest_path(dir_, 4)));
}

TEST_F(JobCheckpoint, AMarkedDirectoryResumesOnlyFromARoundDeclaredComplete) {
  write_manifest(dir_, map_);
  write_round(2);
  write_parts(2, 2);
  complete(2);
  write_round(4);  // the servers' slices of round 4, but no worker wrote its part
  mark_job_checkpoints(dir_);
  const ResumePoint p = find_resume_round(dir_, map_);
  EXPECT_EQ(p.round, 2u);
  ASSERT_EQ(p.skipped.size(), 1u);
  EXPECT_FALSE(p.skipped[0].damaged);
  EXPECT_NE(p.skipped[0].why.find("incomplete: no job manifest '" + job_manifest_path(dir_, 4)),
            std::string::npos)
      << p.skipped[0].why;
  // Without job checkpoints the slices alone make round 4 usable, as before.
  fs::remove(dir_ + "/JOB-CHECKPOINTS");
  remove_job_round(dir_, 2);
  EXPECT_FALSE(has_job_checkpoints(dir_));
  EXPECT_EQ(find_resume_round(dir_, map_).round, 4u);
}

TEST_F(JobCheckpoint, ADamagedWorkerPartFallsBackToThePreviousRoundAndSaysWhy) {
  write_manifest(dir_, map_);
  for (std::uint64_t r : {2, 4}) {
    write_round(r);
    write_parts(r, 2);
    complete(r);
  }
  auto bytes = read_file(worker_part_path(dir_, 4, 1));
  bytes[3] ^= 0x20;
  write_file(worker_part_path(dir_, 4, 1), bytes);
  const ResumePoint p = find_resume_round(dir_, map_);
  EXPECT_EQ(p.round, 2u);
  ASSERT_EQ(p.skipped.size(), 1u);
  EXPECT_TRUE(p.skipped[0].damaged);
  EXPECT_NE(p.skipped[0].why.find("worker part '" + worker_part_path(dir_, 4, 1) +
                                  "' is unusable: size or checksum mismatch"),
            std::string::npos)
      << p.skipped[0].why;
  EXPECT_THROW(read_worker_part(dir_, 4, 1), Error);
  // Pruning a round leaves nothing of it once the servers removed their slices.
  for (const auto& [key, entry] : map_.keys())
    for (const auto& s : entry.second)
      remove_slice_checkpoint(dir_, 2, key, s.index);
  remove_job_round(dir_, 2);
  EXPECT_FALSE(fs::exists(checkpoint_round_dir(dir_, 2)));
}

}  // namespace
}  // namespace psrt::ps
