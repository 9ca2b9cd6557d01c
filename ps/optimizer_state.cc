#include "ps/optimizer_state.h"

#include <fmt/core.h>

#include <cstring>

#include "kernels/fused_adam.h"
#include "psrt/error.h"

namespace psrt::ps {

std::uint64_t adam_steps(std::span<const float> state, std::size_t count) {
  std::uint32_t words[2];
  std::memcpy(words, state.data() + 2 * count, sizeof words);
  return words[0] | (static_cast<std::uint64_t>(words[1]) << 32);
}

void set_adam_steps(std::span<float> state, std::size_t count, std::uint64_t steps) {
  const std::uint32_t words[2] = {static_cast<std::uint32_t>(steps),
                                  static_cast<std::uint32_t>(steps >> 32)};
  std::memcpy(state.data() + 2 * count, words, sizeof words);
}

std::string describe_state(std::size_t floats, std::size_t count) {
  if (floats == 0) return "no optimizer state";
  if (floats == count) return "SGD momentum";
  if (floats == adam_state_floats(count)) return "Adam/AdamW moments and step count";
  return fmt::format("{} floats of unknown state", floats);
}

void check_state(const std::vector<float>& state, std::size_t count, std::uint64_t version,
                 const OptimizerConfig& cfg, const std::string& where) {
  const bool adam = kernels::is_adam(cfg);
  const bool fits = adam ? (state.empty() ? version == 0 : state.size() == adam_state_floats(count))
                         : (state.empty() || state.size() == count);
  if (fits) return;
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("{} holds {} after {} updates, but the job's optimizer is {}: the "
                          "checkpoint or replica was written by another optimizer. Resume with "
                          "the optimizer that wrote it (--optimizer), or start afresh without "
                          "--resume",
                          where, describe_state(state.size(), count), version,
                          kernels::to_string(cfg.algorithm)));
}

StateUpdate::StateUpdate(std::vector<float>& state, std::size_t count, std::uint64_t version,
                         const OptimizerConfig& cfg, const std::string& where)
    : state_(state), count_(count), adam_(kernels::is_adam(cfg)) {
  check_state(state, count, version, cfg, where);
  if (adam_) {
    if (state.empty()) state.assign(adam_state_floats(count), 0.f);  // step count 0
    step_ = adam_steps(state, count) + 1;
  } else if (cfg.momentum != 0.f && state.empty()) {
    state.assign(count, 0.f);
    first_step_ = true;
  }
}

void StateUpdate::attach(kernels::SliceUpdate& k) const {
  k.momentum = state_.empty() ? nullptr : state_.data();
  k.first_step = first_step_;
  if (!adam_) return;
  k.exp_avg_sq = state_.data() + count_;
  k.step = step_;
}

void StateUpdate::finish(const kernels::StepResult& result) {
  if (adam_ && !result.skipped) set_adam_steps(state_, count_, step_);
  if (!adam_ && result.skipped && first_step_) state_.clear();
}

}  // namespace psrt::ps
