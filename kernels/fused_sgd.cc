// fused_sgd_cpu's front: names, ISA detection with the PSRT_CPU_ISA cap, validation of the
// step, the guard/clipping decision from the pre-pass's norm, and the hand-off to one ISA
// backend. The arithmetic lives in fused_sgd_*.cc.
#include "kernels/fused_sgd.h"

#include <fmt/core.h>

#include <cmath>
#include <cstdlib>
#include <span>
#include <string>

#include "kernels/fused_adam.h"
#include "kernels/fused_sgd_internal.h"
#include "psrt/error.h"

namespace psrt::kernels {

std::string_view to_string(CpuIsa isa) noexcept {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "unknown-isa";
}

std::string_view to_string(OptimizerAlgorithm a) noexcept {
  switch (a) {
    case OptimizerAlgorithm::kSgd:
      return "sgd";
    case OptimizerAlgorithm::kAdam:
      return "adam";
    case OptimizerAlgorithm::kAdamW:
      return "adamw";
  }
  return "unknown-optimizer";
}

bool parse_algorithm(std::string_view text, OptimizerAlgorithm& out) noexcept {
  for (auto a : {OptimizerAlgorithm::kSgd, OptimizerAlgorithm::kAdam, OptimizerAlgorithm::kAdamW}) {
    if (text == to_string(a)) {
      out = a;
      return true;
    }
  }
  return false;
}

bool parse_betas(std::string_view text, OptimizerConfig& cfg) {
  const auto comma = text.find(',');
  if (comma == std::string_view::npos) return false;
  const std::string b1(text.substr(0, comma)), b2(text.substr(comma + 1));
  char* end1 = nullptr;
  char* end2 = nullptr;
  const float x = std::strtof(b1.c_str(), &end1);
  const float y = std::strtof(b2.c_str(), &end2);
  if (b1.empty() || b2.empty() || *end1 != '\0' || *end2 != '\0') return false;
  cfg.beta1 = x;
  cfg.beta2 = y;
  return true;
}

namespace {

// The widest ISA the CPU has, probed once: the answer cannot change while the process runs.
CpuIsa detected_isa() noexcept {
  static const CpuIsa isa = [] {
#if PSRT_KERNELS_X86
    // __builtin_cpu_supports also checks that the OS saves the wider registers (XCR0).
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) {
      return CpuIsa::kAvx512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) return CpuIsa::kAvx2;
#endif
    return CpuIsa::kScalar;
  }();
  return isa;
}

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message);
}

// Everything a backend relies on, checked before anything is written. `where` names the slice
// in a step of several ("slice 2: "), and is empty for a step of one.
void validate(const SliceUpdate& u, const OptimizerConfig& cfg, const std::string& where) {
  if (u.num_grads < 1) {
    invalid(
        fmt::format("fused_sgd_cpu: {}num_grads is {}; a slice update needs at least one "
                    "gradient",
                    where, u.num_grads));
  }
  if (u.weights == nullptr) invalid(fmt::format("fused_sgd_cpu: {}weights is null", where));
  if (is_adam(cfg)) {
    if (u.momentum == nullptr || u.exp_avg_sq == nullptr) {
      invalid(
          fmt::format("fused_sgd_cpu: {}{} needs both moments (momentum = exp_avg and "
                      "exp_avg_sq, count floats each); one is null",
                      where, to_string(cfg.algorithm)));
    }
    if (u.step < 1) {
      invalid(fmt::format("fused_sgd_cpu: {}{} step is 0; the first step is 1", where,
                          to_string(cfg.algorithm)));
    }
  } else if (u.momentum == nullptr && cfg.momentum != 0.f) {
    invalid(
        fmt::format("fused_sgd_cpu: {}momentum buffer is null but OptimizerConfig::momentum is {}; "
                    "pass a buffer of count floats or set momentum to 0",
                    where, cfg.momentum));
  }
  if (u.grads == nullptr) invalid(fmt::format("fused_sgd_cpu: {}grads is null", where));
  for (int j = 0; j < u.num_grads; ++j) {
    if (u.grads[j] == nullptr) {
      invalid(fmt::format("fused_sgd_cpu: {}grads[{}] of {} is null", where, j, u.num_grads));
    }
  }
  if (static_cast<int>(u.dtype) >= kNumDTypes) {
    invalid(fmt::format("fused_sgd_cpu: {}unknown gradient dtype {}", where,
                        static_cast<int>(u.dtype)));
  }
}

void validate_step(std::span<const SliceUpdate> slices, const OptimizerConfig& cfg, CpuIsa isa) {
  if (!(cfg.max_grad_norm >= 0.f && std::isfinite(cfg.max_grad_norm))) {
    invalid(
        fmt::format("fused_sgd_cpu: OptimizerConfig::max_grad_norm is {}; it must be finite and "
                    ">= 0 (0 = no clipping)",
                    cfg.max_grad_norm));
  }
  for (std::size_t i = 0; i < slices.size(); ++i) {
    validate(slices[i], cfg, slices.size() > 1 ? fmt::format("slice {}: ", i) : std::string());
  }
  if (!cpu_has_isa(isa)) {
    invalid(fmt::format("fused_sgd_cpu: this CPU or build lacks {} (best available: {})",
                        to_string(isa), to_string(detected_isa())));
  }
}

