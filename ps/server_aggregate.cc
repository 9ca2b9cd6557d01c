// Aggregate-only keys (psrt/key_update.h): a round's value is the mean or the sum of its
// gradients, with no optimizer. The fused update computes it: from weights of zero, with
// learning rate -1 and nothing else, its spec (kernels/fused_sgd.h) gives w = 0 - (-1 * g) = g,
// the aggregated gradient, bit for bit.
#include <fmt/core.h>

#include <algorithm>
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

kernels::StepResult Server::aggregate_only(Slice& s, const Update& u) {
  std::vector<const void*> grads;
  grads.reserve(u.grads.size());
  for (const auto& g : u.grads)
    grads.push_back(std::get<HostGrad>(g.where).data.get());
  const float* source = nullptr;
  float* target = update_target(s, u, &source);
  std::fill_n(target, s.count, 0.f);
  kernels::SliceUpdate k = slice_update(s, u, grads, target, nullptr, false);
  k.grad_scale = s.update == KeyUpdate::kMean ? 1.f / static_cast<float>(grads.size()) : 1.f;
  OptimizerConfig sum_only;  // no momentum, weight decay, clipping or guard
  sum_only.lr = -1.f;
  return apply_host_update(k, sum_only);
}

}  // namespace psrt::ps
