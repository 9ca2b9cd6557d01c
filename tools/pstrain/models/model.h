// pstrain's image classifiers and the registry that builds them by name.
//
//   psrt::pstrain::ModelSpec spec{.channels = 3, .height = 32, .width = 32, .classes = 10};
//   auto model = psrt::pstrain::make_model("resnet20", spec);
//   torch::Tensor logits = model->forward(images);   // [B, 3, 32, 32] -> [B, 10]
//
// Every model calls psrt::torch::pre_forward() at the top of each block that owns parameters
// (the stem, every residual block, the head; LeNet per layer), so a DistributedOptimizer lets
// each block start as soon as its own pulled weights are in. Together these calls cover every
// parameter, which keeps the optimizer from falling back to waiting for all pulls in step().
//
// Parameter names follow torchvision ("layer1.0.conv1.weight", "fc.bias"); they are the keys the
// parameter servers store, so they are stable across builds and unique within a model.
//
// Contracts: construction and forward() are not thread-safe on one model (one training thread).
// Models work in train() and eval(); train() needs batch >= 2 (BatchNorm statistics), eval() any
// batch >= 1.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace psrt::pstrain {

// The input images [B, channels, height, width] and the number of classes a model is built for.
struct ModelSpec {
  int64_t channels = 1, height = 28, width = 28, classes = 10;
};

// A classifier: forward(images [B, C, H, W] float) -> logits [B, classes].
class ClassifierImpl : public ::torch::nn::Module {
 public:
  virtual ::torch::Tensor forward(::torch::Tensor x) = 0;
};

// Builds a model by name: lenet, resnet18, resnet34, resnet50, resnet20, resnet32, resnet56,
// resnet110. Throws psrt::Error(kInvalidArgument) for an unknown name (the message lists the
// known ones) and for a spec the model cannot take (the message says which field and why).
std::shared_ptr<ClassifierImpl> make_model(const std::string& name, const ModelSpec& spec);

// The names make_model() accepts, in the order above.
const std::vector<std::string>& model_names();

// For model constructors: throws psrt::Error(kInvalidArgument) naming `model` and the field when
// a count in `spec` is not positive, or when height or width is below `min_side`, with `why` (the
// reason for that minimum) in the message.
void check_spec(const std::string& model, const ModelSpec& spec, int64_t min_side = 1,
                const std::string& why = "");

// For model forwards: throws psrt::Error(kInvalidArgument) naming `model` unless `x` is
// [B >= 1, spec.channels, H, W], with H and W equal to the spec's when `exact_size` (a model
// whose layer widths depend on the image size).
void check_input(const std::string& model, const ModelSpec& spec, const ::torch::Tensor& x,
                 bool exact_size);

}  // namespace psrt::pstrain
