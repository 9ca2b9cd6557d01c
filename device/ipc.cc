#include "device/ipc.h"

#include <fmt/core.h>

#include <cstring>

#include "base/log.h"
#include "device/cuda_device.h"
#include "device/memory.h"
#include "psrt/config.h"
#include "psrt/error.h"

#if PSRT_HAVE_CUDA
#include <cuda.h>  // types of the driver entry point only; libcuda is reached through the runtime
#include <cuda_runtime_api.h>

#include "kernels/cuda_check.h"
#endif

namespace psrt::device {

#if PSRT_HAVE_CUDA

namespace {

// cuMemGetAddressRange: the base and size of the allocation holding a pointer. A driver API
// call, fetched through the runtime so that psrt does not link libcuda (absent on machines
// without a driver, where every binary must still start).
using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

GetAddressRange address_range_fn() {
  static GetAddressRange fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    PSRT_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &p, 12000,
                                                     cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || !p)
      throw Error(ErrorCode::kUnsupported, "the CUDA driver has no cuMemGetAddressRange");
    return reinterpret_cast<GetAddressRange>(p);
  }();
  return fn;
}

}  // namespace

IpcExporter::IpcExporter(int device) : device_(device) {
  require_cuda_device(device);
  DeviceGuard guard(device);
  cudaEvent_t ev = nullptr;
  PSRT_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventInterprocess));
  event_ = ev;
  cudaIpcEventHandle_t h{};
  PSRT_CUDA_CHECK(cudaIpcGetEventHandle(&h, ev));
  static_assert(sizeof(h) == kIpcHandleBytes);
  std::memcpy(event_handle_.data(), &h, kIpcHandleBytes);
}

IpcExporter::~IpcExporter() {
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
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
    throw Error(ErrorCode::kSystem,
                fmt::format("cuMemGetAddressRange of {} failed with CUresult {}", p,
                            static_cast<int>(r)));
  const auto offset = reinterpret_cast<std::uintptr_t>(p) - static_cast<std::uintptr_t>(base);
  if (offset + bytes > size)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("CUDA IPC of {} bytes at {}: the range leaves its allocation of {} "
                            "bytes",
                            bytes, p, size));
  IpcRecord r;
  cudaIpcMemHandle_t mh{};
  PSRT_CUDA_CHECK(cudaIpcGetMemHandle(&mh, reinterpret_cast<void*>(base)));
  static_assert(sizeof(mh) == kIpcHandleBytes);
  std::memcpy(r.memory.data(), &mh, kIpcHandleBytes);
  r.offset = offset;
  r.allocation_bytes = size;
  std::lock_guard lock(mu_);
  // The importer waits for this point of the legacy default stream (where LibTorch computes
  // unless told otherwise); re-recording later only moves it later, never earlier.
  PSRT_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_), nullptr));
  r.event = event_handle_;
  return r;
}

IpcImporter::IpcImporter(int device, std::size_t max_open) : device_(device), max_open_(max_open) {
  require_cuda_device(device);
}

IpcImporter::~IpcImporter() {
  try {
    DeviceGuard guard(device_);
    for (auto& [key, a] : allocations_) cudaIpcCloseMemHandle(a.base);
    for (auto& [key, e] : events_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  } catch (const Error& e) {
    PSRT_LOG_WARN("closing CUDA IPC handles: {}", e.what());
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
    lru_.push_front(r.memory);
    it = allocations_.emplace(r.memory, Allocation{base, size, lru_.begin()}).first;
    while (allocations_.size() > max_open_) {
      auto victim = allocations_.find(lru_.back());
      cudaIpcCloseMemHandle(victim->second.base);
      allocations_.erase(victim);
      lru_.pop_back();
    }
  } else {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  }
  if (r.offset > it->second.bytes || bytes > it->second.bytes - r.offset)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("CUDA IPC record for {} bytes at offset {}, but the shared allocation "
                            "holds {} bytes",
                            bytes, r.offset, it->second.bytes));
  out.data = static_cast<std::byte*>(it->second.base) + r.offset;
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

std::size_t IpcImporter::open_allocations() {
  std::lock_guard lock(mu_);
  return allocations_.size();
}

#else

namespace {
[[noreturn]] void no_cuda() {
  throw Error(ErrorCode::kUnsupported,
              "CUDA IPC: this psrt was built without CUDA (configure with -DPSRT_WITH_CUDA=ON)");
}
}  // namespace

IpcExporter::IpcExporter(int device) : device_(device) { no_cuda(); }
IpcExporter::~IpcExporter() = default;
IpcRecord IpcExporter::describe(const void*, std::size_t) { no_cuda(); }
IpcImporter::IpcImporter(int device, std::size_t max_open) : device_(device), max_open_(max_open) {
  no_cuda();
}
IpcImporter::~IpcImporter() = default;
IpcImporter::Opened IpcImporter::open(const IpcRecord&, std::size_t) { no_cuda(); }
std::size_t IpcImporter::open_allocations() { return 0; }

#endif

}  // namespace psrt::device
