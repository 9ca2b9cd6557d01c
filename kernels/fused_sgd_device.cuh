// Device code of fused_sgd_cuda: the spec of kernels/fused_sgd.h per element, with the same
// IEEE operations in the same order as fused_sgd_cpu. Every multiply and add is an explicit
// round-to-nearest intrinsic (__fmul_rn, __fadd_rn, __fsub_rn), which nvcc never contracts into
// an FMA, and the target is also compiled with -fmad=false as a second guard.
//
// Work layout: the launch's slices are numbered into one space of work items. An item of a slice
// whose pointers are all 16-byte aligned covers kVectorWidth elements (4 fp32 values, or 8
// fp16/bf16 values: one 128-bit gradient load), the last item of such a slice also covers its
// tail one element at a time; an item of any other slice is one element. A persistent grid walks
// the item space with a grid-wide stride, so one launch serves any mix of slice sizes.
//
// The guard/clipping pre-pass (fused_sgd.h), when the config asks for it, is two more kernels
// before the update, arranged so that the norm does not depend on the grid size: every slice is
// cut into chunks of kNormChunk elements, numbered across the launch; norm_kernel reduces each
// chunk with one block (each thread sums its kNormElementsPerThread elements in order, then a
// fixed shared-memory tree) into partials[chunk]; norm_finalize_kernel, one block, reduces the
// partials the same way and writes the skip flag and clip factor to a StepControl in device
// memory, which the update kernel reads first (a skipped step returns at once). All fp64
// arithmetic is __dadd_rn/__dmul_rn, so nothing is contracted.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace psrt::kernels::device {

// Same values as psrt::kernels::DType.
inline constexpr int kF32 = 0;
inline constexpr int kF16 = 1;
inline constexpr int kBF16 = 2;

// Elements per 128-bit gradient load.
template <int T>
inline constexpr int kVectorWidth = T == kF32 ? 4 : 8;

// One slice as the kernel sees it; the host launcher builds a table of these in device memory.
struct SliceDesc {
  float* weights;
  float* momentum;           // unused (may be null) when the config has no momentum
  const void* const* grads;  // device array of num_grads device pointers
  unsigned long long count;
  unsigned long long item_begin;  // [item_begin, item_end): this slice's part of the item space
  unsigned long long item_end;
  float grad_scale;
  int num_grads;
  int dtype;
  int vectorised;  // 1: items of kVectorWidth elements; 0: items of one element
  int first_step;
  unsigned long long chunk_begin;  // [chunk_begin, chunk_end): this slice's pre-pass chunks
  unsigned long long chunk_end;
  // Adam/AdamW (kernels/fused_adam.h): `momentum` is exp_avg, this is exp_avg_sq, and the
  // constants of the slice's step, computed on the host.
  float* exp_avg_sq;
  float neg_step_size;
  float bc2_sqrt;
};

// The pre-pass's verdict, written by norm_finalize_kernel, read by fused_sgd_kernel and copied
// back to the host.
struct StepControl {
  double sum_of_squares;
  double norm;
  float clip_coef;  // the factor applied when clip != 0
  int skip;         // 1: skip_nonfinite and a non-finite norm; the update writes nothing
  int clip;         // 1: max_grad_norm > 0 and clip_coef < 1
};

// Loop invariants of the launch, passed by value as the kernel's parameter.
struct LaunchParams {
  const SliceDesc* slices;
  int num_slices;
  unsigned long long total_items;
  float lr;
  float momentum;
  float weight_decay;
  float one_minus_dampening;  // 1 - dampening, rounded to fp32 once on the host
  int has_weight_decay;
  int has_momentum;
  int nesterov;
  // The pre-pass's verdict, or null when the config asks for none. The kernel copies its clip
  // factor into clip_coef/has_clip below before updating anything.
  const StepControl* control;
  float clip_coef;
  int has_clip;
  // Adam/AdamW (adam != 0): kernels/fused_adam.h's per-call constants.
  int adam;
  int l2;         // Adam with weight decay: g = g + weight_decay * w
  int decoupled;  // AdamW with weight decay: w = w * decay
  float beta1, beta2, eps, one_minus_beta1, one_minus_beta2, decay;
};

