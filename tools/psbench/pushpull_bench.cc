#include "pushpull_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "psrt/psrt.h"
#include "runtime/env_contract.h"

namespace psrt::bench {

namespace {

// Rank 0's JSON line for one size: `rounds_us` (sorted here), the goodput over `wall` seconds.
void report(Worker& w, const PushPullConfig& config, std::size_t n, std::size_t keys,
            std::vector<double>& rounds_us, double wall) {
  const int servers = w.num_servers();
  std::sort(rounds_us.begin(), rounds_us.end());
  auto pct = [&](double p) {
    return rounds_us[std::min(rounds_us.size() - 1,
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
                      {"round_us_mean", wall * 1e6 / config.iters},
                      {"round_us_p50", pct(0.5)},
                      {"round_us_p99", pct(0.99)}};
  std::cout << j.dump() << std::endl;
}

}  // namespace

int run_pushpull_bench(const PushPullConfig& config) {
  using clock = std::chrono::steady_clock;
  Worker w = Worker::from_env();
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
    // The keys' versions: a worker runs rounds until every key reached the round it aims at,
    // counted on the servers. Without backup workers that is exactly one round per push_pull;
    // with them (docs/elastic.md) a straggler's dropped rounds do not hold the others back,
    // and no worker pushes for a round that the others will not run.
    std::vector<std::uint64_t> version(keys, 0);
    // Every push_pull of the round is issued before the first wait; keys that reached `target`
    // sit it out. False when every key had.
    const double compute_ms =
        config.compute_ms * (w.rank() == config.slow_rank ? config.slow_factor : 1.0);
    auto round = [&](std::uint64_t target) {
      if (compute_ms > 0 && *std::min_element(version.begin(), version.end()) < target)
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(compute_ms));
      bool any = false;
      for (std::size_t j = 0; j < keys; ++j) {
        handles[j] = Handle();
        if (version[j] >= target) continue;
        handles[j] = w.push_pull(first_key + j, grads[j], outs[j]);
        any = true;
      }
      for (std::size_t j = 0; j < keys; ++j) {
        handles[j].wait();
        if (version[j] < target) version[j] = handles[j].version();
      }
      return any;
    };
    for (std::size_t j = 0; j < keys; ++j) {
      Handle h = w.pull(first_key + j, outs[j]);
      h.wait();
      version[j] = h.version();
    }
    w.barrier();
    const std::uint64_t base = *std::min_element(version.begin(), version.end());
    while (round(base + static_cast<std::uint64_t>(config.warmup))) {
    }
    w.barrier();
    std::vector<double> rounds_us;
    rounds_us.reserve(config.iters);
    const auto start = clock::now();
    const std::uint64_t target = base + static_cast<std::uint64_t>(config.warmup + config.iters);
    for (;;) {
      const auto t = clock::now();
      if (!round(target)) break;
      rounds_us.push_back(std::chrono::duration<double, std::micro>(clock::now() - t).count());
    }
    w.barrier();
    const double wall = std::chrono::duration<double>(clock::now() - start).count();
    if (w.rank() == 0) report(w, config, n, keys, rounds_us, wall);
  }
  w.shutdown();
  return 0;
}

}  // namespace psrt::bench
