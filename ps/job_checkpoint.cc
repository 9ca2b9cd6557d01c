#include "ps/job_checkpoint.h"

#include <fmt/core.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/fnv.h"
#include "ps/checkpoint.h"
#include "ps/shard_map.h"
#include "psrt/error.h"

namespace psrt::ps {
namespace fs = std::filesystem;
namespace {

constexpr std::uintmax_t kMaxPartBytes = std::uintmax_t{1} << 34;  // 16 GiB
constexpr std::uintmax_t kMaxManifestBytes = std::uintmax_t{1} << 26;

struct PartEntry {
  std::uint64_t bytes = 0;
  std::uint64_t checksum = 0;
};

std::uint64_t checksum_of(std::span<const std::byte> bytes) {
  return fnv1a(bytes.data(), bytes.size());
}

// The whole of a regular file no larger than `limit`; false when it is not there.
bool read_regular(const std::string& path, std::uintmax_t limit, std::vector<std::byte>& out) {
  std::error_code ec;
  const auto st = fs::symlink_status(path, ec);
  if (ec || !fs::exists(st)) return false;
  if (!fs::is_regular_file(st))
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("job checkpoint file '{}' is not a regular file", path));
  const auto size = fs::file_size(path, ec);
  if (ec || size > limit)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("job checkpoint file '{}' is unreadable or too large", path));
  out.resize(static_cast<std::size_t>(size));
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()));
  if (!in) throw Error(ErrorCode::kInvalidArgument, fmt::format("cannot read '{}'", path));
  return true;
}

// The entries of `round`'s JOB; false when there is none.
bool read_job_manifest(const std::string& dir, std::uint64_t round, std::vector<PartEntry>& parts) {
  const std::string path = job_manifest_path(dir, round);
  std::vector<std::byte> bytes;
  if (!read_regular(path, kMaxManifestBytes, bytes)) return false;
  const auto bad = [&](const std::string& why) {
    return Error(ErrorCode::kInvalidArgument,
                 fmt::format("job manifest '{}' is unusable: {}", path, why));
  };
  std::istringstream in(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  std::string magic, word_round, word_workers;
  int format = 0;
  std::uint64_t r = 0;
  std::uint32_t workers = 0;
  if (!(in >> magic >> format >> word_round >> r >> word_workers >> workers) ||
      magic != "psrt-job" || format != 1 || word_round != "round" || word_workers != "workers")
    throw bad("not a psrt job manifest");
  if (r != round)
    throw bad(fmt::format("it holds round {} but lies in round {}'s directory", r, round));
  if (workers == 0 || workers > (1u << 20)) throw bad(fmt::format("{} workers", workers));
  parts.assign(workers, {});
  for (std::uint32_t i = 0; i < workers; ++i) {
    std::string name, hex;
    if (!(in >> name >> parts[i].bytes >> hex) || name != fmt::format("w{}", i) || hex.size() != 16)
      throw bad(fmt::format("line of worker {} is missing or malformed", i));
    parts[i].checksum = std::stoull(hex, nullptr, 16);
  }
  std::string rest;
  if (in >> rest) throw bad("trailing text");
  return true;
}

}  // namespace

std::string worker_part_path(const std::string& dir, std::uint64_t round, std::uint32_t rank) {
  return fmt::format("{}/w{}.part", checkpoint_round_dir(dir, round), rank);
}

std::string job_manifest_path(const std::string& dir, std::uint64_t round) {
  return checkpoint_round_dir(dir, round) + "/JOB";
}

void write_worker_part(const std::string& dir, std::uint64_t round, std::uint32_t rank,
                       std::span<const std::byte> bytes) {
  write_checkpoint_file(worker_part_path(dir, round, rank), bytes);
}

std::vector<std::byte> read_worker_part(const std::string& dir, std::uint64_t round,
                                        std::uint32_t rank) {
  std::vector<PartEntry> parts;
  if (!read_job_manifest(dir, round, parts))
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("round {} of '{}' has no job manifest", round, dir));
  const std::string path = worker_part_path(dir, round, rank);
  if (rank >= parts.size())
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("job checkpoint round {} of '{}' was written by {} workers, this "
                            "worker has rank {}: resume with at most {} workers (fewer "
                            "resume too: psrun --min-workers)",
                            round, dir, parts.size(), rank, parts.size()));
  std::vector<std::byte> bytes;
  if (!read_regular(path, kMaxPartBytes, bytes))
    throw Error(ErrorCode::kInvalidArgument, fmt::format("worker part '{}' is missing", path));
  if (bytes.size() != parts[rank].bytes || checksum_of(bytes) != parts[rank].checksum)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("worker part '{}' is unusable: size or checksum mismatch", path));
  return bytes;
}

