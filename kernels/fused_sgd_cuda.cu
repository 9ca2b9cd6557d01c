// fused_sgd_cuda's launcher: builds the slice table in pinned host memory, copies it to the device
// with the gradient pointer arrays, launches one persistent grid over all slices and waits. With
// the guard or clipping on, the two pre-pass kernels run first on the same stream and the step's
// verdict comes back in the same staging buffer. FusedSgdCudaBatch's launcher: the same table,
// built and copied to the device once, then launched without host-device copies or waits.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device/cuda_check.h"
#include "device/memory.h"
#include "kernels/fused_adam.h"
#include "kernels/fused_sgd.h"
#include "kernels/fused_sgd_cuda_launch.h"
#include "kernels/fused_sgd_device.cuh"

namespace psrt::kernels::detail {

namespace {

using device::LaunchParams;
using device::NormParams;
using device::SliceDesc;
using device::StepControl;
using ::psrt::device::DeviceGuard;

// A table's worth of pinned host memory and device memory of the same size. Buffers are reused
// from call to call (one per concurrent caller per device) and never freed: they are small, and
// freeing at static destruction would race the CUDA runtime's own teardown.
struct StagingBuffer {
  void* host = nullptr;
  void* device = nullptr;
  std::size_t capacity = 0;
};

struct DeviceState {
  std::mutex mutex;
  int grid = 0;       // persistent grid size: SMs x resident blocks per SM; 0 until first use
  int norm_grid = 0;  // the same for the pre-pass's norm_kernel
  std::vector<StagingBuffer> free_buffers;
};

DeviceState& device_state(int device) {
  static std::mutex mutex;
  static auto* states = new std::vector<DeviceState*>();  // leaked on purpose, see above
  std::lock_guard<std::mutex> lock(mutex);
  if (states->size() <= static_cast<std::size_t>(device)) states->resize(device + 1, nullptr);
  DeviceState*& state = (*states)[device];
  if (state == nullptr) state = new DeviceState();
  return *state;
}

int persistent_grid(int device, DeviceState& state) {
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.grid == 0) {
    int sms = 0;
    PSRT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    int blocks_per_sm = 0;
    PSRT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &blocks_per_sm, device::fused_sgd_kernel, device::kBlockSize, 0));
    state.grid = std::max(1, sms * std::max(1, blocks_per_sm));
  }
  return state.grid;
}

int persistent_norm_grid(int device, DeviceState& state) {
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.norm_grid == 0) {
    int sms = 0;
    PSRT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    int blocks_per_sm = 0;
    PSRT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &blocks_per_sm, device::norm_kernel, device::kNormBlockSize, 0));
    state.norm_grid = std::max(1, sms * std::max(1, blocks_per_sm));
  }
  return state.norm_grid;
}

std::size_t align_up(std::size_t n, std::size_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

// Holds a staging buffer of at least `bytes` for one call and returns it to the device's free
// list afterwards. If the call failed after queueing the copy, the stream is drained first so the
// next user cannot overwrite pinned memory that a copy still reads.
class StagingLease {
 public:
  StagingLease(DeviceState& state, std::size_t bytes, cudaStream_t stream)
      : state_(state), stream_(stream) {
    {
      std::lock_guard<std::mutex> lock(state_.mutex);
      if (!state_.free_buffers.empty()) {
        buffer_ = state_.free_buffers.back();
        state_.free_buffers.pop_back();
      }
    }
    if (buffer_.capacity < bytes) {
      release_memory();
      const std::size_t capacity = std::max<std::size_t>(bytes, 4096);
      PSRT_CUDA_CHECK(cudaMallocHost(&buffer_.host, capacity));
      PSRT_CUDA_CHECK(cudaMalloc(&buffer_.device, capacity));
      buffer_.capacity = capacity;
    }
  }
  ~StagingLease() {
    if (!completed_) (void)cudaStreamSynchronize(stream_);
    if (buffer_.capacity == 0) return;
    std::lock_guard<std::mutex> lock(state_.mutex);
    state_.free_buffers.push_back(buffer_);
  }
  StagingLease(const StagingLease&) = delete;
  StagingLease& operator=(const StagingLease&) = delete;

  void* host() const { return buffer_.host; }
  void* device() const { return buffer_.device; }
  void mark_completed() { completed_ = true; }

 private:
  // Frees a buffer too small for this call (or a half-allocated one), errors ignored: the
  // memory is unusable either way.
  void release_memory() {
    if (buffer_.host != nullptr) (void)cudaFreeHost(buffer_.host);
    if (buffer_.device != nullptr) (void)cudaFree(buffer_.device);
    buffer_ = StagingBuffer{};
  }

  DeviceState& state_;
  cudaStream_t stream_;
  StagingBuffer buffer_;
  bool completed_ = false;
};

bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0;
}

