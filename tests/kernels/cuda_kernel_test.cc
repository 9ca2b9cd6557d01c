// fused_sgd_cuda against fused_sgd_cpu, bit for bit, plus its input validation. Device tests skip
// when the CUDA runtime finds no usable GPU; the validation tests run everywhere, since
// fused_sgd_cuda checks its inputs before any CUDA call.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/fused_adam.h"
#include "kernels/fused_sgd.h"
#include "kernels/fused_sgd_cuda.h"
#include "psrt/error.h"
#include "tests/kernels/sgd_test_util.h"

namespace psrt::kernels {
namespace {

using testing::GradRange;
using testing::GradSet;
using testing::make_grads;
using testing::random_weights;

// Why device tests cannot run here, or empty when a GPU is usable.
std::string no_gpu_reason() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    return std::string("no usable CUDA device: cudaGetDeviceCount failed with ") +
           cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  }
  if (n == 0) return "no CUDA device: cudaGetDeviceCount returned 0";
  return "";
}

#define SKIP_WITHOUT_GPU()                       \
  do {                                           \
    const std::string reason = no_gpu_reason();  \
    if (!reason.empty()) GTEST_SKIP() << reason; \
  } while (0)

void check(cudaError_t err, const char* what) {
  ASSERT_EQ(err, cudaSuccess) << what << ": " << cudaGetErrorString(err);
}

// A device array of `count` elements of `width` bytes at `offset` elements past a 256-byte
// aligned allocation, with kGuard guard bytes on both sides that must never change.
class DeviceArray {
 public:
  static constexpr std::size_t kGuard = 64;
  static constexpr unsigned char kGuardByte = 0xa5;

  DeviceArray(std::size_t count, std::size_t width, std::size_t offset)
      : bytes_(count * width), front_(kGuard + offset * width) {
    check(cudaMalloc(&base_, front_ + bytes_ + kGuard), "cudaMalloc");
    check(cudaMemset(base_, kGuardByte, front_ + bytes_ + kGuard), "cudaMemset");
  }
  ~DeviceArray() { (void)cudaFree(base_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  void* data() const { return static_cast<char*>(base_) + front_; }
  void upload(const void* src) const {
    check(cudaMemcpy(data(), src, bytes_, cudaMemcpyHostToDevice), "upload");
  }
  void download(void* dst) const {
    check(cudaMemcpy(dst, data(), bytes_, cudaMemcpyDeviceToHost), "download");
  }
  // The guard bytes before and after the array are untouched.
  bool guards_intact() const {
    std::vector<unsigned char> all(front_ + bytes_ + kGuard);
    check(cudaMemcpy(all.data(), base_, all.size(), cudaMemcpyDeviceToHost), "guards");
    for (std::size_t i = 0; i < front_; ++i)
      if (all[i] != kGuardByte) return false;
    for (std::size_t i = front_ + bytes_; i < all.size(); ++i)
      if (all[i] != kGuardByte) return false;
    return true;
  }

 private:
  void* base_ = nullptr;
  std::size_t bytes_;
  std::size_t front_;
};

struct Case {
  DType dtype = DType::kF32;
  int num_grads = 1;
  std::size_t count = 1;
  bool first_step = false;
  bool misaligned = false;  // every pointer one element past 16-byte alignment
};

// One slice's inputs on the host (the CPU reference updates these in place) and on the device.
struct SliceFixture {
  SliceFixture(const Case& c, const OptimizerConfig& cfg, std::mt19937_64& rng)
      : c_(c),
        has_momentum_(cfg.momentum != 0.f),
        grads(make_grads(c.dtype, c.num_grads, c.count, GradRange::kWide, rng)),
        weights(random_weights(c.count, rng)),
        momentum(cfg.momentum != 0.f ? random_weights(c.count, rng) : std::vector<float>()),
        d_weights(c.count, 4, c.misaligned ? 1 : 0),
        d_momentum(momentum.empty() ? 0 : c.count, 4, c.misaligned ? 1 : 0) {
    // A first step writes the momentum buffer without reading it: poison it so an element the
    // kernel skips shows up as NaN (the CPU reference never reads it either).
    if (c.first_step) {
      for (float& m : momentum)
        m = std::numeric_limits<float>::quiet_NaN();
    }
    d_weights.upload(weights.data());
    if (!momentum.empty()) d_momentum.upload(momentum.data());
    for (int j = 0; j < c.num_grads; ++j) {
      d_grads.push_back(
          std::make_unique<DeviceArray>(c.count, dtype_size(c.dtype), c.misaligned ? 1 : 0));
      d_grads.back()->upload(grads.bytes[static_cast<std::size_t>(j)].data());
      d_grad_ptrs.push_back(d_grads.back()->data());
    }
  }

  SliceUpdate host_update() {
    return testing::make_update(weights, momentum, grads, 1.f / static_cast<float>(c_.num_grads),
                                c_.first_step);
  }
  SliceUpdate device_update() {
    SliceUpdate u = host_update();
    u.weights = static_cast<float*>(d_weights.data());
    // From the config, not from `momentum`: an empty slice's host vector is empty too, but
    // with momentum on the update still needs a (non-null) buffer.
    u.momentum = has_momentum_ ? static_cast<float*>(d_momentum.data()) : nullptr;
    u.grads = d_grad_ptrs.data();
    return u;
  }

  // Runs the CPU reference on the host copies and compares the device results bit for bit.
  void expect_matches_cpu(const OptimizerConfig& cfg, const std::string& label) {
    // An empty slice has nothing to compare, and its empty host vectors have null data(),
    // which the CPU update refuses.
    if (c_.count > 0) fused_sgd_cpu(host_update(), cfg);
    expect_device_matches_host(label);
  }

  // Compares the device weights and momentum with the host copies: bit for bit, or with
  // `tolerance` relative to max(1, |host value|) when it is > 0 (a clipped step, whose coef may
  // differ by an ulp between CPU and GPU).
  void expect_device_matches_host(const std::string& label, double tolerance = 0) {
    std::vector<float> w(c_.count);
    d_weights.download(w.data());
    expect_close(w, weights, tolerance, label + ": weights");
    EXPECT_TRUE(d_weights.guards_intact()) << label << ": wrote outside the weights";
    if (!momentum.empty()) {
      std::vector<float> m(c_.count);
      d_momentum.download(m.data());
      expect_close(m, momentum, tolerance, label + ": momentum");
      EXPECT_TRUE(d_momentum.guards_intact()) << label << ": wrote outside the momentum";
    }
    for (const auto& g : d_grads)
      EXPECT_TRUE(g->guards_intact()) << label << ": wrote around a gradient";
  }

  static void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                           double tolerance, const std::string& label) {
    if (tolerance == 0) {
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
          << label << " differ, first at " << first_difference(got, want);
      return;
    }
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double bound = tolerance * std::max(1.0, std::abs(static_cast<double>(want[i])));
      if (!(std::abs(static_cast<double>(got[i]) - want[i]) <= bound)) {
        ADD_FAILURE() << label << " differ beyond " << tolerance << " at " << i << " (gpu "
                      << got[i] << " cpu " << want[i] << ")";
        return;
      }
    }
  }