void complete_job_round(const std::string& dir, std::uint64_t round, std::uint32_t workers,
                        std::uint32_t num_servers, std::size_t partition_bytes) {
  const auto missing = [&](const std::string& why) {
    return Error(
        ErrorCode::kNotFound,
        fmt::format("job checkpoint round {} in '{}' is not complete: {}", round, dir, why));
  };
  std::string text = fmt::format("psrt-job 1 round {} workers {}\n", round, workers);
  for (std::uint32_t w = 0; w < workers; ++w) {
    std::vector<std::byte> bytes;
    const std::string path = worker_part_path(dir, round, w);
    if (!read_regular(path, kMaxPartBytes, bytes))
      throw missing(fmt::format("worker {} wrote no part ('{}')", w, path));
    text += fmt::format("w{} {} {:016x}\n", w, bytes.size(), checksum_of(bytes));
  }
  ShardMap map(num_servers, partition_bytes);
  try {
    if (!read_manifest(dir, map)) throw missing("no MANIFEST (no key was placed yet)");
    for (const auto& [key, entry] : map.keys())
      for (const auto& s : entry.second)
        (void)read_slice_checkpoint(dir, round, key, s, entry.first);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kNotFound) throw;
    throw missing(e.what());
  }
  write_checkpoint_file(job_manifest_path(dir, round), std::as_bytes(std::span(text)));
}

std::string checkpoint_request_path(const std::string& dir, std::uint64_t round) {
  return checkpoint_round_dir(dir, round) + ".request";
}

void request_checkpoint(const std::string& dir, std::uint64_t round) {
  const std::string text = fmt::format("{}\n", round);
  write_checkpoint_file(checkpoint_request_path(dir, round), std::as_bytes(std::span(text)));
}

bool checkpoint_requested(const std::string& dir, std::uint64_t round) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(checkpoint_request_path(dir, round), ec));
}

std::string checkpoint_now_path(const std::string& dir) {
  return dir + "/CHECKPOINT-NOW";
}

bool take_checkpoint_now(const std::string& dir) {
  std::error_code ec;
  return fs::remove(checkpoint_now_path(dir), ec);
}

void mark_job_checkpoints(const std::string& dir) {
  const std::string path = dir + "/JOB-CHECKPOINTS";
  std::error_code ec;
  if (fs::exists(fs::symlink_status(path, ec))) return;
  constexpr std::string_view kText = "psrt job checkpoints 1\n";
  write_checkpoint_file(path, std::as_bytes(std::span(kText)));
}

bool has_job_checkpoints(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(dir + "/JOB-CHECKPOINTS", ec))) return true;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() == 13 && name[0] == 'r' &&
        name.find_first_not_of("0123456789", 1) == std::string::npos &&
        fs::exists(fs::symlink_status(entry.path() / "JOB", ec)))
      return true;
  }
  return false;
}

bool job_round_complete(const std::string& dir, std::uint64_t round, std::string* why) {
  std::vector<PartEntry> parts;
  if (!read_job_manifest(dir, round, parts)) {
    if (why)
      *why = fmt::format("no job manifest '{}' (a worker's part was not written)",
                         job_manifest_path(dir, round));
    return false;
  }
  for (std::uint32_t w = 0; w < parts.size(); ++w) {
    const std::string path = worker_part_path(dir, round, w);
    std::vector<std::byte> bytes;
    if (!read_regular(path, kMaxPartBytes, bytes)) {
      if (why) *why = fmt::format("no worker part '{}'", path);
      return false;
    }
    if (bytes.size() != parts[w].bytes || checksum_of(bytes) != parts[w].checksum)
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("worker part '{}' is unusable: size or checksum mismatch", path));
  }
  return true;
}

void remove_job_round(const std::string& dir, std::uint64_t round) {
  std::error_code ec;
  const std::string rdir = checkpoint_round_dir(dir, round);
  if (!is_real_directory(rdir)) return;  // a symlinked round is not followed
  fs::remove(job_manifest_path(dir, round), ec);
  for (const auto& entry : fs::directory_iterator(rdir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 6 && name[0] == 'w' && name.ends_with(".part")) fs::remove(entry.path(), ec);
  }
  fs::remove(rdir, ec);  // only succeeds once empty
}

}  // namespace psrt::ps
