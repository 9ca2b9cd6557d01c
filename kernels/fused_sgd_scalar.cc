// The portable backend: one element at a time, through the same element function that the
// vector backends use for their tails. Compiled for the baseline ISA, so it runs anywhere and
// is the reference the vector backends are tested against bit for bit.
#include "kernels/fused_sgd_internal.h"

namespace psrt::kernels::detail {

void fused_sgd_scalar(const SliceUpdate& u, const OptimizerConfig& cfg, float clip_coef) {
  const ElementParams p = make_element_params(u, cfg, clip_coef);
  switch (u.dtype) {
    case DType::kF32:
      update_elements_scalar<DType::kF32>(u, p, 0, u.count);
      break;
    case DType::kF16:
      update_elements_scalar<DType::kF16>(u, p, 0, u.count);
      break;
    case DType::kBF16:
      update_elements_scalar<DType::kBF16>(u, p, 0, u.count);
      break;
  }
}

void fused_adam_scalar(const SliceUpdate& u, const OptimizerConfig& cfg, float clip_coef) {
  const AdamParams p = make_adam_params(u, cfg, clip_coef);
  switch (u.dtype) {
    case DType::kF32:
      adam_elements_scalar<DType::kF32>(u, p, 0, u.count);
      break;
    case DType::kF16:
      adam_elements_scalar<DType::kF16>(u, p, 0, u.count);
      break;
    case DType::kBF16:
      adam_elements_scalar<DType::kBF16>(u, p, 0, u.count);
      break;
  }
}

void sum_squares_scalar(const SliceUpdate& u, double* partials) {
  switch (u.dtype) {
    case DType::kF32:
      accumulate_squares_scalar<DType::kF32>(u, 0, u.count, partials);
      break;
    case DType::kF16:
      accumulate_squares_scalar<DType::kF16>(u, 0, u.count, partials);
      break;
    case DType::kBF16:
      accumulate_squares_scalar<DType::kBF16>(u, 0, u.count, partials);
      break;
  }
}

}  // namespace psrt::kernels::detail
