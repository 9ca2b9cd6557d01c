// Learning-rate schedules, as a function of the step (the same on every worker).
#pragma once
#include <cstdint>
#include <string>

namespace psrt::pstrain {

// "none": base. "step": base × 0.1 from 50 % of total_steps, × 0.01 from 75 %. "cosine":
// base × (1 + cos(π · step / total_steps)) / 2.
float lr_at(const std::string& schedule, float base, std::int64_t step, std::int64_t total_steps);

}  // namespace psrt::pstrain