  static std::string first_difference(const std::vector<float>& got,
                                      const std::vector<float>& want) {
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (std::memcmp(&got[i], &want[i], 4) != 0) {
        return std::to_string(i) + " (gpu " + std::to_string(got[i]) + " cpu " +
               std::to_string(want[i]) + ")";
      }
    }
    return "none";
  }

  Case c_;
  bool has_momentum_;
  GradSet grads;
  std::vector<float> weights;
  std::vector<float> momentum;
  DeviceArray d_weights;
  DeviceArray d_momentum;
  std::vector<std::unique_ptr<DeviceArray>> d_grads;
  std::vector<const void*> d_grad_ptrs;
};

// The optimizer settings every comparison covers.
std::vector<OptimizerConfig> configs() {
  std::vector<OptimizerConfig> out;
  out.push_back({.lr = 0.05f,
                 .momentum = 0.f,
                 .dampening = 0.f,
                 .weight_decay = 0.f,
                 .nesterov = false});  // plain SGD
  out.push_back({.lr = 0.05f,
                 .momentum = 0.f,
                 .dampening = 0.f,
                 .weight_decay = 1e-4f,
                 .nesterov = false});  // weight decay
  out.push_back({.lr = 0.03f,
                 .momentum = 0.9f,
                 .dampening = 0.f,
                 .weight_decay = 0.f,
                 .nesterov = false});  // momentum
  out.push_back({.lr = 0.03f,
                 .momentum = 0.9f,
                 .dampening = 0.1f,
                 .weight_decay = 5e-4f,
                 .nesterov = false});  // momentum, dampening, weight decay
  out.push_back({.lr = 0.02f,
                 .momentum = 0.9f,
                 .dampening = 0.f,
                 .weight_decay = 0.f,
                 .nesterov = true});  // nesterov
  out.push_back({.lr = 0.02f,
                 .momentum = 0.85f,
                 .dampening = 0.f,
                 .weight_decay = 1e-3f,
                 .nesterov = true});  // nesterov with weight decay
  return out;
}

