#include "pstrain/models/resnet.h"

#include <fmt/format.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/init.h>

#include <utility>

#include "psrt/error.h"
#include "psrt/torch.h"

namespace psrt::pstrain {
namespace {

namespace nn = ::torch::nn;

nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return nn::Conv2d(
      nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

// The projection shortcut (1x1 conv with the block's stride + BN) where the block changes the
// map's shape; none (an identity shortcut) where it does not.
nn::Sequential make_downsample(int64_t in, int64_t out, int64_t stride) {
  if (stride == 1 && in == out) return nullptr;
  return nn::Sequential(conv(in, out, 1, stride), nn::BatchNorm2d(out));
}

template <typename Block>
nn::Sequential make_stage(int64_t& in_planes, int64_t planes, int64_t blocks, int64_t stride) {
  nn::Sequential stage;
  for (int64_t i = 0; i < blocks; ++i) {
    stage->push_back(Block(in_planes, planes, i == 0 ? stride : 1));
    in_planes = planes * Block::ContainedType::kExpansion;
  }
  return stage;
}

void check_config(const ResNetConfig& config) {
  bool ok = !config.blocks.empty() && config.blocks.size() == config.widths.size();
  for (std::size_t i = 0; ok && i < config.blocks.size(); ++i)
    ok = config.blocks[i] >= 1 && config.widths[i] >= 1;
  if (!ok)
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("{}: a ResNet needs as many stage widths as stage block counts, all "
                    ">= 1 (got blocks [{}], widths [{}])",
                    config.name, fmt::join(config.blocks, ", "), fmt::join(config.widths, ", ")));
}

}  // namespace

BasicBlockImpl::BasicBlockImpl(int64_t in_planes, int64_t planes, int64_t stride) {
  // Registered in forward order: parameter order is the order their pulls are queued in.
  conv1_ = register_module("conv1", conv(in_planes, planes, 3, stride));
  bn1_ = register_module("bn1", nn::BatchNorm2d(planes));
  conv2_ = register_module("conv2", conv(planes, planes, 3, 1));
  bn2_ = register_module("bn2", nn::BatchNorm2d(planes));
  if (auto shortcut = make_downsample(in_planes, planes * kExpansion, stride))
    downsample_ = register_module("downsample", shortcut);
}

::torch::Tensor BasicBlockImpl::forward(const ::torch::Tensor& x) {
  psrt::torch::pre_forward(*this);
  auto out = bn1_->forward(conv1_->forward(x)).relu_();
  out = bn2_->forward(conv2_->forward(out));
  out += downsample_ ? downsample_->forward(x) : x;
  return out.relu_();
}

BottleneckImpl::BottleneckImpl(int64_t in_planes, int64_t planes, int64_t stride) {
  conv1_ = register_module("conv1", conv(in_planes, planes, 1, 1));
  bn1_ = register_module("bn1", nn::BatchNorm2d(planes));
  conv2_ = register_module("conv2", conv(planes, planes, 3, stride));
  bn2_ = register_module("bn2", nn::BatchNorm2d(planes));
  conv3_ = register_module("conv3", conv(planes, planes * kExpansion, 1, 1));
  bn3_ = register_module("bn3", nn::BatchNorm2d(planes * kExpansion));
  if (auto shortcut = make_downsample(in_planes, planes * kExpansion, stride))
    downsample_ = register_module("downsample", shortcut);
}

::torch::Tensor BottleneckImpl::forward(const ::torch::Tensor& x) {
  psrt::torch::pre_forward(*this);
  auto out = bn1_->forward(conv1_->forward(x)).relu_();
  out = bn2_->forward(conv2_->forward(out)).relu_();
  out = bn3_->forward(conv3_->forward(out));
  out += downsample_ ? downsample_->forward(x) : x;
  return out.relu_();
}

ResNetConfig torchvision_resnet_config(int64_t depth) {
  const std::vector<int64_t> widths{64, 128, 256, 512};
  switch (depth) {
    case 18:
      return {"resnet18", ResNetBlock::kBasic, {2, 2, 2, 2}, widths};
    case 34:
      return {"resnet34", ResNetBlock::kBasic, {3, 4, 6, 3}, widths};
    case 50:
      return {"resnet50", ResNetBlock::kBottleneck, {3, 4, 6, 3}, widths};
    default:
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("no ResNet of depth {}: the torchvision-layout ResNets here are "
                              "18, 34 and 50 deep",
                              depth));
  }
}

ResNetImpl::ResNetImpl(ResNetConfig config, const ModelSpec& spec)
    : config_(std::move(config)), spec_(spec) {
  check_spec(config_.name, spec_);
  check_config(config_);
  int64_t planes = config_.widths[0];
  conv1_ = register_module("conv1", conv(spec_.channels, planes, 3, 1));
  bn1_ = register_module("bn1", nn::BatchNorm2d(planes));
  for (std::size_t i = 0; i < config_.blocks.size(); ++i) {
    const int64_t stride = i == 0 ? 1 : 2;
    auto stage = config_.block == ResNetBlock::kBasic
                     ? make_stage<BasicBlock>(planes, config_.widths[i], config_.blocks[i], stride)
                     : make_stage<Bottleneck>(planes, config_.widths[i], config_.blocks[i], stride);
    layers_.emplace_back(register_module(fmt::format("layer{}", i + 1), stage));
  }
  fc_ = register_module("fc", nn::Linear(planes, spec_.classes));

  for (auto& module : modules(/*include_self=*/false))
    if (auto* c = module->as<nn::Conv2d>())
      nn::init::kaiming_normal_(c->weight, /*a=*/0.0, ::torch::kFanOut, ::torch::kReLU);
}

::torch::Tensor ResNetImpl::forward(::torch::Tensor x) {
  check_input(config_.name, spec_, x, /*exact_size=*/false);
  // The stem's and the head's layers belong to this module directly; waiting for `*this` would
  // wait for every block's weights, so each waits for its own.
  psrt::torch::pre_forward(*conv1_);
  psrt::torch::pre_forward(*bn1_);
  x = bn1_->forward(conv1_->forward(x)).relu_();
  for (auto& layer : layers_)
    x = layer->forward(x);  // each block waits for its own weights
  x = nn::functional::adaptive_avg_pool2d(x, nn::functional::AdaptiveAvgPool2dFuncOptions(1))
          .flatten(1);
  psrt::torch::pre_forward(*fc_);
  return fc_->forward(x);
}

}  // namespace psrt::pstrain
