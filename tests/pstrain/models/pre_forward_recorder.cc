#include "pre_forward_recorder.h"

#include <cstdlib>
#include <iostream>

#include "psrt/torch.h"

namespace psrt::pstrain::test_support {
namespace {

bool recording = false;
std::vector<const ::torch::nn::Module*>& calls() {
  static std::vector<const ::torch::nn::Module*> c;
  return c;
}

}  // namespace

PreForwardRecorder::PreForwardRecorder() {
  if (recording) {
    std::cerr << "PreForwardRecorder: one recorder at a time\n";
    std::abort();
  }
  recording = true;
  calls().clear();
}

PreForwardRecorder::~PreForwardRecorder() {
  recording = false;
}

const std::vector<const ::torch::nn::Module*>& PreForwardRecorder::modules() const {
  return calls();
}

}  // namespace psrt::pstrain::test_support

// Replaces psrt_torch's definition for this binary (see the header); a no-op when not recording,
// like the real one without a DistributedOptimizer.
void psrt::torch::pre_forward(const ::torch::nn::Module& module) {
  if (psrt::pstrain::test_support::recording)
    psrt::pstrain::test_support::calls().push_back(&module);
}
