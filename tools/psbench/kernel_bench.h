// psbench kernel: the server's fused aggregate+SGD update against a large memory copy timed in
// the same run (the bandwidth ceiling), one JSON object per parameter count.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace psrt::bench {

struct KernelBenchConfig {
  std::string device = "cpu";                  // cpu | cuda
  int workers = 8;                             // gradients aggregated per update (N)
  std::vector<std::size_t> params{25'600'000};  // elements per update (ResNet-50: 25.6 M)
  std::string dtype = "fp32";                  // gradient type: fp32 | fp16 | bf16
  int iters = 100;                             // timed updates (the median is reported)
  int warmup = 5;
  int threads = 1;                             // cpu: updates split over this many threads
};

int run_kernel_bench(const KernelBenchConfig& config);

}  // namespace psrt::bench