// The device that holds `weights`; throws when it is not CUDA memory.
int device_of(const float* weights, std::size_t index) {
  cudaPointerAttributes attributes{};
  PSRT_CUDA_CHECK(cudaPointerGetAttributes(&attributes, weights));
  if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
    throw Error(ErrorCode::kInvalidArgument,
                "fused_sgd_cuda: the weights of slice " + std::to_string(index) +
                    " are not CUDA device memory; pass device pointers, or apply the update "
                    "with MemoryType::kHost");
  }
  return attributes.device;
}

// Bytes of the slice table of slices[0, num_slices): num_slices SliceDescs, then every slice's
// gradient pointers back to back (the part copied to the device).
std::size_t table_bytes(const SliceUpdate* slices, std::size_t num_slices) {
  std::size_t total_grads = 0;
  for (std::size_t i = 0; i < num_slices; ++i)
    total_grads += static_cast<std::size_t>(slices[i].num_grads);
  return num_slices * sizeof(SliceDesc) + total_grads * sizeof(const void*);
}

// Norm chunks of slices[0, num_slices) (the guard/clipping pre-pass).
unsigned long long norm_chunks(const SliceUpdate* slices, std::size_t num_slices) {
  unsigned long long chunks = 0;
  for (std::size_t i = 0; i < num_slices; ++i)
    chunks += (slices[i].count + device::kNormChunk - 1) / device::kNormChunk;
  return chunks;
}

