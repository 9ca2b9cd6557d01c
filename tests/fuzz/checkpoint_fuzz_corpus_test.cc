// Runs the checkpoint reader fuzz body over a few seeds (made with encode_slice_checkpoint and
// encode_manifest, so they follow the format) and malformed inputs with any compiler; see
// corpus_runner.h for the arguments.
#include <string>
#include <vector>

#include "ps/checkpoint.h"
#include "tests/fuzz/checkpoint_fuzz.h"
#include "tests/fuzz/corpus_runner.h"
#include "transport/wire.h"

namespace {

using psrt::fuzz::Bytes;
using psrt::fuzz::Inputs;
namespace ps = psrt::ps;
using ps::fuzz::Outcome;

std::string expect(Outcome o) {
  return ps::fuzz::name_of(o);
}

// The reader selector byte, then the file.
Bytes input(std::uint8_t selector, std::span<const std::byte> file) {
  Bytes b{std::byte{selector}};
  b.insert(b.end(), file.begin(), file.end());
  return b;
}

Bytes slice_file(std::uint64_t round, bool momentum) {
  const std::vector<float> w = {1.f, -2.5f, 3.25f, 0.f, 1e-20f};
  const std::vector<float> m = {0.5f, 0.25f, -0.125f, 8.f, -0.f};
  return ps::encode_slice_checkpoint(
      ps::fuzz::kKey, ps::fuzz::kSlice, ps::fuzz::kTotal, round, w,
      momentum ? std::span<const float>(m) : std::span<const float>());
}

std::string manifest_text() {
  ps::ShardMap map(ps::fuzz::kServers, ps::fuzz::kPartitionBytes);
  map.place(1, 25);
  map.place(7, 3);
  return ps::encode_manifest(map);
}

Inputs seeds() {
  Inputs s;
  s["seed-slice"] = {input(0, slice_file(ps::fuzz::kRound, false)),
                     expect(Outcome::kSliceAccepted)};
  s["seed-slice-momentum"] = {input(0, slice_file(ps::fuzz::kRound, true)),
                              expect(Outcome::kSliceAccepted)};
  s["seed-manifest"] = {input(1, ps::as_bytes(manifest_text())),
                        expect(Outcome::kManifestAccepted)};
  return s;
}

Inputs malformed() {
  Inputs m;
  const Bytes good = seeds().at("seed-slice-momentum").bytes;
  m["empty"] = {{}, expect(Outcome::kEmpty)};
  m["empty slice file"] = {{std::byte{0}}, expect(Outcome::kSliceRejected)};
  m["another round"] = {input(0, slice_file(ps::fuzz::kRound - 2, true)),
                        expect(Outcome::kSliceRejected)};
  Bytes b = good;
  b[1 + 48] ^= std::byte{1};  // the header's round
  m["round field changed"] = {b, expect(Outcome::kSliceRejected)};
  b = good;
  b[1 + 20] = std::byte{0};  // momentum flag cleared: trailing bytes
  m["flag cleared"] = {b, expect(Outcome::kSliceRejected)};
  b = good;
  b.back() ^= std::byte{0x40};
  m["momentum bit flipped"] = {b, expect(Outcome::kSliceRejected)};
  m["cut"] = {Bytes(good.begin(), good.end() - 3), expect(Outcome::kSliceRejected)};
  m["manifest of 3 servers"] = {input(1, ps::as_bytes("psrt-manifest 1 servers 3\n")),
                                expect(Outcome::kManifestRejected)};
  m["manifest with a gap"] = {
      input(1, ps::as_bytes("psrt-manifest 1 servers 2\n1 25 0 0 0 9\n1 25 2 1 18 7\n")),
      expect(Outcome::kManifestRejected)};
  m["manifest with a huge number"] = {
      input(1, ps::as_bytes("psrt-manifest 1 servers 2\n1 99999999999999999999 0 0 0 9\n")),
      expect(Outcome::kManifestRejected)};
  m["manifest header only"] = {input(1, ps::as_bytes("psrt-manifest 1 servers 2\n")),
                               expect(Outcome::kManifestAccepted)};
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  return psrt::fuzz::corpus_main(
      argc, argv, "checkpoint_fuzz_corpus_test", seeds(), malformed(),
      [](std::span<const std::byte> in) { return expect(ps::fuzz::run_one(in)); });
}