std::string describe(const Case& c, const OptimizerConfig& cfg) {
  return std::string(to_string(c.dtype)) + " N=" + std::to_string(c.num_grads) +
         " count=" + std::to_string(c.count) + (c.first_step ? " first_step" : "") +
         (c.misaligned ? " misaligned" : "") + " lr=" + std::to_string(cfg.lr) +
         " momentum=" + std::to_string(cfg.momentum) +
         " dampening=" + std::to_string(cfg.dampening) + " wd=" + std::to_string(cfg.weight_decay) +
         (cfg.nesterov ? " nesterov" : "");
}

class CudaMatchesCpu : public ::testing::TestWithParam<std::tuple<DType, int>> {};

// Every config and first_step on small sizes (1001: vector body plus tail), aligned and misaligned;
// the large size once per (dtype, N) with a config picked in rotation, so each config meets large
// slices too.
TEST_P(CudaMatchesCpu, BitIdentical) {
  SKIP_WITHOUT_GPU();
  const auto [dtype, n] = GetParam();
  std::mt19937_64 rng(0x5eed + static_cast<unsigned>(n) * 31 + static_cast<unsigned>(dtype));
  const std::vector<OptimizerConfig> all = configs();
  for (std::size_t count : {std::size_t{1}, std::size_t{3}, std::size_t{7}, std::size_t{1001}}) {
    for (const OptimizerConfig& cfg : all) {
      for (bool first_step : {false, true}) {
        for (bool misaligned : {false, true}) {
          const Case c{dtype, n, count, first_step, misaligned};
          SliceFixture f(c, cfg, rng);
          const SliceUpdate u = f.device_update();
          fused_sgd_cuda(std::span<const SliceUpdate>(&u, 1), cfg, nullptr);
          f.expect_matches_cpu(cfg, describe(c, cfg));
        }
      }
    }
  }
  const OptimizerConfig& cfg =
      all[static_cast<std::size_t>(n + static_cast<int>(dtype)) % all.size()];
  for (bool misaligned : {false, true}) {
    const Case c{dtype, n, 1000003, n % 2 == 0, misaligned};
    SliceFixture f(c, cfg, rng);
    const SliceUpdate u = f.device_update();
    fused_sgd_cuda(std::span<const SliceUpdate>(&u, 1), cfg, nullptr);
    f.expect_matches_cpu(cfg, describe(c, cfg));
  }
}

INSTANTIATE_TEST_SUITE_P(AllDTypesAndGradCounts, CudaMatchesCpu,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kF16,
                                                              DType::kBF16),
                                            ::testing::Range(1, 17)),
                         [](const auto& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_N" +
                                  std::to_string(std::get<1>(info.param));
                         });

// One launch over tiny, empty and huge slices of every dtype, aligned and misaligned, with
// gradient counts on both sides of the N <= 8 specialisations and mixed first steps.
TEST(CudaFusedSgd, OneLaunchMixesSlices) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(77);
  for (const OptimizerConfig& cfg : configs()) {
    const std::vector<Case> cases = {
        {DType::kF32, 3, 1, false, false},      {DType::kBF16, 9, 1000003, false, false},
        {DType::kF16, 1, 7, true, true},        {DType::kF32, 16, 0, false, false},
        {DType::kF32, 2, 1000003, true, true},  {DType::kBF16, 4, 3, false, true},
        {DType::kF16, 12, 4099, false, false},  {DType::kF32, 8, 33, true, false},
        {DType::kF16, 5, 1000003, false, true}, {DType::kBF16, 1, 8, true, false},
    };
    std::vector<std::unique_ptr<SliceFixture>> fixtures;
    std::vector<SliceUpdate> updates;
    for (const Case& c : cases) {
      fixtures.push_back(std::make_unique<SliceFixture>(c, cfg, rng));
      updates.push_back(fixtures.back()->device_update());
    }
    cudaStream_t stream = nullptr;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    fused_sgd_cuda(updates, cfg, stream);  // blocking: results are ready on return
    for (std::size_t i = 0; i < cases.size(); ++i)
      fixtures[i]->expect_matches_cpu(
          cfg, "slice " + std::to_string(i) + ": " + describe(cases[i], cfg));
    check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  }
}

