#include "pstrain/epoch_plan.h"

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <string_view>

#include "base/fnv.h"

namespace psrt::pstrain {
namespace {

// The record: [count, epoch, step hi, step lo, step base hi, step base lo, ranks...]. Steps and
// step bases are cut in base-4096 digits so that the sum over up to kMaxRanks workers of equal
// values stays an exact fp32 integer (below 2^24) for every step below 2^26.
constexpr std::size_t kHeader = 6;
constexpr std::int64_t kDigit = 4096;
constexpr std::size_t kRecord = kHeader + EpochPlanner::kMaxRanks;

// A name no parameter has (LibTorch's names are dotted identifiers), hashed as parameter names
// are (psrt::torch::key_of).
Key plan_key() {
  static constexpr std::string_view kName = "pstrain:epoch-plan";
  return fnv1a(kName.data(), kName.size());
}

std::int64_t exact(float sum, float count, const char* what) {
  const double v = static_cast<double>(sum) / static_cast<double>(count);
  if (v != std::floor(v) || v < 0)
    throw Error(ErrorCode::kInternal,
                fmt::format("epoch plan: the {} workers disagree about the epoch's {} (sum {})",
                            count, what, sum));
  return static_cast<std::int64_t>(v);
}

}  // namespace

std::vector<float> encode_epoch_plan(const EpochPlan& plan, int rank) {
  std::vector<float> v(kRecord, 0.f);
  v[0] = 1.f;
  v[1] = static_cast<float>(plan.epoch);
  const std::int64_t step_hi = plan.first_step / kDigit, base_hi = plan.step_base / kDigit;
  v[2] = static_cast<float>(step_hi);
  v[3] = static_cast<float>(plan.first_step % kDigit);
  v[4] = static_cast<float>(base_hi);
  v[5] = static_cast<float>(plan.step_base % kDigit);
  v[kHeader + static_cast<std::size_t>(rank)] = 1.f;
  return v;
}

EpochPlan decode_epoch_plan(const std::vector<float>& v, int rank) {
  EpochPlan p;
  if (v.size() != kRecord || v[0] < 1.f) return p;  // no plan round yet
  const float count = v[0];
  p.epoch = exact(v[1], count, "number");
  p.first_step = exact(v[2], count, "first step") * kDigit + exact(v[3], count, "first step");
  p.step_base = exact(v[4], count, "step base") * kDigit + exact(v[5], count, "step base");
  int members = 0;
  for (std::size_t r = 0; r < EpochPlanner::kMaxRanks; ++r) {
    const float bit = v[kHeader + r];
    if (bit != 0.f && bit != 1.f)
      throw Error(ErrorCode::kInternal,
                  fmt::format("epoch plan: rank {} took part {} times in one round", r, bit));
    if (bit == 0.f) continue;
    if (static_cast<int>(r) == rank) p.part = members;
    ++members;
  }
  if (static_cast<float>(members) != count)
    throw Error(ErrorCode::kInternal,
                fmt::format("epoch plan: {} records but {} ranks marked", count, members));
  p.world = members;
  return p;
}

EpochPlanner::EpochPlanner(Worker& worker) : worker_(worker), out_(kRecord, 0.f) {
  if (worker_.rank() >= kMaxRanks)
    throw Error(ErrorCode::kUnsupported,
                fmt::format("epoch plan: rank {} has no place in the plan record (ranks below {})",
                            worker_.rank(), kMaxRanks));
  worker_.init(plan_key(), out_, KeyUpdate::kSum);
}

EpochPlan EpochPlanner::agree(std::int64_t epoch, std::int64_t first_step, std::int64_t step_base) {
  const EpochPlan mine{epoch, first_step, step_base, 0, -1};
  const std::vector<float> record = encode_epoch_plan(mine, worker_.rank());
  worker_.push_pull(plan_key(), record, out_).wait();
  EpochPlan p = decode_epoch_plan(out_, worker_.rank());
  if (p.epoch != epoch || p.first_step != first_step || p.step_base != step_base || p.part < 0)
    throw Error(
        ErrorCode::kInternal,
        fmt::format("epoch plan: this worker starts epoch {} at step {} (step base {}), the "
                    "job's plan says epoch {} at step {} (step base {}); the workers were "
                    "started with different --epochs/--batch-size/--max-steps or data",
                    epoch, first_step, step_base, p.epoch, p.first_step, p.step_base));
  return p;
}

EpochPlan EpochPlanner::last() {
  worker_.pull(plan_key(), out_).wait();
  return decode_epoch_plan(out_, worker_.rank());
}

}  // namespace psrt::pstrain