// kernels/fused_adam.h's steps after the sum, for one element held in registers.
__device__ __forceinline__ void adam_element(float g, float& w, float& m, float& v,
                                             const LaunchParams& p, const SliceDesc& s) {
  g = __fmul_rn(g, s.grad_scale);
  if (p.has_clip) g = __fmul_rn(g, p.clip_coef);
  if (p.l2) g = __fadd_rn(g, __fmul_rn(p.weight_decay, w));
  if (p.decoupled) w = __fmul_rn(w, p.decay);
  m = __fadd_rn(__fmul_rn(p.beta1, m), __fmul_rn(p.one_minus_beta1, g));
  v = __fadd_rn(__fmul_rn(p.beta2, v), __fmul_rn(__fmul_rn(p.one_minus_beta2, g), g));
  const float d = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), s.bc2_sqrt), p.eps);
  w = __fadd_rn(w, __fdiv_rn(__fmul_rn(s.neg_step_size, m), d));
}

// The spec's steps after the sum, for one element held in registers.
__device__ __forceinline__ void update_element(float g, float& w, float& m, const LaunchParams& p,
                                               float grad_scale, bool first_step) {
  g = __fmul_rn(g, grad_scale);
  if (p.has_clip) g = __fmul_rn(g, p.clip_coef);
  if (p.has_weight_decay) g = __fadd_rn(g, __fmul_rn(p.weight_decay, w));
  if (p.has_momentum) {
    const float buf =
        first_step ? g : __fadd_rn(__fmul_rn(p.momentum, m), __fmul_rn(p.one_minus_dampening, g));
    m = buf;
    g = p.nesterov ? __fadd_rn(g, __fmul_rn(p.momentum, buf)) : buf;
  }
  w = __fsub_rn(w, __fmul_rn(p.lr, g));
}

// Exact widening of one 16-bit gradient value.
template <int T>
__device__ __forceinline__ float widen16(unsigned short bits) {
  if constexpr (T == kF16) {
    return __half2float(__ushort_as_half(bits));
  } else {
    return __uint_as_float(static_cast<unsigned>(bits) << 16);
  }
}

// Gradient element i; gradients are read once, so the loads carry the streaming hint.
template <int T>
__device__ __forceinline__ float load_grad(const void* grad, unsigned long long i) {
  if constexpr (T == kF32) {
    return __ldcs(static_cast<const float*>(grad) + i);
  } else {
    return widen16<T>(__ldcs(static_cast<const unsigned short*>(grad) + i));
  }
}

// The kVectorWidth gradient values of 128-bit word k.
template <int T>
__device__ __forceinline__ void load_grad_vector(const void* grad, unsigned long long k,
                                                 float (&out)[kVectorWidth<T>]) {
  if constexpr (T == kF32) {
    const float4 v = __ldcs(static_cast<const float4*>(grad) + k);
    out[0] = v.x;
    out[1] = v.y;
    out[2] = v.z;
    out[3] = v.w;
  } else {
    const uint4 v = __ldcs(static_cast<const uint4*>(grad) + k);
    const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // little-endian: the lower half is the earlier element
      out[2 * i] = widen16<T>(static_cast<unsigned short>(words[i] & 0xffffu));
      out[2 * i + 1] = widen16<T>(static_cast<unsigned short>(words[i] >> 16));
    }
  }
}

// The number of gradients: the compile-time N when the kernel has a specialisation for it
// (1..8), else the slice's runtime count (N == 0).
template <int N>
__device__ __forceinline__ int grad_count(const SliceDesc& s) {
  return N > 0 ? N : s.num_grads;
}

