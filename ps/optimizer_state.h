// A slice's optimizer state on a server: one fp32 array (served::Slice::momentum), laid out by the
// algorithm, so that checkpoints (ps/checkpoint.h) and replicas (ps/replica_link.h) carry it
// byte for byte whatever the optimizer:
//   SGD, momentum != 0:  count momentum values (empty until the first applied step)
//   SGD, momentum == 0:  empty
//   Adam, AdamW:         exp_avg (count), exp_avg_sq (count), then the slice's step count, a u64
//                        (little-endian) in the bits of two floats: 2 * count + 2 values (empty
//                        until the first update; the step count excludes skipped steps)
// A state whose size fits neither layout of the job's optimizer is refused (check_state): a job
// resumed from an SGD checkpoint cannot go on as Adam, nor the other way round.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/fused_sgd.h"
#include "psrt/optimizer.h"

namespace psrt::ps {

inline constexpr std::size_t adam_state_floats(std::size_t count) {
  return 2 * count + 2;
}

std::uint64_t adam_steps(std::span<const float> state, std::size_t count);
void set_adam_steps(std::span<float> state, std::size_t count, std::uint64_t steps);

// What a state of `floats` values holds for a slice of `count`: "no state", "SGD momentum",
// "Adam/AdamW moments" or "unknown".
std::string describe_state(std::size_t floats, std::size_t count);

// Throws psrt::Error (kInvalidArgument) when `state` cannot be the state of `cfg` for a slice of
// `count` elements at `version` (the updates applied so far): Adam/AdamW need either no state at
// version 0 or 2 * count + 2 values; SGD with momentum needs none or count. `where` names the
// slice.
void check_state(const std::vector<float>& state, std::size_t count, std::uint64_t version,
                 const OptimizerConfig& cfg, const std::string& where);

// One host update's use of the state: check_state, then the state allocated when the algorithm
// needs one it does not have yet, and the kernel's view of it in `k` (momentum, exp_avg_sq, step,
// first_step). `where` names the slice in errors. finish() after the kernel: Adam's step count
// advances unless the step was skipped; a skipped first SGD step leaves the momentum "not yet
// initialised" (empty), so the next applied one is torch's first step again.
class StateUpdate {
 public:
  StateUpdate(std::vector<float>& state, std::size_t count, std::uint64_t version,
              const OptimizerConfig& cfg, const std::string& where);
  void attach(kernels::SliceUpdate& k) const;
  void finish(const kernels::StepResult& result);

 private:
  std::vector<float>& state_;
  std::size_t count_;
  bool adam_ = false;
  bool first_step_ = false;
  std::uint64_t step_ = 0;  // Adam: the step this update is
};

}  // namespace psrt::ps
