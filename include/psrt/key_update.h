// What the servers do with a key's rounds, chosen by the Worker::init() that stores the key.
#pragma once

#include <cstdint>

namespace psrt {

// - kOptimizer: the job's optimizer (Worker::set_optimizer, psrun --lr ...) updates the weights
//   with the round's aggregated gradient (psrun --aggregate mean|sum), keeping its state.
// - kMean / kSum: aggregate only. After a round the key's value IS the mean (kMean) or the sum
//   (kSum) of that round's gradients, one per live worker, exactly as the fused update
//   aggregates them (kernels/fused_sgd.h: the fp32 sum in rank order, times 1/N for the mean):
//   no optimizer state, learning rate, clipping or guard. A push_pull then returns the round's
//   aggregate: an allreduce through the servers, for sum mode (each worker runs its own optimizer
//   on the averaged gradient) and for metrics. Needs psrun --mode sync and cpu servers; refused
//   with --replicas 2 (psrt::Error kInvalidArgument naming the cause). A checkpoint holds the
//   last round's aggregate, and a resumed key keeps its kind (its init says it again).
enum class KeyUpdate : std::uint8_t { kOptimizer = 0, kMean = 1, kSum = 2 };

}  // namespace psrt
