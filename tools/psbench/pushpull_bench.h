// psbench pushpull: push_pull rounds through the parameter server, run as every worker of a
// psrun job; rank 0 prints one JSON object per size.
#pragma once

#include <cstddef>
#include <vector>

namespace psrt::bench {

struct PushPullConfig {
  std::vector<std::size_t> sizes{std::size_t{4} << 20};  // bytes of one tensor (fp32)
  int iters = 50;
  int warmup = 5;
};

int run_pushpull_bench(const PushPullConfig& config);

}  // namespace psrt::bench
