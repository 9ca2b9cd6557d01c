// Where the slices of each key live. The scheduler owns the one ShardMap of a job: a key is cut
// into slices of at most partition_bytes of f32 weights (even sizes), and each slice goes to the
// server holding the fewest bytes so far (lowest index on ties), so that small key sets spread
// as well as big ones.
//
// The balanced cut (the default of a psrun job: --partition-bytes not given) makes every server
// carry an equal share of a round's bytes whatever the tensor sizes, without knowing the model in
// advance (keys arrive one LOCATE at a time): a key above small_key_bytes() is cut into a
// multiple of S equal slices of at most partition_bytes (and pipeline_bytes), one of each
// group of S per server (so it adds the same bytes to
// every server, give or take one element); a smaller key is one slice on the server holding the
// fewest bytes. The servers' loads then differ by less than small_key_bytes() plus one element
// per key (ShardMapBalanced tests pin this), where the fixed cut can leave a server without a
// byte (a 7.45 MB tensor in 4 MiB slices on 4 servers: two slices, two idle servers).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ps/session/protocol.h"

namespace psrt::ps {

// How keys are cut: slices of at most partition_bytes; balanced_servers = S > 0 for the balanced
// cut over S servers (above), 0 for the fixed cut (psrun --partition-bytes given).
struct Cut {
  std::size_t partition_bytes = std::size_t{4} << 20;
  std::uint32_t balanced_servers = 0;
  // The slices of a key cut over S servers are at most this many bytes too, when not 0 and
  // smaller than partition_bytes: the reply of a slice leaves while the later slices of its key
  // still arrive, so a round ends one group of S such slices after its last push (perf/vs_ddp:
  // a 7.45 MB tensor on 4 servers over 100 Mbit/s took 1.28 s a round in 4 slices, 0.91 s in
  // 32). job_cut() sets it where messages travel as TCP byte streams (transport/byte_streams.h:
  // tcp, or ucx with UCX_TLS=tcp): over UCX's shared memory on one loaded host 16 times the
  // messages made psbench pushpull --keys 40 four times slower (perf/RESULTS.md).
  std::uint64_t pipeline_bytes = 0;
  static constexpr std::uint64_t kPipelineSliceBytes = std::uint64_t{256} << 10;
  // Keys of at most this many bytes stay whole under the balanced cut: 64 KiB, or 4 KiB per
  // server where that is more (no slice of a cut key is smaller than 4 KiB).
  std::uint64_t small_key_bytes() const;
};

// Where slice `index` of a key of `total` f32 values lies under `cut`: the cut ShardMap::place
// makes, as a pure function of its arguments, so that a server can check an INIT against it
// (which server holds a slice is not such a function: it depends on the keys placed before).
// Empty when the key cannot be cut so (0 elements, more slices than one LOCATE_REPLY holds) or
// `index` is past its last slice.
// How many slices that cut makes of a key of `total` values; 0 when it cannot be cut so.
std::uint64_t slice_count(std::uint64_t total, const Cut& cut);
struct SliceBounds {
  std::uint64_t offset = 0, count = 0;
};
std::optional<SliceBounds> slice_bounds(std::uint64_t total, const Cut& cut, std::uint64_t index);
// The cut of a job: balanced over `num_servers` or fixed at `partition_bytes`; the balanced cut
// pipelines (pipeline_bytes = kPipelineSliceBytes) where the job's messages travel as TCP byte
// streams (`byte_streams`: transport::moves_as_byte_streams of the job's transport and UCX_TLS,
// which psrun hands to every process, so that the scheduler and the servers cut alike).
Cut job_cut(std::size_t partition_bytes, bool balanced, std::uint32_t num_servers,
            bool byte_streams);

// The fixed cut at `partition_bytes`.
inline std::uint64_t slice_count(std::uint64_t total, std::size_t partition_bytes) {
  return slice_count(total, Cut{partition_bytes, 0});
}
inline std::optional<SliceBounds> slice_bounds(std::uint64_t total, std::size_t partition_bytes,
                                               std::uint64_t index) {
  return slice_bounds(total, Cut{partition_bytes, 0}, index);
}

class ShardMap {
 public:
  // The fixed cut at `partition_bytes`.
  ShardMap(std::uint32_t num_servers, std::size_t partition_bytes);
  // `cut.balanced_servers` is 0 or num_servers.
  ShardMap(std::uint32_t num_servers, const Cut& cut);

  // The placement of `key` holding `total` f32 values: made on first sight, the same afterwards.
  // Throws psrt::Error(kInvalidArgument) when the key exists with another size.
  const std::vector<SliceRecord>& place(std::uint64_t key, std::uint64_t total);
  // Adds a placement restored from a checkpoint manifest (already validated).
  void restore(std::uint64_t key, std::uint64_t total, std::vector<SliceRecord> slices);
  // Null when the key is unknown.
  const std::vector<SliceRecord>* find(std::uint64_t key) const;
  std::uint64_t total(std::uint64_t key) const;

  std::uint64_t bytes_on(std::uint32_t server) const { return load_[server]; }
  const Cut& cut() const { return cut_; }
  std::uint32_t num_servers() const { return static_cast<std::uint32_t>(load_.size()); }
  const std::map<std::uint64_t, std::pair<std::uint64_t, std::vector<SliceRecord>>>& keys() const {
    return keys_;
  }

 private:
  Cut cut_;
  std::vector<std::uint64_t> load_;
  std::map<std::uint64_t, std::pair<std::uint64_t, std::vector<SliceRecord>>> keys_;
};

// One line for the log: the cut, keys, slices and the bytes each server holds, e.g.
// "shard map (balanced cut, slices <= 4194304 B): 6 keys in 14 slices; bytes per server:
// 1863692 1863688 1863692 1863688 (max/mean 1.000)".
std::string describe_load(const ShardMap& map);

}  // namespace psrt::ps
