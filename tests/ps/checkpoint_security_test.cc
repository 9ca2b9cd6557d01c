// Checkpoint files as an attacker or a bad disk leaves them: every header field is checked against
// where the file lies, a file of another round is refused, the old format is refused with the
// reason, nothing blocks on a FIFO, and what the server writes is private (0600 files, 0700
// directories) and durable (the directory is fsynced after the rename).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/fnv.h"
#include "ps/checkpoint.h"
#include "ps/job_checkpoint.h"
#include "ps/manifest_writer.h"
#include "ps/shard_map.h"
#include "tests/ps/checkpoint_test_util.h"
#include "transport/wire.h"

// Records the directories fsync() is called on (this test binary's fsync() stands in for libc's;
// the real call is made through syscall()).
namespace {
std::mutex fsync_mu;
std::vector<std::string> fsynced_dirs;
}  // namespace

extern "C" int fsync(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    char target[4096];
    const std::string link = "/proc/self/fd/" + std::to_string(fd);
    const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
    std::lock_guard lock(fsync_mu);
    fsynced_dirs.emplace_back(target, n > 0 ? static_cast<std::size_t>(n) : 0);
  }
  return static_cast<int>(::syscall(SYS_fsync, fd));
}

namespace psrt::ps {
namespace {

namespace fs = std::filesystem;
using namespace psrt::ps::test;  // NOLINT(google-build-using-namespace): the shared values

class CheckpointSecurity : public testing::Test {
 protected:
  void SetUp() override { dir_ = test_dir("psrt_sec_ckpt_"); }
  void TearDown() override { fs::remove_all(dir_); }

  // Expects reading key kKey's kSlice at `round` to throw kInvalidArgument naming the file and
  // `needle`.
  void expect_refused(std::uint64_t round, const std::string& needle) {
    const std::string path = slice_checkpoint_path(dir_, round, kKey, kSlice.index);
    try {
      SliceState s = read_slice_checkpoint(dir_, round, kKey, kSlice, kTotal);
      ADD_FAILURE() << path << " was accepted (version " << s.version << "); expected '" << needle
                    << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      const std::string what = e.what();
      EXPECT_NE(what.find("'" + path + "'"), std::string::npos) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
    }
  }

