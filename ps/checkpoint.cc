#include "ps/checkpoint.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/fnv.h"
#include "base/sys_check.h"
#include "ps/job_checkpoint.h"
#include "ps/optimizer_state.h"
#include "transport/wire.h"

namespace psrt::ps {
namespace fs = std::filesystem;
namespace {

constexpr std::uint32_t kSliceMagic = 0x4b435350;  // "PSCK"
constexpr std::size_t kFileHeader = kSliceCheckpointHeaderBytes;
constexpr std::size_t kChecksumAt = 56;
constexpr std::uint32_t kFlagMomentum = 1;
// The state is Adam/AdamW's moments and step count (ps/optimizer_state.h): 2 * count + 2 values.
constexpr std::uint32_t kFlagAdamState = 2;
// The largest MANIFEST read: a line per slice (PSRT_MAX_SLICES_PER_WORKER's 2^20 slices of one
// worker take about 60 MiB).
constexpr std::uint64_t kMaxManifestBytes = std::uint64_t{1} << 28;

std::string round_dir(const std::string& dir, std::uint64_t round) {
  return fmt::format("{}/r{:012}", dir, round);
}

Error sys_error(const std::string& what, const std::string& path) {
  return Error(ErrorCode::kSystem, fmt::format("{} '{}': {}", what, path, std::strerror(errno)));
}

// Makes the directory's entries (a rename, a new subdirectory) durable.
void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw sys_error("cannot open checkpoint directory", dir);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  errno = err;
  if (rc != 0) throw sys_error("fsync of checkpoint directory", dir);
}

// Creates `path` (0700) unless it exists; a new directory is made durable in its parent.
void make_private_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) == 0) {
    fsync_dir(fs::path(path).parent_path().string());
    return;
  }
  if (errno == EEXIST && fs::is_directory(path)) return;
  if (errno == ENOENT) {  // a missing parent: the user's directories get the usual mode
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    if (!ec && ::mkdir(path.c_str(), 0700) == 0) return;
    if (ec) errno = ec.value();
  }
  throw sys_error("cannot create checkpoint directory", path);
}

void write_all_fd(int fd, const void* data, std::size_t size, const std::string& path) {
  auto* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw sys_error("cannot write checkpoint", path);
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

// Writes a whole file atomically and privately: temporary name (0600), fsync, rename, fsync of
// the directory (without it a crash can lose the rename although the data was synced).
void write_atomically(const std::string& path, std::span<const std::span<const std::byte>> parts) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) throw sys_error("cannot create checkpoint", tmp);
  try {
    // A temporary file left by a crash keeps its old mode through O_CREAT.
    if (::fchmod(fd, 0600) != 0) throw sys_error("chmod 600", tmp);
    for (auto part : parts)
      write_all_fd(fd, part.data(), part.size(), tmp);
    if (::fsync(fd) != 0) throw sys_error("fsync", tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error(ErrorCode::kSystem,
                fmt::format("rename '{}' -> '{}': {}", tmp, path, std::strerror(errno)));
  fsync_dir(fs::path(path).parent_path().string());
}

std::uint64_t header_checksum(std::span<const std::byte> header) {
  return psrt::fnv1a(header.data(), kChecksumAt);
}

}  // namespace

std::string checkpoint_round_dir(const std::string& dir, std::uint64_t round) {
  return round_dir(dir, round);
}

void write_checkpoint_file(const std::string& path, std::span<const std::byte> bytes) {
  make_private_dir(fs::path(path).parent_path().string());
  const std::span<const std::byte> parts[] = {bytes};
  write_atomically(path, parts);
}

std::string slice_checkpoint_path(const std::string& dir, std::uint64_t round, std::uint64_t key,
                                  std::uint32_t index) {
  return fmt::format("{}/k{}-s{}.slice", round_dir(dir, round), key, index);
}

std::vector<std::byte> encode_slice_checkpoint(std::uint64_t key, const SliceRecord& slice,
                                               std::uint64_t total, std::uint64_t version,
                                               std::span<const float> weights,
                                               std::span<const float> momentum) {
  std::vector<std::byte> out(kFileHeader + weights.size_bytes() + momentum.size_bytes());
  std::byte* h = out.data();
  wire::store<std::uint32_t>(h, kSliceMagic);
  wire::store<std::uint32_t>(h + 4, kSliceCheckpointFormat);
  wire::store<std::uint64_t>(h + 8, key);
  wire::store<std::uint32_t>(h + 16, slice.index);
  // The state's layout by its size (ps/optimizer_state.h): count values of momentum, or Adam's.
  wire::store<std::uint32_t>(h + 20, momentum.empty()                 ? 0
                                     : momentum.size() == slice.count ? kFlagMomentum
                                                                      : kFlagAdamState);
  wire::store<std::uint64_t>(h + 24, slice.offset);
  wire::store<std::uint64_t>(h + 32, slice.count);
  wire::store<std::uint64_t>(h + 40, total);
  wire::store<std::uint64_t>(h + 48, version);
  if (!weights.empty()) std::memcpy(h + kFileHeader, weights.data(), weights.size_bytes());
  if (!momentum.empty())
    std::memcpy(h + kFileHeader + weights.size_bytes(), momentum.data(), momentum.size_bytes());
  wire::store<std::uint64_t>(h + kChecksumAt, psrt::fnv1a(h + kFileHeader, out.size() - kFileHeader,
                                                          header_checksum({h, kFileHeader})));
  return out;
}

