#include "device/memory.h"

#include <fmt/core.h>

#include <utility>

#include "base/log.h"
#include "device/cuda_device.h"
#include "psrt/config.h"
#include "psrt/error.h"

#if PSRT_HAVE_CUDA
#include <cuda.h>  // driver types for the entry points of device/driver.h only
#include <cuda_runtime_api.h>

#include "device/cuda_check.h"
#include "device/driver.h"
#endif

namespace psrt::device {

#if PSRT_HAVE_CUDA

namespace {
// Destructors log instead of throwing: a failing free at shutdown must not take the process down.
void log_failure(cudaError_t err, const char* what) {
  if (err != cudaSuccess) PSRT_LOG_WARN("{} failed: {}", what, cudaGetErrorString(err));
}
}  // namespace

namespace {
// Whether `device`'s primary context exists (cuDevicePrimaryCtxGetState, device/driver.h).
bool primary_context_active(int device) {
  using GetState = CUresult (*)(CUdevice, unsigned int*, int*);
  static auto fn =
      reinterpret_cast<GetState>(detail::driver_function("cuDevicePrimaryCtxGetState"));
  unsigned int flags = 0;
  int active = 0;
  return fn(static_cast<CUdevice>(device), &flags, &active) == CUDA_SUCCESS && active != 0;
}
}  // namespace

DeviceGuard::DeviceGuard(int device) {
  PSRT_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ == device) {
    previous_ = -1;
    return;
  }
  if (!primary_context_active(previous_)) previous_ = -1;  // nothing to go back to
  PSRT_CUDA_CHECK(cudaSetDevice(device));
}

void DeviceGuard::set_for_thread(int device) noexcept {
  if (const cudaError_t err = cudaSetDevice(device); err != cudaSuccess)
    PSRT_LOG_WARN("cudaSetDevice({}) failed: {}", device, cudaGetErrorString(err));
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) log_failure(cudaSetDevice(previous_), "cudaSetDevice (restore)");
}

DeviceMemory DeviceMemory::allocate(int device, std::size_t bytes) {
  require_cuda_device(device);
  DeviceGuard guard(device);
  DeviceMemory m;
  // cudaMalloc of 0 bytes returns null: keep one byte so that a slot always has an address.
  PSRT_CUDA_CHECK(cudaMalloc(&m.data_, bytes == 0 ? 1 : bytes));
  m.size_ = bytes;
  m.device_ = device;
  return m;
}

DeviceMemory::~DeviceMemory() {
  if (data_) log_failure(cudaFree(data_), "cudaFree");
}

PinnedMemory PinnedMemory::allocate(std::size_t bytes, int device) {
  std::string why;
  if (cuda_device_count(&why) == 0)
    throw Error(ErrorCode::kUnsupported, "pinned host memory needs a CUDA device: " + why);
  require_cuda_device(device);
  DeviceGuard guard(device);
  PinnedMemory m;
  PSRT_CUDA_CHECK(cudaHostAlloc(&m.data_, bytes == 0 ? 1 : bytes, cudaHostAllocPortable));
  m.size_ = bytes;
  return m;
}

PinnedMemory::~PinnedMemory() {
  if (data_) log_failure(cudaFreeHost(data_), "cudaFreeHost");
}

Stream::Stream(int device) : device_(device) {
  require_cuda_device(device);
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  PSRT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
}

Stream::~Stream() {
  if (stream_)
    log_failure(cudaStreamDestroy(static_cast<cudaStream_t>(stream_)), "cudaStreamDestroy");
}

void Stream::synchronize() const {
  PSRT_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
}

Event Event::record(const Stream& stream) {
  DeviceGuard guard(stream.device());
  Event e;
  cudaEvent_t ev = nullptr;
  PSRT_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  e.event_ = ev;
  e.device_ = stream.device();
  PSRT_CUDA_CHECK(cudaEventRecord(ev, static_cast<cudaStream_t>(stream.handle())));
  return e;
}

Event::~Event() {
  if (event_) log_failure(cudaEventDestroy(static_cast<cudaEvent_t>(event_)), "cudaEventDestroy");
}

void Event::synchronize() const {
  PSRT_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
}

void Event::wait_on(const Stream& s) const {
  PSRT_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(s.handle()),
                                      static_cast<cudaEvent_t>(event_), 0));
}

void order_after_legacy_default(const Stream& stream) {
  DeviceGuard guard(stream.device());
  cudaEvent_t ev = nullptr;
  PSRT_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  const cudaError_t recorded = cudaEventRecord(ev, nullptr);
  const cudaError_t waited =
      recorded == cudaSuccess
          ? cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.handle()), ev, 0)
          : recorded;
  cudaEventDestroy(ev);  // the wait keeps what it needs
  PSRT_CUDA_CHECK(waited);
}

void synchronize_legacy_default(int device) {
  DeviceGuard guard(device);
  PSRT_CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

void wait_event(void* cuda_event, const Stream& stream) {
  PSRT_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.handle()),
                                      static_cast<cudaEvent_t>(cuda_event), 0));
}

void copy_async(void* dst, const void* src, std::size_t bytes, const Stream& stream) {
  if (bytes == 0) return;
  DeviceGuard guard(stream.device());
  PSRT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                                  static_cast<cudaStream_t>(stream.handle())));
}

#else  // no CUDA in this build: nothing can be created, so nothing else is ever called.

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw Error(ErrorCode::kUnsupported,
              fmt::format("{}: this psrt was built without CUDA (configure with "
                          "-DPSRT_WITH_CUDA=ON on a machine with the CUDA toolkit)",
                          what));
}
}  // namespace

DeviceGuard::DeviceGuard(int) {
  no_cuda("selecting a CUDA device");
}
void DeviceGuard::set_for_thread(int) noexcept {}
DeviceGuard::~DeviceGuard() = default;
DeviceMemory DeviceMemory::allocate(int, std::size_t) {
  no_cuda("allocating device memory");
}
DeviceMemory::~DeviceMemory() = default;
PinnedMemory PinnedMemory::allocate(std::size_t, int) {
  no_cuda("allocating pinned memory");
}
PinnedMemory::~PinnedMemory() = default;
Stream::Stream(int) {
  no_cuda("creating a CUDA stream");
}
Stream::~Stream() = default;
void Stream::synchronize() const {}
Event Event::record(const Stream&) {
  no_cuda("recording a CUDA event");
}
Event::~Event() = default;
void Event::synchronize() const {}
void Event::wait_on(const Stream&) const {}
void order_after_legacy_default(const Stream&) {
  no_cuda("ordering CUDA streams");
}
void synchronize_legacy_default(int) {
  no_cuda("synchronising a CUDA device");
}
void wait_event(void*, const Stream&) {
  no_cuda("waiting for a CUDA event");
}
void copy_async(void*, const void*, std::size_t, const Stream&) {
  no_cuda("copying device memory");
}

#endif

void DeviceMemory::swap(DeviceMemory& o) noexcept {
  std::swap(data_, o.data_);
  std::swap(size_, o.size_);
  std::swap(device_, o.device_);
}
void PinnedMemory::swap(PinnedMemory& o) noexcept {
  std::swap(data_, o.data_);
  std::swap(size_, o.size_);
}
void Stream::swap(Stream& o) noexcept {
  std::swap(stream_, o.stream_);
  std::swap(device_, o.device_);
}
void Event::swap(Event& o) noexcept {
  std::swap(event_, o.event_);
  std::swap(device_, o.device_);
}

}  // namespace psrt::device
