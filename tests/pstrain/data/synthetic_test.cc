#include "pstrain/data/synthetic.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include "psrt/error.h"
#include "pstrain/data/batch.h"
#include "pstrain/data/dataset.h"
#include "pstrain/data/shard.h"
#include "test_files.h"

namespace psrt::pstrain {
namespace {

using testing::int_values;

TEST(Synthetic, ShapesPerSpec) {
  const SyntheticSpec spec{.train_size = 500,
                           .test_size = 130,
                           .channels = 3,
                           .height = 8,
                           .width = 6,
                           .classes = 4,
                           .seed = 5};
  const DataSplit data = load_dataset("synthetic", "ignored", spec);
  EXPECT_EQ(data.train.images.sizes().vec(), (std::vector<int64_t>{500, 3, 8, 6}));
  EXPECT_EQ(data.test.images.sizes().vec(), (std::vector<int64_t>{130, 3, 8, 6}));
  EXPECT_EQ(data.train.images.scalar_type(), torch::kFloat32);
  EXPECT_EQ(data.train.labels.sizes().vec(), (std::vector<int64_t>{500}));
  EXPECT_EQ(data.train.labels.scalar_type(), torch::kInt64);
  EXPECT_EQ(data.train.num_classes, 4);
  EXPECT_EQ(data.train.name, "synthetic");
  EXPECT_FALSE(data.train.augment);
}

TEST(Synthetic, DefaultSpecIsFashionMnistShaped) {
  const DataSplit data = load_dataset("synthetic", "");
  EXPECT_EQ(data.train.images.sizes().vec(), (std::vector<int64_t>{4096, 1, 28, 28}));
  EXPECT_EQ(data.test.images.sizes().vec(), (std::vector<int64_t>{1024, 1, 28, 28}));
  EXPECT_EQ(data.test.num_classes, 10);
}

TEST(Synthetic, DeterministicFromTheSeed) {
  const SyntheticSpec spec{.train_size = 300, .test_size = 100, .seed = 77};
  const DataSplit a = make_synthetic(spec);
  const DataSplit b = make_synthetic(spec);
  EXPECT_TRUE(torch::equal(a.train.images, b.train.images));
  EXPECT_TRUE(torch::equal(a.train.labels, b.train.labels));
  EXPECT_TRUE(torch::equal(a.test.images, b.test.images));
  EXPECT_TRUE(torch::equal(a.test.labels, b.test.labels));
  // The same numbers whatever the intra-op thread count.
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const DataSplit serial = make_synthetic(spec);
  at::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(a.train.images, serial.train.images));

  SyntheticSpec other = spec;
  other.seed = 78;
  const DataSplit c = make_synthetic(other);
  EXPECT_FALSE(torch::equal(a.train.images, c.train.images));
  EXPECT_FALSE(torch::equal(a.train.labels, c.train.labels));
  // Train and test are different draws.
  EXPECT_FALSE(torch::equal(a.train.images.narrow(0, 0, 100), a.test.images));
}

TEST(Synthetic, BalancedShuffledLabelsAndUnitVariancePixels) {
  const SyntheticSpec spec{.train_size = 1003, .test_size = 200, .classes = 10, .seed = 3};
  const DataSplit data = make_synthetic(spec);
  const std::vector<int64_t> counts = int_values(torch::bincount(data.train.labels, {}, 10));
  EXPECT_EQ(counts, (std::vector<int64_t>{101, 101, 101, 100, 100, 100, 100, 100, 100, 100}));
  EXPECT_EQ(int_values(torch::bincount(data.test.labels, {}, 10)), std::vector<int64_t>(10, 20));
  // Shuffled: not the 0, 1, 2, ... cycle.
  EXPECT_FALSE(torch::equal(data.train.labels, torch::arange(1003, torch::kInt64).remainder(10)));
  EXPECT_NEAR(data.train.images.mean().item<float>(), 0.0, 0.1);
  EXPECT_NEAR(data.train.images.std().item<float>(), 1.0, 0.05);
}

TEST(Synthetic, ASoftmaxRegressionLearnsItInAFewHundredSteps) {
  const SyntheticSpec spec{.train_size = 2048, .test_size = 512, .seed = 11};
  const DataSplit data = make_synthetic(spec);
  const int64_t features = 28 * 28;
  torch::Tensor weight = torch::zeros({features, 10}, torch::requires_grad());
  torch::Tensor bias = torch::zeros({10}, torch::requires_grad());
  const torch::Tensor shard = epoch_shard(spec.train_size, 0, 1, 1, 0);
  for (int64_t step = 0; step < 200; ++step) {
    const Batch b = make_batch(data.train, shard, (step % 32) * 64, 64, 0);
    const torch::Tensor logits = b.images.reshape({64, features}).matmul(weight) + bias;
    const torch::Tensor loss = torch::nll_loss(torch::log_softmax(logits, 1), b.labels);
    loss.backward();
    torch::NoGradGuard no_grad;
    weight.sub_(weight.grad() * 0.01);
    bias.sub_(bias.grad() * 0.01);
    weight.mutable_grad().zero_();
    bias.mutable_grad().zero_();
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor predicted =
      (data.test.images.reshape({-1, features}).matmul(weight) + bias).argmax(1);
  const double accuracy = predicted.eq(data.test.labels).to(torch::kDouble).mean().item<double>();
  EXPECT_GT(accuracy, 0.5) << "chance is 0.1";
}

TEST(Synthetic, BadSpec) {
  EXPECT_PSRT_ERROR(make_synthetic({.train_size = 0}), ErrorCode::kInvalidArgument,
                    "sizes must be positive", "train_size 0");
  EXPECT_PSRT_ERROR(make_synthetic({.classes = 1}), ErrorCode::kInvalidArgument, "classes >= 2",
                    "classes 1");
}

}  // namespace
}  // namespace psrt::pstrain
