// psbench pushpull: push_pull rounds through the parameter server, run as every worker of a
// psrun job; rank 0 prints one JSON object per size. A round is --keys tensors of that size, all
// in flight at once.
#pragma once

#include <cstddef>
#include <vector>

namespace psrt::bench {

struct PushPullConfig {
  std::vector<std::size_t> sizes{std::size_t{4} << 20};  // bytes of one tensor (fp32)
  // Tensors per size, all pushed and pulled each round with every operation in flight before the
  // first wait (a model's gradients); 1 measures one tensor's latency.
  int keys = 1;
  int iters = 50;
  int warmup = 5;
  // A training step's compute before each round's push_pulls (a sleep: it takes no core from
  // the job), and one worker that takes `slow_factor` times as long (a straggler; -1: none).
  double compute_ms = 0;
  int slow_rank = -1;
  double slow_factor = 2;
};

int run_pushpull_bench(const PushPullConfig& config);

}  // namespace psrt::bench