void write_slice_checkpoint(const std::string& dir, std::uint64_t key, const SliceRecord& slice,
                            std::uint64_t total, std::uint64_t version,
                            std::span<const float> weights, std::span<const float> momentum) {
  make_private_dir(dir);
  make_private_dir(round_dir(dir, version));
  const auto bytes = encode_slice_checkpoint(key, slice, total, version, weights, momentum);
  std::span<const std::byte> parts[] = {bytes};
  write_atomically(slice_checkpoint_path(dir, version, key, slice.index), parts);
}

namespace {

Error unusable(const std::string& path, const std::string& why) {
  return Error(ErrorCode::kInvalidArgument,
               fmt::format("checkpoint '{}' is unusable: {}", path, why));
}

std::vector<float> floats_at(std::span<const std::byte> bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

}  // namespace

SliceState decode_slice_checkpoint(std::span<const std::byte> file, const std::string& path,
                                   std::uint64_t round, std::uint64_t key, const SliceRecord& slice,
                                   std::uint64_t total) {
  auto bad = [&](const std::string& why) { return unusable(path, why); };
  if (file.size() < kFileHeader) throw bad("truncated header");
  const std::byte* h = file.data();
  if (wire::load<std::uint32_t>(h) != kSliceMagic) throw bad("not a psrt slice checkpoint (magic)");
  if (const auto format = wire::load<std::uint32_t>(h + 4); format != kSliceCheckpointFormat)
    throw bad(fmt::format(
        "checkpoint format {} {}; this psrt reads format {}: resume with the psrt that wrote it, "
        "or remove the checkpoint directory to start afresh",
        format, format < kSliceCheckpointFormat ? "is from an older psrt" : "is not known",
        kSliceCheckpointFormat));
  const auto file_key = wire::load<std::uint64_t>(h + 8);
  const auto file_index = wire::load<std::uint32_t>(h + 16);
  const auto flags = wire::load<std::uint32_t>(h + 20);
  const auto file_round = wire::load<std::uint64_t>(h + 48);
  // Where the file was found first: a valid file under another name is a misplaced file.
  if (file_key != key || file_index != slice.index)
    throw bad(fmt::format("it holds key {} slice {}, but its name says key {} slice {}", file_key,
                          file_index, key, slice.index));
  if (file_round != round)
    throw bad(
        fmt::format("round mismatch: it holds round {} but lies in round {}'s directory "
                    "(a file of another round copied here?)",
                    file_round, round));
  if (wire::load<std::uint64_t>(h + 24) != slice.offset ||
      wire::load<std::uint64_t>(h + 32) != slice.count ||
      wire::load<std::uint64_t>(h + 40) != total)
    throw bad("it holds another slice than the manifest says");
  if ((flags & ~(kFlagMomentum | kFlagAdamState)) != 0 || flags == (kFlagMomentum | kFlagAdamState))
    throw bad(fmt::format("unknown flags 0x{:x}", flags));
  // count matches the manifest's, which decode_slices bounded by the tensor's total.
  const std::span<const std::byte> body = file.subspan(kFileHeader);
  if (slice.count > body.size() / sizeof(float)) throw bad("truncated weights");
  const std::size_t vector_bytes = slice.count * sizeof(float);
  const std::size_t state_bytes = (flags & kFlagMomentum) != 0 ? vector_bytes
                                  : (flags & kFlagAdamState) != 0
                                      ? adam_state_floats(slice.count) * sizeof(float)
                                      : 0;
  if (body.size() < vector_bytes + state_bytes) throw bad("truncated optimizer state");
  if (body.size() > vector_bytes + state_bytes) throw bad("trailing bytes");
  const auto weights = body.first(vector_bytes);
  const auto momentum = body.subspan(vector_bytes);
  const std::uint64_t sum = psrt::fnv1a(
      momentum.data(), momentum.size(),
      psrt::fnv1a(weights.data(), weights.size(), header_checksum(file.first(kFileHeader))));
  if (sum != wire::load<std::uint64_t>(h + kChecksumAt)) throw bad("checksum mismatch");
  SliceState s;
  s.version = file_round;
  s.weights = floats_at(weights);
  s.momentum = floats_at(momentum);
  return s;
}

SliceState read_slice_checkpoint(const std::string& dir, std::uint64_t round, std::uint64_t key,
                                 const SliceRecord& slice, std::uint64_t total) {
  const std::string path = slice_checkpoint_path(dir, round, key, slice.index);
  // O_NONBLOCK: a FIFO under the file's name must not block the reader.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw unusable(path, fmt::format("cannot open it: {}", std::strerror(errno)));
  std::vector<std::byte> bytes;
  try {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw unusable(path, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) throw unusable(path, "not a regular file");
    // No more than the largest valid file (weights and Adam's state) is read into memory.
    const auto largest =
        kFileHeader + (slice.count + adam_state_floats(slice.count)) * sizeof(float);
    const auto size = static_cast<std::uint64_t>(st.st_size);
    bytes.resize(std::min<std::uint64_t>(size, largest + 1));
    std::size_t got = 0;
    while (got < bytes.size()) {
      ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw unusable(path, fmt::format("cannot read it: {}", std::strerror(errno)));
      if (n == 0) break;
      got += static_cast<std::size_t>(n);
    }
    bytes.resize(got);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return decode_slice_checkpoint(bytes, path, round, key, slice, total);
}

bool is_real_directory(const std::string& path) {
  std::error_code ec;
  return fs::symlink_status(path, ec).type() == fs::file_type::directory;
}

void remove_slice_checkpoint(const std::string& dir, std::uint64_t round, std::uint64_t key,
                             std::uint32_t index) {
  // A round directory that is a symlink is not followed: its files may lie anywhere.
  if (!is_real_directory(round_dir(dir, round))) return;
  std::error_code ec;
  fs::remove(slice_checkpoint_path(dir, round, key, index), ec);
  fs::remove(round_dir(dir, round), ec);  // only succeeds once empty
}

std::string encode_manifest(const ShardMap& map) {
  std::string text = fmt::format("psrt-manifest 1 servers {}\n", map.num_servers());
  for (const auto& [key, entry] : map.keys())
    for (const auto& s : entry.second)
      text += fmt::format("{} {} {} {} {} {}\n", key, entry.first, s.index, s.server, s.offset,
                          s.count);
  return text;
}

void check_checkpoint_dir(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return;  // made private (0700) by the first write
    throw sys_error("cannot inspect checkpoint directory", dir);
  }
  if (!S_ISDIR(st.st_mode))
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("checkpoint directory '{}' is not a directory", dir));
  if (st.st_uid != ::geteuid())
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("checkpoint directory '{}' belongs to uid {}, not to this user (uid "
                            "{}): its owner could plant checkpoints; use a directory of your own",
                            dir, st.st_uid, ::geteuid()));
  if ((st.st_mode & 022) != 0)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("checkpoint directory '{}' is writable by group or others (mode "
                            "{:04o}): they could plant checkpoints; make it private: chmod 700 "
                            "'{}'",
                            dir, st.st_mode & 07777, dir));
}

