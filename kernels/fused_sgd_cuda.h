// The CUDA implementation of the fused aggregate+SGD update: the spec of kernels/fused_sgd.h, run
// on the GPU for any number of slices in one kernel launch. Plain C++ (no CUDA headers), so
// callers compile without nvcc; it exists only in builds with PSRT_HAVE_CUDA (psrt/config.h).
//
//   SliceUpdate slices[2] = {{w0, m0, grads0, 4, DType::kBF16, n0, 0.25f, false},
//                            {w1, m1, grads1, 4, DType::kF32, n1, 0.25f, false}};
//   const StepResult r = fused_sgd_cuda(slices, cfg, stream);  // returns when both are updated
//
//   FusedSgdCudaBatch batch(slices, cfg);  // table built and uploaded once
//   batch.launch(stream);                  // enqueues one update; does not wait
#pragma once

#include <memory>
#include <span>

#include "kernels/fused_sgd.h"

namespace psrt::kernels {

// Applies every slice's update on the GPU with ONE kernel launch (plus one small host-to-device
// copy of the slice table), as one step: with OptimizerConfig::skip_nonfinite or max_grad_norm, the
// norm is over all the slices and two small pre-pass kernels run first (fused_sgd.h's spec,
// fused_sgd_device.cuh's layout). Results are bit-identical to fused_sgd_cpu_step for the same
// inputs whenever no NaN is involved (a GPU produces the canonical NaN where x86 keeps a
// payload) and the step is not clipped: the skip decision and every unclipped step match the
// CPU exactly. A clipped step's norm is an fp64 sum in another (fixed) order than the CPU's, so
// grad_norm may differ in the last bits, clip_coef by an fp32 ulp, and the weights by the
// rounding that follows; compare those with a tolerance. The norm is deterministic: the same
// inputs give the same bits on every run and for every grid size.
//
// Memory: weights, momentum and every gradient of every slice must be CUDA device (or managed)
// memory on one device, the one that holds the weights of the first non-empty slice (only those
// are checked); the kernel runs there (the calling thread's current device is switched for the
// call and restored). `grads` itself, the array of
// gradient pointers, is host memory like the SliceUpdate structs; both may be reused as soon as
// the call returns. Slices must not overlap each other, and gradients must not alias weights or
// momentum. Pointers that are 16-byte aligned (weights, momentum and all gradients of a slice)
// get 128-bit loads and stores; any other slice is updated one element at a time.
//
// stream: a cudaStream_t of that device, or null for its legacy default stream. The work is
// ordered after what is already queued on the stream.
//
// Blocking: synchronises `stream` before returning, so the update is complete (and visible to
// any stream) on return. Thread-safe: concurrent calls use separate staging buffers.
//
// Returns what the step did (StepResult; grad_norm only when a pre-pass ran).
//
// Throws psrt::Error: kInvalidArgument for an unusable SliceUpdate (null pointers, num_grads < 1,
// an unknown dtype; checked for all slices before any CUDA call, nothing is launched), a
// max_grad_norm that is negative or not finite, or weights not in CUDA memory; kUnsupported when
// no usable device is present; kSystem for other CUDA failures (the message names the failing
// CUDA call). An empty `slices`, or slices that are all empty, return without touching the GPU
// (a norm of 0, as the CPU computes for no elements).
StepResult fused_sgd_cuda(std::span<const SliceUpdate> slices, const OptimizerConfig& cfg,
                          void* stream);

namespace detail {
struct PreparedLaunch;
struct PreparedLaunchDeleter {
  void operator()(PreparedLaunch* p) const noexcept;
};
}  // namespace detail

// The update of fused_sgd_cuda, prepared once and launched any number of times: the constructor
// validates the slices, builds their table and copies it to the device; launch() then only
// enqueues the kernel, with no host-device copy and no wait. For callers whose buffers stay put
// from update to update (a benchmark timing the kernel alone with CUDA events; fixed server
// slots). Every launch applies the same SliceUpdates (first_step included) with the same
// OptimizerConfig (without the guard and clipping, which need fused_sgd_cuda's pre-pass: a config
// asking for them is refused with kInvalidArgument), reading the buffers' contents as they are when
// the kernel runs; results are those of fused_sgd_cuda on the same inputs.
class FusedSgdCudaBatch {
 public:
  // Same memory rules and errors as fused_sgd_cuda. Blocking (one small synchronous copy). The
  // pointers are captured: weights, momentum and gradients must stay allocated until the last
  // launch has completed; the SliceUpdate structs and their `grads` arrays may be reused at once.
  FusedSgdCudaBatch(std::span<const SliceUpdate> slices, const OptimizerConfig& cfg);

  // Enqueues one update on `stream` (a cudaStream_t of device(), or null for its legacy default
  // stream) and returns without waiting; the caller orders and waits with the stream or events.
  // Does nothing for an empty batch. Callable from several threads at once, but launches on
  // different streams update the same buffers unordered: the caller orders them. Throws
  // psrt::Error when the launch fails (codes as for fused_sgd_cuda).
  void launch(void* stream) const;

  // The device that holds the buffers and runs the kernel; -1 for an empty batch.
  int device() const noexcept;
  bool empty() const noexcept { return prepared_ == nullptr; }

  // Movable, not copyable. Destruction frees the device table; cudaFree first waits for the
  // device's queued work, so pending launches finish before it goes.

 private:
  std::unique_ptr<detail::PreparedLaunch, detail::PreparedLaunchDeleter> prepared_;
};

}  // namespace psrt::kernels
