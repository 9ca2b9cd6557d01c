#include "device/ipc.h"

#include <fmt/core.h>

#include <cstring>

#include "base/log.h"
#include "device/cuda_device.h"
#include "device/driver.h"
#include "device/memory.h"
#include "psrt/config.h"
#include "psrt/error.h"

#if PSRT_HAVE_CUDA
#include <cuda.h>  // types of the driver entry point only; libcuda is reached through the runtime
#include <cuda_runtime_api.h>

#include "device/cuda_check.h"
#endif

namespace psrt::device {

#if PSRT_HAVE_CUDA

namespace {

// cuMemGetAddressRange: the base and size of the allocation holding a pointer (device/driver.h).
using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

GetAddressRange address_range_fn() {
  static auto fn =
      reinterpret_cast<GetAddressRange>(detail::driver_function("cuMemGetAddressRange"));
  return fn;
}

}  // namespace

IpcExporter::IpcExporter(int device) : device_(device) {
  require_cuda_device(device);
  DeviceGuard guard(device);
  try {
    for (std::size_t i = 0; i < kEvents; ++i) {
      cudaEvent_t ev = nullptr;
      PSRT_CUDA_CHECK(
          cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventInterprocess));
      events_[i] = ev;
      cudaIpcEventHandle_t h{};
      PSRT_CUDA_CHECK(cudaIpcGetEventHandle(&h, ev));
      static_assert(sizeof(h) == kIpcHandleBytes);
      std::memcpy(event_handles_[i].data(), &h, kIpcHandleBytes);
    }
  } catch (...) {
    for (void* e : events_)
      if (e) cudaEventDestroy(static_cast<cudaEvent_t>(e));
    throw;
  }
}

IpcExporter::~IpcExporter() {
  for (void* e : events_)
    if (e) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  if (probe_) cudaFree(probe_);
}

IpcRecord IpcExporter::probe() {
  constexpr std::size_t kProbeBytes = 256;
  {
    std::lock_guard lock(mu_);
    if (!probe_) {
      DeviceGuard guard(device_);
      PSRT_CUDA_CHECK(cudaMalloc(&probe_, kProbeBytes));
    }
  }
  return describe(probe_, kProbeBytes);
}

IpcRecord IpcExporter::describe(const void* p, std::size_t bytes) {
  const DeviceSpec where = locate(p);
  if (!where.is_cuda() || where.index != device_)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("CUDA IPC of {}: not device memory of cuda:{}", p, device_));
  DeviceGuard guard(device_);
  CUdeviceptr base = 0;
  size_t size = 0;
  if (CUresult r = address_range_fn()(&base, &size, reinterpret_cast<CUdeviceptr>(p));
      r != CUDA_SUCCESS)
    throw Error(
        ErrorCode::kSystem,
        fmt::format("cuMemGetAddressRange of {} failed with CUresult {}", p, static_cast<int>(r)));
  const auto offset = reinterpret_cast<std::uintptr_t>(p) - static_cast<std::uintptr_t>(base);
  if (offset + bytes > size)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("CUDA IPC of {} bytes at {}: the range leaves its allocation of {} "
                            "bytes",
                            bytes, p, size));
  IpcRecord r;
  cudaIpcMemHandle_t mh{};
  // NOLINTNEXTLINE(performance-no-int-to-ptr): the driver hands the allocation base as a number
  PSRT_CUDA_CHECK(cudaIpcGetMemHandle(&mh, reinterpret_cast<void*>(base)));
  static_assert(sizeof(mh) == kIpcHandleBytes);
  std::memcpy(r.memory.data(), &mh, kIpcHandleBytes);
  r.offset = offset;
  r.allocation_bytes = size;
  std::lock_guard lock(mu_);
  // The importer waits for this point of the legacy default stream (where LibTorch computes
  // unless told otherwise); re-recording an event later only moves it later, never earlier.
  const std::size_t i = next_event_++ % kEvents;
  PSRT_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(events_[i]), nullptr));
  r.event = event_handles_[i];
  return r;
}

struct IpcImporter::Mapping {
  int device = 0;
  void* base = nullptr;
  std::size_t bytes = 0;  // as mapped here
  ~Mapping() {
    try {
      DeviceGuard guard(device);
      if (cudaIpcCloseMemHandle(base) != cudaSuccess)
        PSRT_LOG_WARN("cudaIpcCloseMemHandle failed: {}", cudaGetErrorString(cudaGetLastError()));
    } catch (const Error& e) {
      PSRT_LOG_WARN("closing a CUDA IPC mapping: {}", e.what());
    }
  }
};

