#include "kernel_bench.h"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "device/cuda_device.h"
#include "kernels/fused_adam.h"
#include "kernels/fused_sgd.h"
#include "psrt/config.h"
#include "psrt/error.h"

#if PSRT_HAVE_CUDA
#include "kernel_bench_cuda.h"
#endif

namespace psrt::bench {
namespace {

using Clock = std::chrono::steady_clock;

kernels::DType parse_dtype(const std::string& s) {
  if (s == "fp32") return kernels::DType::kF32;
  if (s == "fp16") return kernels::DType::kF16;
  if (s == "bf16") return kernels::DType::kBF16;
  throw Error(ErrorCode::kInvalidArgument, fmt::format("--dtype {}: use fp32, fp16 or bf16", s));
}

// Memory that is written once before timing so that no page fault lands in a timed call.
struct Buffer {
  explicit Buffer(std::size_t bytes) : data(std::make_unique_for_overwrite<std::byte[]>(bytes)) {
    std::memset(data.get(), 0, bytes);
  }
  std::unique_ptr<std::byte[]> data;
};

// One input set: N gradients, weights and momentum. Several sets are rotated so that a set
// never starts a call in cache from the previous one.
struct InputSet {
  std::vector<Buffer> grads;
  std::vector<const void*> grad_ptrs;
  Buffer weights, momentum, exp_avg_sq;  // exp_avg_sq: Adam only (else empty)
  InputSet(int n, std::size_t params, std::size_t gsize, bool adam)
      : weights(params * sizeof(float)),
        momentum(params * sizeof(float)),
        exp_avg_sq(adam ? params * sizeof(float) : 0) {
    std::mt19937 rng(42);
    for (int j = 0; j < n; ++j) {
      grads.emplace_back(params * gsize);
      // Small finite values in every dtype: 0x3c00 is fp16 1.0, 0x3f80 bf16 1.0.
      auto* b = grads.back().data.get();
      for (std::size_t i = 0; i < params * gsize; i += 4096)
        b[i] = std::byte(rng() & 0x1f);
      grad_ptrs.push_back(b);
    }
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs fn(part, parts) on `threads` threads at once (part 0 on the caller) and returns the wall
// time of the slowest.
template <typename Fn>
double timed_parallel(int threads, Fn&& fn) {
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int p = 1; p < threads; ++p)
    pool.emplace_back([&fn, p, threads] { fn(p, threads); });
  fn(0, threads);
  for (auto& t : pool)
    t.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::pair<std::size_t, std::size_t> part_of(std::size_t n, int part, int parts) {
  const std::size_t begin = n * static_cast<std::size_t>(part) / static_cast<std::size_t>(parts);
  const std::size_t end = n * static_cast<std::size_t>(part + 1) / static_cast<std::size_t>(parts);
  return {begin, end - begin};
}

// The benchmark's optimizer: SGD with momentum and weight decay, or Adam/AdamW (--optimizer).
OptimizerConfig bench_optimizer(const KernelBenchConfig& c) {
  OptimizerConfig cfg{.lr = 0.01f,
                      .momentum = 0.9f,
                      .dampening = 0.f,
                      .weight_decay = 1e-4f,
                      .nesterov = false,
                      .max_grad_norm = c.max_grad_norm,
                      .skip_nonfinite = c.skip_nonfinite};
  if (!kernels::parse_algorithm(c.optimizer, cfg.algorithm))
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--optimizer {}: use sgd, adam or adamw", c.optimizer));
  const bool adam = kernels::is_adam(cfg);
  if (adam) {
    cfg.momentum = 0.f;
    cfg.weight_decay = 1e-2f;
  }
  return cfg;
}

// The ceiling: memcpy of as many bytes as the update reads (`bytes` / 2, at least 64 MiB), same
// threads, in GB/s; a copy moves twice its size (read + write).
double copy_ceiling_gbps(const KernelBenchConfig& c, double bytes) {
  const std::size_t copy_bytes =
      std::max<std::size_t>(static_cast<std::size_t>(bytes / 2), std::size_t{64} << 20);
  Buffer src(copy_bytes), dst(copy_bytes);
  std::vector<double> copies;
  for (int i = 0; i < c.warmup + std::max(10, c.iters / 5); ++i) {
    const double t = timed_parallel(c.threads, [&](int part, int parts) {
      auto [begin, count] = part_of(copy_bytes, part, parts);
      std::memcpy(dst.data.get() + begin, src.data.get() + begin, count);
    });
    if (i >= c.warmup) copies.push_back(t);
  }
  return 2.0 * static_cast<double>(copy_bytes) / median(copies) / 1e9;
}

int run_cpu(const KernelBenchConfig& c, std::size_t params, kernels::DType dtype) {
  const OptimizerConfig cfg = bench_optimizer(c);
  const bool adam = kernels::is_adam(cfg);
  // Per element: weights and one momentum (SGD) or two moments (Adam), each read and written.
  const std::size_t state_floats = adam ? 3 : 2;
  const std::size_t gsize = kernels::dtype_size(dtype);
  const std::size_t set_bytes = params * (c.workers * gsize + state_floats * sizeof(float));
  // Rotate sets until 256 MiB separate two uses of one set (well past any CPU cache).
  const int sets = static_cast<int>(std::clamp<std::size_t>(
      (std::size_t{256} << 20) / std::max<std::size_t>(set_bytes, 1) + 1, 1, 8));
  std::vector<std::unique_ptr<InputSet>> inputs;
  inputs.reserve(static_cast<std::size_t>(sets));
  for (int s = 0; s < sets; ++s)
    inputs.push_back(std::make_unique<InputSet>(c.workers, params, gsize, adam));
  const kernels::CpuIsa isa = kernels::best_cpu_isa();

  std::uint64_t step = 0;
  auto update = [&](InputSet& in) {
    ++step;
    return timed_parallel(c.threads, [&](int part, int parts) {
      auto [begin, count] = part_of(params, part, parts);
      std::vector<const void*> g;
      for (const void* p : in.grad_ptrs)
        g.push_back(static_cast<const std::byte*>(p) + begin * gsize);
      kernels::SliceUpdate u;
      u.weights = reinterpret_cast<float*>(in.weights.data.get()) + begin;
      u.momentum = reinterpret_cast<float*>(in.momentum.data.get()) + begin;
      u.grads = g.data();
      u.num_grads = c.workers;
      u.dtype = dtype;
      u.count = count;
      u.grad_scale = 1.f / static_cast<float>(c.workers);
      if (adam) {
        u.exp_avg_sq = reinterpret_cast<float*>(in.exp_avg_sq.data.get()) + begin;
        u.step = step;
      }
      kernels::fused_sgd_cpu(u, cfg, isa);
    });
  };
  std::vector<double> times;
  for (int i = 0; i < c.warmup + c.iters; ++i) {
    const double t = update(*inputs[static_cast<std::size_t>(i % sets)]);
    if (i >= c.warmup) times.push_back(t);
  }
  const double t_update = median(times);
  const double bytes =
      static_cast<double>(params) * (static_cast<double>(c.workers * gsize) +
                                     2.0 * static_cast<double>(state_floats * sizeof(float)));
  const double copy_gbps = copy_ceiling_gbps(c, bytes);
  const double gbps = bytes / t_update / 1e9;
  nlohmann::json line{{"bench", "kernel"},
                      {"device", "cpu"},
                      {"isa", std::string(kernels::to_string(isa))},
                      {"threads", c.threads},
                      {"workers", c.workers},
                      {"params", params},
                      {"dtype", c.dtype},
                      {"optimizer", c.optimizer},
                      {"iters", c.iters},
                      {"us_p50", t_update * 1e6},
                      {"GBps", gbps},
                      {"copy_GBps", copy_gbps},
                      {"pct_of_copy", 100.0 * gbps / copy_gbps}};
  if (kernels::needs_prepass(cfg)) {
    line["max_grad_norm"] = c.max_grad_norm;
    line["skip_nonfinite"] = c.skip_nonfinite;
  }
  std::cout << line.dump() << std::endl;
  return 0;
}

}  // namespace

int run_kernel_bench(const KernelBenchConfig& c) {
  const kernels::DType dtype = parse_dtype(c.dtype);
  device::DeviceSpec where;
  try {
    where = device::parse_device(c.device);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("--device: {}", e.what()));
  }
  if (where.is_cuda() && c.optimizer != "sgd")
    throw Error(
        ErrorCode::kInvalidArgument,
        "--optimizer " + c.optimizer + " times the cpu update only (the cuda bench times SGD)");
  if (where.is_cuda() && (c.max_grad_norm != 0.f || c.skip_nonfinite))
    throw Error(ErrorCode::kInvalidArgument,
                "--max-grad-norm and --skip-nonfinite time the cpu update only (the cuda bench "
                "times the update kernel alone)");
  if (where.is_cuda()) {
#if PSRT_HAVE_CUDA
    run_cuda_kernel_bench(c, where.index, dtype);
    return 0;
#else
    throw Error(
        ErrorCode::kUnsupported,
        fmt::format("--device {}: this build has no CUDA (configure with PSRT_WITH_CUDA=ON)",
                    c.device));
#endif
  }
  for (std::size_t p : c.params)
    run_cpu(c, p, dtype);
  return 0;
}

}  // namespace psrt::bench
