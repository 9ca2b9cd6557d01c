#include "ps/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/core.h>

#include "base/fnv.h"
#include "base/sys_check.h"
#include "transport/wire.h"

namespace psrt::ps {
namespace fs = std::filesystem;
namespace {

constexpr std::uint32_t kSliceMagic = 0x4b435350;  // "PSCK"
constexpr std::uint32_t kFormat = 1;
constexpr std::size_t kFileHeader = 64;

std::uint64_t fnv1a(std::span<const float> a, std::uint64_t h = kFnv1aOffset) {
  return psrt::fnv1a(a.data(), a.size_bytes(), h);
}

std::string round_dir(const std::string& dir, std::uint64_t round) {
  return fmt::format("{}/r{:012}", dir, round);
}

void write_all_fd(int fd, const void* data, std::size_t size, const std::string& path) {
  auto* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw Error(ErrorCode::kSystem, fmt::format("cannot write checkpoint '{}': {}", path,
                                                  std::strerror(errno)));
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

// Writes a whole file atomically: temporary name, fsync, rename.
void write_atomically(const std::string& path, std::span<const std::span<const std::byte>> parts) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw Error(ErrorCode::kSystem,
                fmt::format("cannot create checkpoint '{}': {}", tmp, std::strerror(errno)));
  try {
    for (auto part : parts) write_all_fd(fd, part.data(), part.size(), tmp);
    if (::fsync(fd) != 0)
      throw Error(ErrorCode::kSystem, fmt::format("fsync '{}': {}", tmp, std::strerror(errno)));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error(ErrorCode::kSystem,
                fmt::format("rename '{}' -> '{}': {}", tmp, path, std::strerror(errno)));
}

}  // namespace

std::string slice_checkpoint_path(const std::string& dir, std::uint64_t round, std::uint64_t key,
                                  std::uint32_t index) {
  return fmt::format("{}/k{}-s{}.slice", round_dir(dir, round), key, index);
}

void write_slice_checkpoint(const std::string& dir, std::uint64_t key, const SliceRecord& slice,
                            std::uint64_t total, std::uint64_t version,
                            std::span<const float> weights, std::span<const float> momentum) {
  std::error_code ec;
  fs::create_directories(round_dir(dir, version), ec);
  if (ec)
    throw Error(ErrorCode::kSystem, fmt::format("cannot create checkpoint directory '{}': {}",
                                                round_dir(dir, version), ec.message()));
  std::array<std::byte, kFileHeader> h{};
  wire::store<std::uint32_t>(&h[0], kSliceMagic);
  wire::store<std::uint32_t>(&h[4], kFormat);
  wire::store<std::uint64_t>(&h[8], key);
  wire::store<std::uint32_t>(&h[16], slice.index);
  wire::store<std::uint32_t>(&h[20], momentum.empty() ? 0 : 1);
  wire::store<std::uint64_t>(&h[24], slice.offset);
  wire::store<std::uint64_t>(&h[32], slice.count);
  wire::store<std::uint64_t>(&h[40], total);
  wire::store<std::uint64_t>(&h[48], version);
  wire::store<std::uint64_t>(&h[56], fnv1a(momentum, fnv1a(weights)));
  std::span<const std::byte> parts[] = {h, std::as_bytes(weights), std::as_bytes(momentum)};
  write_atomically(slice_checkpoint_path(dir, version, key, slice.index), parts);
}

SliceState read_slice_checkpoint(const std::string& dir, std::uint64_t round, std::uint64_t key,
                                 const SliceRecord& slice, std::uint64_t total) {
  const std::string path = slice_checkpoint_path(dir, round, key, slice.index);
  std::ifstream in(path, std::ios::binary);
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::kInvalidArgument,
                 fmt::format("checkpoint '{}' is unusable: {}; remove the round directory to "
                             "resume from an older round",
                             path, why));
  };
  if (!in) throw bad("cannot open it");
  std::array<std::byte, kFileHeader> h{};
  if (!in.read(reinterpret_cast<char*>(h.data()), h.size())) throw bad("truncated header");
  if (wire::load<std::uint32_t>(&h[0]) != kSliceMagic || wire::load<std::uint32_t>(&h[4]) != kFormat)
    throw bad("not a psrt slice checkpoint (magic/format)");
  if (wire::load<std::uint64_t>(&h[8]) != key || wire::load<std::uint32_t>(&h[16]) != slice.index ||
      wire::load<std::uint64_t>(&h[24]) != slice.offset ||
      wire::load<std::uint64_t>(&h[32]) != slice.count || wire::load<std::uint64_t>(&h[40]) != total)
    throw bad("it holds another slice than the manifest says");
  SliceState s;
  s.version = wire::load<std::uint64_t>(&h[48]);
  s.weights.resize(slice.count);
  if (!in.read(reinterpret_cast<char*>(s.weights.data()), slice.count * sizeof(float)))
    throw bad("truncated weights");
  if (wire::load<std::uint32_t>(&h[20]) == 1) {
    s.momentum.resize(slice.count);
    if (!in.read(reinterpret_cast<char*>(s.momentum.data()), slice.count * sizeof(float)))
      throw bad("truncated momentum");
  }
  if (in.peek() != std::char_traits<char>::eof()) throw bad("trailing bytes");
  if (fnv1a(s.momentum, fnv1a(s.weights)) != wire::load<std::uint64_t>(&h[56]))
    throw bad("checksum mismatch");
  return s;
}

void remove_slice_checkpoint(const std::string& dir, std::uint64_t round, std::uint64_t key,
                             std::uint32_t index) {
  std::error_code ec;
  fs::remove(slice_checkpoint_path(dir, round, key, index), ec);
  fs::remove(round_dir(dir, round), ec);  // only succeeds once empty
}

void write_manifest(const std::string& dir, const ShardMap& map) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw Error(ErrorCode::kSystem,
                fmt::format("cannot create checkpoint directory '{}': {}", dir, ec.message()));
  std::string text = fmt::format("psrt-manifest 1 servers {}\n", map.num_servers());
  for (const auto& [key, entry] : map.keys())
    for (const auto& s : entry.second)
      text += fmt::format("{} {} {} {} {} {}\n", key, entry.first, s.index, s.server, s.offset,
                          s.count);
  std::span<const std::byte> parts[] = {as_bytes(text)};
  write_atomically(dir + "/MANIFEST", parts);
}

bool read_manifest(const std::string& dir, ShardMap& map) {
  const std::string path = dir + "/MANIFEST";
  std::ifstream in(path);
  if (!in) return false;
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
  return true;
}

std::uint64_t latest_complete_round(const std::string& dir, const ShardMap& map) {
  std::vector<std::uint64_t> rounds;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    auto name = entry.path().filename().string();
    if (name.size() == 13 && name[0] == 'r' &&
        name.find_first_not_of("0123456789", 1) == std::string::npos)
      rounds.push_back(std::stoull(name.substr(1)));
  }
  std::sort(rounds.rbegin(), rounds.rend());
  for (auto r : rounds) {
    bool complete = !map.keys().empty();
    for (const auto& [key, entry] : map.keys())
      for (const auto& s : entry.second)
        complete = complete && fs::exists(slice_checkpoint_path(dir, r, key, s.index));
    if (complete) return r;
  }
  return 0;
}

}  // namespace psrt::ps
