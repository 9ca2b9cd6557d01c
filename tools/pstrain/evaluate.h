// Test-set evaluation, shared by pstrain and pseval.
#pragma once
#include <torch/torch.h>

#include "pstrain/data/dataset.h"
#include "pstrain/models/model.h"

namespace psrt::pstrain {

struct EvalResult {
  double loss = 0;      // mean cross-entropy
  double accuracy = 0;  // fraction of samples classified right
};

// Runs `model` in eval mode over all of `data` (CPU tensors) without gradients, on the device the
// model's parameters are on, batch by batch; restores its train/eval mode.
EvalResult evaluate(ClassifierImpl& model, const Dataset& data, std::int64_t batch_size = 1000);

}  // namespace psrt::pstrain
