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
  kSync,   // BSP: a round is applied once every live worker (all but `backup` of them, with
           // backup workers) has a gradient queued for it
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
  // Its oldest queued gradient is for the round the slice applies next. Always true without
  // backup workers; with them a worker's gradients carry the round they were computed for
  // (docs/elastic.md), and one for a later round waits.
  bool current = true;
};

// The ranks (ascending) whose oldest queued gradient goes into the next update; empty when
// nothing may run yet. `live` holds every live worker of the job, ascending by rank.
// `backup` (sync only, psrun --backup-workers): a round runs as soon as all but `backup` live
// workers have a current gradient queued (at least one), with those workers only.
std::vector<std::uint32_t> next_update(Mode mode, std::uint64_t staleness,
                                       std::span<const WorkerClock> live, std::uint32_t backup = 0);

// The gradients a sync round with backup workers waits for: all but `backup` of `live`, at
// least 1.
std::size_t backup_quorum(std::size_t live, std::uint32_t backup) noexcept;

// Refuses a --backup-workers value the job cannot run (kInvalidArgument naming the cause and
// the fix): backup workers need sync mode, fewer backups than workers, and no server replicas
// (a push re-sent to a promoted backup carries its push number, not its round).
void check_backup_workers(Mode mode, std::uint32_t backup, std::uint32_t workers,
                          std::uint32_t replicas);

}  // namespace psrt::ps
