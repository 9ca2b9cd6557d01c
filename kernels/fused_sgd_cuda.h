// The CUDA implementation of the fused aggregate+SGD update: the spec of kernels/fused_sgd.h, run
// on the GPU for any number of slices in one kernel launch. Plain C++ (no CUDA headers), so
// callers compile without nvcc; it exists only in builds with PSRT_HAVE_CUDA (psrt/config.h).
//
//   SliceUpdate slices[2] = {{w0, m0, grads0, 4, DType::kBF16, n0, 0.25f, false},
//                            {w1, m1, grads1, 4, DType::kF32, n1, 0.25f, false}};
//   const StepResult r = fused_sgd_cuda(slices, cfg, stream);  // returns when both are updated
#pragma once

#include <span>

#include "kernels/fused_sgd.h"

namespace psrt::kernels {

// Applies every slice's update on the GPU with ONE kernel launch (plus one small host-to-device
// copy of the slice table), as one step: with SgdConfig::skip_nonfinite or max_grad_norm, the
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
StepResult fused_sgd_cuda(std::span<const SliceUpdate> slices, const SgdConfig& cfg, void* stream);

}  // namespace psrt::kernels
