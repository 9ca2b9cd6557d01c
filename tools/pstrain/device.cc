#include "pstrain/device.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <fmt/format.h>

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
  if (spec.index >= count)
    throw Error(ErrorCode::kUnsupported,
                fmt::format("--device {}: this machine has {} CUDA device{} (cuda:0{})", flag,
                            count, count == 1 ? "" : "s",
                            count == 1 ? "" : fmt::format(" to cuda:{}", count - 1)));
  return {::torch::kCUDA, static_cast<c10::DeviceIndex>(spec.index)};
}

}  // namespace psrt::pstrain