// A prepared batch launched k times equals k blocking updates: two fixtures with the same inputs,
// one stepped through FusedSgdCudaBatch::launch (queued back to back, no wait in between), the
// other through fused_sgd_cuda, compared bit for bit (and the first against the CPU reference).
TEST(CudaFusedSgdBatch, RepeatedLaunchesEqualRepeatedBlockingUpdates) {
  SKIP_WITHOUT_GPU();
  const OptimizerConfig cfg{
      .lr = 0.03f, .momentum = 0.9f, .dampening = 0.f, .weight_decay = 1e-4f, .nesterov = false};
  const std::vector<Case> cases = {{DType::kBF16, 8, 1000003, false, false},
                                   {DType::kF32, 3, 1001, false, true},
                                   {DType::kF16, 12, 0, false, false}};
  std::mt19937_64 rng_a(11), rng_b(11);
  std::vector<std::unique_ptr<SliceFixture>> batched, blocking;
  std::vector<SliceUpdate> batched_updates, blocking_updates;
  for (const Case& c : cases) {
    batched.push_back(std::make_unique<SliceFixture>(c, cfg, rng_a));
    blocking.push_back(std::make_unique<SliceFixture>(c, cfg, rng_b));
    batched_updates.push_back(batched.back()->device_update());
    blocking_updates.push_back(blocking.back()->device_update());
  }
  const FusedSgdCudaBatch batch(batched_updates, cfg);
  EXPECT_FALSE(batch.empty());
  int current = -1;
  check(cudaGetDevice(&current), "cudaGetDevice");
  EXPECT_EQ(batch.device(), current);
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  constexpr int kSteps = 3;
  for (int k = 0; k < kSteps; ++k) {
    batch.launch(stream);
    fused_sgd_cuda(blocking_updates, cfg, nullptr);
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::size_t n = cases[i].count;
    if (n == 0) continue;
    std::vector<float> a(n), b(n);
    batched[i]->d_weights.download(a.data());
    blocking[i]->d_weights.download(b.data());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), n * 4), 0) << "slice " << i << " weights";
    batched[i]->d_momentum.download(a.data());
    blocking[i]->d_momentum.download(b.data());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), n * 4), 0) << "slice " << i << " momentum";
  }
}

TEST(CudaFusedSgd, ApplyUpdateDispatchesDeviceMemory) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(5);
  const OptimizerConfig cfg{
      .lr = 0.03f, .momentum = 0.9f, .dampening = 0.f, .weight_decay = 1e-4f, .nesterov = true};
  SliceFixture f({DType::kBF16, 4, 1000, false, false}, cfg, rng);
  apply_update(f.device_update(), cfg, MemoryType::kCuda);
  f.expect_matches_cpu(cfg, "apply_update(kCuda)");
}

