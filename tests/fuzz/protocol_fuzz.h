// The body of the PS message fuzz target, callable without libFuzzer so that
// protocol_fuzz_corpus_test can run it over the seeds with any compiler.
#pragma once

#include <cstddef>
#include <span>

namespace psrt::ps::fuzz {

// What one input did. Every path checks its invariants and aborts (a libFuzzer crash) when one
// breaks; the outcome only tells the corpus test which path an input took.
enum class Outcome {
  kRejected,            // decode() refused the header or payload size
  kHeaderOnly,          // decoded; the type carries no structured payload
  kStructuredAccepted,  // decoded, and the slice/rank/optimizer/line decoder accepted the payload
  kStructuredRejected,  // decoded, but the structured decoder refused the payload
};

// Splits `input` into a 64-byte header (or less, when the input is shorter) and the rest as the
// payload, decodes the header with the payload's size and, when that succeeds, decodes the
// payload of the types that carry structured bytes.
Outcome run_one(std::span<const std::byte> input);

}  // namespace psrt::ps::fuzz
