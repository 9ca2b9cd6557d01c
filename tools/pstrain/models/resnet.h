// Residual networks (He et al. 2016) in torchvision's layout, with a stem for small images.
//
// One ResNetImpl serves both families: the ImageNet-depth ResNet-18/34/50 here (widths
// 64/128/256/512) and the CIFAR ResNets of cifar_resnet.h (widths 16/32/64); a ResNetConfig
// says which blocks, how many and how wide.
//
// Parameter names are torchvision's: conv1, bn1, layer<k>.<i>.{conv,bn}<j>,
// layer<k>.<i>.downsample.{0,1} (1x1 conv + BN on the shortcut), fc.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "pstrain/models/model.h"

namespace psrt::pstrain {

// 3x3 conv (stride s) - BN - ReLU - 3x3 conv - BN, plus the shortcut, then ReLU. The shortcut is
// the identity, or a 1x1 conv with stride s + BN where the shape changes.
class BasicBlockImpl : public ::torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlockImpl(int64_t in_planes, int64_t planes, int64_t stride);
  ::torch::Tensor forward(const ::torch::Tensor& x);

 private:
  ::torch::nn::Conv2d conv1_{nullptr};
  ::torch::nn::BatchNorm2d bn1_{nullptr};
  ::torch::nn::Conv2d conv2_{nullptr};
  ::torch::nn::BatchNorm2d bn2_{nullptr};
  ::torch::nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(BasicBlock);

// 1x1 conv - BN - ReLU - 3x3 conv (stride s) - BN - ReLU - 1x1 conv to 4x the planes - BN, plus
// the shortcut, then ReLU. The stride sits on the 3x3 conv, as in torchvision ("ResNet v1.5").
class BottleneckImpl : public ::torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;
  BottleneckImpl(int64_t in_planes, int64_t planes, int64_t stride);
  ::torch::Tensor forward(const ::torch::Tensor& x);

 private:
  ::torch::nn::Conv2d conv1_{nullptr};
  ::torch::nn::BatchNorm2d bn1_{nullptr};
  ::torch::nn::Conv2d conv2_{nullptr};
  ::torch::nn::BatchNorm2d bn2_{nullptr};
  ::torch::nn::Conv2d conv3_{nullptr};
  ::torch::nn::BatchNorm2d bn3_{nullptr};
  ::torch::nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(Bottleneck);

enum class ResNetBlock { kBasic, kBottleneck };

struct ResNetConfig {
  std::string name;  // for error messages, e.g. "resnet18"
  ResNetBlock block = ResNetBlock::kBasic;
  std::vector<int64_t> blocks;  // residual blocks per stage
  std::vector<int64_t> widths;  // planes per stage; the stem outputs widths[0] channels
};

// ResNet-18, -34 (BasicBlock: 2,2,2,2 and 3,4,6,3) and -50 (Bottleneck: 3,4,6,3), widths
// 64/128/256/512. Throws psrt::Error(kInvalidArgument) for another depth.
ResNetConfig torchvision_resnet_config(int64_t depth);

// stem: 3x3 conv (stride 1, padding 1) - BN - ReLU, no max-pool: the usual adaptation of
// torchvision's 7x7/2 conv + 3x3/2 pool stem to 32x32 images, which it would shrink to 8x8
// before the first stage. Then one stage per config entry, the first at stride 1 and every
// later one halving the map with stride 2 in its first block, then global average pooling and
// fc. Convs start from Kaiming-normal weights (fan_out, ReLU) as in torchvision; BN from 1 and 0.
// Any image size >= 1x1 works: the pooling adapts.
//
// With 3 input channels and 10 classes: resnet18 11,173,962 parameters, resnet34 21,282,122,
// resnet50 23,520,842.
class ResNetImpl : public ClassifierImpl {
 public:
  // Throws psrt::Error(kInvalidArgument) for a spec or config it cannot take.
  ResNetImpl(ResNetConfig config, const ModelSpec& spec);
  ::torch::Tensor forward(::torch::Tensor x) override;

 private:
  ResNetConfig config_;
  ModelSpec spec_;
  ::torch::nn::Conv2d conv1_{nullptr};
  ::torch::nn::BatchNorm2d bn1_{nullptr};
  std::vector<::torch::nn::Sequential> layers_;
  ::torch::nn::Linear fc_{nullptr};
};

}  // namespace psrt::pstrain