TEST(CudaFusedSgd, HostWeightsAreRejected) {
  SKIP_WITHOUT_GPU();
  std::vector<float> w(16, 1.f);
  std::vector<float> g(16, 1.f);
  const void* grads[] = {g.data()};
  SliceUpdate u;
  u.weights = w.data();
  u.grads = grads;
  u.num_grads = 1;
  u.count = w.size();
  try {
    fused_sgd_cuda(std::span<const SliceUpdate>(&u, 1), OptimizerConfig{}, nullptr);
    FAIL() << "host weights were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("not CUDA device memory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(w, std::vector<float>(16, 1.f));
}

// --- the guard and clipping (OptimizerConfig::skip_nonfinite, max_grad_norm) ---

// Poisons element `at` of gradient `j` on the host copy and on the device with a NaN or an
// infinity in the gradient's dtype.
void poison_gradient(SliceFixture& f, int j, std::size_t at, int kind) {
  const DType t = f.grads.dtype;
  auto& bytes = f.grads.bytes[static_cast<std::size_t>(j)];
  if (t == DType::kF32) {
    const float v = kind == 0   ? std::numeric_limits<float>::quiet_NaN()
                    : kind == 1 ? std::numeric_limits<float>::infinity()
                                : -std::numeric_limits<float>::infinity();
    std::memcpy(&bytes[at * 4], &v, 4);
  } else {
    const bool half = t == DType::kF16;
    const std::uint16_t v = kind == 0   ? (half ? 0x7e00 : 0x7fc0)
                            : kind == 1 ? (half ? 0x7c00 : 0x7f80)
                                        : (half ? 0xfc00 : 0xff80);
    std::memcpy(&bytes[at * 2], &v, 2);
  }
  f.d_grads[static_cast<std::size_t>(j)]->upload(bytes.data());
}

// Runs one step over `fixtures` on the GPU and on the CPU (host copies); returns both results.
std::pair<StepResult, StepResult> run_step_both(
    std::vector<std::unique_ptr<SliceFixture>>& fixtures, const OptimizerConfig& cfg) {
  std::vector<SliceUpdate> device, host;
  for (auto& f : fixtures) {
    device.push_back(f->device_update());
    if (f->c_.count > 0) host.push_back(f->host_update());  // see expect_matches_cpu
  }
  const StepResult gpu = fused_sgd_cuda(device, cfg, nullptr);
  const StepResult cpu = fused_sgd_cpu_step(host, cfg);
  return {gpu, cpu};
}

OptimizerConfig guarded(OptimizerConfig cfg, bool skip, float max_grad_norm) {
  cfg.skip_nonfinite = skip;
  cfg.max_grad_norm = max_grad_norm;
  return cfg;
}

// A NaN or infinity in any one gradient, at the first, a middle or the last element: the GPU
// skips the step as the CPU does, and nothing on the device changes.
TEST(CudaFusedSgdGuard, NonFiniteGradientSkipsTheStep) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(101);
  const OptimizerConfig cfg = guarded(
      {.lr = 0.03f, .momentum = 0.9f, .dampening = 0.f, .weight_decay = 5e-4f, .nesterov = false},
      true, 0.f);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (std::size_t count : {std::size_t{5}, std::size_t{4099}, std::size_t{100003}}) {
      for (std::size_t at : {std::size_t{0}, count / 2, count - 1}) {
        for (int kind = 0; kind < 3; ++kind) {
          for (bool misaligned : {false, true}) {
            const Case c{dtype, 3, count, at == 0, misaligned};
            std::vector<std::unique_ptr<SliceFixture>> f;
            f.push_back(std::make_unique<SliceFixture>(c, cfg, rng));
            poison_gradient(*f[0], static_cast<int>(at % 3), at, kind);
            const std::vector<float> w0 = f[0]->weights, m0 = f[0]->momentum;
            const auto [gpu, cpu] = run_step_both(f, cfg);
            const std::string label = describe(c, cfg) + " bad kind " + std::to_string(kind) +
                                      " at " + std::to_string(at);
            EXPECT_TRUE(gpu.skipped) << label;
            EXPECT_TRUE(cpu.skipped) << label;
            EXPECT_FALSE(std::isfinite(gpu.grad_norm)) << label;
            EXPECT_EQ(f[0]->weights, w0) << label << ": the CPU wrote weights";
            // The device still holds w0/m0 (NaN poison included on a first step): compare bits.
            f[0]->expect_device_matches_host(label);
            if (!m0.empty()) {
              EXPECT_EQ(std::memcmp(f[0]->momentum.data(), m0.data(), m0.size() * 4), 0) << label;
            }
          }
        }
      }
    }
  }
}

// Finite gradients with the guard on, and clipping that does not trigger: bit-identical to the
// CPU, with the same verdict.
TEST(CudaFusedSgdGuard, UnclippedStepsAreBitIdenticalToTheCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(202);
  for (const OptimizerConfig& base : configs()) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (std::size_t count : {std::size_t{7}, std::size_t{1001}, std::size_t{1000003}}) {
        // Huge max_grad_norm: the pre-pass runs, the coef is far above 1.
        const OptimizerConfig cfg = guarded(base, true, 1e30f);
        const Case c{dtype, 4, count, false, count == 1001};
        std::vector<std::unique_ptr<SliceFixture>> f;
        f.push_back(std::make_unique<SliceFixture>(c, cfg, rng));
        const auto [gpu, cpu] = run_step_both(f, cfg);
        const std::string label = describe(c, cfg);
        EXPECT_FALSE(gpu.skipped) << label;
        EXPECT_FALSE(gpu.clipped) << label;
        EXPECT_EQ(gpu.clip_coef, 1.f) << label;
        EXPECT_NEAR(gpu.grad_norm, cpu.grad_norm, 1e-12 * cpu.grad_norm) << label;
        f[0]->expect_device_matches_host(label);
      }
    }
  }
}

