// The records of server replication (psrun --replicas 2) on the wire: one worker's counters on
// a replicated slice, so that a promoted backup knows which of each worker's pushes the version
// it holds consumed (a re-sent push it already holds is acknowledged, not applied again).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ps/session/protocol.h"

namespace psrt::ps {
inline namespace session {

// REPLICATE_COMMIT record (kReplicaCountBytes): u32 rank, u64 applied, u64 pushes.
struct ReplicaCount {
  std::uint32_t rank = 0;
  std::uint64_t applied = 0;  // the worker's clock on the slice (Server::WorkerState::applied)
  std::uint64_t pushes = 0;   // its pushes the replicated version consumed
};
std::vector<std::byte> encode_counts(std::span<const ReplicaCount> counts);
// Ranks below kMaxRanks and unique; pushes never above what a clock allows is not checked (a
// joiner's clock starts level with the slowest worker's).
Status decode_counts(std::span<const std::byte> bytes, std::vector<ReplicaCount>& out);

}  // namespace session
}  // namespace psrt::ps