  std::string dir_;
};

TEST_F(CheckpointSecurity, EveryHeaderByteIsChecked) {
  write_slice_checkpoint(dir_, kKey, kSlice, kTotal, 8, kWeights, kMomentum);
  const std::string path = slice_checkpoint_path(dir_, 8, kKey, kSlice.index);
  const auto good = read_file(path);
  for (std::size_t at = 0; at < kSliceCheckpointHeaderBytes; ++at) {
    for (char bit : {char(0x01), char(0x80)}) {
      auto bad = good;
      bad[at] = static_cast<char>(bad[at] ^ bit);
      write_file(path, bad);
      SCOPED_TRACE(testing::Message() << "header byte " << at << " ^ " << int(bit & 0xff));
      expect_refused(8, "is unusable");
    }
  }
}

TEST_F(CheckpointSecurity, TheVersionFieldMustBeTheRoundOfItsDirectory) {
  write_slice_checkpoint(dir_, kKey, kSlice, kTotal, 8, kWeights, {});
  const std::string path = slice_checkpoint_path(dir_, 8, kKey, kSlice.index);
  auto bytes = read_file(path);
  bytes[48] = 9;  // version 8 -> 9, nothing else changed
  write_file(path, bytes);
  expect_refused(8, "round mismatch: it holds round 9 but lies in round 8's directory");
}

TEST_F(CheckpointSecurity, AValidFileOfAnOlderRoundCopiedIntoTheLatestIsRefused) {
  write_slice_checkpoint(dir_, kKey, kSlice, kTotal, 2, std::vector<float>(5, 2.f), {});
  write_slice_checkpoint(dir_, kKey, kSlice, kTotal, 4, std::vector<float>(5, 4.f), {});
  fs::copy_file(slice_checkpoint_path(dir_, 2, kKey, kSlice.index),
                slice_checkpoint_path(dir_, 4, kKey, kSlice.index),
                fs::copy_options::overwrite_existing);
  expect_refused(4, "round mismatch: it holds round 2 but lies in round 4's directory");
  EXPECT_EQ(read_slice_checkpoint(dir_, 2, kKey, kSlice, kTotal).weights,
            std::vector<float>(5, 2.f))
      << "the original stays readable where it belongs";
}

TEST_F(CheckpointSecurity, AValidFileOfAnotherSliceUnderThisNameIsRefused) {
  const SliceRecord other{1, 3, 100, 5};
  write_slice_checkpoint(dir_, kKey, other, kTotal, 8, kWeights, {});
  fs::rename(slice_checkpoint_path(dir_, 8, kKey, other.index),
             slice_checkpoint_path(dir_, 8, kKey, kSlice.index));
  expect_refused(8, "it holds key 42 slice 3, but its name says key 42 slice 2");
}

// Format 1 (psrt before this check): the same 64-byte header, the checksum over the data only.
TEST_F(CheckpointSecurity, AFormat1FileIsRefusedWithTheReasonAndTheWayOut) {
  std::vector<std::byte> h(kSliceCheckpointHeaderBytes);
  wire::store<std::uint32_t>(&h[0], 0x4b435350);
  wire::store<std::uint32_t>(&h[4], 1);
  wire::store<std::uint64_t>(&h[8], kKey);
  wire::store<std::uint32_t>(&h[16], kSlice.index);
  wire::store<std::uint32_t>(&h[20], 0);
  wire::store<std::uint64_t>(&h[24], kSlice.offset);
  wire::store<std::uint64_t>(&h[32], kSlice.count);
  wire::store<std::uint64_t>(&h[40], kTotal);
  wire::store<std::uint64_t>(&h[48], 8);
  wire::store<std::uint64_t>(&h[56], fnv1a(kWeights.data(), kWeights.size() * 4));
  std::vector<char> file(reinterpret_cast<const char*>(h.data()),
                         reinterpret_cast<const char*>(h.data()) + h.size());
  file.insert(file.end(), reinterpret_cast<const char*>(kWeights.data()),
              reinterpret_cast<const char*>(kWeights.data()) + kWeights.size() * 4);
  fs::create_directories(
      fs::path(slice_checkpoint_path(dir_, 8, kKey, kSlice.index)).parent_path());
  write_file(slice_checkpoint_path(dir_, 8, kKey, kSlice.index), file);
  expect_refused(8, "checkpoint format 1 is from an older psrt; this psrt reads format 2");
  expect_refused(8, "remove the checkpoint directory to start afresh");
}

TEST_F(CheckpointSecurity, AFifoUnderTheFilesNameIsRefusedWithoutBlocking) {
  write_slice_checkpoint(dir_, kKey, kSlice, kTotal, 8, kWeights, {});
  const std::string path = slice_checkpoint_path(dir_, 8, kKey, kSlice.index);
  fs::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << std::strerror(errno);
  expect_refused(8, "not a regular file");
}

// The MANIFEST is read as the slice files are (issue 30): a symlink (out of the directory, to
// /dev/zero) and a FIFO are refused, and the refusal never blocks.
TEST_F(CheckpointSecurity, AManifestThatIsASymlinkIsRefused) {
  const std::string elsewhere = test_dir("psrt_sec_manifest_");
  ShardMap placed(2, 64);
  placed.place(kKey, kTotal);
  write_manifest(elsewhere, placed);
  fs::create_directories(dir_);
  ASSERT_EQ(::symlink((elsewhere + "/MANIFEST").c_str(), (dir_ + "/MANIFEST").c_str()), 0);
  ShardMap map(2, 64);
  try {
    const bool read = read_manifest(dir_, map);
    fs::remove_all(elsewhere);
    FAIL() << "a MANIFEST linking out of the checkpoint directory was read (" << read << ")";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("symbolic link"), std::string::npos) << e.what();
  }
  fs::remove_all(elsewhere);
  // A link to /dev/zero is refused before a byte is read (the old reader grew without bound).
  fs::remove(dir_ + "/MANIFEST");
  ASSERT_EQ(::symlink("/dev/zero", (dir_ + "/MANIFEST").c_str()), 0);
  EXPECT_THROW(read_manifest(dir_, map), Error);
}

TEST_F(CheckpointSecurity, AFifoManifestIsRefusedWithoutBlocking) {
  const std::string path = dir_ + "/MANIFEST";
  fs::create_directories(dir_);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << std::strerror(errno);
  std::promise<std::string> outcome;
  auto result = outcome.get_future();
  std::thread reader([&] {
    ShardMap map(2, 64);
    try {
      read_manifest(dir_, map);
      outcome.set_value("read");
    } catch (const Error& e) {
      outcome.set_value(e.what());
    }
  });
  if (result.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    // Unblock the reader (a writer opens and closes the FIFO) so that the test ends.
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
    reader.join();
    FAIL() << "reading a FIFO MANIFEST blocked for 5 s";
  }
  reader.join();
  EXPECT_NE(result.get().find("not a regular file"), std::string::npos);
}

// Pruning an old round never follows a symlinked round directory out of the checkpoint
// directory (issue 30): the files it points at stay.
TEST_F(CheckpointSecurity, PruningDoesNotFollowASymlinkedRound) {
  const std::string elsewhere = test_dir("psrt_sec_prune_");
  write_slice_checkpoint(elsewhere, kKey, kSlice, kTotal, 5, kWeights, {});
  const std::string outside = slice_checkpoint_path(elsewhere, 5, kKey, kSlice.index);
  ASSERT_TRUE(fs::exists(outside));
  fs::create_directories(dir_);
  const std::string link =
      fs::path(slice_checkpoint_path(dir_, 5, kKey, kSlice.index)).parent_path().string();
  ASSERT_EQ(::symlink(fs::path(outside).parent_path().c_str(), link.c_str()), 0);
  remove_slice_checkpoint(dir_, 5, kKey, kSlice.index);
  remove_job_round(dir_, 5);
  EXPECT_TRUE(fs::exists(outside)) << "pruning deleted " << outside << " through " << link;
  fs::remove_all(elsewhere);
}

// An existing checkpoint directory that others may write, or that another user owns, is refused
// as the secret file is (issue 30): they could plant checkpoints the job would resume from.
TEST_F(CheckpointSecurity, ADirectoryOthersMayWriteOrAnotherUserOwnsIsRefused) {
  ShardMap map(1, 40);
  map.place(kKey, 5);
  auto refusal = [&] {
    try {
      write_manifest(dir_, map);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0) << std::strerror(errno);
  ASSERT_EQ(::chmod(dir_.c_str(), 0777), 0);
  EXPECT_EQ(refusal(), "checkpoint directory '" + dir_ +
                           "' is writable by group or others (mode 0777): they could plant "
                           "checkpoints; make it private: chmod 700 '" +
                           dir_ + "'");
  EXPECT_FALSE(fs::exists(dir_ + "/MANIFEST"));
  ASSERT_EQ(::chmod(dir_.c_str(), 0720), 0);
  EXPECT_NE(refusal().find("(mode 0720)"), std::string::npos) << "group-writable";
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  EXPECT_EQ(refusal(), "accepted") << "readable by others is the user's choice";
  if (::geteuid() != 0) GTEST_SKIP() << "the owner check needs root to chown a directory";
  ASSERT_EQ(::chown(dir_.c_str(), 65534, 65534), 0) << std::strerror(errno);
  EXPECT_EQ(refusal(), "checkpoint directory '" + dir_ +
                           "' belongs to uid 65534, not to this user (uid 0): its owner could "
                           "plant checkpoints; use a directory of your own");
  EXPECT_THROW(check_checkpoint_dir(dir_), Error);
  const std::string file = dir_ + "/MANIFEST";
  EXPECT_THROW(check_checkpoint_dir(file), Error) << "not a directory";
}

// The MANIFEST is written in batches off the scheduler's progress thread (issue 30): 20 000 keys
// placed one by one (the scheduler's add() per new key) take a handful of writes, not 20 000
// rewrites and fsyncs of the whole file, and every key is in the file once flush() returns.
TEST_F(CheckpointSecurity, TheManifestIsWrittenOncePerBatchOfKeys) {
  constexpr std::uint64_t kKeys = 20'000;
  ShardMap placed(2, 64);
  Status failed;
  std::uint64_t writes = 0;
  {
    ManifestWriter writer(dir_, placed, [&](const Status& why) { failed = why; });
    const auto start = std::chrono::steady_clock::now();
    for (std::uint64_t key = 0; key < kKeys; ++key)
      writer.add(key, 16, placed.place(key, 16));
    const auto adding = std::chrono::steady_clock::now() - start;
    EXPECT_LT(adding, std::chrono::seconds(2)) << "add() waited for the disk";
    writer.flush();
    writes = writer.writes();
  }
  EXPECT_TRUE(failed.ok()) << failed.message();
  EXPECT_GE(writes, 1u);
  EXPECT_LT(writes, 1000u) << "one MANIFEST write per key or nearly";
  ShardMap read(2, 64);
  ASSERT_TRUE(read_manifest(dir_, read));
  EXPECT_EQ(read.keys().size(), kKeys);
  EXPECT_EQ(encode_manifest(read), encode_manifest(placed));
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path << ": " << std::strerror(errno);
  return st.st_mode & 07777;
}

TEST_F(CheckpointSecurity, FilesAre0600AndDirectories0700WhateverTheUmask) {
  const mode_t old_umask = ::umask(0);  // the widest the process could ask for
  ShardMap map(1, 40);
  map.place(kKey, 5);
  write_manifest(dir_, map);
  write_slice_checkpoint(dir_, kKey, kSlice, kTotal, 8, kWeights, kMomentum);
  // A temporary file left by a crash with a wide mode does not keep it.
  const std::string path = slice_checkpoint_path(dir_, 12, kKey, kSlice.index);
  fs::create_directories(fs::path(path).parent_path());
  write_file(path + ".tmp", {'x'});
  fs::permissions(path + ".tmp", fs::perms::all);
  write_slice_checkpoint(dir_, kKey, kSlice, kTotal, 12, kWeights, {});
  ::umask(old_umask);
  EXPECT_EQ(mode_of(dir_), 0700u);
  EXPECT_EQ(mode_of(dir_ + "/MANIFEST"), 0600u);
  EXPECT_EQ(mode_of(fs::path(slice_checkpoint_path(dir_, 8, kKey, 0)).parent_path()), 0700u);
  EXPECT_EQ(mode_of(slice_checkpoint_path(dir_, 8, kKey, kSlice.index)), 0600u);
  EXPECT_EQ(mode_of(path), 0600u);
}

TEST_F(CheckpointSecurity, TheDirectoryIsFsyncedAfterEachRename) {
  {
    std::lock_guard lock(fsync_mu);
    fsynced_dirs.clear();
  }
  fs::create_directories(dir_);
  const std::string canonical = fs::canonical(dir_).string();
  ShardMap map(1, 40);
  map.place(kKey, 5);
  write_manifest(dir_, map);
  write_slice_checkpoint(dir_, kKey, kSlice, kTotal, 8, kWeights, {});
  const std::string round = fs::path(slice_checkpoint_path(canonical, 8, kKey, 0)).parent_path();
  std::lock_guard lock(fsync_mu);
  auto count = [&](const std::string& d) {
    return std::count(fsynced_dirs.begin(), fsynced_dirs.end(), d);
  };
  EXPECT_GE(count(canonical), 2) << "the MANIFEST's rename and the new round directory";
  EXPECT_EQ(count(round), 1) << "the slice file's rename";
}

}  // namespace
}  // namespace psrt::ps
