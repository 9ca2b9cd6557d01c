// LeNet-5 (LeCun et al. 1998) for small grey or colour images.
#pragma once

#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "pstrain/models/model.h"

namespace psrt::pstrain {

// conv 6@5x5 (padding 2) - pool - conv 16@5x5 - pool - fc 120 - fc 84 - fc classes.
//
// The padding of the first convolution makes a 28x28 input behave like the classic unpadded
// 32x32 one (a 28x28 map after conv1, 5x5x16 before fc1). Other sizes keep the same layers; fc1
// takes whatever the second pool leaves, so 32x32 inputs give 6x6x16 features. We use ReLU and
// 2x2 max-pooling, the modern substitutes for the paper's scaled tanh and trainable subsampling.
// For 1x28x28 and 10 classes: 61,706 parameters. Inputs must be at least 12x12.
class LeNetImpl : public ClassifierImpl {
 public:
  // Throws psrt::Error(kInvalidArgument) for a spec it cannot take.
  explicit LeNetImpl(const ModelSpec& spec);
  ::torch::Tensor forward(::torch::Tensor x) override;

 private:
  ModelSpec spec_;
  ::torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  ::torch::nn::Linear fc1_{nullptr}, fc2_{nullptr}, fc3_{nullptr};
};

}  // namespace psrt::pstrain
