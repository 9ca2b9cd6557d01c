// fused_sgd_cuda's and FusedSgdCudaBatch's front: validates every slice the way fused_sgd_cpu
// does, before any CUDA call, then hands the batch to the launcher in fused_sgd_cuda.cu.
#include "kernels/fused_sgd_cuda.h"

#include <fmt/core.h>

#include <cmath>
#include <string>

#include "kernels/fused_adam.h"
#include "kernels/fused_sgd_cuda_launch.h"
#include "psrt/error.h"

namespace psrt::kernels {

namespace {

[[noreturn]] void invalid(std::size_t index, const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("fused_sgd_cuda: slice {}: {}; nothing was launched", index, message));
}

void validate(const SliceUpdate& u, std::size_t index, const OptimizerConfig& cfg) {
  if (u.num_grads < 1) {
    invalid(index, fmt::format("num_grads is {}; a slice update needs at least one gradient",
                               u.num_grads));
  }
  if (u.weights == nullptr) invalid(index, "weights is null");
  if (u.weights_in != nullptr && u.weights_in != u.weights)
    invalid(index, "weights_in is a CPU-only field: the CUDA update runs in place");
  if (is_adam(cfg) && (u.momentum == nullptr || u.exp_avg_sq == nullptr || u.step < 1)) {
    invalid(index, fmt::format("{} needs both moments (momentum = exp_avg, exp_avg_sq) and a step "
                               ">= 1",
                               to_string(cfg.algorithm)));
  }
  if (u.momentum == nullptr && cfg.momentum != 0.f) {
    invalid(index,
            fmt::format("momentum buffer is null but OptimizerConfig::momentum is {}; pass a "
                        "buffer of count floats or set momentum to 0",
                        cfg.momentum));
  }
  if (u.grads == nullptr) invalid(index, "grads is null");
  for (int j = 0; j < u.num_grads; ++j) {
    if (u.grads[j] == nullptr)
      invalid(index, fmt::format("grads[{}] of {} is null", j, u.num_grads));
  }
  if (static_cast<int>(u.dtype) >= kNumDTypes) {
    invalid(index, fmt::format("unknown gradient dtype {}", static_cast<int>(u.dtype)));
  }
}

// Validates every slice and the config; returns whether any slice has work.
bool validate_all(std::span<const SliceUpdate> slices, const OptimizerConfig& cfg) {
  if (!(cfg.max_grad_norm >= 0.f && std::isfinite(cfg.max_grad_norm))) {
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("fused_sgd_cuda: OptimizerConfig::max_grad_norm is {}; it must be finite "
                    "and >= 0 (0 = no clipping); nothing was launched",
                    cfg.max_grad_norm));
  }
  bool any_work = false;
  for (std::size_t i = 0; i < slices.size(); ++i) {
    validate(slices[i], i, cfg);
    any_work = any_work || slices[i].count > 0;
  }
  return any_work;
}

}  // namespace

StepResult fused_sgd_cuda(std::span<const SliceUpdate> slices, const OptimizerConfig& cfg,
                          void* stream) {
  if (!validate_all(slices, cfg)) return StepResult{};
  return detail::launch_fused_sgd_cuda(slices.data(), slices.size(), cfg, stream);
}

void detail::PreparedLaunchDeleter::operator()(PreparedLaunch* p) const noexcept {
  destroy_prepared_fused_sgd_cuda(p);
}

FusedSgdCudaBatch::FusedSgdCudaBatch(std::span<const SliceUpdate> slices,
                                     const OptimizerConfig& cfg) {
  if (cfg.max_grad_norm != 0.f || cfg.skip_nonfinite)
    throw Error(ErrorCode::kInvalidArgument,
                "FusedSgdCudaBatch: max_grad_norm and skip_nonfinite need the norm pre-pass of "
                "fused_sgd_cuda; a batch launches the update alone");
  if (!validate_all(slices, cfg)) return;
  prepared_.reset(detail::prepare_fused_sgd_cuda(slices.data(), slices.size(), cfg));
}

void FusedSgdCudaBatch::launch(void* stream) const {
  if (prepared_ != nullptr) detail::launch_prepared_fused_sgd_cuda(*prepared_, stream);
}

int FusedSgdCudaBatch::device() const noexcept {
  return prepared_ != nullptr ? detail::prepared_device(*prepared_) : -1;
}

}  // namespace psrt::kernels