// Elements [begin, end) of a slice, one at a time, summing gradients in index order.
template <int T, int N>
__device__ __forceinline__ void update_elements_scalar(const SliceDesc& s, const LaunchParams& p,
                                                       unsigned long long begin,
                                                       unsigned long long end) {
  for (unsigned long long i = begin; i < end; ++i) {
    float g = load_grad<T>(s.grads[0], i);
    if constexpr (N > 0) {
#pragma unroll
      for (int j = 1; j < N; ++j)
        g = __fadd_rn(g, load_grad<T>(s.grads[j], i));
    } else {
      for (int j = 1; j < s.num_grads; ++j)
        g = __fadd_rn(g, load_grad<T>(s.grads[j], i));
    }
    float w = s.weights[i];
    if (p.adam) {
      float m = s.momentum[i], v = s.exp_avg_sq[i];
      adam_element(g, w, m, v, p, s);
      s.weights[i] = w;
      s.momentum[i] = m;
      s.exp_avg_sq[i] = v;
      continue;
    }
    float m = p.has_momentum && !s.first_step ? s.momentum[i] : 0.f;
    update_element(g, w, m, p, s.grad_scale, s.first_step != 0);
    s.weights[i] = w;
    if (p.has_momentum) s.momentum[i] = m;
  }
}

// Work item k of a vectorised slice: 128-bit word k of every gradient and the matching
// kVectorWidth weights and momentum values (one or two float4s each).
template <int T, int N>
__device__ __forceinline__ void update_vector(const SliceDesc& s, const LaunchParams& p,
                                              unsigned long long k) {
  constexpr int V = kVectorWidth<T>;
  constexpr int kFloat4s = V / 4;
  float g[V];
  load_grad_vector<T>(s.grads[0], k, g);
  const int n = grad_count<N>(s);
#pragma unroll(N > 0 ? N : 1)
  for (int j = 1; j < n; ++j) {
    float x[V];
    load_grad_vector<T>(s.grads[j], k, x);
#pragma unroll
    for (int l = 0; l < V; ++l)
      g[l] = __fadd_rn(g[l], x[l]);
  }
  float4* w4 = reinterpret_cast<float4*>(s.weights) + k * kFloat4s;
  float4* m4 = reinterpret_cast<float4*>(s.momentum) + k * kFloat4s;
  if (p.adam) {
    float4* v4 = reinterpret_cast<float4*>(s.exp_avg_sq) + k * kFloat4s;
#pragma unroll
    for (int q = 0; q < kFloat4s; ++q) {
      float4 w = w4[q], m = m4[q], v = v4[q];
      adam_element(g[4 * q + 0], w.x, m.x, v.x, p, s);
      adam_element(g[4 * q + 1], w.y, m.y, v.y, p, s);
      adam_element(g[4 * q + 2], w.z, m.z, v.z, p, s);
      adam_element(g[4 * q + 3], w.w, m.w, v.w, p, s);
      w4[q] = w;
      m4[q] = m;
      v4[q] = v;
    }
    return;
  }
  const bool read_momentum = p.has_momentum && !s.first_step;
#pragma unroll
  for (int q = 0; q < kFloat4s; ++q) {
    float4 w = w4[q];
    float4 m = read_momentum ? m4[q] : make_float4(0.f, 0.f, 0.f, 0.f);
    const bool first = s.first_step != 0;
    update_element(g[4 * q + 0], w.x, m.x, p, s.grad_scale, first);
    update_element(g[4 * q + 1], w.y, m.y, p, s.grad_scale, first);
    update_element(g[4 * q + 2], w.z, m.z, p, s.grad_scale, first);
    update_element(g[4 * q + 3], w.w, m.w, p, s.grad_scale, first);
    w4[q] = w;
    if (p.has_momentum) m4[q] = m;
  }
}

// Work item `item` (relative to the slice) of slice s.
template <int T, int N>
__device__ __forceinline__ void update_item(const SliceDesc& s, const LaunchParams& p,
                                            unsigned long long item) {
  if (!s.vectorised) {
    update_elements_scalar<T, N>(s, p, item, item + 1);
    return;
  }
  constexpr int V = kVectorWidth<T>;
  const unsigned long long begin = item * V;
  if (begin + V <= s.count) {
    update_vector<T, N>(s, p, item);
  } else {
    update_elements_scalar<T, N>(s, p, begin, s.count);  // the slice's tail
  }
}