// The pre-pass of the spec (fused_sgd.h): the fp64 sum of squares of the step's aggregated
// gradient, in the fixed partial order every ISA shares.
double step_sum_of_squares(std::span<const SliceUpdate> slices, CpuIsa isa) {
  double partials[detail::kNormPartials] = {};
  for (const SliceUpdate& u : slices) {
    if (u.count == 0) continue;
    switch (isa) {
      case CpuIsa::kScalar:
        detail::sum_squares_scalar(u, partials);
        break;
#if PSRT_KERNELS_X86
      case CpuIsa::kAvx2:
        detail::sum_squares_avx2(u, partials);
        break;
      case CpuIsa::kAvx512:
        detail::sum_squares_avx512(u, partials);
        break;
#else
      default:
        break;  // unreachable: validate_step() rejects ISAs this build lacks
#endif
    }
  }
  double sum = partials[0];
  for (std::size_t k = 1; k < detail::kNormPartials; ++k)
    sum = sum + partials[k];
  return sum;
}

void update_slice_adam(const SliceUpdate& u, const OptimizerConfig& cfg, CpuIsa isa,
                       float clip_coef) {
  switch (isa) {
    case CpuIsa::kScalar:
      detail::fused_adam_scalar(u, cfg, clip_coef);
      return;
#if PSRT_KERNELS_X86
    case CpuIsa::kAvx2:
      detail::fused_adam_avx2(u, cfg, clip_coef);
      return;
    case CpuIsa::kAvx512:
      detail::fused_adam_avx512(u, cfg, clip_coef);
      return;
#else
    default:
      return;  // unreachable: validate_step() rejects ISAs this build lacks
#endif
  }
}

void update_slice(const SliceUpdate& u, const OptimizerConfig& cfg, CpuIsa isa, float clip_coef) {
  if (u.count == 0) return;
  if (is_adam(cfg)) return update_slice_adam(u, cfg, isa, clip_coef);
  switch (isa) {
    case CpuIsa::kScalar:
      detail::fused_sgd_scalar(u, cfg, clip_coef);
      return;
#if PSRT_KERNELS_X86
    case CpuIsa::kAvx2:
      detail::fused_sgd_avx2(u, cfg, clip_coef);
      return;
    case CpuIsa::kAvx512:
      detail::fused_sgd_avx512(u, cfg, clip_coef);
      return;
#else
    default:
      return;  // unreachable: validate_step() rejects ISAs this build lacks
#endif
  }
}

}  // namespace

bool cpu_has_isa(CpuIsa isa) noexcept {
  switch (isa) {
    case CpuIsa::kScalar:
    case CpuIsa::kAvx2:
    case CpuIsa::kAvx512:
      return static_cast<int>(isa) <= static_cast<int>(detected_isa());
  }
  return false;
}

CpuIsa best_cpu_isa() {
  const CpuIsa detected = detected_isa();
  const char* env = std::getenv("PSRT_CPU_ISA");
  if (env == nullptr || *env == '\0') return detected;
  const std::string_view cap(env);
  for (CpuIsa isa : kAllCpuIsas) {
    if (cap == to_string(isa)) {
      return static_cast<int>(isa) < static_cast<int>(detected) ? isa : detected;
    }
  }
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("PSRT_CPU_ISA={} is not one of scalar|avx2|avx512 (unset it to use the "
                          "widest ISA this CPU has)",
                          cap));
}

StepResult fused_sgd_cpu_step(std::span<const SliceUpdate> slices, const OptimizerConfig& cfg,
                              CpuIsa isa) {
  validate_step(slices, cfg, isa);
  StepResult result;
  if (needs_prepass(cfg)) {
    // sum is non-finite exactly when some aggregated gradient element is (see fused_sgd.h).
    result.grad_norm = std::sqrt(step_sum_of_squares(slices, isa));
    if (cfg.skip_nonfinite && !std::isfinite(result.grad_norm)) {
      result.skipped = true;
      return result;
    }
    if (cfg.max_grad_norm > 0.f) {
      const auto coef =
          static_cast<float>(static_cast<double>(cfg.max_grad_norm) / (result.grad_norm + 1e-6));
      if (coef < 1.f) {
        result.clip_coef = coef;
        result.clipped = true;
      }
    }
  }
  for (const SliceUpdate& u : slices)
    update_slice(u, cfg, isa, result.clip_coef);
  return result;
}

StepResult fused_sgd_cpu(const SliceUpdate& u, const OptimizerConfig& cfg, CpuIsa isa) {
  return fused_sgd_cpu_step(std::span<const SliceUpdate>(&u, 1), cfg, isa);
}

}  // namespace psrt::kernels