void write_manifest(const std::string& dir, const ShardMap& map) {
  write_manifest_text(dir, encode_manifest(map));
}

void write_manifest_text(const std::string& dir, std::string_view text) {
  check_checkpoint_dir(dir);
  make_private_dir(dir);
  std::span<const std::byte> parts[] = {as_bytes(text)};
  write_atomically(dir + "/MANIFEST", parts);
}

bool read_manifest(const std::string& dir, ShardMap& map) {
  const std::string path = dir + "/MANIFEST";
  // As a slice file is read: never through a symlink (a link to /dev/zero, or out of the
  // directory), never blocking (a FIFO), never more than the largest manifest into memory.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0 && errno == ENOENT) return false;
  if (fd < 0)
    throw unusable(path, errno == ELOOP ? std::string("it is a symbolic link; a checkpoint "
                                                      "directory holds regular files only")
                                        : fmt::format("cannot open it: {}", std::strerror(errno)));
  std::string text;
  try {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw unusable(path, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) throw unusable(path, "not a regular file");
    if (static_cast<std::uint64_t>(st.st_size) > kMaxManifestBytes)
      throw unusable(path, fmt::format("{} bytes, more than the {} a manifest may have", st.st_size,
                                       kMaxManifestBytes));
    text.resize(static_cast<std::size_t>(st.st_size));
    std::size_t got = 0;
    while (got < text.size()) {
      ssize_t n = ::read(fd, text.data() + got, text.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw unusable(path, fmt::format("cannot read it: {}", std::strerror(errno)));
      if (n == 0) break;
      got += static_cast<std::size_t>(n);
    }
    text.resize(got);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  decode_manifest(text, path, map);
  return true;
}

void decode_manifest(std::string_view text, const std::string& path, ShardMap& map) {
  std::istringstream in{std::string(text)};
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::kInvalidArgument,
                 fmt::format("checkpoint manifest '{}' is unusable: {}", path, why));
  };
  std::string magic, word;
  int format = 0;
  std::uint32_t servers = 0;
  std::string first;
  std::getline(in, first);
  std::istringstream head(first);
  if (!(head >> magic >> format >> word >> servers) || magic != "psrt-manifest" || format != 1 ||
      word != "servers")
    throw bad("bad first line");
  if (servers != map.num_servers())
    throw bad(fmt::format("written by a job with {} servers, this job has {}", servers,
                          map.num_servers()));
  std::map<std::uint64_t, std::pair<std::uint64_t, std::vector<SliceRecord>>> keys;
  std::uint64_t key, total;
  SliceRecord s;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    std::istringstream rec(line);
    std::string extra;
    if (!(rec >> key >> total >> s.index >> s.server >> s.offset >> s.count) || (rec >> extra))
      throw bad("malformed line '" + line + "'");
    auto& e = keys[key];
    e.first = total;
    e.second.push_back(s);
  }
  for (auto& [k, e] : keys) {
    std::vector<SliceRecord> checked;
    if (Status st = decode_slices(encode_slices(e.second), e.first, servers, checked); !st.ok())
      throw bad(fmt::format("key {}: {}", k, st.message()));
    map.restore(k, e.first, std::move(checked));
  }
}

