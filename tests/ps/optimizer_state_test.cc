// A slice's optimizer state on a server (ps/optimizer_state.h): its layout per algorithm, the
// step count, and a state written by another optimizer refused by name.
#include "ps/optimizer_state.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "psrt/error.h"

namespace psrt::ps {
namespace {

OptimizerConfig with(OptimizerAlgorithm a, float momentum = 0.f) {
  OptimizerConfig c;
  c.algorithm = a;
  c.momentum = momentum;
  return c;
}

std::string refusal(const std::vector<float>& state, std::size_t count, std::uint64_t version,
                    const OptimizerConfig& cfg) {
  try {
    check_state(state, count, version, cfg, "key 5 slice 1");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

TEST(OptimizerState, AdamAllocatesMomentsAndCountsOnlyAppliedSteps) {
  std::vector<float> state;
  const OptimizerConfig adamw = with(OptimizerAlgorithm::kAdamW);
  for (std::uint64_t step = 1; step <= 3; ++step) {
    StateUpdate u(state, 10, step - 1, adamw, "key 5 slice 1");
    kernels::SliceUpdate k;
    u.attach(k);
    ASSERT_EQ(state.size(), adam_state_floats(10));
    EXPECT_EQ(k.momentum, state.data());
    EXPECT_EQ(k.exp_avg_sq, state.data() + 10);
    EXPECT_EQ(k.step, step);
    u.finish({});
  }
  StateUpdate skipped(state, 10, 3, adamw, "key 5 slice 1");
  kernels::StepResult r;
  r.skipped = true;
  skipped.finish(r);
  EXPECT_EQ(adam_steps(state, 10), 3u) << "a skipped step is not counted";
}

TEST(OptimizerState, ASkippedFirstAdamStepStillLeavesAState) {
  std::vector<float> state;
  StateUpdate u(state, 4, 0, with(OptimizerAlgorithm::kAdam), "s");
  kernels::StepResult r;
  r.skipped = true;
  u.finish(r);
  ASSERT_EQ(state.size(), adam_state_floats(4));
  EXPECT_EQ(adam_steps(state, 4), 0u);
  EXPECT_EQ(refusal(state, 4, 1, with(OptimizerAlgorithm::kAdam)), "");
}

TEST(OptimizerState, AStateOfAnotherOptimizerIsRefusedByName) {
  const std::vector<float> momentum(8, 1.f), adam(adam_state_floats(8), 0.f), none;
  std::string why = refusal(momentum, 8, 40, with(OptimizerAlgorithm::kAdamW));
  EXPECT_NE(why.find("key 5 slice 1 holds SGD momentum after 40 updates, but the job's "
                     "optimizer is adamw"),
            std::string::npos)
      << why;
  why = refusal(none, 8, 40, with(OptimizerAlgorithm::kAdam));
  EXPECT_NE(why.find("holds no optimizer state after 40 updates, but the job's optimizer is adam"),
            std::string::npos)
      << why;
  why = refusal(adam, 8, 40, with(OptimizerAlgorithm::kSgd, 0.9f));
  EXPECT_NE(why.find("holds Adam/AdamW moments and step count after 40 updates, but the job's "
                     "optimizer is sgd"),
            std::string::npos)
      << why;
  EXPECT_EQ(refusal(none, 8, 0, with(OptimizerAlgorithm::kAdam)), "");
  EXPECT_EQ(refusal(adam, 8, 40, with(OptimizerAlgorithm::kAdam)), "") << "Adam <-> AdamW: same";
  EXPECT_EQ(refusal(momentum, 8, 40, with(OptimizerAlgorithm::kSgd, 0.9f)), "");
}

}  // namespace
}  // namespace psrt::ps
