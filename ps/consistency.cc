#include "ps/consistency.h"

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

std::vector<std::uint32_t> next_update(Mode mode, std::uint64_t staleness,
                                       std::span<const WorkerClock> live) {
  if (live.empty()) return {};
  switch (mode) {
    case Mode::kSync: {
      if (!std::all_of(live.begin(), live.end(), [](const auto& w) { return w.queued > 0; }))
        return {};
      std::vector<std::uint32_t> all;
      for (const auto& w : live)
        all.push_back(w.rank);
      return all;
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
