// libFuzzer target for the UCX bootstrap hello (transport/ucx/hello.cc): the first bytes a UCX
// peer reads from a socket anyone can connect to. Build and run with clang (from the repository
// root), or `make fuzz` for every target:
//
//   CXX=clang++ CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
//   cmake --build build-fuzz --target hello_fuzz && mkdir -p build-fuzz/hello_corpus &&
//   build-fuzz/bin/hello_fuzz -max_total_time=60 build-fuzz/hello_corpus tests/fuzz/hello_corpus
//
// A crashing input is written to ./crash-<sha1>; replay it with `build-fuzz/bin/hello_fuzz FILE`.
// `hello_fuzz_corpus_test --write tests/fuzz/hello_corpus` regenerates the seeds after a change
// of the hello's layout.
#include "tests/fuzz/hello_fuzz.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "transport/ucx/hello.h"

namespace psrt::transport::ucx::fuzz {
namespace {

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "hello_fuzz: invariant broken: %s\n", what);
  std::abort();
}

}  // namespace

const char* name_of(Outcome o) {
  switch (o) {
    case Outcome::kShort:
      return "short";
    case Outcome::kRejected:
      return "rejected";
    case Outcome::kTruncatedAddress:
      return "truncated address";
    case Outcome::kAccepted:
      return "accepted";
  }
  return "?";
}

Outcome run_one(std::span<const std::byte> input) {
  if (input.size() < kHelloFixedBytes) return Outcome::kShort;
  Hello hello;
  std::size_t address_len = 0;
  const std::string error = decode_hello_fixed(input.first<kHelloFixedBytes>(), hello, address_len);
  if (!error.empty()) return Outcome::kRejected;
  require(address_len >= 1 && address_len <= kMaxWorkerAddressBytes,
          "an accepted hello announces an address outside 1..kMaxWorkerAddressBytes");
  require(hello.boot_id.size() <= kBootIdBytes, "a boot id longer than its field");
  const auto rest = input.subspan(kHelloFixedBytes);
  if (rest.size() < address_len) return Outcome::kTruncatedAddress;
  hello.worker_address.assign(rest.begin(),
                              rest.begin() + static_cast<std::ptrdiff_t>(address_len));
  // What was decoded encodes to a hello that decodes to the same thing.
  const std::vector<std::byte> again = encode_hello(hello);
  require(again.size() == kHelloFixedBytes + address_len, "re-encoded hello has another size");
  Hello second;
  std::size_t second_len = 0;
  require(
      decode_hello_fixed(std::span(again).first<kHelloFixedBytes>(), second, second_len).empty(),
      "a re-encoded hello is refused");
  require(second_len == address_len, "a re-encoded hello announces another address length");
  second.worker_address.assign(again.begin() + kHelloFixedBytes, again.end());
  require(encode_hello(second) == again, "decode(encode(decoded hello)) differs");
  return Outcome::kAccepted;
}

}  // namespace psrt::transport::ucx::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  psrt::transport::ucx::fuzz::run_one({reinterpret_cast<const std::byte*>(data), size});
  return 0;
}
