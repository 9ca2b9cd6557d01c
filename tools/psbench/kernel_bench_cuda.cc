// psbench kernel --device cuda: FusedSgdCudaBatch launches and a device-to-device copy, each
// timed with CUDA events on one stream (see kernel_bench.h for the method and the byte counts).
#include "kernel_bench_cuda.h"

#include <cuda_runtime_api.h>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "device/cuda_check.h"
#include "kernels/fused_sgd.h"
#include "kernels/fused_sgd_cuda.h"
#include "psrt/error.h"

namespace psrt::bench {
namespace {

constexpr std::size_t kMinSets = 2;
constexpr std::size_t kMaxSets = 256;
constexpr std::size_t kAlign = 256;  // every buffer starts 256-byte aligned (128-bit loads)
constexpr std::size_t kMinCopyBytes = std::size_t{1} << 30;

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// "12.8" from the CUDA API's 1000 * major + 10 * minor.
std::string cuda_version(int v) {
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  std::size_t l2_bytes = 0;
  int driver_version = 0;
  int runtime_version = 0;
};

// Makes device `index` current and describes it; throws when there is no such usable device.
// `flag` is the --device value, for messages.
DeviceInfo open_device(int index, const std::string& flag) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("--device {}: no usable CUDA device: cudaGetDeviceCount failed with "
                            "{} ({})",
                            flag, cudaGetErrorName(err), cudaGetErrorString(err)));
  }
  if (count == 0) {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("--device {}: no CUDA device: cudaGetDeviceCount returned 0", flag));
  }
  if (index >= count) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--device {}: this machine has {} CUDA device{} (cuda:0 to "
                            "cuda:{})",
                            flag, count, count == 1 ? "" : "s", count - 1));
  }
  PSRT_CUDA_CHECK(cudaSetDevice(index));
  cudaDeviceProp prop{};
  PSRT_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  DeviceInfo info;
  info.index = index;
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.l2_bytes = static_cast<std::size_t>(prop.l2CacheSize);
  PSRT_CUDA_CHECK(cudaDriverGetVersion(&info.driver_version));
  PSRT_CUDA_CHECK(cudaRuntimeGetVersion(&info.runtime_version));
  return info;
}

// Device memory of the current device, freed on scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) {
    if (bytes > 0) PSRT_CUDA_CHECK(cudaMalloc(&data_, bytes));
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) (void)cudaFree(data_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  std::byte* data() const { return static_cast<std::byte*>(data_); }

 private:
  void* data_ = nullptr;
};

