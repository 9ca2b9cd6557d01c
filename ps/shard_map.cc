#include "ps/shard_map.h"

#include <fmt/core.h>

#include <algorithm>

namespace psrt::ps {

std::uint64_t slice_count(std::uint64_t total, std::size_t partition_bytes) {
  const std::uint64_t slice_elems = std::max<std::uint64_t>(1, partition_bytes / sizeof(float));
  // A slice table must fit one control message (LOCATE_REPLY).
  constexpr std::uint64_t kMaxSlices = kMaxControlBytes / kSliceRecordBytes;
  if (total == 0 || total > kMaxSlices * slice_elems) return 0;
  return (total + slice_elems - 1) / slice_elems;
}

std::optional<SliceBounds> slice_bounds(std::uint64_t total, std::size_t partition_bytes,
                                        std::uint64_t index) {
  const std::uint64_t n = slice_count(total, partition_bytes);
  if (index >= n) return std::nullopt;
  const std::uint64_t base = total / n, extra = total % n;
  return SliceBounds{index * base + std::min(index, extra), base + (index < extra ? 1 : 0)};
}

ShardMap::ShardMap(std::uint32_t num_servers, std::size_t partition_bytes)
    : slice_elems_(std::max<std::uint64_t>(1, partition_bytes / sizeof(float))),
      load_(num_servers, 0) {
  if (num_servers == 0) throw Error(ErrorCode::kInvalidArgument, "a job needs at least 1 server");
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
  const std::uint64_t n = slice_count(total, slice_elems_ * sizeof(float));
  if (n == 0)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("key {} of {} elements needs more than {} slices of {} elements; "
                            "raise --partition-bytes",
                            key, total, kMaxControlBytes / kSliceRecordBytes, slice_elems_));
  std::vector<SliceRecord> slices;
  slices.reserve(n);
  std::uint64_t offset = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint64_t count = slice_bounds(total, slice_elems_ * sizeof(float), i)->count;
    auto server =
        static_cast<std::uint32_t>(std::min_element(load_.begin(), load_.end()) - load_.begin());
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

}  // namespace psrt::ps
