// The body of the checkpoint reader fuzz target (ps/checkpoint.cc: slice files and the
// MANIFEST), callable without libFuzzer so that checkpoint_fuzz_corpus_test can run it over the
// seeds with any compiler.
#pragma once

#include <cstddef>
#include <span>

#include "ps/shard_map.h"

namespace psrt::ps::fuzz {

// Where the fuzzed slice file claims to lie: key 42 slice 2 of round 8, [100, +5) of 200.
inline constexpr std::uint64_t kRound = 8;
inline constexpr std::uint64_t kKey = 42;
inline constexpr SliceRecord kSlice{1, 2, 100, 5};
inline constexpr std::uint64_t kTotal = 200;
// The fuzzed manifest is read into a ShardMap of this many servers and partition bytes.
inline constexpr std::uint32_t kServers = 2;
inline constexpr std::size_t kPartitionBytes = 40;

// What one input did. A broken invariant aborts (a libFuzzer crash) instead.
enum class Outcome {
  kEmpty,
  kSliceAccepted,     // decode_slice_checkpoint() accepted it; it re-encodes to the same bytes
  kSliceRejected,     // refused with a psrt::Error
  kManifestAccepted,  // decode_manifest() accepted it; its re-encoding reads back the same
  kManifestRejected,  // refused with a psrt::Error
};

// input[0] picks the reader (even: slice file, odd: manifest); the rest is the file.
Outcome run_one(std::span<const std::byte> input);

const char* name_of(Outcome o);

}  // namespace psrt::ps::fuzz
