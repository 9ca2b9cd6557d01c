// Where the slices of each key live. The scheduler owns the one ShardMap of a job: a key is cut
// into slices of at most partition_bytes of f32 weights (even sizes), and each slice goes to the
// server holding the fewest bytes so far (lowest index on ties), so that small key sets spread
// as well as big ones.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "ps/protocol.h"

namespace psrt::ps {

// Where slice `index` of a key of `total` f32 values cut into slices of at most
// `partition_bytes` lies: the cut ShardMap::place makes, as a pure function of its arguments, so
// that a server can check an INIT against it (which server holds a slice is not such a function:
// it depends on the keys placed before). Empty when the key cannot be cut so (0 elements, more
// slices than one LOCATE_REPLY holds) or `index` is past its last slice.
// How many slices that cut makes of a key of `total` values; 0 when it cannot be cut so.
std::uint64_t slice_count(std::uint64_t total, std::size_t partition_bytes);
struct SliceBounds {
  std::uint64_t offset = 0, count = 0;
};
std::optional<SliceBounds> slice_bounds(std::uint64_t total, std::size_t partition_bytes,
                                        std::uint64_t index);

class ShardMap {
 public:
  ShardMap(std::uint32_t num_servers, std::size_t partition_bytes);

  // The placement of `key` holding `total` f32 values: made on first sight, the same afterwards.
  // Throws psrt::Error(kInvalidArgument) when the key exists with another size.
  const std::vector<SliceRecord>& place(std::uint64_t key, std::uint64_t total);
  // Adds a placement restored from a checkpoint manifest (already validated).
  void restore(std::uint64_t key, std::uint64_t total, std::vector<SliceRecord> slices);
  // Null when the key is unknown.
  const std::vector<SliceRecord>* find(std::uint64_t key) const;
  std::uint64_t total(std::uint64_t key) const;

  std::uint64_t bytes_on(std::uint32_t server) const { return load_[server]; }
  std::uint32_t num_servers() const { return static_cast<std::uint32_t>(load_.size()); }
  const std::map<std::uint64_t, std::pair<std::uint64_t, std::vector<SliceRecord>>>& keys() const {
    return keys_;
  }

 private:
  std::uint64_t slice_elems_;
  std::vector<std::uint64_t> load_;
  std::map<std::uint64_t, std::pair<std::uint64_t, std::vector<SliceRecord>>> keys_;
};

}  // namespace psrt::ps
