// load_dataset("fashion-mnist" / "mnist"): file discovery, validation, normalisation, and the
// real Debian Fashion-MNIST when it is installed.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "psrt/error.h"
#include "pstrain/data/dataset.h"
#include "test_files.h"

namespace psrt::pstrain {
namespace {

using testing::counting_bytes;
using testing::idx_bytes;
using testing::TempDir;

constexpr uint32_t kSide = 28;
constexpr size_t kImage = kSide * kSide;

// Writes a complete small MNIST-layout directory: `train` and `test` samples, image i filled
// with counting bytes starting at i, label i = labels[i % labels.size()].
void write_mnist_dir(const TempDir& dir, uint32_t train, uint32_t test, bool gzip,
                     const std::vector<uint8_t>& labels = {3, 1, 4, 1, 5, 9, 2, 6}) {
  const auto write = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
    if (gzip) {
      testing::write_gzip(dir.file(name + ".gz"), bytes);
    } else {
      testing::write_file(dir.file(name), bytes);
    }
  };
  for (const auto& [prefix, count] : {std::pair{"train", train}, std::pair{"t10k", test}}) {
    std::vector<uint8_t> images;
    std::vector<uint8_t> label_bytes;
    for (uint32_t i = 0; i < count; ++i) {
      const std::vector<uint8_t> image = counting_bytes(kImage, static_cast<uint8_t>(i));
      images.insert(images.end(), image.begin(), image.end());
      label_bytes.push_back(labels[i % labels.size()]);
    }
    write(std::string(prefix) + "-images-idx3-ubyte", idx_bytes({count, kSide, kSide}, images));
    write(std::string(prefix) + "-labels-idx1-ubyte", idx_bytes({count}, label_bytes));
  }
}

class MnistFiles : public ::testing::TestWithParam<bool> {};

TEST_P(MnistFiles, FashionMnistNormalisationAndLabels) {
  TempDir dir;
  write_mnist_dir(dir, 5, 3, GetParam());
  const DataSplit data = load_dataset("fashion-mnist", dir.path());

  EXPECT_EQ(data.train.name, "fashion-mnist");
  EXPECT_EQ(data.train.num_classes, 10);
  EXPECT_FALSE(data.train.augment);
  EXPECT_FALSE(data.test.augment);
  ASSERT_EQ(data.train.images.sizes().vec(), (std::vector<int64_t>{5, 1, 28, 28}));
  ASSERT_EQ(data.test.images.sizes().vec(), (std::vector<int64_t>{3, 1, 28, 28}));
  EXPECT_EQ(data.train.images.scalar_type(), torch::kFloat32);
  EXPECT_EQ(data.train.labels.scalar_type(), torch::kInt64);

  // Image 2, pixel (row 5, col 7) is byte (2 + 5 * 28 + 7) mod 256 = 149.
  const float pixel = data.train.images[2][0][5][7].item<float>();
  EXPECT_NEAR(pixel, (149 / 255.0 - 0.2860) / 0.3530, 1e-6);
  // Every pixel: x = counting byte, out = (x/255 - mean)/std.
  const torch::Tensor first = data.test.images[1][0].reshape({-1});
  for (int64_t p = 0; p < static_cast<int64_t>(kImage); ++p) {
    const double x = static_cast<uint8_t>(1 + p);
    ASSERT_NEAR(first[p].item<float>(), (x / 255.0 - 0.2860) / 0.3530, 1e-6) << "pixel " << p;
  }
  EXPECT_EQ(testing::int_values(data.train.labels), (std::vector<int64_t>{3, 1, 4, 1, 5}));
  EXPECT_EQ(testing::int_values(data.test.labels), (std::vector<int64_t>{3, 1, 4}));
}

TEST_P(MnistFiles, MnistUsesItsOwnStatistics) {
  TempDir dir;
  write_mnist_dir(dir, 2, 2, GetParam());
  const DataSplit data = load_dataset("mnist", dir.path());
  EXPECT_EQ(data.train.name, "mnist");
  // Image 1 pixel 0 is byte 1; image 0 pixel 255 is byte 255.
  EXPECT_NEAR(data.train.images[1][0][0][0].item<float>(), (1 / 255.0 - 0.1307) / 0.3081, 1e-6);
  EXPECT_NEAR(data.train.images[0][0][9][3].item<float>(), (255 / 255.0 - 0.1307) / 0.3081, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(RawAndGzip, MnistFiles, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Gzip" : "Raw";
                         });

TEST(Mnist, PrefersWhicheverOfRawAndGzipExists) {
  TempDir dir;
  write_mnist_dir(dir, 2, 2, /*gzip=*/true);
  // Replace the gzip train labels with a raw file: it is found and used.
  std::filesystem::remove(dir.file("train-labels-idx1-ubyte.gz"));
  testing::write_file(dir.file("train-labels-idx1-ubyte"), idx_bytes({2}, {7, 8}));
  const DataSplit data = load_dataset("fashion-mnist", dir.path());
  EXPECT_EQ(testing::int_values(data.train.labels), (std::vector<int64_t>{7, 8}));
}

TEST(Mnist, MissingFashionMnistFileSaysHowToInstallIt) {
  TempDir dir;
  const std::string path = dir.file("train-images-idx3-ubyte");
  EXPECT_PSRT_ERROR(load_dataset("fashion-mnist", dir.path()), ErrorCode::kNotFound,
                    "missing " + path + " (or " + path + ".gz)",
                    "apt-get install dataset-fashion-mnist", "scripts/install_deps.sh");
}

TEST(Mnist, MissingMnistFileSaysWhereToGetIt) {
  TempDir dir;
  write_mnist_dir(dir, 2, 2, false);
  std::filesystem::remove(dir.file("t10k-labels-idx1-ubyte"));
  EXPECT_PSRT_ERROR(load_dataset("mnist", dir.path()), ErrorCode::kNotFound,
                    "missing " + dir.file("t10k-labels-idx1-ubyte"), "MNIST site", "--data-dir");
}

TEST(Mnist, CountMismatchNamesBothFiles) {
  TempDir dir;
  write_mnist_dir(dir, 4, 2, false);
  testing::write_file(dir.file("train-labels-idx1-ubyte"), idx_bytes({3}, {1, 2, 3}));
  EXPECT_PSRT_ERROR(load_dataset("fashion-mnist", dir.path()), ErrorCode::kInvalidArgument,
                    "'" + dir.file("train-images-idx3-ubyte") + "' holds 4 images",
                    "'" + dir.file("train-labels-idx1-ubyte") + "' holds 3 labels");
}

TEST(Mnist, LabelOfTenIsRefused) {
  TempDir dir;
  write_mnist_dir(dir, 3, 2, false);
  testing::write_file(dir.file("t10k-labels-idx1-ubyte"), idx_bytes({2}, {9, 10}));
  EXPECT_PSRT_ERROR(load_dataset("fashion-mnist", dir.path()), ErrorCode::kInvalidArgument,
                    "'" + dir.file("t10k-labels-idx1-ubyte") + "' label 1 is 10, outside [0, 10)");
}

TEST(Mnist, ImagesMustBe28x28) {
  TempDir dir;
  write_mnist_dir(dir, 2, 2, false);
  testing::write_file(dir.file("train-images-idx3-ubyte"),
                      idx_bytes({2, 27, 28}, counting_bytes(2 * 27 * 28)));
  EXPECT_PSRT_ERROR(load_dataset("fashion-mnist", dir.path()), ErrorCode::kInvalidArgument,
                    dir.file("train-images-idx3-ubyte"), "idx3 images of 28x28",
                    "found dims [2, 27, 28]");
}

TEST(Mnist, LabelsMustBeIdx1) {
  TempDir dir;
  write_mnist_dir(dir, 2, 2, false);
  testing::write_file(dir.file("train-labels-idx1-ubyte"), idx_bytes({2, 1}, {1, 2}));
  EXPECT_PSRT_ERROR(load_dataset("fashion-mnist", dir.path()), ErrorCode::kInvalidArgument,
                    dir.file("train-labels-idx1-ubyte"), "should hold idx1 labels",
                    "found dims [2, 1]");
}

TEST(Mnist, BadFileErrorComesFromTheIdxReaderNamingIt) {
  TempDir dir;
  write_mnist_dir(dir, 2, 2, false);
  testing::write_file(dir.file("t10k-images-idx3-ubyte"), {1, 2, 3, 4});
  EXPECT_PSRT_ERROR(load_dataset("fashion-mnist", dir.path()), ErrorCode::kInvalidArgument,
                    dir.file("t10k-images-idx3-ubyte"), "bad magic");
}

// The real data set from Debian's dataset-fashion-mnist.
TEST(RealFashionMnist, ShapesAndExactClassBalance) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(dir)) {
    GTEST_SKIP() << dir << " is missing: apt-get install dataset-fashion-mnist";
  }
  const auto start = std::chrono::steady_clock::now();
  const DataSplit data = load_dataset("fashion-mnist", "");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("load_seconds", std::to_string(seconds));
  std::printf("Fashion-MNIST load: %.3f s\n", seconds);

