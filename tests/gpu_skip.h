// How tests that need a GPU skip without one: the reason comes from the same query psrt makes
// (device::cuda_device_count), so a skip says exactly what psrt itself would report.
//
//   TEST(Suite, NeedsAGpu) { PSRT_REQUIRE_GPU(); ... }
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "device/cuda_device.h"

namespace psrt::testing {

// Empty when a CUDA device is usable, else why not.
inline std::string no_gpu_reason() {
  std::string why;
  return device::cuda_device_count(&why) > 0 ? std::string() : why;
}

}  // namespace psrt::testing

#define PSRT_REQUIRE_GPU()                                                     \
  do {                                                                         \
    if (auto psrt_why_ = ::psrt::testing::no_gpu_reason(); !psrt_why_.empty()) \
      GTEST_SKIP() << "no usable CUDA device (" << psrt_why_ << ")";           \
  } while (0)
