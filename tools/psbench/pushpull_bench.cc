#include "pushpull_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>

#include "psrt/psrt.h"
#include "runtime/env_contract.h"

namespace psrt::bench {

int run_pushpull_bench(const PushPullConfig& config) {
  using clock = std::chrono::steady_clock;
  Worker w = Worker::from_env();
  const int servers = w.num_servers();
  for (std::size_t k = 0; k < config.sizes.size(); ++k) {
    const std::size_t size = config.sizes[k];
    const std::size_t n = std::max<std::size_t>(1, size / sizeof(float));
    // Zero gradients keep the weights finite however many rounds run; the work is the same.
    // One gradient and one output buffer per key: the operations of a round are all in flight
    // at once, so none may share an output.
    const auto keys = static_cast<std::size_t>(config.keys);
    std::vector<std::vector<float>> grads(keys, std::vector<float>(n, 0.f));
    std::vector<std::vector<float>> outs(keys, std::vector<float>(n, 0.f));
    const std::uint64_t first_key = k * keys;
    for (std::size_t j = 0; j < keys; ++j)
      w.init(first_key + j, outs[j]);
    std::vector<Handle> handles(keys);
    // Every push_pull of the round is issued before the first wait.
    auto round = [&] {
      for (std::size_t j = 0; j < keys; ++j)
        handles[j] = w.push_pull(first_key + j, grads[j], outs[j]);
      for (auto& h : handles)
        h.wait();
    };
    w.barrier();
    for (int i = 0; i < config.warmup; ++i)
      round();
    w.barrier();
    std::vector<double> rounds_us;
    rounds_us.reserve(config.iters);
    const auto start = clock::now();
    for (int i = 0; i < config.iters; ++i) {
      const auto t = clock::now();
      round();
      rounds_us.push_back(std::chrono::duration<double, std::micro>(clock::now() - t).count());
    }
    w.barrier();
    const double wall = std::chrono::duration<double>(clock::now() - start).count();
    if (w.rank() != 0) continue;
    std::sort(rounds_us.begin(), rounds_us.end());
    auto pct = [&](double p) {
      return rounds_us[std::min(
          rounds_us.size() - 1,
          static_cast<std::size_t>(p * static_cast<double>(rounds_us.size())))];
    };
    // Goodput: gradient bytes pushed plus weight bytes pulled, of every key, by every worker,
    // per second.
    const double bytes = 2.0 * static_cast<double>(n * sizeof(float)) * static_cast<double>(keys) *
                         config.iters * w.num_workers();
    nlohmann::json j = {{"bench", "pushpull"},
                        {"transport", runtime::env_string("PSRT_TRANSPORT")},
                        {"workers", w.num_workers()},
                        {"servers", servers},
                        {"size", n * sizeof(float)},
                        {"keys", keys},
                        {"bytes", bytes},
                        {"iters", config.iters},
                        {"goodput_MBps", bytes / wall / (1 << 20)},
                        {"round_us_p50", pct(0.5)},
                        {"round_us_p99", pct(0.99)}};
    std::cout << j.dump() << std::endl;
  }
  w.shutdown();
  return 0;
}

}  // namespace psrt::bench