// A clipped step over several slices of mixed dtypes and alignment: the norm is global and
// agrees with the CPU's to fp64 summation order, the coef to an fp32 ulp, the weights to fp32
// rounding.
TEST(CudaFusedSgdGuard, ClippedMultiSliceStepMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(303);
  for (const OptimizerConfig& base : configs()) {
    const std::vector<Case> cases = {
        {DType::kF32, 3, 1, false, false},    {DType::kBF16, 9, 1000003, false, false},
        {DType::kF16, 1, 7, true, true},      {DType::kF32, 16, 0, false, false},
        {DType::kF32, 2, 100003, true, true}, {DType::kF16, 12, 4099, false, false},
    };
    std::vector<std::unique_ptr<SliceFixture>> f;
    for (const Case& c : cases)
      f.push_back(std::make_unique<SliceFixture>(c, base, rng));
    // The unclipped norm, from a guard-only step on copies: clip to a third of it.
    std::vector<SliceUpdate> host;
    std::vector<std::vector<float>> w_copy, m_copy;
    for (auto& x : f) {
      w_copy.push_back(x->weights);
      m_copy.push_back(x->momentum);
    }
    for (std::size_t k = 0; k < f.size(); ++k) {
      if (cases[k].count == 0) continue;  // see expect_matches_cpu
      host.push_back(testing::make_update(w_copy[k], m_copy[k], f[k]->grads,
                                          1.f / static_cast<float>(cases[k].num_grads),
                                          cases[k].first_step));
    }
    const double norm = fused_sgd_cpu_step(host, guarded(base, true, 0.f)).grad_norm;
    const OptimizerConfig cfg = guarded(base, true, static_cast<float>(norm / 3));
    const auto [gpu, cpu] = run_step_both(f, cfg);
    ASSERT_TRUE(cpu.clipped);
    EXPECT_TRUE(gpu.clipped);
    EXPECT_FALSE(gpu.skipped);
    EXPECT_NEAR(gpu.grad_norm, cpu.grad_norm, 1e-12 * cpu.grad_norm);
    EXPECT_NEAR(gpu.clip_coef, cpu.clip_coef, 2e-7f * cpu.clip_coef);
    EXPECT_EQ(gpu.clip_coef,
              static_cast<float>(static_cast<double>(cfg.max_grad_norm) / (gpu.grad_norm + 1e-6)));
    for (std::size_t k = 0; k < f.size(); ++k)
      f[k]->expect_device_matches_host(
          "slice " + std::to_string(k) + ": " + describe(cases[k], cfg), 1e-5);
  }
}

// Same inputs, same bits: the norm does not depend on scheduling (two runs, on two streams).
TEST(CudaFusedSgdGuard, NormAndClippedUpdateAreDeterministic) {
  SKIP_WITHOUT_GPU();
  const OptimizerConfig base{
      .lr = 0.03f, .momentum = 0.9f, .dampening = 0.f, .weight_decay = 5e-4f, .nesterov = false};
  std::vector<float> first_weights;
  double first_norm = 0;
  for (int run = 0; run < 2; ++run) {
    std::mt19937_64 rng(404);  // the same inputs both times
    const Case c{DType::kBF16, 5, 3000017, false, false};
    SliceFixture f(c, base, rng);
    const OptimizerConfig cfg = guarded(base, false, 1.f);
    cudaStream_t stream = nullptr;
    if (run == 1) check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    const SliceUpdate u = f.device_update();
    const StepResult r = fused_sgd_cuda(std::span<const SliceUpdate>(&u, 1), cfg, stream);
    if (stream != nullptr) check(cudaStreamDestroy(stream), "cudaStreamDestroy");
    ASSERT_TRUE(r.clipped);
    std::vector<float> w(c.count);
    f.d_weights.download(w.data());
    if (run == 0) {
      first_weights = w;
      first_norm = r.grad_norm;
    } else {
      EXPECT_EQ(std::memcmp(&r.grad_norm, &first_norm, sizeof(double)), 0)
          << r.grad_norm << " vs " << first_norm;
      EXPECT_EQ(std::memcmp(w.data(), first_weights.data(), w.size() * 4), 0);
    }
  }
}

// A skipped first step leaves the momentum buffer as it was (the caller keeps first_step).
TEST(CudaFusedSgdGuard, SkippedFirstStepLeavesMomentumUnwritten) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(505);
  const OptimizerConfig cfg = guarded(
      {.lr = 0.03f, .momentum = 0.9f, .dampening = 0.5f, .weight_decay = 0.f, .nesterov = false},
      true, 0.f);
  const Case c{DType::kF32, 2, 1001, true, false};
  SliceFixture f(c, cfg, rng);
  const std::vector<float> poison(c.count, -777.f);
  f.d_momentum.upload(poison.data());
  poison_gradient(f, 1, 500, 0);
  const SliceUpdate u = f.device_update();
  const StepResult r = fused_sgd_cuda(std::span<const SliceUpdate>(&u, 1), cfg, nullptr);
  EXPECT_TRUE(r.skipped);
  std::vector<float> m(c.count);
  f.d_momentum.download(m.data());
  EXPECT_EQ(m, poison);
}

