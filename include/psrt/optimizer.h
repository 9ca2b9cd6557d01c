// The servers' optimizer: torch.optim.SGD, Adam or AdamW (`algorithm`) with their parameters,
// plus the step guard and clipping. One type from the public API down to the kernels: the worker
// sends it (Worker::set_optimizer), psrun sets it (--optimizer, --lr, --momentum, ...), the server
// keeps it and the fused update (kernels/fused_sgd.h for SGD, kernels/fused_adam.h for Adam and
// AdamW, whose specs fix the arithmetic) reads it. A new option is a field here, its wire encoding
// (ps/session/protocol.cc) and the kernels that apply it.
//
// C++17 as well as C++20: nvcc compiles the CUDA kernel at C++17 and sees this header through
// kernels/fused_sgd.h (operator== is C++20 only).
#pragma once

#include <cstdint>

namespace psrt {

// Which torch.optim class the servers apply. Adam and AdamW keep two moments and a step count per
// slice (3x the weights' memory on the servers; docs/optimizers.md); SGD keeps a momentum buffer
// when momentum != 0.
enum class OptimizerAlgorithm : std::uint8_t { kSgd = 0, kAdam = 1, kAdamW = 2 };

struct OptimizerConfig {
  OptimizerAlgorithm algorithm = OptimizerAlgorithm::kSgd;
  float lr = 0.01f;
  float momentum = 0.f;   // SGD only (0 for Adam and AdamW)
  float dampening = 0.f;  // SGD only
  // SGD and Adam: L2, added to the gradient (g + weight_decay * w). AdamW: decoupled, the weights
  // are scaled by (1 - lr * weight_decay) before the Adam step. torch's defaults differ (AdamW:
  // 0.01); the config's is 0 for every algorithm, so set it explicitly.
  float weight_decay = 0.f;
  bool nesterov = false;  // SGD only
  // Adam and AdamW (torch.optim.Adam's betas and eps): in [0, 1) and > 0, finite. The moments'
  // running averages and the denominator's term; bias correction uses the slice's step count.
  // (amsgrad and maximize are not supported: the entry points refuse them.)
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  // > 0: before the update, scale the round's mean (or summed) gradient g by
  // min(1, max_grad_norm / (|g| + 1e-6)), as torch.nn.utils.clip_grad_norm_ does. NOTE the norm
  // |g| is taken per server update, i.e. over ONE SLICE of one tensor (at most psrun's
  // --partition-bytes), not over the whole model as in torch: a large tensor's slices are
  // clipped independently and small tensors on their own. (The kernels take the norm over the
  // slices of one step, kernels/fused_sgd.h; a server's step is one slice.) Finite, >= 0;
  // 0 = no clipping.
  float max_grad_norm = 0.f;
  // Skip a server update whose aggregated gradient holds a NaN or an infinity: that slice's
  // weights and momentum stay exactly as they were (the round still counts, so every worker's
  // push and pull complete), and the server logs a warning naming the key, slice and round.
  bool skip_nonfinite = false;

#if __cplusplus >= 202002L
  // Field by field, floats by value (so +0 == -0 and NaN != NaN; the wire codec refuses NaN).
  bool operator==(const OptimizerConfig&) const = default;
#endif
};

}  // namespace psrt