class Stream {
 public:
  Stream() { PSRT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() { (void)cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class Events {
 public:
  explicit Events(std::size_t n) : events_(n, nullptr) {
    for (cudaEvent_t& e : events_)
      PSRT_CUDA_CHECK(cudaEventCreate(&e));
  }
  ~Events() {
    for (cudaEvent_t e : events_) {
      if (e != nullptr) (void)cudaEventDestroy(e);
    }
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;

  cudaEvent_t operator[](std::size_t i) const { return events_[i]; }

 private:
  std::vector<cudaEvent_t> events_;
};

// Queues warmup + iters calls of op(i) back to back on `stream`, each between its own pair of
// events, waits once, and returns the GPU time in seconds of each of the last `iters` calls.
// Queueing everything first keeps the GPU busy, so an event pair brackets its operation and no
// host launch gap.
template <typename Op>
std::vector<double> time_on_stream(cudaStream_t stream, int warmup, int iters, Op&& op) {
  const auto total = static_cast<std::size_t>(warmup + iters);
  Events events(2 * total);
  for (std::size_t i = 0; i < total; ++i) {
    PSRT_CUDA_CHECK(cudaEventRecord(events[2 * i], stream));
    op(i);
    PSRT_CUDA_CHECK(cudaEventRecord(events[2 * i + 1], stream));
  }
  PSRT_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> seconds;
  for (std::size_t i = static_cast<std::size_t>(warmup); i < total; ++i) {
    float ms = 0.f;
    PSRT_CUDA_CHECK(cudaEventElapsedTime(&ms, events[2 * i], events[2 * i + 1]));
    seconds.push_back(static_cast<double>(ms) * 1e-3);
  }
  return seconds;
}

// `count` random finite values of `dtype` with magnitudes in [2^-8, 2), as raw bytes: sign,
// exponent and mantissa drawn directly, so no rounding code is needed for the 16-bit types.
std::vector<std::byte> random_values(kernels::DType dtype, std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::size_t size = kernels::dtype_size(dtype);
  std::vector<std::byte> out(count * size);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t r = rng();
    const std::uint32_t sign = static_cast<std::uint32_t>(r & 1u);
    const std::uint32_t exp_offset = static_cast<std::uint32_t>((r >> 1) % 9);  // 2^-8 .. 2^0
    const auto mantissa = static_cast<std::uint32_t>(r >> 8);
    if (dtype == kernels::DType::kF32) {
      const std::uint32_t bits = sign << 31 | (119 + exp_offset) << 23 | (mantissa & 0x7fffffu);
      std::memcpy(out.data() + i * 4, &bits, 4);
    } else {
      const std::uint16_t bits =
          dtype == kernels::DType::kF16
              ? static_cast<std::uint16_t>(sign << 15 | (7 + exp_offset) << 10 |
                                           (mantissa & 0x3ffu))
              : static_cast<std::uint16_t>(sign << 15 | (119 + exp_offset) << 7 |
                                           (mantissa & 0x7fu));
      std::memcpy(out.data() + i * 2, &bits, 2);
    }
  }
  return out;
}

// One parameter count on the current device: prints its JSON line.
void run_case(const KernelBenchConfig& c, const DeviceInfo& dev, std::size_t params,
              kernels::DType dtype) {
  const std::size_t n = static_cast<std::size_t>(c.workers);
  const std::size_t gsize = kernels::dtype_size(dtype);
  const std::size_t grad_stride = round_up(params * gsize, kAlign);
  const std::size_t state_stride = round_up(params * sizeof(float), kAlign);
  const std::size_t set_bytes = n * grad_stride + 2 * state_stride;
  const double update_bytes =
      static_cast<double>(params) * (static_cast<double>(n * gsize) + 4.0 * sizeof(float));
  const std::size_t copy_bytes = round_up(
      std::max({kMinCopyBytes, static_cast<std::size_t>(update_bytes / 2), 4 * dev.l2_bytes}),
      kAlign);

  std::size_t sets =
      std::clamp<std::size_t>((4 * dev.l2_bytes + set_bytes - 1) / set_bytes, kMinSets, kMaxSets);
  std::size_t free_bytes = 0, total_bytes = 0;
  PSRT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  // Leave a tenth of the free memory (and room for tables and events) alone.
  const std::size_t budget = free_bytes / 10 * 9;
  while (sets > 1 && sets * set_bytes + 2 * copy_bytes > budget)
    --sets;
  if (sets * set_bytes + 2 * copy_bytes > budget) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--params {}: one input set ({} gradients of {} and fp32 weights and "
                            "momentum, {:.2f} GiB) and the {:.2f} GiB copy buffers do not fit in "
                            "the {:.2f} GiB free on {}",
                            params, n, c.dtype, static_cast<double>(set_bytes) / (1 << 30),
                            2.0 * static_cast<double>(copy_bytes) / (1 << 30),
                            static_cast<double>(free_bytes) / (1 << 30), dev.name));
  }

  // Inputs: one allocation of `sets` sets, each N gradients then weights then momentum. Gradient
  // 0 of set 0 and the weights of set 0 are uploaded from the host; everything else is a device
  // copy of them (the values do not matter to the timing, only that they are finite).
  DeviceBuffer arena(sets * set_bytes);
  const std::vector<std::byte> host_grad = random_values(dtype, params, 42);
  const std::vector<std::byte> host_weights = random_values(kernels::DType::kF32, params, 7);
  auto grad_ptr = [&](std::size_t s, std::size_t j) {
    return arena.data() + s * set_bytes + j * grad_stride;
  };
  auto weights_ptr = [&](std::size_t s) {
    return reinterpret_cast<float*>(arena.data() + s * set_bytes + n * grad_stride);
  };
  auto momentum_ptr = [&](std::size_t s) {
    return reinterpret_cast<float*>(arena.data() + s * set_bytes + n * grad_stride + state_stride);
  };
  PSRT_CUDA_CHECK(
      cudaMemcpy(grad_ptr(0, 0), host_grad.data(), host_grad.size(), cudaMemcpyHostToDevice));
  PSRT_CUDA_CHECK(
      cudaMemcpy(weights_ptr(0), host_weights.data(), host_weights.size(), cudaMemcpyHostToDevice));
  for (std::size_t s = 0; s < sets; ++s) {
    for (std::size_t j = 0; j < n; ++j) {
      if (s == 0 && j == 0) continue;
      PSRT_CUDA_CHECK(
          cudaMemcpy(grad_ptr(s, j), grad_ptr(0, 0), params * gsize, cudaMemcpyDeviceToDevice));
    }
    if (s > 0) {
      PSRT_CUDA_CHECK(cudaMemcpy(weights_ptr(s), weights_ptr(0), params * sizeof(float),
                                 cudaMemcpyDeviceToDevice));
    }
    PSRT_CUDA_CHECK(cudaMemset(momentum_ptr(s), 0, params * sizeof(float)));
  }

  const OptimizerConfig cfg{
      .lr = 0.01f, .momentum = 0.9f, .dampening = 0.f, .weight_decay = 1e-4f, .nesterov = false};
  std::vector<std::vector<const void*>> grads(sets);
  std::vector<kernels::SliceUpdate> updates(sets);
  std::vector<kernels::FusedSgdCudaBatch> batches;
  batches.reserve(sets);
  for (std::size_t s = 0; s < sets; ++s) {
    for (std::size_t j = 0; j < n; ++j)
      grads[s].push_back(grad_ptr(s, j));
    kernels::SliceUpdate& u = updates[s];
    u.weights = weights_ptr(s);
    u.momentum = momentum_ptr(s);
    u.grads = grads[s].data();
    u.num_grads = c.workers;
    u.dtype = dtype;
    u.count = params;
    u.grad_scale = 1.f / static_cast<float>(c.workers);
    batches.emplace_back(std::span<const kernels::SliceUpdate>(&u, 1), cfg);
  }

  Stream stream;
  const std::vector<double> update_times =
      time_on_stream(stream.get(), c.warmup, c.iters,
                     [&](std::size_t i) { batches[i % sets].launch(stream.get()); });

  // What the server waits for: the public blocking call, host wall time.
  std::vector<double> blocking_times;
  for (std::size_t i = 0; i < static_cast<std::size_t>(c.warmup + c.iters); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    kernels::fused_sgd_cuda(std::span<const kernels::SliceUpdate>(&updates[i % sets], 1), cfg,
                            stream.get());
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= static_cast<std::size_t>(c.warmup)) blocking_times.push_back(t);
  }

