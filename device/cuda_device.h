// Which device a process computes on, and what the CUDA runtime says about devices and pointers.
// Every function works in builds without CUDA (no device exists there) and on machines without a
// GPU or driver (the reason is reported, never a crash).
//
//   auto spec = device::parse_device("cuda:1");  // psrun --server-device
//   device::require_cuda_device(spec.index);       // throws naming the cause when unusable
#pragma once

#include <string>
#include <string_view>

#include "psrt/buffer.h"

namespace psrt::device {

// A compute device: the host CPU, or CUDA device `index`.
struct DeviceSpec {
  MemoryType memory = MemoryType::kHost;
  int index = 0;

  bool is_cuda() const noexcept { return memory == MemoryType::kCuda; }
  friend bool operator==(const DeviceSpec&, const DeviceSpec&) = default;
};

// "cpu", "cuda" (= cuda:0) or "cuda:N". Throws psrt::Error(kInvalidArgument) naming the accepted
// forms for anything else.
DeviceSpec parse_device(std::string_view text);
std::string to_string(const DeviceSpec& d);

// The number of CUDA devices this process can use; 0 when there are none, and then `why` (if
// given) says why: no CUDA in this build, no driver, no device. Thread-safe.
int cuda_device_count(std::string* why = nullptr);

// The CUDA driver's version as cudaDriverGetVersion reports it (12040 = 12.4); 0 when there is
// no driver or the build has no CUDA. Thread-safe.
int cuda_driver_version() noexcept;

// Throws psrt::Error(kUnsupported) naming the cause and what to do when CUDA device `index`
// cannot be used (no CUDA build, no driver, index out of range). Thread-safe.
void require_cuda_device(int index);

// The device's name as the driver reports it ("NVIDIA H100 80GB HBM3"). Throws like
// require_cuda_device.
std::string cuda_device_name(int index);

// Where `p` points: kCuda with its device for device (or managed) memory, kHost (index 0) for
// anything else, including every pointer in a build or on a machine without CUDA. Creates no
// CUDA context when the build has no CUDA; otherwise asks cudaPointerGetAttributes.
DeviceSpec locate(const void* p) noexcept;

}  // namespace psrt::device