template <int T>
__device__ __forceinline__ void dispatch_grad_count(const SliceDesc& s, const LaunchParams& p,
                                                    unsigned long long item) {
  switch (s.num_grads) {
    case 1:
      update_item<T, 1>(s, p, item);
      break;
    case 2:
      update_item<T, 2>(s, p, item);
      break;
    case 3:
      update_item<T, 3>(s, p, item);
      break;
    case 4:
      update_item<T, 4>(s, p, item);
      break;
    case 5:
      update_item<T, 5>(s, p, item);
      break;
    case 6:
      update_item<T, 6>(s, p, item);
      break;
    case 7:
      update_item<T, 7>(s, p, item);
      break;
    case 8:
      update_item<T, 8>(s, p, item);
      break;
    default:
      update_item<T, 0>(s, p, item);
      break;
  }
}

// The first slice at or after `lo` whose items extend past `item` (binary search: the item space
// is sorted by slice, and empty slices have item_begin == item_end).
__device__ __forceinline__ int find_slice(const LaunchParams& p, int lo, unsigned long long item) {
  int hi = p.num_slices - 1;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (p.slices[mid].item_end > item) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

inline constexpr int kBlockSize = 256;

// The persistent kernel: each thread takes items thread, thread + stride, ...; its slice index
// only moves forward, so it looks a slice up only when it crosses into a new one.
__global__ void __launch_bounds__(kBlockSize) fused_sgd_kernel(LaunchParams params) {
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  unsigned long long item = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= params.total_items) return;
  LaunchParams p = params;
  if (p.control != nullptr) {
    if (p.control->skip) return;  // a non-finite gradient: nothing is written
    p.has_clip = p.control->clip;
    p.clip_coef = p.control->clip_coef;
  }
  int index = find_slice(p, 0, item);
  SliceDesc s = p.slices[index];
  for (; item < p.total_items; item += stride) {
    if (item >= s.item_end) {
      index = find_slice(p, index + 1, item);
      s = p.slices[index];
    }
    const unsigned long long local = item - s.item_begin;
    switch (s.dtype) {
      case kF32:
        dispatch_grad_count<kF32>(s, p, local);
        break;
      case kF16:
        dispatch_grad_count<kF16>(s, p, local);
        break;
      default:
        dispatch_grad_count<kBF16>(s, p, local);
        break;
    }
  }
}

// --- the guard/clipping pre-pass ---

inline constexpr int kNormBlockSize = 256;
inline constexpr int kNormElementsPerThread = 16;
inline constexpr unsigned long long kNormChunk =
    static_cast<unsigned long long>(kNormBlockSize) * kNormElementsPerThread;

struct NormParams {
  const SliceDesc* slices;
  int num_slices;
  unsigned long long total_chunks;
  double* partials;  // total_chunks values, one per chunk
};

// Gradient element i through the read-only cache: the update kernel reads the gradients again
// right after, so these loads do not carry the streaming hint.
template <int T>
__device__ __forceinline__ float load_grad_cached(const void* grad, unsigned long long i) {
  if constexpr (T == kF32) {
    return __ldg(static_cast<const float*>(grad) + i);
  } else {
    return widen16<T>(__ldg(static_cast<const unsigned short*>(grad) + i));
  }
}

// This thread's share of elements [begin, end) of a slice: begin + threadIdx.x + k *
// kNormBlockSize for k = 0, 1, ...; returns the fp64 sum of their squared aggregated gradients
// (formed exactly as the update forms them), added in k order.
template <int T>
__device__ __forceinline__ double thread_sum_of_squares(const SliceDesc& s,
                                                        unsigned long long begin,
                                                        unsigned long long end) {
  float g[kNormElementsPerThread];
#pragma unroll
  for (int k = 0; k < kNormElementsPerThread; ++k) {
    const unsigned long long i =
        begin + threadIdx.x + static_cast<unsigned long long>(k) * kNormBlockSize;
    g[k] = i < end ? load_grad_cached<T>(s.grads[0], i) : 0.f;
  }
  for (int j = 1; j < s.num_grads; ++j) {
    const void* src = s.grads[j];
#pragma unroll
    for (int k = 0; k < kNormElementsPerThread; ++k) {
      const unsigned long long i =
          begin + threadIdx.x + static_cast<unsigned long long>(k) * kNormBlockSize;
      if (i < end) g[k] = __fadd_rn(g[k], load_grad_cached<T>(src, i));
    }
  }
  double acc = 0.0;
#pragma unroll
  for (int k = 0; k < kNormElementsPerThread; ++k) {
    const unsigned long long i =
        begin + threadIdx.x + static_cast<unsigned long long>(k) * kNormBlockSize;
    if (i < end) {
      const double d = __fmul_rn(g[k], s.grad_scale);
      acc = __dadd_rn(acc, __dmul_rn(d, d));
    }
  }
  return acc;
}

