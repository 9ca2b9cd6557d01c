// Server checkpoints. Servers write each slice at versions that are multiples of
// checkpoint_every into <dir>/r<version>/k<key>-s<index>.slice (written to a temporary name,
// fsynced, then renamed, so a file either is complete or absent). The scheduler keeps
// <dir>/MANIFEST, the list of every key's slices. A round is complete when every slice of the
// manifest has its file for it; a restarted job resumes from the latest complete round.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ps/shard_map.h"

namespace psrt::ps {

struct SliceState {
  std::uint64_t version = 0;
  std::vector<float> weights;
  std::vector<float> momentum;  // empty when the optimizer has no momentum yet
};

std::string slice_checkpoint_path(const std::string& dir, std::uint64_t round, std::uint64_t key,
                                  std::uint32_t index);

void write_slice_checkpoint(const std::string& dir, std::uint64_t key, const SliceRecord& slice,
                            std::uint64_t total, std::uint64_t version,
                            std::span<const float> weights, std::span<const float> momentum);
// Reads and validates (magic, coordinates, size, checksum). Throws psrt::Error naming the file.
SliceState read_slice_checkpoint(const std::string& dir, std::uint64_t round, std::uint64_t key,
                                 const SliceRecord& slice, std::uint64_t total);
// Deletes one slice's file of an older round (and the round's directory once empty).
void remove_slice_checkpoint(const std::string& dir, std::uint64_t round, std::uint64_t key,
                             std::uint32_t index);

void write_manifest(const std::string& dir, const ShardMap& map);
// Restores the manifest's placements into `map`; returns false when there is no manifest.
bool read_manifest(const std::string& dir, ShardMap& map);
// The latest round every slice of `map` has a checkpoint file for; 0 when none.
std::uint64_t latest_complete_round(const std::string& dir, const ShardMap& map);

}  // namespace psrt::ps