// Writes the slice table into `host` (table_bytes() of it), with pointers that are valid once the
// table is copied to `device_table`, and returns the launch parameters that go with it (no
// pre-pass control: the caller sets that).
LaunchParams build_table(const SliceUpdate* slices, std::size_t num_slices,
                         const OptimizerConfig& cfg, void* host, void* device_table) {
  const bool adam = is_adam(cfg);
  const bool has_momentum = cfg.momentum != 0.f || adam;  // Adam: exp_avg is `momentum`
  const std::size_t descs_bytes = num_slices * sizeof(SliceDesc);
  auto* descs = static_cast<SliceDesc*>(host);
  auto* host_ptrs = reinterpret_cast<const void**>(static_cast<char*>(host) + descs_bytes);
  auto* device_ptrs =
      reinterpret_cast<const void**>(static_cast<char*>(device_table) + descs_bytes);

  unsigned long long items = 0;
  unsigned long long chunks = 0;
  std::size_t next_ptr = 0;
  for (std::size_t i = 0; i < num_slices; ++i) {
    const SliceUpdate& u = slices[i];
    bool aligned = aligned16(u.weights) && (!has_momentum || aligned16(u.momentum)) &&
                   (!adam || aligned16(u.exp_avg_sq));
    for (int j = 0; j < u.num_grads; ++j) {
      aligned = aligned && aligned16(u.grads[j]);
      host_ptrs[next_ptr + j] = u.grads[j];
    }
    const unsigned long long width = u.dtype == DType::kF32 ? device::kVectorWidth<device::kF32>
                                                            : device::kVectorWidth<device::kF16>;
    const unsigned long long slice_items = aligned ? (u.count + width - 1) / width : u.count;
    descs[i] = SliceDesc{u.weights,
                         has_momentum ? u.momentum : nullptr,
                         device_ptrs + next_ptr,
                         u.count,
                         items,
                         items + slice_items,
                         u.grad_scale,
                         u.num_grads,
                         static_cast<int>(u.dtype),
                         aligned ? 1 : 0,
                         u.first_step ? 1 : 0,
                         chunks,
                         chunks + (u.count + device::kNormChunk - 1) / device::kNormChunk,
                         nullptr,
                         0.f,
                         1.f};
    if (adam) {
      const AdamConstants k = adam_constants(cfg, u.step);
      descs[i].exp_avg_sq = u.exp_avg_sq;
      descs[i].neg_step_size = k.neg_step_size;
      descs[i].bc2_sqrt = k.bc2_sqrt;
    }
    chunks = descs[i].chunk_end;
    items += slice_items;
    next_ptr += static_cast<std::size_t>(u.num_grads);
  }

  LaunchParams params{};
  params.slices = static_cast<const SliceDesc*>(device_table);
  params.num_slices = static_cast<int>(num_slices);
  params.total_items = items;
  params.lr = cfg.lr;
  params.momentum = cfg.momentum;
  params.weight_decay = cfg.weight_decay;
  params.one_minus_dampening = 1.f - cfg.dampening;
  params.has_weight_decay = cfg.weight_decay != 0.f ? 1 : 0;
  params.has_momentum = has_momentum ? 1 : 0;
  params.nesterov = cfg.nesterov ? 1 : 0;
  params.control = nullptr;
  params.clip_coef = 1.f;
  params.has_clip = 0;
  if (adam) {
    const AdamConstants k = adam_constants(cfg, 1);  // the step-independent ones
    params.adam = 1;
    params.has_momentum = 0;
    params.l2 = cfg.algorithm == OptimizerAlgorithm::kAdam && cfg.weight_decay != 0.f ? 1 : 0;
    params.decoupled =
        cfg.algorithm == OptimizerAlgorithm::kAdamW && cfg.weight_decay != 0.f ? 1 : 0;
    params.beta1 = cfg.beta1;
    params.beta2 = cfg.beta2;
    params.eps = cfg.eps;
    params.one_minus_beta1 = k.one_minus_beta1;
    params.one_minus_beta2 = k.one_minus_beta2;
    params.decay = k.decay;
  }
  return params;
}

// Blocks of the launch: the persistent grid, or fewer when there are fewer items.
int grid_size(const LaunchParams& params, int device, DeviceState& state) {
  const unsigned long long needed_blocks =
      (params.total_items + device::kBlockSize - 1) / device::kBlockSize;
  return static_cast<int>(
      std::min<unsigned long long>(needed_blocks, persistent_grid(device, state)));
}

// The device of the first non-empty slice (the front checked that one exists).
int device_of_batch(const SliceUpdate* slices) {
  std::size_t first_nonempty = 0;
  while (slices[first_nonempty].count == 0)
    ++first_nonempty;
  return device_of(slices[first_nonempty].weights, first_nonempty);
}

}  // namespace

struct PreparedLaunch {
  int device = 0;
  void* table = nullptr;  // device memory, owned
  LaunchParams params{};
  int grid = 0;
};

