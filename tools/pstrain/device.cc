#include "pstrain/device.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>

#include "device/cuda_device.h"
#include "psrt/error.h"

namespace psrt::pstrain {

bool libtorch_has_cuda() {
  // torch::cuda::is_available() is false both without CUDA in LibTorch and without a GPU; only
  // the CUDA library's hooks answer this query, the CPU-only stub throws.
  try {
    return at::detail::getCUDAHooks().versionCUDART() > 0;
  } catch (const c10::Error&) {
    return false;
  }
}

int rank_gpu(int count, const char* psrt_gpu, const char* local_rank) {
  auto number = [](const char* name, const char* text) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < 0 || v > (1 << 20))
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{}={} is not a device number (0, 1, ...)", name, text));
    return static_cast<int>(v);
  };
  if (count <= 0) return 0;
  if (psrt_gpu && *psrt_gpu) {
    const int gpu = number("PSRT_GPU", psrt_gpu);
    if (gpu >= count)
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("PSRT_GPU={}, but this process sees {} CUDA device{} (check "
                              "CUDA_VISIBLE_DEVICES, or pass --device cuda:N)",
                              gpu, count, count == 1 ? "" : "s"));
    return gpu;
  }
  if (local_rank && *local_rank) return number("PSRT_LOCAL_RANK", local_rank) % count;
  return 0;
}

::torch::Device resolve_device(const std::string& flag) {
  const device::DeviceSpec spec = device::parse_device(flag);
  if (!spec.is_cuda()) return ::torch::kCPU;
  if (!libtorch_has_cuda())
    throw Error(ErrorCode::kUnsupported,
                fmt::format("--device {}: this LibTorch has no CUDA (Debian's libtorch-dev is "
                            "CPU-only; configure psrt against a CUDA LibTorch: "
                            "-DTorch_DIR=$(python3 -c 'import torch;print(torch.utils.cmake_"
                            "prefix_path)')/Torch), or train with --device cpu",
                            flag));
  const auto count = static_cast<int>(::torch::cuda::device_count());
  if (count == 0 || !::torch::cuda::is_available()) {
    std::string why;
    device::cuda_device_count(&why);
    throw Error(ErrorCode::kUnsupported,
                fmt::format("--device {}: LibTorch sees no CUDA device ({}); train with "
                            "--device cpu",
                            flag, why.empty() ? "no driver or no GPU visible" : why));
  }
  // "cuda" alone: the GPU this worker's placement names, not every worker of a node on cuda:0.
  if (flag == "cuda")
    return {::torch::kCUDA, static_cast<c10::DeviceIndex>(rank_gpu(
                                count, std::getenv("PSRT_GPU"), std::getenv("PSRT_LOCAL_RANK")))};
  if (spec.index >= count)
    throw Error(ErrorCode::kUnsupported,
                fmt::format("--device {}: this machine has {} CUDA device{} (cuda:0{})", flag,
                            count, count == 1 ? "" : "s",
                            count == 1 ? "" : fmt::format(" to cuda:{}", count - 1)));
  return {::torch::kCUDA, static_cast<c10::DeviceIndex>(spec.index)};
}

}  // namespace psrt::pstrain
