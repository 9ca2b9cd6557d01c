#include "pstrain/data/cifar.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "psrt/error.h"
#include "pstrain/data/dataset.h"
#include "test_files.h"

namespace psrt::pstrain {
namespace {

using testing::TempDir;

constexpr double kMean[3] = {0.4914, 0.4822, 0.4465};
constexpr double kStd[3] = {0.2470, 0.2435, 0.2616};

// Record r: label labels[r]; pixel byte of (channel c, row y, col x) = (r * 7 + c * 50 + y + x).
std::vector<uint8_t> cifar_records(const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> out;
  for (size_t r = 0; r < labels.size(); ++r) {
    out.push_back(labels[r]);
    for (int c = 0; c < 3; ++c) {
      for (int y = 0; y < 32; ++y) {
        for (int x = 0; x < 32; ++x)
          out.push_back(static_cast<uint8_t>(r * 7 + c * 50 + y + x));
      }
    }
  }
  return out;
}

double expected_pixel(int r, int c, int y, int x) {
  return (static_cast<uint8_t>(r * 7 + c * 50 + y + x) / 255.0 - kMean[c]) / kStd[c];
}

TEST(Cifar, BatchRoundTripKeepsChannelOrderAndLabels) {
  TempDir dir;
  testing::write_file(dir.file("a.bin"), cifar_records({6, 9, 0}));
  testing::write_file(dir.file("b.bin"), cifar_records({2}));
  const Dataset data = read_cifar_batches({dir.file("a.bin"), dir.file("b.bin")}, true);

  EXPECT_EQ(data.name, "cifar10");
  EXPECT_EQ(data.num_classes, 10);
  EXPECT_TRUE(data.augment);
  ASSERT_EQ(data.images.sizes().vec(), (std::vector<int64_t>{4, 3, 32, 32}));
  EXPECT_EQ(data.images.scalar_type(), torch::kFloat32);
  EXPECT_EQ(testing::int_values(data.labels), (std::vector<int64_t>{6, 9, 0, 2}));
  // Every pixel of record 1 (all three channels), and spot checks of the others.
  const torch::Tensor one = data.images[1].contiguous();
  const float* p = one.data_ptr<float>();
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 32; ++y) {
      for (int x = 0; x < 32; ++x) {
        ASSERT_NEAR(p[(c * 32 + y) * 32 + x], expected_pixel(1, c, y, x), 1e-6)
            << "c " << c << " y " << y << " x " << x;
      }
    }
  }
  EXPECT_NEAR(data.images[0][2][31][0].item<float>(), expected_pixel(0, 2, 31, 0), 1e-6);
  // Record 3 came from the second file, where it is record 0.
  EXPECT_NEAR(data.images[3][1][4][5].item<float>(), expected_pixel(0, 1, 4, 5), 1e-6);
}

TEST(Cifar, TestSplitIsNotAugmented) {
  TempDir dir;
  testing::write_file(dir.file("t.bin"), cifar_records({1}));
  EXPECT_FALSE(read_cifar_batches({dir.file("t.bin")}, false).augment);
}

TEST(Cifar, SizeNotAMultipleOfTheRecordSaysTheSize) {
  TempDir dir;
  std::vector<uint8_t> bytes = cifar_records({1, 2});
  bytes.resize(bytes.size() - 5);
  testing::write_file(dir.file("cut.bin"), bytes);
  EXPECT_PSRT_ERROR(read_cifar_batches({dir.file("cut.bin")}, true), ErrorCode::kInvalidArgument,
                    "'" + dir.file("cut.bin") +
                        "' is 6141 bytes, not a positive multiple of "
                        "the 3073-byte record");
}

TEST(Cifar, LabelTenSaysTheRecordIndex) {
  TempDir dir;
  testing::write_file(dir.file("bad.bin"), cifar_records({1, 2, 10, 3}));
  EXPECT_PSRT_ERROR(read_cifar_batches({dir.file("bad.bin")}, true), ErrorCode::kInvalidArgument,
                    "'" + dir.file("bad.bin") + "' record 2 has label 10, outside [0, 10)");
}

TEST(Cifar, MissingFileSaysHowToGetIt) {
  TempDir dir;
  EXPECT_PSRT_ERROR(load_dataset("cifar10", dir.path()), ErrorCode::kNotFound,
                    "missing " + dir.file("data_batch_1.bin"), "cifar-10-binary.tar.gz",
                    "https://www.cs.toronto.edu/~kriz/cifar.html", "--data-dir",
                    "cifar-10-batches-bin");
}

TEST(Cifar, LoadDatasetAcceptsTheExtractedArchiveDirectory) {
  TempDir dir;
  const std::filesystem::path batches = std::filesystem::path(dir.path()) / "cifar-10-batches-bin";
  std::filesystem::create_directory(batches);
  for (int i = 1; i <= 5; ++i) {
    testing::write_file((batches / ("data_batch_" + std::to_string(i) + ".bin")).string(),
                        cifar_records({static_cast<uint8_t>(i), static_cast<uint8_t>(i + 1)}));
  }
  testing::write_file((batches / "test_batch.bin").string(), cifar_records({9}));

  for (const std::string& where : {dir.path(), batches.string()}) {
    const DataSplit data = load_dataset("cifar10", where);
    EXPECT_EQ(testing::int_values(data.train.labels),
              (std::vector<int64_t>{1, 2, 2, 3, 3, 4, 4, 5, 5, 6}));
    EXPECT_EQ(testing::int_values(data.test.labels), (std::vector<int64_t>{9}));
    EXPECT_TRUE(data.train.augment);
    EXPECT_FALSE(data.test.augment);
  }
}

}  // namespace
}  // namespace psrt::pstrain
