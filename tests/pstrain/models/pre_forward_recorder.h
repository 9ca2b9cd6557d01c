// Records the modules the models pass to psrt::torch::pre_forward().
//
// pre_forward_recorder.cc defines psrt::torch::pre_forward for this test binary, so the linker
// takes it instead of psrt_torch's (whose archive member is then never pulled in: nothing here
// uses the DistributedOptimizer). The models stay untouched and the test sees exactly which
// modules each forward waits for.
#pragma once

#include <torch/nn/module.h>

#include <vector>

namespace psrt::pstrain::test_support {

// Starts recording on construction and stops on destruction. One at a time; single thread.
class PreForwardRecorder {
 public:
  PreForwardRecorder();
  ~PreForwardRecorder();
  PreForwardRecorder(const PreForwardRecorder&) = delete;
  PreForwardRecorder& operator=(const PreForwardRecorder&) = delete;

  // The modules passed since construction, in call order.
  const std::vector<const ::torch::nn::Module*>& modules() const;
};

}  // namespace psrt::pstrain::test_support
