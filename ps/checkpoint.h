// Server checkpoints. Servers write each slice at versions that are multiples of
// checkpoint_every into <dir>/r<version>/k<key>-s<index>.slice (written to a temporary name,
// fsynced, renamed, and the directory fsynced, so a file either is complete or absent; files
// 0600, directories 0700). The scheduler keeps <dir>/MANIFEST, the list of every key's slices.
// A round is usable when every slice of the manifest has a valid file for it; a restarted job
// resumes from the latest usable round and skips newer ones, saying why.
//
// Slice file, format 2 (little-endian):
//   offset  size  field
//   0       4     magic 'PSCK' (0x4b435350)
//   4       4     format (2; format 1 files are refused with the reason)
//   8       8     key
//   16      4     slice index
//   20      4     flags: bit 0 = SGD momentum follows the weights (count values); bit 1 =
//   Adam/AdamW
//                 state follows (2 * count + 2 values, ps/optimizer_state.h); not both; other
//                 bits must be 0
//   24      8     offset of the slice in its tensor
//   32      8     count (elements)
//   40      8     total (elements of the tensor)
//   48      8     version = the round of the directory the file lives in
//   56      8     FNV-1a 64 over bytes 0..55, then the weights, then the momentum
//   64      ...   count fp32 weights, then the optimizer state (flag bit 0 or 1), if any
// The checksum catches damage and misplaced files (another key, slice or round), not a writer
// who means harm: anyone who can write the directory can write a valid file.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ps/shard_map.h"

namespace psrt::ps {

struct SliceState {
  std::uint64_t version = 0;
  std::vector<float> weights;
  // The optimizer state (ps/optimizer_state.h): SGD's momentum or Adam's moments and step count;
  // empty when the optimizer has none yet.
  std::vector<float> momentum;
};

std::string slice_checkpoint_path(const std::string& dir, std::uint64_t round, std::uint64_t key,
                                  std::uint32_t index);
// <dir>/r<round in 12 digits>: the directory of one checkpoint round.
std::string checkpoint_round_dir(const std::string& dir, std::uint64_t round);
// Writes `bytes` to `path` as slice files are written: its directory created (0700) when
// missing, a temporary name (0600), fsync, rename, fsync of the directory. Throws psrt::Error
// (kSystem) naming the path.
void write_checkpoint_file(const std::string& path, std::span<const std::byte> bytes);

// The bytes of a slice file (header and checksum included); write_slice_checkpoint writes these.
std::vector<std::byte> encode_slice_checkpoint(std::uint64_t key, const SliceRecord& slice,
                                               std::uint64_t total, std::uint64_t version,
                                               std::span<const float> weights,
                                               std::span<const float> momentum);
void write_slice_checkpoint(const std::string& dir, std::uint64_t key, const SliceRecord& slice,
                            std::uint64_t total, std::uint64_t version,
                            std::span<const float> weights, std::span<const float> momentum);
inline constexpr std::uint32_t kSliceCheckpointFormat = 2;
inline constexpr std::size_t kSliceCheckpointHeaderBytes = 64;

// Validates the bytes of the file that should hold `key`'s `slice` at `round` (format, the
// header's key, slice, round, offset, count and total against where it was found and the
// manifest, size, checksum) and returns its contents. Throws psrt::Error (kInvalidArgument)
// naming `path` and the cause. Pure: reads nothing else.
SliceState decode_slice_checkpoint(std::span<const std::byte> file, const std::string& path,
                                   std::uint64_t round, std::uint64_t key, const SliceRecord& slice,
                                   std::uint64_t total);
// Reads the file of `key`'s `slice` at `round` (a regular file no larger than the slice needs)
// and decodes it as above. Throws psrt::Error naming the file.
SliceState read_slice_checkpoint(const std::string& dir, std::uint64_t round, std::uint64_t key,
                                 const SliceRecord& slice, std::uint64_t total);
// True when `path` is a directory itself, not a symlink to one (pruning never follows links).
bool is_real_directory(const std::string& path);
// Deletes one slice's file of an older round (and the round's directory once empty); nothing
// when the round's directory is a symlink.
void remove_slice_checkpoint(const std::string& dir, std::uint64_t round, std::uint64_t key,
                             std::uint32_t index);

// Refuses an existing checkpoint directory that another user owns or that group or others may
// write (they could plant checkpoints: the secret file's rule, for a directory), or that is no
// directory; psrt::Error (kInvalidArgument) naming it and the fix. A missing one passes: the
// first write makes it 0700. The scheduler and every server check it when they start, and
// write_manifest before each write.
void check_checkpoint_dir(const std::string& dir);

// The manifest's text; write_manifest writes it to <dir>/MANIFEST.
std::string encode_manifest(const ShardMap& map);
void write_manifest(const std::string& dir, const ShardMap& map);
// Writes `text` (encode_manifest's) as <dir>/MANIFEST: atomically, fsynced, 0600.
void write_manifest_text(const std::string& dir, std::string_view text);
// Restores the manifest's placements into `map`; returns false when there is no manifest.
bool read_manifest(const std::string& dir, ShardMap& map);
// read_manifest's parser: `text` is the manifest's content, `path` names it in errors.
void decode_manifest(std::string_view text, const std::string& path, ShardMap& map);

struct SkippedRound {
  std::uint64_t round = 0;
  std::string why;       // the first missing or unusable file, and its cause
  bool damaged = false;  // a file is there but unusable (not merely missing)
};
struct ResumePoint {
  std::uint64_t round = 0;            // 0: start afresh
  std::vector<SkippedRound> skipped;  // newer rounds passed over, newest first
};
// The latest round whose every slice of `map` has a file that read_slice_checkpoint accepts
// (every file is read in full) and, once any round of `dir` holds a job manifest
// (ps/job_checkpoint.h), whose job manifest and worker parts are valid too; and the newer rounds
// it passed over. When no round is usable,
// round is 0; if one of them was damaged rather than incomplete, throws psrt::Error
// (kInvalidArgument) listing every round and why, since starting afresh would silently drop the
// checkpoints the user asked to resume from.
ResumePoint find_resume_round(const std::string& dir, const ShardMap& map);
// Renames each skipped round's directory to r<round>.skipped (.skipped.1, ... when taken), which
// resume ignores, so that the resumed job's files of that round are never mixed with the old
// ones. Returns the new paths. Throws psrt::Error (kSystem) naming a directory it cannot rename.
std::vector<std::string> set_aside_rounds(const std::string& dir,
                                          const std::vector<SkippedRound>& skipped);

}  // namespace psrt::ps
