// Runs the UCX hello fuzz body over a few seeds (made with encode_hello, so they follow the
// layout) and malformed inputs with any compiler; see corpus_runner.h for the arguments.
#include <string>

#include "tests/fuzz/corpus_runner.h"
#include "tests/fuzz/hello_fuzz.h"
#include "transport/ucx/hello.h"

namespace {

using psrt::fuzz::Bytes;
using psrt::fuzz::Inputs;
namespace ucx = psrt::transport::ucx;
using ucx::fuzz::Outcome;

std::string expect(Outcome o) {
  return ucx::fuzz::name_of(o);
}

// The route token's bytes are a fixed pattern from `token_seed`, so the seeds are reproducible.
Bytes hello_bytes(std::uint64_t token_seed, const std::string& boot_id, std::size_t address_len) {
  ucx::Hello h;
  for (std::size_t i = 0; i < h.route_token.size(); ++i)
    h.route_token[i] = std::byte(static_cast<std::uint8_t>((token_seed >> (8 * (i % 8))) + i));
  h.boot_id = boot_id;
  for (std::size_t i = 0; i < address_len; ++i)
    h.worker_address.push_back(std::byte(static_cast<std::uint8_t>(i * 7 + 1)));
  return ucx::encode_hello(h);
}

Inputs seeds() {
  Inputs s;
  s["seed-hello"] = {hello_bytes(1, "5f2d0c4e-7a1b-4c3d-9e8f-0a1b2c3d4e5f", 38),
                     expect(Outcome::kAccepted)};
  s["seed-hello-no-boot-id"] = {hello_bytes(0xfedcba9876543210ull, "", 1),
                                expect(Outcome::kAccepted)};
  return s;
}

Inputs malformed() {
  Inputs m;
  const Bytes good = seeds().at("seed-hello").bytes;
  m["empty"] = {{}, expect(Outcome::kShort)};
  m["fixed part cut"] = {Bytes(good.begin(), good.begin() + ucx::kHelloFixedBytes - 1),
                         expect(Outcome::kShort)};
  Bytes b = good;
  b[0] = std::byte{'X'};
  m["bad magic"] = {b, expect(Outcome::kRejected)};
  b = good;
  b[4] = std::byte{0xff};
  b[5] = std::byte{0xff};
  m["unknown version"] = {b, expect(Outcome::kRejected)};
  m["address cut"] = {Bytes(good.begin(), good.end() - 1), expect(Outcome::kTruncatedAddress)};
  b = good;
  b.push_back(std::byte{0});  // what follows the address is not the hello's
  m["bytes after the address"] = {b, expect(Outcome::kAccepted)};
  m["all zero"] = {Bytes(ucx::kHelloFixedBytes + 8), expect(Outcome::kRejected)};
  m["all ones"] = {Bytes(ucx::kHelloFixedBytes + 8, std::byte{0xff}), expect(Outcome::kRejected)};
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  return psrt::fuzz::corpus_main(
      argc, argv, "hello_fuzz_corpus_test", seeds(), malformed(),
      [](std::span<const std::byte> in) { return expect(ucx::fuzz::run_one(in)); });
}
