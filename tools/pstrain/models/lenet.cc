#include "pstrain/models/lenet.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>

#include "psrt/torch.h"

namespace psrt::pstrain {
namespace {

namespace F = ::torch::nn::functional;

constexpr int64_t kKernel = 5;
constexpr int64_t kPadding = 2;
constexpr int64_t kPool = 2;

// The side of the map the second pool leaves from an input side `side`.
int64_t features_side(int64_t side) {
  const int64_t pooled1 = (side + 2 * kPadding - kKernel + 1) / kPool;
  return (pooled1 - kKernel + 1) / kPool;
}

}  // namespace

LeNetImpl::LeNetImpl(const ModelSpec& spec) : spec_(spec) {
  check_spec("lenet", spec, /*min_side=*/12,
             "its two 5x5 convolutions and 2x2 pools need a 12x12 input to leave a 1x1 map");
  const int64_t features = 16 * features_side(spec.height) * features_side(spec.width);
  conv1_ = register_module(
      "conv1",
      ::torch::nn::Conv2d(::torch::nn::Conv2dOptions(spec.channels, 6, kKernel).padding(kPadding)));
  conv2_ =
      register_module("conv2", ::torch::nn::Conv2d(::torch::nn::Conv2dOptions(6, 16, kKernel)));
  fc1_ = register_module("fc1", ::torch::nn::Linear(features, 120));
  fc2_ = register_module("fc2", ::torch::nn::Linear(120, 84));
  fc3_ = register_module("fc3", ::torch::nn::Linear(84, spec.classes));
}

::torch::Tensor LeNetImpl::forward(::torch::Tensor x) {
  // fc1's width follows the spec's image size, so another size would fail deep inside the
  // matrix product; say what was expected instead.
  check_input("lenet", spec_, x, /*exact_size=*/true);
  psrt::torch::pre_forward(*conv1_);
  x = F::max_pool2d(::torch::relu(conv1_->forward(x)), F::MaxPool2dFuncOptions(kPool));
  psrt::torch::pre_forward(*conv2_);
  x = F::max_pool2d(::torch::relu(conv2_->forward(x)), F::MaxPool2dFuncOptions(kPool));
  x = x.flatten(1);
  psrt::torch::pre_forward(*fc1_);
  x = ::torch::relu(fc1_->forward(x));
  psrt::torch::pre_forward(*fc2_);
  x = ::torch::relu(fc2_->forward(x));
  psrt::torch::pre_forward(*fc3_);
  return fc3_->forward(x);
}

}  // namespace psrt::pstrain
