// The consistency policies, as one decision: given the gradients queued per live worker of a
// slice, which of them form the next update. The server runs whatever this returns; the update
// itself does not care about the mode.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace psrt::ps {

enum class Mode : std::uint8_t {
  kSync,   // BSP: a round is applied once every live worker has a gradient queued for it
  kAsync,  // every gradient applied alone, on arrival
  kSsp,    // applied alone, but no worker more than `staleness` updates ahead of the slowest
};
std::string_view to_string(Mode m) noexcept;
// "sync" | "async" | "ssp"; throws psrt::Error(kInvalidArgument) naming the accepted values.
Mode parse_mode(std::string_view s);

struct WorkerClock {
  std::uint32_t rank;
  std::uint64_t queued;   // gradients received and not yet applied
  std::uint64_t applied;  // gradients of this worker applied so far (its clock)
};

// The ranks (ascending) whose oldest queued gradient goes into the next update; empty when
// nothing may run yet. `live` holds every live worker of the job, ascending by rank.
std::vector<std::uint32_t> next_update(Mode mode, std::uint64_t staleness,
                                       std::span<const WorkerClock> live);

}  // namespace psrt::ps
