#include "pstrain/lr_schedule.h"

#include <cmath>
#include <numbers>

namespace psrt::pstrain {

float lr_at(const std::string& schedule, float base, std::int64_t step, std::int64_t total_steps) {
  if (total_steps <= 0) return base;
  const double f = static_cast<double>(step) / static_cast<double>(total_steps);
  if (schedule == "step") return base * (f >= 0.75 ? 0.01f : f >= 0.5 ? 0.1f : 1.f);
  if (schedule == "cosine")
    return static_cast<float>(base * 0.5 * (1.0 + std::cos(std::numbers::pi * f)));
  return base;
}

}  // namespace psrt::pstrain
