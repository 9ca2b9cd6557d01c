// libFuzzer target for the checkpoint readers (ps/checkpoint.cc): the slice file decoder and the
// MANIFEST parser, which read whatever lies in the checkpoint directory when a job resumes.
// Build and run with clang (from the repository root), or `make fuzz` for every target:
//
//   CXX=clang++ CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
//   cmake --build build-fuzz --target checkpoint_fuzz && mkdir -p build-fuzz/checkpoint_corpus &&
//   build-fuzz/bin/checkpoint_fuzz -max_total_time=60 build-fuzz/checkpoint_corpus
//       tests/fuzz/checkpoint_corpus      (one command line)
//
// A crashing input is written to ./crash-<sha1>; replay it with `build-fuzz/bin/checkpoint_fuzz
// FILE`. `checkpoint_fuzz_corpus_test --write tests/fuzz/checkpoint_corpus` regenerates the seeds
// after a format change.
#include "tests/fuzz/checkpoint_fuzz.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "ps/checkpoint.h"

namespace psrt::ps::fuzz {
namespace {

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "checkpoint_fuzz: invariant broken: %s\n", what);
  std::abort();
}

Outcome run_slice(std::span<const std::byte> file) {
  SliceState s;
  try {
    s = decode_slice_checkpoint(file, "fuzz", kRound, kKey, kSlice, kTotal);
  } catch (const Error& e) {
    require(e.code() == ErrorCode::kInvalidArgument, "a slice file refused with another code");
    return Outcome::kSliceRejected;
  }
  require(s.version == kRound, "accepted a file of another round");
  require(s.weights.size() == kSlice.count, "accepted weights of another size");
  require(s.momentum.empty() || s.momentum.size() == kSlice.count,
          "accepted momentum of another size");
  // A valid file is canonical: every header field follows from where it lies and its contents.
  const auto again =
      encode_slice_checkpoint(kKey, kSlice, kTotal, s.version, s.weights, s.momentum);
  require(again.size() == file.size() && std::equal(again.begin(), again.end(), file.begin()),
          "an accepted slice file differs from its re-encoding");
  return Outcome::kSliceAccepted;
}

Outcome run_manifest(std::span<const std::byte> file) {
  const std::string_view text(reinterpret_cast<const char*>(file.data()), file.size());
  ShardMap map(kServers, kPartitionBytes);
  try {
    decode_manifest(text, "fuzz", map);
  } catch (const Error& e) {
    require(e.code() == ErrorCode::kInvalidArgument, "a manifest refused with another code");
    return Outcome::kManifestRejected;
  }
  const std::string first = encode_manifest(map);
  ShardMap second(kServers, kPartitionBytes);
  try {
    decode_manifest(first, "re-encoded", second);
  } catch (const Error&) {
    require(false, "a re-encoded manifest is refused");
  }
  require(encode_manifest(second) == first, "a manifest does not read back as written");
  return Outcome::kManifestAccepted;
}

}  // namespace

const char* name_of(Outcome o) {
  switch (o) {
    case Outcome::kEmpty:
      return "empty";
    case Outcome::kSliceAccepted:
      return "slice accepted";
    case Outcome::kSliceRejected:
      return "slice rejected";
    case Outcome::kManifestAccepted:
      return "manifest accepted";
    case Outcome::kManifestRejected:
      return "manifest rejected";
  }
  return "?";
}

Outcome run_one(std::span<const std::byte> input) {
  if (input.empty()) return Outcome::kEmpty;
  const bool manifest = (static_cast<unsigned>(input[0]) & 1) != 0;
  return manifest ? run_manifest(input.subspan(1)) : run_slice(input.subspan(1));
}

}  // namespace psrt::ps::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  psrt::ps::fuzz::run_one({reinterpret_cast<const std::byte*>(data), size});
  return 0;
}