StepResult launch_fused_sgd_cuda(const SliceUpdate* slices, std::size_t num_slices,
                                 const OptimizerConfig& cfg, void* stream_handle) {
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  const bool prepass = needs_prepass(cfg);
  const int device = device_of_batch(slices);
  DeviceGuard guard(device);
  DeviceState& state = device_state(device);

  // Layout: the table (copied to the device); with the pre-pass, the device side also holds one
  // fp64 partial per chunk and the StepControl, which comes back to the same offset of the host
  // side.
  const std::size_t upload_bytes = table_bytes(slices, num_slices);
  const unsigned long long total_chunks = norm_chunks(slices, num_slices);
  const std::size_t partials_offset = align_up(upload_bytes, alignof(double));
  const std::size_t control_offset =
      align_up(partials_offset + total_chunks * sizeof(double), alignof(StepControl));
  const std::size_t bytes = prepass ? control_offset + sizeof(StepControl) : upload_bytes;

  StagingLease lease(state, bytes, stream);
  LaunchParams params = build_table(slices, num_slices, cfg, lease.host(), lease.device());
  const int grid = grid_size(params, device, state);

  PSRT_CUDA_CHECK(
      cudaMemcpyAsync(lease.device(), lease.host(), upload_bytes, cudaMemcpyHostToDevice, stream));
  auto* device_control =
      reinterpret_cast<StepControl*>(static_cast<char*>(lease.device()) + control_offset);
  if (prepass) {
    NormParams norm{};
    norm.slices = params.slices;
    norm.num_slices = params.num_slices;
    norm.total_chunks = total_chunks;
    norm.partials = reinterpret_cast<double*>(static_cast<char*>(lease.device()) + partials_offset);
    // The grid only spreads the chunks over blocks; each chunk's sum does not depend on it.
    const int norm_grid = static_cast<int>(
        std::min<unsigned long long>(total_chunks, persistent_norm_grid(device, state)));
    device::norm_kernel<<<norm_grid, device::kNormBlockSize, 0, stream>>>(norm);
    PSRT_CUDA_CHECK(cudaGetLastError());
    device::norm_finalize_kernel<<<1, device::kNormBlockSize, 0, stream>>>(
        norm.partials, total_chunks, device_control, static_cast<double>(cfg.max_grad_norm),
        cfg.skip_nonfinite ? 1 : 0);
    PSRT_CUDA_CHECK(cudaGetLastError());
    params.control = device_control;
  }
  device::fused_sgd_kernel<<<grid, device::kBlockSize, 0, stream>>>(params);
  PSRT_CUDA_CHECK(cudaGetLastError());
  auto* host_control =
      reinterpret_cast<StepControl*>(static_cast<char*>(lease.host()) + control_offset);
  if (prepass) {
    PSRT_CUDA_CHECK(cudaMemcpyAsync(host_control, device_control, sizeof(StepControl),
                                    cudaMemcpyDeviceToHost, stream));
  }
  PSRT_CUDA_CHECK(cudaStreamSynchronize(stream));
  lease.mark_completed();

  StepResult result;
  if (prepass) {
    result.grad_norm = host_control->norm;
    result.skipped = host_control->skip != 0;
    if (host_control->clip != 0) {
      result.clipped = true;
      result.clip_coef = host_control->clip_coef;
    }
  }
  return result;
}

PreparedLaunch* prepare_fused_sgd_cuda(const SliceUpdate* slices, std::size_t num_slices,
                                       const OptimizerConfig& cfg) {
  const int device = device_of_batch(slices);
  DeviceGuard guard(device);
  DeviceState& state = device_state(device);

  const std::size_t bytes = table_bytes(slices, num_slices);
  std::unique_ptr<PreparedLaunch, void (*)(PreparedLaunch*) noexcept> prepared(
      new PreparedLaunch(), destroy_prepared_fused_sgd_cuda);
  prepared->device = device;
  PSRT_CUDA_CHECK(cudaMalloc(&prepared->table, bytes));
  std::vector<unsigned char> host(bytes);
  prepared->params = build_table(slices, num_slices, cfg, host.data(), prepared->table);
  prepared->grid = grid_size(prepared->params, device, state);
  PSRT_CUDA_CHECK(cudaMemcpy(prepared->table, host.data(), bytes, cudaMemcpyHostToDevice));
  return prepared.release();
}

void launch_prepared_fused_sgd_cuda(const PreparedLaunch& prepared, void* stream_handle) {
  DeviceGuard guard(prepared.device);
  device::fused_sgd_kernel<<<prepared.grid, device::kBlockSize, 0,
                             static_cast<cudaStream_t>(stream_handle)>>>(prepared.params);
  PSRT_CUDA_CHECK(cudaGetLastError());
}

int prepared_device(const PreparedLaunch& prepared) noexcept {
  return prepared.device;
}

void destroy_prepared_fused_sgd_cuda(PreparedLaunch* prepared) noexcept {
  if (prepared == nullptr) return;
  if (prepared->table != nullptr) {
    try {
      DeviceGuard guard(prepared->device);
      (void)cudaFree(prepared->table);
    } catch (...) {
      // Freeing is best effort (the device may be gone); nothing to report from a destructor.
    }
  }
  delete prepared;
}

}  // namespace psrt::kernels::detail
