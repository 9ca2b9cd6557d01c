// Aggregate-only keys (psrt/key_update.h): a round's value is the mean or the sum of its
// gradients, with no optimizer. What a server refuses of them; their update is
// UpdateStage::aggregate_only (ps/update_stage.cc).
#include <fmt/core.h>

#include <string_view>

#include "ps/server.h"

namespace psrt::ps {

std::string_view to_string(KeyUpdate u) noexcept {
  switch (u) {
    case KeyUpdate::kOptimizer:
      return "an optimizer key";
    case KeyUpdate::kMean:
      return "an aggregate-only key (mean)";
    case KeyUpdate::kSum:
      return "an aggregate-only key (sum)";
  }
  return "?";
}

void Server::check_aggregate_init(const Header& h) const {
  if (h.key_update() == static_cast<std::uint32_t>(KeyUpdate::kOptimizer)) return;
  if (config_.mode != Mode::kSync)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("init of key {} as {}: its value is one round's aggregate, which "
                            "needs psrun --mode sync (every worker in every round), not {}",
                            h.key, to_string(static_cast<KeyUpdate>(h.key_update())),
                            to_string(config_.mode)));
  if (gpu_)
    throw Error(ErrorCode::kUnsupported,
                fmt::format("init of key {} as {}: aggregate-only keys run on cpu servers; run "
                            "with --server-device cpu",
                            h.key, to_string(static_cast<KeyUpdate>(h.key_update()))));
}

}  // namespace psrt::ps
