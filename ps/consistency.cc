#include "ps/consistency.h"

#include <fmt/core.h>

#include <algorithm>

#include "psrt/error.h"

namespace psrt::ps {

std::string_view to_string(Mode m) noexcept {
  switch (m) {
    case Mode::kSync:
      return "sync";
    case Mode::kAsync:
      return "async";
    case Mode::kSsp:
      return "ssp";
  }
  return "?";
}

Mode parse_mode(std::string_view s) {
  if (s == "sync") return Mode::kSync;
  if (s == "async") return Mode::kAsync;
  if (s == "ssp") return Mode::kSsp;
  throw Error(ErrorCode::kInvalidArgument,
              "unknown consistency mode '" + std::string(s) + "': use sync, async or ssp");
}

std::size_t backup_quorum(std::size_t live, std::uint32_t backup) noexcept {
  return live > backup ? live - backup : 1;
}

void check_backup_workers(Mode mode, std::uint32_t backup, std::uint32_t workers,
                          std::uint32_t replicas) {
  if (backup == 0) return;
  if (mode != Mode::kSync)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--backup-workers {} needs --mode sync (mode {} applies every "
                            "gradient alone and never waits for a round): drop it or use sync",
                            backup, to_string(mode)));
  if (backup >= workers)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--backup-workers {} with {} workers: a round needs at least one "
                            "gradient; use fewer backup workers than -n",
                            backup, workers));
  if (replicas > 1)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--backup-workers {} cannot be combined with --replicas {}: a push "
                            "re-sent to a promoted backup is numbered by push, not by round; "
                            "use one of them",
                            backup, replicas));
}

std::vector<std::uint32_t> next_update(Mode mode, std::uint64_t staleness,
                                       std::span<const WorkerClock> live, std::uint32_t backup) {
  if (live.empty()) return {};
  switch (mode) {
    case Mode::kSync: {
      std::vector<std::uint32_t> ready;
      for (const auto& w : live)
        if (w.queued > 0 && w.current) ready.push_back(w.rank);
      if (ready.size() < backup_quorum(live.size(), backup)) return {};
      return ready;
    }
    case Mode::kAsync:
    case Mode::kSsp: {
      std::uint64_t slowest = UINT64_MAX;
      for (const auto& w : live)
        slowest = std::min(slowest, w.applied);
      // The furthest-behind worker with a gradient goes first: it is the one others wait on.
      const WorkerClock* pick = nullptr;
      for (const auto& w : live) {
        if (w.queued == 0) continue;
        if (mode == Mode::kSsp && w.applied > slowest + staleness) continue;
        if (!pick || w.applied < pick->applied) pick = &w;
      }
      if (!pick) return {};
      return {pick->rank};
    }
  }
  return {};
}

}  // namespace psrt::ps