// Sums shared[0, kNormBlockSize) into shared[0] in a fixed pairing; every thread of the block
// must call it.
__device__ __forceinline__ void block_tree_sum(double* shared) {
  __syncthreads();
#pragma unroll
  for (int stride = kNormBlockSize / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride)
      shared[threadIdx.x] = __dadd_rn(shared[threadIdx.x], shared[threadIdx.x + stride]);
    __syncthreads();
  }
}

// The slice whose chunks include `chunk` (binary search, as find_slice).
__device__ __forceinline__ int find_chunk_slice(const NormParams& p, unsigned long long chunk) {
  int lo = 0;
  int hi = p.num_slices - 1;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (p.slices[mid].chunk_end > chunk) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// One block per chunk (blocks stride over the chunks): partials[chunk] = the chunk's sum of
// squares. Which block reduces a chunk does not change the result.
__global__ void __launch_bounds__(kNormBlockSize) norm_kernel(NormParams p) {
  __shared__ double shared[kNormBlockSize];
  for (unsigned long long chunk = blockIdx.x; chunk < p.total_chunks; chunk += gridDim.x) {
    const SliceDesc& s = p.slices[find_chunk_slice(p, chunk)];
    const unsigned long long begin = (chunk - s.chunk_begin) * kNormChunk;
    const unsigned long long end = begin + kNormChunk < s.count ? begin + kNormChunk : s.count;
    double acc;
    switch (s.dtype) {
      case kF32:
        acc = thread_sum_of_squares<kF32>(s, begin, end);
        break;
      case kF16:
        acc = thread_sum_of_squares<kF16>(s, begin, end);
        break;
      default:
        acc = thread_sum_of_squares<kBF16>(s, begin, end);
        break;
    }
    shared[threadIdx.x] = acc;
    block_tree_sum(shared);
    if (threadIdx.x == 0) p.partials[chunk] = shared[0];
    __syncthreads();  // shared[0] is read before the next chunk overwrites it
  }
}

// One block: sums the partials (thread t takes t, t + kNormBlockSize, ... in order, then the
// tree) and decides the step as fused_sgd_cpu_step does.
__global__ void __launch_bounds__(kNormBlockSize)
    norm_finalize_kernel(const double* partials, unsigned long long num_partials,
                         StepControl* control, double max_grad_norm, int skip_nonfinite) {
  __shared__ double shared[kNormBlockSize];
  double acc = 0.0;
  for (unsigned long long i = threadIdx.x; i < num_partials; i += kNormBlockSize)
    acc = __dadd_rn(acc, partials[i]);
  shared[threadIdx.x] = acc;
  block_tree_sum(shared);
  if (threadIdx.x != 0) return;
  StepControl c;
  c.sum_of_squares = shared[0];
  c.norm = __dsqrt_rn(c.sum_of_squares);
  c.skip = skip_nonfinite && !isfinite(c.norm) ? 1 : 0;
  c.clip = 0;
  c.clip_coef = 1.f;
  if (!c.skip && max_grad_norm > 0.0) {
    const float coef = __double2float_rn(__ddiv_rn(max_grad_norm, __dadd_rn(c.norm, 1e-6)));
    if (coef < 1.f) {
      c.clip = 1;
      c.clip_coef = coef;
    }
  }
  *control = c;
}

}  // namespace psrt::kernels::device
