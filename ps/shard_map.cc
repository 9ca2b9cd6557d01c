#include "ps/shard_map.h"

#include <fmt/core.h>

#include <algorithm>

namespace psrt::ps {

namespace {

std::uint64_t slice_elems(const Cut& cut) {
  return std::max<std::uint64_t>(1, cut.partition_bytes / sizeof(float));
}

// The balanced cut cuts the keys above small_key_bytes() into groups of S slices (S = 1 too:
// slices of at most pipeline_bytes pipeline a key's pulls behind its pushes there as well).
bool cut_over_servers(std::uint64_t total, const Cut& cut) {
  return cut.balanced_servers > 0 && total * sizeof(float) > cut.small_key_bytes();
}

}  // namespace

std::uint64_t Cut::small_key_bytes() const {
  return std::max<std::uint64_t>(std::uint64_t{64} << 10,
                                 (std::uint64_t{4} << 10) * balanced_servers);
}

Cut job_cut(std::size_t partition_bytes, bool balanced, std::uint32_t num_servers,
            bool byte_streams) {
  if (!balanced) return Cut{partition_bytes, 0};
  Cut cut{partition_bytes, num_servers};
  if (byte_streams) cut.pipeline_bytes = Cut::kPipelineSliceBytes;
  return cut;
}

std::uint64_t slice_count(std::uint64_t total, const Cut& cut) {
  std::uint64_t elems = slice_elems(cut);
  if (cut.pipeline_bytes != 0 && cut_over_servers(total, cut))
    elems = std::min(elems, std::max<std::uint64_t>(1, cut.pipeline_bytes / sizeof(float)));
  // A slice table must fit one control message (LOCATE_REPLY).
  constexpr std::uint64_t kMaxSlices = kMaxControlBytes / kSliceRecordBytes;
  if (total == 0 || total > kMaxSlices * elems) return 0;
  const std::uint64_t fewest = (total + elems - 1) / elems;
  if (!cut_over_servers(total, cut)) return fewest;
  // The fewest groups of S slices of at most `elems` each.
  const std::uint64_t s = cut.balanced_servers;
  const std::uint64_t n = (fewest + s - 1) / s * s;
  return n > kMaxSlices ? 0 : n;
}

std::optional<SliceBounds> slice_bounds(std::uint64_t total, const Cut& cut, std::uint64_t index) {
  const std::uint64_t n = slice_count(total, cut);
  if (index >= n) return std::nullopt;
  const std::uint64_t base = total / n, extra = total % n;
  return SliceBounds{index * base + std::min(index, extra), base + (index < extra ? 1 : 0)};
}

ShardMap::ShardMap(std::uint32_t num_servers, std::size_t partition_bytes)
    : ShardMap(num_servers, Cut{partition_bytes, 0}) {}

ShardMap::ShardMap(std::uint32_t num_servers, const Cut& cut) : cut_(cut), load_(num_servers, 0) {
  if (num_servers == 0) throw Error(ErrorCode::kInvalidArgument, "a job needs at least 1 server");
  if (cut.balanced_servers != 0 && cut.balanced_servers != num_servers)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("a cut balanced over {} servers for a job of {}", cut.balanced_servers,
                            num_servers));
}

const std::vector<SliceRecord>& ShardMap::place(std::uint64_t key, std::uint64_t total) {
  if (total == 0)
    throw Error(ErrorCode::kInvalidArgument, fmt::format("key {} with 0 elements", key));
  if (auto it = keys_.find(key); it != keys_.end()) {
    if (it->second.first != total)
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("key {} was initialised with {} elements, not {}: every worker "
                              "must use the same shape for a key",
                              key, it->second.first, total));
    return it->second.second;
  }
  // Totals come from the network: the cut (slice_bounds) refuses what one LOCATE_REPLY can't hold.
  const std::uint64_t n = slice_count(total, cut_);
  if (n == 0)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("key {} of {} elements needs more than {} slices of {} elements; "
                            "raise --partition-bytes",
                            key, total, kMaxControlBytes / kSliceRecordBytes, slice_elems(cut_)));
  // A cut key: slice i to the (i mod S)-th least loaded server (lowest index on ties), so each
  // group of S slices adds the same bytes to every server and the slices one element longer
  // (the first ones) go where the load is lowest. A whole key: to the least loaded server.
  std::vector<std::uint32_t> by_load(load_.size());
  for (std::uint32_t s = 0; s < by_load.size(); ++s)
    by_load[s] = s;
  std::stable_sort(by_load.begin(), by_load.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return load_[a] < load_[b]; });
  std::vector<SliceRecord> slices;
  slices.reserve(n);
  std::uint64_t offset = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint64_t count = slice_bounds(total, cut_, i)->count;
    const auto server = cut_over_servers(total, cut_)
                            ? by_load[i % by_load.size()]
                            : static_cast<std::uint32_t>(
                                  std::min_element(load_.begin(), load_.end()) - load_.begin());
    load_[server] += count * sizeof(float);
    slices.push_back({server, static_cast<std::uint32_t>(i), offset, count});
    offset += count;
  }
  return keys_.emplace(key, std::make_pair(total, std::move(slices))).first->second.second;
}

void ShardMap::restore(std::uint64_t key, std::uint64_t total, std::vector<SliceRecord> slices) {
  for (const auto& s : slices)
    load_[s.server] += s.count * sizeof(float);
  keys_[key] = {total, std::move(slices)};
}

const std::vector<SliceRecord>* ShardMap::find(std::uint64_t key) const {
  auto it = keys_.find(key);
  return it == keys_.end() ? nullptr : &it->second.second;
}

std::uint64_t ShardMap::total(std::uint64_t key) const {
  auto it = keys_.find(key);
  return it == keys_.end() ? 0 : it->second.first;
}

std::string describe_load(const ShardMap& map) {
  std::size_t slices = 0;
  for (const auto& [key, entry] : map.keys())
    slices += entry.second.size();
  std::uint64_t sum = 0, most = 0;
  std::string loads;
  for (std::uint32_t s = 0; s < map.num_servers(); ++s) {
    sum += map.bytes_on(s);
    most = std::max(most, map.bytes_on(s));
    loads += fmt::format(" {}", map.bytes_on(s));
  }
  const double mean = static_cast<double>(sum) / map.num_servers();
  return fmt::format(
      "shard map ({} cut, slices <= {} B): {} keys in {} slices; bytes per server:{} "
      "(max/mean {:.3f})",
      map.cut().balanced_servers != 0 ? "balanced" : "fixed", map.cut().partition_bytes,
      map.keys().size(), slices, loads, mean > 0 ? static_cast<double>(most) / mean : 1.0);
}

}  // namespace psrt::ps