ResumePoint find_resume_round(const std::string& dir, const ShardMap& map) {
  std::vector<std::uint64_t> rounds;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    auto name = entry.path().filename().string();
    if (name.size() == 13 && name[0] == 'r' &&
        name.find_first_not_of("0123456789", 1) == std::string::npos)
      rounds.push_back(std::stoull(name.substr(1)));
  }
  std::sort(rounds.rbegin(), rounds.rend());
  ResumePoint point;
  if (map.keys().empty()) return point;
  const bool job_rounds = has_job_checkpoints(dir);
  for (auto r : rounds) {
    SkippedRound skip{r, "", false};
    for (const auto& [key, entry] : map.keys()) {
      for (const auto& s : entry.second) {
        const std::string path = slice_checkpoint_path(dir, r, key, s.index);
        std::error_code missing;
        if (!fs::exists(fs::symlink_status(path, missing))) {
          skip.why =
              fmt::format("incomplete: no file for key {} slice {} ('{}')", key, s.index, path);
          break;
        }
        try {
          (void)read_slice_checkpoint(dir, r, key, s, entry.first);
        } catch (const Error& e) {
          skip.why = e.what();
          skip.damaged = true;
          break;
        }
      }
      if (!skip.why.empty()) break;
    }
    if (skip.why.empty() && job_rounds) {
      try {
        if (!job_round_complete(dir, r, &skip.why)) skip.why = "incomplete: " + skip.why;
      } catch (const Error& e) {
        skip.why = e.what();
        skip.damaged = true;
      }
    }
    if (skip.why.empty()) {
      point.round = r;
      return point;
    }
    point.skipped.push_back(std::move(skip));
  }
  if (std::any_of(point.skipped.begin(), point.skipped.end(),
                  [](const SkippedRound& s) { return s.damaged; })) {
    std::string why;
    for (const auto& s : point.skipped)
      why += fmt::format("\n  round {}: {}", s.round, s.why);
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("no checkpoint round in '{}' can be resumed from:{}\nrepair or "
                            "remove the damaged rounds, or remove '{}' to start the job afresh",
                            dir, why, dir));
  }
  return point;
}

std::vector<std::string> set_aside_rounds(const std::string& dir,
                                          const std::vector<SkippedRound>& skipped) {
  std::vector<std::string> moved;
  for (const auto& s : skipped) {
    const std::string from = round_dir(dir, s.round);
    std::string to = from + ".skipped";
    for (int i = 1; fs::exists(fs::symlink_status(to)); ++i)
      to = fmt::format("{}.skipped.{}", from, i);
    if (::rename(from.c_str(), to.c_str()) != 0)
      throw Error(ErrorCode::kSystem,
                  fmt::format("cannot set aside the skipped checkpoint round '{}' as '{}': {}",
                              from, to, std::strerror(errno)));
    moved.push_back(to);
  }
  if (!moved.empty()) fsync_dir(dir);
  return moved;
}

}  // namespace psrt::ps
