#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/torch.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "pre_forward_recorder.h"
#include "psrt/error.h"
#include "pstrain/models/cifar_resnet.h"
#include "pstrain/models/model.h"
#include "pstrain/models/resnet.h"

namespace psrt::pstrain {
namespace {

const ModelSpec kMnist{.channels = 1, .height = 28, .width = 28, .classes = 10};
const ModelSpec kCifar{.channels = 3, .height = 32, .width = 32, .classes = 10};

int64_t parameter_count(const ::torch::nn::Module& model) {
  int64_t n = 0;
  for (const auto& p : model.parameters())
    n += p.numel();
  return n;
}

std::vector<std::string> parameter_names(const ::torch::nn::Module& model) {
  std::vector<std::string> names;
  for (const auto& item : model.named_parameters())
    names.push_back(item.key());
  return names;
}

::torch::Tensor images(int64_t batch, const ModelSpec& spec) {
  return ::torch::randn({batch, spec.channels, spec.height, spec.width});
}

// The error `f` throws; fails the test when it throws none or another type.
template <typename F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected psrt::Error";
  return Error(ErrorCode::kOk, "");
}

TEST(ModelRegistry, NamesTheEightModels) {
  EXPECT_EQ(model_names(),
            (std::vector<std::string>{"lenet", "resnet18", "resnet34", "resnet50", "resnet20",
                                      "resnet32", "resnet56", "resnet110"}));
}

TEST(ModelRegistry, UnknownNameListsTheKnownOnes) {
  const Error e = error_of([] { make_model("resnet19", kCifar); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  const std::string message = e.what();
  EXPECT_NE(message.find("'resnet19'"), std::string::npos) << message;
  for (const auto& name : model_names())
    EXPECT_NE(message.find(name), std::string::npos) << name << " missing from: " << message;
}

TEST(ModelRegistry, RefusesSpecsAModelCannotTake) {
  Error e = error_of([] { make_model("lenet", {.channels = 1, .height = 8, .width = 28}); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("lenet"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("height 8 is below 12"), std::string::npos) << e.what();

  e = error_of([] { make_model("lenet", {.channels = 1, .height = 28, .width = 11}); });
  EXPECT_NE(std::string(e.what()).find("width 11 is below 12"), std::string::npos) << e.what();
  EXPECT_NO_THROW(make_model("lenet", {.channels = 1, .height = 12, .width = 12}));

  e = error_of([] { make_model("resnet20", {.channels = 0}); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("resnet20"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("channels 0"), std::string::npos) << e.what();

  e = error_of([] { make_model("resnet18", {.channels = 3, .classes = -1}); });
  EXPECT_NE(std::string(e.what()).find("classes -1"), std::string::npos) << e.what();
}

TEST(ModelRegistry, RefusesDepthsOutsideAFamily) {
  EXPECT_EQ(error_of([] { cifar_resnet_config(21); }).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_of([] { cifar_resnet_config(2); }).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_of([] { torchvision_resnet_config(101); }).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(cifar_resnet_config(44).blocks, (std::vector<int64_t>{7, 7, 7}));
}

TEST(ModelForward, RefusesImagesOfAnotherShape) {
  auto lenet = make_model("lenet", kMnist);
  Error e = error_of([&] { lenet->forward(::torch::zeros({2, 1, 32, 32})); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("[B, 1, 28, 28]"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("[2, 1, 32, 32]"), std::string::npos) << e.what();

  // A ResNet takes any image size, but not another channel count.
  auto resnet = make_model("resnet20", kCifar);
  resnet->eval();
  EXPECT_EQ(resnet->forward(::torch::zeros({1, 3, 20, 24})).sizes(), (std::vector<int64_t>{1, 10}));
  e = error_of([&] { resnet->forward(::torch::zeros({2, 1, 32, 32})); });
  EXPECT_NE(std::string(e.what()).find("[B, 3, H, W]"), std::string::npos) << e.what();
}

// Exact counts pin the architectures: a changed kernel, stride-free stem, missing BN or extra bias
// shows up here.
TEST(ModelParameters, LeNetHasTheClassicCount) {
  // conv1 6*(1*25)+6 = 156, conv2 16*(6*25)+16 = 2,416, fc1 120*400+120 = 48,120,
  // fc2 84*120+84 = 10,164, fc3 10*84+10 = 850.
  EXPECT_EQ(parameter_count(*make_model("lenet", kMnist)), 61'706);
}

TEST(ModelParameters, TorchvisionResNetsWithTheSmallImageStem) {
  // torchvision's counts at 1000 classes (11,689,512 / 21,797,672 / 25,557,032), less the 7x7
  // stem conv's 9,408 plus the 3x3 one's 1,728, less fc's (512 or 2048)*990 + 990.
  EXPECT_EQ(parameter_count(*make_model("resnet18", kCifar)), 11'173'962);
  EXPECT_EQ(parameter_count(*make_model("resnet34", kCifar)), 21'282'122);
  EXPECT_EQ(parameter_count(*make_model("resnet50", kCifar)), 23'520'842);
}

TEST(ModelParameters, CifarResNetsWithProjectionShortcuts) {
  // By hand, n blocks per stage, 10 classes (a BN holds 2 per channel):
  //   stem     3*16*9 + 2*16                                        =     464
  //   stage 1  n * (2*16*16*9 + 2*2*16)             = n * 4,672
  //   stage 2  (16*32*9 + 32*32*9 + 2*2*32) + (n-1) * (2*32*32*9 + 2*2*32)
  //                                                 = 13,952 + (n-1) * 18,560
  //   stage 3  (32*64*9 + 64*64*9 + 2*2*64) + (n-1) * (2*64*64*9 + 2*2*64)
  //                                                 = 55,552 + (n-1) * 73,984
  //   option B projections  16*32 + 2*32 + 32*64 + 2*64          =   2,752
  //   fc       64*10 + 10                                         =     650
  // n = 3: 464 + 14,016 + 51,072 + 203,520 + 2,752 + 650 = 272,474 (option A: 269,722).
  EXPECT_EQ(parameter_count(*make_model("resnet20", kCifar)), 272'474);
  // n = 5: 464 + 23,360 + 88,192 + 351,488 + 2,752 + 650
  EXPECT_EQ(parameter_count(*make_model("resnet32", kCifar)), 466'906);
  // n = 9: 464 + 42,048 + 162,432 + 647,424 + 2,752 + 650
  EXPECT_EQ(parameter_count(*make_model("resnet56", kCifar)), 855'770);
  // n = 18: 464 + 84,096 + 329,472 + 1,313,280 + 2,752 + 650
  EXPECT_EQ(parameter_count(*make_model("resnet110", kCifar)), 1'730'714);
}

TEST(ModelParameters, ResNet18NamesAreTorchvisions) {
  const auto names = parameter_names(*make_model("resnet18", kCifar));
  const std::set<std::string> set(names.begin(), names.end());
  for (const char* expected :
       {"conv1.weight", "bn1.weight", "bn1.bias", "layer1.0.conv1.weight", "layer1.1.bn2.bias",
        "layer2.0.downsample.0.weight", "layer2.0.downsample.1.weight",
        "layer2.0.downsample.1.bias", "layer4.1.bn2.weight", "fc.weight", "fc.bias"})
    EXPECT_TRUE(set.contains(expected)) << expected;
  // Stage 1 keeps the stem's 64 channels at stride 1: an identity shortcut.
  EXPECT_FALSE(set.contains("layer1.0.downsample.0.weight"));
  // Registration (= key and push) order follows the forward.
  EXPECT_EQ(names.front(), "conv1.weight");
  EXPECT_EQ(names[3], "layer1.0.conv1.weight");
  EXPECT_EQ(names[4], "layer1.0.bn1.weight");
  EXPECT_EQ(names.back(), "fc.bias");
}

TEST(ModelParameters, BottleneckAndCifarNames) {
  const auto r50 = parameter_names(*make_model("resnet50", kCifar));
  const std::set<std::string> r50_set(r50.begin(), r50.end());
  EXPECT_TRUE(r50_set.contains("layer1.0.downsample.0.weight"));  // 64 -> 256 channels
  EXPECT_TRUE(r50_set.contains("layer3.5.conv3.weight"));
  EXPECT_TRUE(r50_set.contains("layer4.2.bn3.bias"));

  const auto r20 = parameter_names(*make_model("resnet20", kCifar));
  const std::set<std::string> r20_set(r20.begin(), r20.end());
  EXPECT_TRUE(r20_set.contains("layer3.2.bn2.weight"));
  EXPECT_TRUE(r20_set.contains("layer2.0.downsample.0.weight"));
  EXPECT_FALSE(r20_set.contains("layer1.0.downsample.0.weight"));
  EXPECT_FALSE(r20_set.contains("layer4.0.conv1.weight"));

  EXPECT_EQ(parameter_names(*make_model("lenet", kMnist)),
            (std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                      "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias",
                                      "fc3.weight", "fc3.bias"}));
}

TEST(ModelParameters, ResNetInitialisation) {
  auto model = make_model("resnet18", kCifar);
  // Kaiming normal, fan_out, ReLU gain: std = sqrt(2 / (out_channels * 3 * 3)).
  const auto params = model->named_parameters();
  const auto w = params["layer4.0.conv2.weight"];
  const double expected = std::sqrt(2.0 / (512 * 9));
  EXPECT_NEAR(w.std().item<double>(), expected, 0.03 * expected);
  EXPECT_NEAR(w.mean().item<double>(), 0.0, 0.03 * expected);
  EXPECT_TRUE(::torch::equal(params["layer4.0.bn2.weight"], ::torch::ones({512})));
  EXPECT_TRUE(::torch::equal(params["layer4.0.bn2.bias"], ::torch::zeros({512})));
  // PyTorch's BatchNorm defaults.
  for (const auto& module : model->modules())
    if (const auto* bn = module->as<::torch::nn::BatchNorm2d>()) {
      EXPECT_DOUBLE_EQ(bn->options.momentum().value(), 0.1);
      EXPECT_DOUBLE_EQ(bn->options.eps(), 1e-5);
    }
}

class EveryModel : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { ::torch::manual_seed(1); }
};

TEST_P(EveryModel, NamesAreUnique) {
  const auto names = parameter_names(*make_model(GetParam(), kCifar));
  const std::set<std::string> unique(names.begin(), names.end());
  EXPECT_EQ(unique.size(), names.size());
}

TEST_P(EveryModel, LogitsShapeForMnistAndCifarImages) {
  ::torch::NoGradGuard no_grad;
  const ModelSpec cifar100{.channels = 3, .height = 32, .width = 32, .classes = 100};
  for (const auto& spec : {kMnist, cifar100}) {
    auto model = make_model(GetParam(), spec);
    model->eval();
    const auto out = model->forward(images(2, spec));
    EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, spec.classes}));
    EXPECT_EQ(out.dtype(), ::torch::kFloat32);
  }
}

TEST_P(EveryModel, TrainStepGivesEveryParameterAGradient) {
  auto model = make_model(GetParam(), kMnist);
  model->train();
  const auto logits = model->forward(images(2, kMnist));
  ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{2, 10}));
  ::torch::nn::functional::cross_entropy(logits, ::torch::tensor({3, 7})).backward();
  for (const auto& item : model->named_parameters()) {
    const auto& grad = item.value().grad();
    ASSERT_TRUE(grad.defined()) << item.key();
    EXPECT_EQ(grad.sizes(), item.value().sizes()) << item.key();
    EXPECT_TRUE(grad.isfinite().all().item<bool>()) << item.key();
    EXPECT_GT(grad.abs().sum().item<double>(), 0.0) << item.key();
  }
}

TEST_P(EveryModel, EvalIsDeterministicAndPerSample) {
  ::torch::NoGradGuard no_grad;
  auto model = make_model(GetParam(), kMnist);
  // Move the BatchNorm running statistics off their initial values first.
  model->train();
  model->forward(images(2, kMnist));
  model->eval();
  const auto x = images(2, kMnist);
  const auto first = model->forward(x);
  EXPECT_TRUE(::torch::equal(first, model->forward(x)));
  // Eval takes batch 1, and a sample's logits do not depend on the rest of its batch.
  const auto alone = model->forward(x.slice(0, 0, 1));
  EXPECT_TRUE(::torch::allclose(alone, first.slice(0, 0, 1), 1e-4, 1e-4))
      << alone << first.slice(0, 0, 1);
}

// What a DistributedOptimizer relies on: the forward gates every parameter through some
// pre_forward call, and at block granularity (never the whole model at once, which would wait for
// all the pulls before the first layer could start).
TEST_P(EveryModel, PreForwardCoversEveryParameterBlockByBlock) {
  auto model = make_model(GetParam(), kCifar);
  std::set<const void*> covered;
  std::size_t calls = 0;
  {
    test_support::PreForwardRecorder recorder;
    model->train();
    model->forward(images(2, kCifar));
    calls = recorder.modules().size();
    for (const auto* module : recorder.modules()) {
      EXPECT_NE(module, model.get()) << "the whole model waits at once";
      for (const auto& p : module->parameters(/*recurse=*/true))
        covered.insert(p.unsafeGetTensorImpl());
    }
  }
  for (const auto& item : model->named_parameters())
    EXPECT_TRUE(covered.contains(item.value().unsafeGetTensorImpl()))
        << item.key() << " is not behind any pre_forward call";
  // LeNet gates 5 layers; a ResNet its stem (conv1, bn1), each block and fc.
  std::size_t blocks = 0;
  for (const auto& item : model->named_children())
    if (item.key().starts_with("layer")) blocks += item.value()->children().size();
  EXPECT_EQ(calls, GetParam() == "lenet" ? 5 : 3 + blocks);
}

INSTANTIATE_TEST_SUITE_P(Models, EveryModel, ::testing::ValuesIn(model_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace psrt::pstrain