  EXPECT_EQ(data.train.images.sizes().vec(), (std::vector<int64_t>{60000, 1, 28, 28}));
  EXPECT_EQ(data.test.images.sizes().vec(), (std::vector<int64_t>{10000, 1, 28, 28}));
  EXPECT_EQ(data.train.labels.sizes().vec(), (std::vector<int64_t>{60000}));
  EXPECT_EQ(data.test.labels.sizes().vec(), (std::vector<int64_t>{10000}));
  EXPECT_EQ(testing::int_values(torch::bincount(data.train.labels)),
            std::vector<int64_t>(10, 6000));
  EXPECT_EQ(testing::int_values(torch::bincount(data.test.labels)), std::vector<int64_t>(10, 1000));
  // Normalised with the standard statistics: pixel values span [(0-m)/s, (1-m)/s] and the
  // training set's mean and std come out near 0 and 1.
  EXPECT_NEAR(data.train.images.min().item<float>(), -0.2860 / 0.3530, 1e-6);
  EXPECT_NEAR(data.train.images.max().item<float>(), (1 - 0.2860) / 0.3530, 1e-6);
  EXPECT_NEAR(data.train.images.mean().item<float>(), 0.0, 0.01);
  EXPECT_NEAR(data.train.images.std().item<float>(), 1.0, 0.01);
  // Generous for a shared 2-core machine; typically a few hundred milliseconds.
  EXPECT_LT(seconds, 2.0);
}

}  // namespace
}  // namespace psrt::pstrain
