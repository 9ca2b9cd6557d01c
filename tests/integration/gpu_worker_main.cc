// The worker program of the GPU job tests: the worker API on CUDA device memory, checked against
// exact integer-valued results like ps_worker's. Prints "PASS <scenario> rank <r>" on success,
// exits 1 with a message otherwise.
//
//   gpu_worker device-exact --rounds R [--grad fp32|bf16]  weights and gradients in cudaMalloc'd
//                                                   memory, sync mean lr 1, closed form each round
//   gpu_worker no-device                            (no usable GPU) a buffer marked kCuda is
//   refused
//                                                   with kUnsupported naming the cause, and a host
//                                                   push afterwards still works
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "psrt/config.h"
#include "psrt/psrt.h"
#include "tests/integration/worker_fail.h"

#if PSRT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

using psrt::test::fail;

#if PSRT_HAVE_CUDA
void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) fail(std::string(what) + ": " + cudaGetErrorString(err));
}

// bf16 of a small integer: the upper half of its fp32 bits (exact for |x| < 256).
std::uint16_t to_bf16(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return static_cast<std::uint16_t>(bits >> 16);
}

// Sync, mean of N, lr 1 (psrun --lr 1): after round t every element of key k has dropped by
// sum over rounds u < t of mean_r((r+1)(u+1) + i%7) = (u+1)(N+1)/2 + i%7.
void device_exact(psrt::Worker& w, int rounds, bool bf16) {
  const std::vector<std::size_t> sizes = {1, 7, 1000, 4099, 300'001};
  const int n = w.num_workers();
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    const std::size_t count = sizes[k];
    std::vector<float> init(count), host(count);
    for (std::size_t i = 0; i < count; ++i)
      init[i] = static_cast<float>(i % 5);
    w.init(k, init);
    void* d_weights = nullptr;
    void* d_grad = nullptr;
    const std::size_t gsize = bf16 ? 2 : 4;
    check(cudaMalloc(&d_weights, count * 4), "cudaMalloc weights");
    // An interior pointer of a larger allocation, as a caching allocator hands out.
    check(cudaMalloc(&d_grad, count * gsize + 256), "cudaMalloc grad");
    auto* grad = static_cast<std::byte*>(d_grad) + 256;
    check(cudaMemset(d_weights, 0xff, count * 4), "cudaMemset");  // NaN until pulled
    w.pull(k, {d_weights, count * 4, psrt::MemoryType::kCuda}).wait();
    for (int t = 0; t < rounds; ++t) {
      std::vector<float> g(count);
      for (std::size_t i = 0; i < count; ++i)
        g[i] = static_cast<float>((w.rank() + 1) * (t + 1) + static_cast<int>(i % 7));
      if (bf16) {
        std::vector<std::uint16_t> b(count);
        for (std::size_t i = 0; i < count; ++i)
          b[i] = to_bf16(g[i]);
        check(cudaMemcpy(grad, b.data(), count * 2, cudaMemcpyHostToDevice), "cudaMemcpy grad");
      } else {
        check(cudaMemcpy(grad, g.data(), count * 4, cudaMemcpyHostToDevice), "cudaMemcpy grad");
      }
      w.push_pull(k, {grad, count * gsize, psrt::MemoryType::kCuda},
                  bf16 ? psrt::GradType::kBF16 : psrt::GradType::kF32,
                  {d_weights, count * 4, psrt::MemoryType::kCuda})
          .wait();
      check(cudaMemcpy(host.data(), d_weights, count * 4, cudaMemcpyDeviceToHost),
            "cudaMemcpy weights");
      for (std::size_t i = 0; i < count; ++i) {
        auto expect = static_cast<double>(init[i]);
        for (int u = 0; u <= t; ++u)
          expect -= (u + 1) * (n + 1) / 2.0 + static_cast<double>(i % 7);
        if (host[i] != static_cast<float>(expect))
          fail("key " + std::to_string(k) + " round " + std::to_string(t) + " element " +
               std::to_string(i) + ": " + std::to_string(host[i]) + ", expected " +
               std::to_string(expect));
      }
    }
    check(cudaFree(d_weights), "cudaFree");
    check(cudaFree(d_grad), "cudaFree");
  }
}
#endif

void no_device(psrt::Worker& w) {
  std::vector<float> v(64, 1.f), out(64);
  w.init(0, v);
  try {
    w.push(0, {v.data(), v.size() * 4, psrt::MemoryType::kCuda}, psrt::GradType::kF32).wait();
    fail("a kCuda push without a usable GPU was accepted");
  } catch (const psrt::Error& e) {
    const std::string what = e.what();
    if (e.code() != psrt::ErrorCode::kUnsupported || what.find("CUDA") == std::string::npos)
      fail("unexpected error for a kCuda push: " + what);
    std::printf("REFUSED %s\n", what.c_str());
  }
  // Nothing was sent: the job goes on with host memory.
  w.push_pull(0, v, out).wait();
  if (out[0] != 0.f)
    fail("after one round of 1s at lr 1 the weights are " + std::to_string(out[0]));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) fail("usage: gpu_worker device-exact|no-device [--rounds R] [--grad fp32|bf16]");
  const std::string scenario = argv[1];
  // Read by the CUDA build only.
  [[maybe_unused]] int rounds = 3;
  [[maybe_unused]] bool bf16 = false;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--rounds")
      rounds = std::atoi(v.c_str());
    else if (k == "--grad")
      bf16 = v == "bf16";
    else
      fail("unknown option " + k);
  }
  try {
    psrt::Worker w = psrt::Worker::from_env();
    if (scenario == "no-device") {
      no_device(w);
    } else if (scenario == "device-exact") {
#if PSRT_HAVE_CUDA
      device_exact(w, rounds, bf16);
#else
      fail("this build has no CUDA");
#endif
    } else {
      fail("unknown scenario " + scenario);
    }
    std::printf("PASS %s rank %d\n", scenario.c_str(), w.rank());
    w.shutdown();
  } catch (const psrt::Error& e) {
    fail(std::string("psrt::Error: ") + e.what());
  }
  return 0;
}
