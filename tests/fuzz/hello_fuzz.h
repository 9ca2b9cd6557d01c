// The body of the UCX bootstrap hello fuzz target (transport/ucx/hello.*), callable without
// libFuzzer so that hello_fuzz_corpus_test can run it over the seeds with any compiler. It uses
// only the public encode_hello/decode_hello_fixed and the layout's constants, so it follows a
// change of the hello's layout; only the seeds need regenerating (--write).
#pragma once

#include <cstddef>
#include <span>

namespace psrt::transport::ucx::fuzz {

// What one input did. A broken invariant aborts (a libFuzzer crash) instead.
enum class Outcome {
  kShort,             // fewer bytes than the fixed part: the peer would wait for more
  kRejected,          // decode_hello_fixed() refused the fixed part
  kTruncatedAddress,  // the fixed part decoded; fewer address bytes follow than it announces
  kAccepted,          // decoded with its whole address; re-encoding gives the same hello
};

// The first kHelloFixedBytes of `input` are the fixed part; the rest is the worker address.
Outcome run_one(std::span<const std::byte> input);

const char* name_of(Outcome o);

}  // namespace psrt::transport::ucx::fuzz
