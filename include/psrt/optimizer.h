// The servers' optimizer: torch.optim.SGD's parameters plus the step guard and clipping. One
// type from the public API down to the kernels: the worker sends it (Worker::set_optimizer), psrun
// sets it (--lr, --momentum, ...), the server keeps it and the fused update (kernels/fused_sgd.h,
// whose spec fixes the arithmetic) reads it. A new option is a field here, its wire encoding
// (ps/protocol_kernels.cc) and the kernels that apply it.
//
// C++17 as well as C++20: nvcc compiles the CUDA kernel at C++17 and sees this header through
// kernels/fused_sgd.h (operator== is C++20 only).
#pragma once

namespace psrt {

struct OptimizerConfig {
  float lr = 0.01f;
  float momentum = 0.f;
  float dampening = 0.f;
  float weight_decay = 0.f;
  bool nesterov = false;
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