  DeviceBuffer src(copy_bytes), dst(copy_bytes);
  PSRT_CUDA_CHECK(cudaMemset(src.data(), 0x3c, copy_bytes));
  PSRT_CUDA_CHECK(cudaMemset(dst.data(), 0, copy_bytes));
  const std::vector<double> copy_times =
      time_on_stream(stream.get(), c.warmup, c.iters, [&](std::size_t) {
        PSRT_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), copy_bytes,
                                        cudaMemcpyDeviceToDevice, stream.get()));
      });

  const double t_update = median(update_times);
  const double t_copy = median(copy_times);
  const double gbps = update_bytes / t_update / 1e9;
  const double copy_gbps = 2.0 * static_cast<double>(copy_bytes) / t_copy / 1e9;
  nlohmann::json line{{"bench", "kernel"},
                      {"device", "cuda"},
                      {"device_index", dev.index},
                      {"device_name", dev.name},
                      {"cc", fmt::format("{}.{}", dev.cc_major, dev.cc_minor)},
                      {"sm_count", dev.sm_count},
                      {"l2_bytes", dev.l2_bytes},
                      {"cuda_driver", cuda_version(dev.driver_version)},
                      {"cuda_runtime", cuda_version(dev.runtime_version)},
                      {"workers", c.workers},
                      {"params", params},
                      {"dtype", c.dtype},
                      {"iters", c.iters},
                      {"sets", sets},
                      {"working_set_bytes", sets * set_bytes},
                      {"us_p50", t_update * 1e6},
                      {"blocking_us_p50", median(blocking_times) * 1e6},
                      {"GBps", gbps},
                      {"copy_bytes", copy_bytes},
                      {"copy_us_p50", t_copy * 1e6},
                      {"copy_GBps", copy_gbps},
                      {"pct_of_copy", 100.0 * gbps / copy_gbps}};
  std::cout << line.dump() << std::endl;
}

}  // namespace

void run_cuda_kernel_bench(const KernelBenchConfig& c, int device_index, kernels::DType dtype) {
  const DeviceInfo dev = open_device(device_index, c.device);
  for (std::size_t p : c.params)
    run_case(c, dev, p, dtype);
}

}  // namespace psrt::bench