IpcImporter::IpcImporter(int device, std::size_t max_open) : device_(device), max_open_(max_open) {
  require_cuda_device(device);
}

IpcImporter::~IpcImporter() {
  allocations_.clear();  // each mapping closes when its last holder lets go
  try {
    DeviceGuard guard(device_);
    for (auto& [key, e] : events_)
      cudaEventDestroy(static_cast<cudaEvent_t>(e));
  } catch (const Error& e) {
    PSRT_LOG_WARN("closing CUDA IPC events: {}", e.what());
  }
}

IpcImporter::Opened IpcImporter::open(const IpcRecord& r, std::size_t bytes) {
  if (r.offset > r.allocation_bytes || bytes > r.allocation_bytes - r.offset)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("CUDA IPC record for {} bytes at offset {} of an allocation of {} "
                            "bytes: the range leaves the allocation",
                            bytes, r.offset, r.allocation_bytes));
  std::lock_guard lock(mu_);
  DeviceGuard guard(device_);
  Opened out;
  auto it = allocations_.find(r.memory);
  if (it == allocations_.end()) {
    cudaIpcMemHandle_t mh{};
    std::memcpy(&mh, r.memory.data(), kIpcHandleBytes);
    void* base = nullptr;
    PSRT_CUDA_CHECK(cudaIpcOpenMemHandle(&base, mh, cudaIpcMemLazyEnablePeerAccess));
    // The size the record claims is the peer's word; the mapping's own size is the truth.
    CUdeviceptr mapped = 0;
    size_t size = 0;
    if (address_range_fn()(&mapped, &size, reinterpret_cast<CUdeviceptr>(base)) != CUDA_SUCCESS) {
      cudaIpcCloseMemHandle(base);
      throw Error(ErrorCode::kSystem, "cuMemGetAddressRange of an opened CUDA IPC handle failed");
    }
    auto mapping = std::make_shared<Mapping>();
    mapping->device = device_;
    mapping->base = base;
    mapping->bytes = size;
    lru_.push_front(r.memory);
    it = allocations_.emplace(r.memory, Allocation{std::move(mapping), lru_.begin()}).first;
    while (allocations_.size() > max_open_) {
      allocations_.erase(lru_.back());  // closed once no queued update holds it
      lru_.pop_back();
    }
  } else {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  }
  const Mapping& m = *it->second.mapping;
  if (r.offset > m.bytes || bytes > m.bytes - r.offset)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("CUDA IPC record for {} bytes at offset {}, but the shared allocation "
                            "holds {} bytes",
                            bytes, r.offset, m.bytes));
  out.data = static_cast<std::byte*>(m.base) + r.offset;
  out.hold = it->second.mapping;
  auto ev = events_.find(r.event);
  if (ev == events_.end()) {
    cudaIpcEventHandle_t eh{};
    std::memcpy(&eh, r.event.data(), kIpcHandleBytes);
    cudaEvent_t e = nullptr;
    PSRT_CUDA_CHECK(cudaIpcOpenEventHandle(&e, eh));
    ev = events_.emplace(r.event, e).first;
  }
  out.event = ev->second;
  return out;
}

#else

namespace {
[[noreturn]] void no_cuda() {
  throw Error(ErrorCode::kUnsupported,
              "CUDA IPC: this psrt was built without CUDA (configure with -DPSRT_WITH_CUDA=ON)");
}
}  // namespace

IpcExporter::IpcExporter(int device) : device_(device) {
  no_cuda();
}
IpcExporter::~IpcExporter() = default;
IpcRecord IpcExporter::describe(const void*, std::size_t) {
  no_cuda();
}
IpcRecord IpcExporter::probe() {
  no_cuda();
}
IpcImporter::IpcImporter(int device, std::size_t max_open) : device_(device), max_open_(max_open) {
  no_cuda();
}
struct IpcImporter::Mapping {};
IpcImporter::~IpcImporter() = default;
IpcImporter::Opened IpcImporter::open(const IpcRecord&, std::size_t) {
  no_cuda();
}

#endif

}  // namespace psrt::device
