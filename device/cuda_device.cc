#include "device/cuda_device.h"

#include <fmt/core.h>

#include <charconv>

#include "psrt/config.h"
#include "psrt/error.h"

#if PSRT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "device/cuda_check.h"
#include "device/driver.h"
#endif

namespace psrt::device {

#if PSRT_HAVE_CUDA
void* detail::driver_function(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  PSRT_CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || !p)
    throw Error(ErrorCode::kUnsupported, fmt::format("the CUDA driver has no {}", name));
  return p;
}
#endif

DeviceSpec parse_device(std::string_view text) {
  auto bad = [&] {
    return Error(ErrorCode::kInvalidArgument,
                 fmt::format("unknown device '{}': use cpu, cuda (device 0) or cuda:N", text));
  };
  if (text == "cpu") return {};
  if (text == "cuda") return {MemoryType::kCuda, 0};
  if (!text.starts_with("cuda:")) throw bad();
  const std::string_view digits = text.substr(5);
  int index = -1;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || index < 0)
    throw bad();
  return {MemoryType::kCuda, index};
}

std::string to_string(const DeviceSpec& d) {
  return d.is_cuda() ? fmt::format("cuda:{}", d.index) : std::string("cpu");
}

int cuda_device_count(std::string* why) {
#if PSRT_HAVE_CUDA
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why) *why = fmt::format("cudaGetDeviceCount failed: {}", cudaGetErrorString(err));
    return 0;
  }
  if (count == 0 && why) *why = "the CUDA runtime sees no device";
  return count;
#else
  if (why) *why = "this psrt was built without CUDA (configure with -DPSRT_WITH_CUDA=ON)";
  return 0;
#endif
}

int cuda_driver_version() noexcept {
#if PSRT_HAVE_CUDA
  int version = 0;
  if (cudaDriverGetVersion(&version) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return version;
#else
  return 0;
#endif
}

void require_cuda_device(int index) {
  std::string why;
  const int count = cuda_device_count(&why);
  if (count == 0)
    throw Error(ErrorCode::kUnsupported,
                fmt::format("CUDA device {} is not usable: {}; run on a machine with a GPU or "
                            "keep this on the cpu",
                            index, why));
  if (index < 0 || index >= count)
    throw Error(ErrorCode::kUnsupported,
                fmt::format("CUDA device {} does not exist: this machine has {} (cuda:0..cuda:{})",
                            index, count, count - 1));
}

std::string cuda_device_name(int index) {
  require_cuda_device(index);
#if PSRT_HAVE_CUDA
  cudaDeviceProp prop{};
  PSRT_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  return prop.name;
#else
  return {};
#endif
}

DeviceSpec locate(const void* p) noexcept {
#if PSRT_HAVE_CUDA
  if (!p) return {};
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // an unknown pointer is not an error worth keeping
    return {};
  }
  if (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged)
    return {MemoryType::kCuda, attr.device};
  return {};
#else
  (void)p;
  return {};
#endif
}

}  // namespace psrt::device