// Runs without a GPU: every check happens before the first CUDA call. The pointers are host
// pointers that must never be touched.
TEST(CudaFusedSgdValidation, RejectsUnusableSlicesBeforeAnyCudaCall) {
  float w[4] = {1.f, 2.f, 3.f, 4.f};
  float m[4] = {};
  const float g[4] = {};
  const void* grads[] = {g, g};
  const void* grads_with_null[] = {g, nullptr};
  const SliceUpdate good{w, m, grads, 2, DType::kF32, 4, 0.5f, false};
  const OptimizerConfig with_momentum{
      .lr = 0.1f, .momentum = 0.9f, .dampening = 0.f, .weight_decay = 0.f, .nesterov = false};

  const auto expect_invalid = [&](SliceUpdate bad, const OptimizerConfig& cfg, const char* needle) {
    // The bad slice comes second, after a usable one: the whole batch is refused.
    const SliceUpdate batch[] = {good, bad};
    try {
      fused_sgd_cuda(batch, cfg, nullptr);
      ADD_FAILURE() << "accepted a slice with " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      const std::string what = e.what();
      EXPECT_NE(what.find("slice 1"), std::string::npos) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
    }
  };
  SliceUpdate u = good;
  u.weights = nullptr;
  expect_invalid(u, with_momentum, "weights is null");
  u = good;
  u.momentum = nullptr;
  expect_invalid(u, with_momentum, "momentum buffer is null");
  u = good;
  u.grads = nullptr;
  expect_invalid(u, with_momentum, "grads is null");
  u = good;
  u.grads = grads_with_null;
  expect_invalid(u, with_momentum, "grads[1] of 2 is null");
  u = good;
  u.num_grads = 0;
  expect_invalid(u, with_momentum, "num_grads is 0");
  u = good;
  u.dtype = static_cast<DType>(7);
  expect_invalid(u, with_momentum, "unknown gradient dtype 7");
  const float unchanged[4] = {1.f, 2.f, 3.f, 4.f};
  EXPECT_EQ(std::memcmp(w, unchanged, sizeof w), 0);

  // Through the dispatch as well.
  u = good;
  u.weights = nullptr;
  try {
    apply_update(u, with_momentum, MemoryType::kCuda);
    ADD_FAILURE() << "apply_update accepted null weights";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  }
}

// FusedSgdCudaBatch validates like fused_sgd_cuda, before any CUDA call (runs without a GPU).
TEST(CudaFusedSgdValidation, BatchRejectsUnusableSlicesAndEmptyBatchesNeedNoGpu) {
  float w[4] = {1.f, 2.f, 3.f, 4.f};
  const float g[4] = {};
  const void* grads[] = {g};
  SliceUpdate bad{w, nullptr, grads, 0, DType::kF32, 4, 1.f, false};
  try {
    const FusedSgdCudaBatch batch(std::span<const SliceUpdate>(&bad, 1), OptimizerConfig{});
    ADD_FAILURE() << "accepted num_grads 0";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("num_grads is 0"), std::string::npos) << e.what();
  }
  const SliceUpdate empty{w, nullptr, grads, 1, DType::kF32, 0, 1.f, false};
  const FusedSgdCudaBatch batch(std::span<const SliceUpdate>(&empty, 1), OptimizerConfig{});
  EXPECT_TRUE(batch.empty());
  EXPECT_EQ(batch.device(), -1);
  EXPECT_NO_THROW(batch.launch(nullptr));
  EXPECT_EQ(w[0], 1.f);
}

// Runs without a GPU: the config is checked before any CUDA call.
TEST(CudaFusedSgdValidation, RejectsABadMaxGradNormBeforeAnyCudaCall) {
  float w[4] = {1.f, 2.f, 3.f, 4.f};
  const float g[4] = {};
  const void* grads[] = {g};
  const SliceUpdate u{w, nullptr, grads, 1, DType::kF32, 4, 1.f, false};
  for (float bad :
       {-1.f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    OptimizerConfig cfg;
    cfg.max_grad_norm = bad;
    try {
      fused_sgd_cuda(std::span<const SliceUpdate>(&u, 1), cfg, nullptr);
      ADD_FAILURE() << "max_grad_norm " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("max_grad_norm"), std::string::npos) << e.what();
    }
  }
  OptimizerConfig clip;
  clip.max_grad_norm = 1.f;
  try {
    const FusedSgdCudaBatch batch(std::span<const SliceUpdate>(&u, 1), clip);
    ADD_FAILURE() << "a batch accepted max_grad_norm";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("pre-pass"), std::string::npos) << e.what();
  }
  EXPECT_EQ(w[0], 1.f);
}

