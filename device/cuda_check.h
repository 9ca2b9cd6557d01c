// PSRT_CUDA_CHECK: the boundary between the CUDA runtime's error codes and psrt::Error. Wrap
// every CUDA runtime call whose failure the caller must hear about:
//
//   PSRT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
//
// A failing call throws psrt::Error whose message names the call as written, file:line, and the
// runtime's name and description of the error. Host-only; usable from .cc (g++) and .cu (nvcc)
// files, so it sticks to C++17 and the standard library.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "psrt/error.h"

namespace psrt::device::detail {

// The psrt code for a CUDA runtime error: a missing or unusable device is something this machine
// lacks (kUnsupported), a rejected argument is the caller's (kInvalidArgument), anything else
// (out of memory, a faulting kernel, a lost device) is a system failure.
inline ErrorCode cuda_error_code(cudaError_t err) noexcept {
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorDevicesUnavailable:
      return ErrorCode::kUnsupported;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
      return ErrorCode::kInvalidArgument;
    default:
      return ErrorCode::kSystem;
  }
}

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* call, const char* file,
                                          int line) {
  throw Error(cuda_error_code(err), std::string(call) + " failed at " + file + ":" +
                                        std::to_string(line) + ": " + cudaGetErrorName(err) + " (" +
                                        cudaGetErrorString(err) + ")");
}

}  // namespace psrt::device::detail

#define PSRT_CUDA_CHECK(call)                                                                    \
  do {                                                                                           \
    const cudaError_t psrt_cuda_check_err_ = (call);                                             \
    if (psrt_cuda_check_err_ != cudaSuccess) {                                                   \
      ::psrt::device::detail::throw_cuda_error(psrt_cuda_check_err_, #call, __FILE__, __LINE__); \
    }                                                                                            \
  } while (0)
