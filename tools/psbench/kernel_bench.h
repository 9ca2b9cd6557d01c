// psbench kernel: the server's fused aggregate+SGD update against a large memory copy timed in
// the same run (the bandwidth ceiling), one JSON object per parameter count.
//
// Byte counts. GBps counts the bytes an update must move: N gradient reads plus the fp32 weights
// and momentum read and written, P * (N * sizeof(dtype) + 16) per update. copy_GBps counts a
// copy of S bytes as 2 * S (read + write), so both figures count every byte that crosses the
// memory bus once and pct_of_copy = 100 * GBps / copy_GBps compares like with like.
//
// cpu: the update is fused_sgd_cpu split over --threads threads, timed with steady_clock; the
// copy is memcpy of at least as many bytes as the update reads, split the same way.
//
// cuda: one update is ONE launch of FusedSgdCudaBatch (kernels/fused_sgd_cuda.h) over a single
// slice of P elements, whose table was uploaded beforehand, so the CUDA events that bracket it
// time GPU work only; all launches are queued back to back on one stream and synchronised once.
// The copy is cudaMemcpyAsync device-to-device of max(1 GiB, half the update's bytes, 4 x L2)
// bytes, timed the same way and the same number of times. Input sets (N gradients, weights,
// momentum) rotate: at least 2, and enough that the rotation spans 4 x the device's L2 cache (at
// most 256 sets, so tiny P stays cache-resident; the JSON says how many). Gradients hold random
// finite values of their dtype. Extra cuda fields: device_index, device_name, cc, sm_count,
// l2_bytes, cuda_driver, cuda_runtime, sets, working_set_bytes, copy_bytes, copy_us_p50, and
// blocking_us_p50 (host wall time of the public blocking fused_sgd_cuda call on the same inputs:
// table upload + launch + stream synchronisation, what the server waits for).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace psrt::bench {

struct KernelBenchConfig {
  std::string device = "cpu";                   // cpu | cuda | cuda:INDEX
  int workers = 8;                              // gradients aggregated per update (N)
  std::vector<std::size_t> params{25'600'000};  // elements per update (ResNet-50: 25.6 M)
  std::string dtype = "fp32";                   // gradient type: fp32 | fp16 | bf16
  int iters = 100;                              // timed updates (the median is reported)
  int warmup = 5;
  int threads = 1;  // cpu: updates split over this many threads
  // cpu: the optional NaN/Inf guard and gradient clipping (OptimizerConfig), so that their
  // pre-pass is timed too; with threads > 1 each thread's part is a step of its own.
  float max_grad_norm = 0.f;
  bool skip_nonfinite = false;
  // cpu: the update's algorithm, sgd (momentum 0.9, weight decay 1e-4) | adam | adamw (betas
  // 0.9, 0.999, weight decay 1e-2): Adam reads and writes two moments instead of one momentum.
  std::string optimizer = "sgd";
};

// Prints one JSON line per config.params on stdout. Throws psrt::Error before printing anything
// when the device cannot run the benchmark: kInvalidArgument for a --device value
// parse_kernel_device refuses, kUnsupported for --device cuda in a build without
// CUDA or on a machine with no usable CUDA device (the message carries the CUDA runtime's
// reason), kInvalidArgument for a device index the machine does not have.
int run_kernel_bench(const KernelBenchConfig& config);

}  // namespace psrt::bench
