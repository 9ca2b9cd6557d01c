// Owners of GPU-side resources: device allocations, pinned host memory, streams and events.
// Move-only RAII types; the default-constructed ones own nothing. Builds without CUDA: there,
// allocating or creating anything throws psrt::Error(kUnsupported) and nothing else is reachable.
//
//   device::Stream copies(0);                                  // on cuda:0
//   auto slot = device::DeviceMemory::allocate(0, bytes);
//   auto staging = device::PinnedMemory::allocate(bytes, 0);
//   device::copy_async(slot.data(), staging.data(), bytes, copies);
//   device::Event done = device::Event::record(copies);
//   done.synchronize();
//
// Every failing CUDA call throws psrt::Error naming the call (device/cuda_check.h). Destructors
// never throw: a failing free is logged.
#pragma once

#include <cstddef>
#include <utility>

namespace psrt::device {

// Makes `device` current on the calling thread for the scope and restores the previous one —
// only when that one was really in use (its primary context active): a thread that never chose
// a device reports device 0, and restoring it would create a context on GPU 0 in every process.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  // For threads psrt owns that only ever work on `device`: makes it current for good. Logs (does
  // not throw) on failure, since it runs at a thread's start.
  static void set_for_thread(int device) noexcept;
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// cudaMalloc'd memory on one device.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  static DeviceMemory allocate(int device, std::size_t bytes);
  DeviceMemory(DeviceMemory&& o) noexcept { swap(o); }
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    DeviceMemory(std::move(o)).swap(*this);
    return *this;
  }
  ~DeviceMemory();

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  int device() const noexcept { return device_; }
  explicit operator bool() const noexcept { return data_ != nullptr; }

 private:
  void swap(DeviceMemory& o) noexcept;
  void* data_ = nullptr;
  std::size_t size_ = 0;
  int device_ = -1;
};

// Page-locked host memory (cudaHostAlloc, portable to every device): the staging area that DMA
// reads and writes without the driver's own bounce copy.
class PinnedMemory {
 public:
  PinnedMemory() = default;
  // Allocated with `device` current (the memory is usable from every device either way; this
  // keeps the call from creating a context on another GPU).
  static PinnedMemory allocate(std::size_t bytes, int device);
  PinnedMemory(PinnedMemory&& o) noexcept { swap(o); }
  PinnedMemory& operator=(PinnedMemory&& o) noexcept {
    PinnedMemory(std::move(o)).swap(*this);
    return *this;
  }
  ~PinnedMemory();

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  explicit operator bool() const noexcept { return data_ != nullptr; }

 private:
  void swap(PinnedMemory& o) noexcept;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

// A non-blocking stream (does not synchronise with the legacy default stream) on one device.
class Stream {
 public:
  Stream() = default;
  explicit Stream(int device);
  Stream(Stream&& o) noexcept { swap(o); }
  Stream& operator=(Stream&& o) noexcept {
    Stream(std::move(o)).swap(*this);
    return *this;
  }
  ~Stream();

  void* handle() const noexcept { return stream_; }  // a cudaStream_t
  int device() const noexcept { return device_; }
  void synchronize() const;  // waits for everything queued; throws a failure of that work

 private:
  void swap(Stream& o) noexcept;
  void* stream_ = nullptr;
  int device_ = -1;
};

// A point in a stream's work (timing disabled: cheapest to record and wait on).
class Event {
 public:
  Event() = default;
  static Event record(const Stream& stream);
  Event(Event&& o) noexcept { swap(o); }
  Event& operator=(Event&& o) noexcept {
    Event(std::move(o)).swap(*this);
    return *this;
  }
  ~Event();

  explicit operator bool() const noexcept { return event_ != nullptr; }
  void synchronize() const;             // blocks until then
  void wait_on(const Stream& s) const;  // later work on `s` waits for it, without blocking

 private:
  void swap(Event& o) noexcept;
  void* event_ = nullptr;
  int device_ = -1;
};

// Later work on `stream` waits for the work queued so far on `device`'s legacy default stream
// (where LibTorch computes unless told otherwise), without blocking the caller.
void order_after_legacy_default(const Stream& stream);
// Blocks until the work queued so far on `device`'s legacy default stream has finished.
void synchronize_legacy_default(int device);

// Later work on `stream` waits for `cuda_event` (a cudaEvent_t this object does not own, e.g.
// one opened from another process), without blocking the caller.
void wait_event(void* cuda_event, const Stream& stream);

// cudaMemcpyAsync with cudaMemcpyDefault (unified addressing tells the direction): queued on
// `stream`; host memory on either side should be pinned or the copy is synchronous.
void copy_async(void* dst, const void* src, std::size_t bytes, const Stream& stream);

}  // namespace psrt::device