// Nothing to do means no CUDA call at all, so this passes without a GPU too.
TEST(CudaFusedSgdValidation, EmptyBatchesDoNotTouchTheGpu) {
  EXPECT_NO_THROW(fused_sgd_cuda(std::span<const SliceUpdate>(), OptimizerConfig{}, nullptr));
  float w[1] = {1.f};
  const float g[1] = {1.f};
  const void* grads[] = {g};
  const SliceUpdate empty{w, nullptr, grads, 1, DType::kF32, 0, 1.f, false};
  const SliceUpdate batch[] = {empty, empty};
  EXPECT_NO_THROW(fused_sgd_cuda(batch, OptimizerConfig{}, nullptr));
  EXPECT_EQ(w[0], 1.f);
}

// Adam and AdamW (kernels/fused_adam.h): the CUDA update equals the CPU's bit for bit over several
// steps, for each dtype, 1 and 3 gradients, aligned (vector body) and misaligned (scalar path).
// Moderate gradients: a NaN's bits may differ between the CPU and the GPU.
TEST(CudaFusedAdam, BitIdenticalToTheCpuOverSteps) {
  SKIP_WITHOUT_GPU();
  for (auto algorithm : {OptimizerAlgorithm::kAdam, OptimizerAlgorithm::kAdamW}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (int n : {1, 3}) {
        for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
          SCOPED_TRACE(std::string(to_string(algorithm)) + " " + std::string(to_string(dtype)) +
                       " n=" + std::to_string(n) + " offset=" + std::to_string(offset));
          OptimizerConfig cfg;
          cfg.algorithm = algorithm;
          cfg.lr = 1e-2f;
          cfg.weight_decay = 0.05f;
          const std::size_t count = 1001;
          std::mt19937_64 rng(42);
          std::vector<float> w = random_weights(count, rng), m(count), v(count);
          DeviceArray dw(count, 4, offset), dm(count, 4, offset), dv(count, 4, offset);
          dw.upload(w.data());
          dm.upload(m.data());
          dv.upload(v.data());
          for (std::uint64_t step = 1; step <= 4; ++step) {
            const GradSet g = make_grads(dtype, n, count, GradRange::kModerate, rng);
            std::vector<std::unique_ptr<DeviceArray>> dg;
            std::vector<const void*> dptrs;
            for (int j = 0; j < n; ++j) {
              dg.push_back(std::make_unique<DeviceArray>(count, dtype_size(dtype), offset));
              dg.back()->upload(g.ptrs[static_cast<std::size_t>(j)]);
              dptrs.push_back(dg.back()->data());
            }
            SliceUpdate cpu;
            cpu.weights = w.data();
            cpu.momentum = m.data();
            cpu.exp_avg_sq = v.data();
            cpu.grads = g.ptrs.data();
            cpu.num_grads = n;
            cpu.dtype = dtype;
            cpu.count = count;
            cpu.grad_scale = 1.f / static_cast<float>(n);
            cpu.step = step;
            SliceUpdate gpu = cpu;
            gpu.weights = static_cast<float*>(dw.data());
            gpu.momentum = static_cast<float*>(dm.data());
            gpu.exp_avg_sq = static_cast<float*>(dv.data());
            gpu.grads = dptrs.data();
            (void)fused_sgd_cpu(cpu, cfg, CpuIsa::kScalar);
            (void)fused_sgd_cuda(std::span<const SliceUpdate>(&gpu, 1), cfg, nullptr);
          }
          std::vector<float> gw(count), gm(count), gv(count);
          dw.download(gw.data());
          dm.download(gm.data());
          dv.download(gv.data());
          EXPECT_EQ(std::memcmp(gw.data(), w.data(), count * 4), 0);
          EXPECT_EQ(std::memcmp(gm.data(), m.data(), count * 4), 0);
          EXPECT_EQ(std::memcmp(gv.data(), v.data(), count * 4), 0);
          EXPECT_TRUE(dw.guards_intact() && dm.guards_intact() && dv.guards_intact());
        }
      }
    }
  }
}

TEST(CudaFusedAdamValidation, RejectsMissingMomentsBeforeAnyCudaCall) {
  OptimizerConfig cfg;
  cfg.algorithm = OptimizerAlgorithm::kAdamW;
  float w[4] = {};
  float m[4] = {};
  const float g[4] = {};
  const void* grads[1] = {g};
  SliceUpdate u;
  u.weights = w;
  u.momentum = m;
  u.grads = grads;
  u.num_grads = 1;
  u.count = 4;
  u.step = 1;
  try {
    (void)fused_sgd_cuda(std::span<const SliceUpdate>(&u, 1), cfg, nullptr);
    FAIL() << "a null exp_avg_sq was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("adamw needs both moments"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace psrt::kernels
