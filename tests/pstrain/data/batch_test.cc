#include "pstrain/data/batch.h"

#include <gtest/gtest.h>

#include <chrono>
#include <set>

#include "psrt/error.h"
#include "pstrain/data/random.h"
#include "test_files.h"

namespace psrt::pstrain {
namespace {

using testing::int_values;

// n images of C x H x W whose pixel values are 1 + their flat index in the data set (so no
// pixel is 0, the padding value), labels i % 10.
Dataset counting_dataset(int64_t n, int64_t c, int64_t h, int64_t w, bool augment) {
  Dataset d;
  d.images = torch::arange(1, 1 + n * c * h * w, torch::kFloat32).reshape({n, c, h, w});
  d.labels = torch::arange(n, torch::kInt64).remainder(10);
  d.name = "counting";
  d.augment = augment;
  return d;
}

TEST(MakeBatch, WithoutAugmentationEqualsDirectIndexing) {
  const Dataset data = counting_dataset(50, 3, 4, 5, false);
  const torch::Tensor shard = torch::tensor({7, 3, 49, 0, 12, 12, 31}, torch::kInt64);
  const Batch b = make_batch(data, shard, 2, 4, /*seed=*/99);
  ASSERT_EQ(b.images.sizes().vec(), (std::vector<int64_t>{4, 3, 4, 5}));
  EXPECT_EQ(int_values(b.labels), (std::vector<int64_t>{9, 0, 2, 2}));
  const std::vector<int64_t> picked = {49, 0, 12, 12};
  for (size_t i = 0; i < picked.size(); ++i) {
    EXPECT_TRUE(torch::equal(b.images[static_cast<int64_t>(i)], data.images[picked[i]])) << i;
  }
  // The seed does not matter without augmentation.
  EXPECT_TRUE(torch::equal(b.images, make_batch(data, shard, 2, 4, 1).images));
}

TEST(MakeBatch, WithoutAugmentationDoesNotAliasTheDataSet) {
  const Dataset data = counting_dataset(4, 1, 2, 2, false);
  const Batch b = make_batch(data, torch::tensor({1, 2}, torch::kInt64), 0, 2, 0);
  b.images.zero_();
  EXPECT_EQ(data.images[1][0][0][0].item<float>(), 5.0f);
}

TEST(MakeBatch, RangeOutsideTheShard) {
  const Dataset data = counting_dataset(10, 1, 2, 2, false);
  const torch::Tensor shard = torch::arange(6, torch::kInt64);
  EXPECT_PSRT_ERROR(make_batch(data, shard, 4, 3, 0), ErrorCode::kInvalidArgument,
                    "samples [4, 7) are not inside the shard of 6");
  EXPECT_PSRT_ERROR(make_batch(data, shard, 0, 0, 0), ErrorCode::kInvalidArgument,
                    "samples [0, 0) are not inside the shard of 6");
}

TEST(MakeBatch, IndexOutsideTheDataSet) {
  const Dataset data = counting_dataset(10, 1, 2, 2, false);
  EXPECT_PSRT_ERROR(make_batch(data, torch::tensor({3, 10}, torch::kInt64), 0, 2, 0),
                    ErrorCode::kInvalidArgument,
                    "sample index 10 is outside the 10 samples of 'counting'");
}

// The augmentation the header documents, recomputed from the same generator.
torch::Tensor reference_augment(const torch::Tensor& images, uint64_t seed) {
  const int64_t h = images.size(2);
  const int64_t w = images.size(3);
  torch::Tensor out = torch::zeros_like(images);
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < images.size(0); ++i) {
    const int64_t dy = static_cast<int64_t>(uniform_below(rng, 9)) - 4;
    const int64_t dx = static_cast<int64_t>(uniform_below(rng, 9)) - 4;
    const bool flip = (rng() >> 63) != 0;
    for (int64_t c = 0; c < images.size(1); ++c) {
      for (int64_t y = 0; y < h; ++y) {
        for (int64_t x = 0; x < w; ++x) {
          const int64_t sy = y + dy;
          const int64_t sx = (flip ? w - 1 - x : x) + dx;
          if (sy >= 0 && sy < h && sx >= 0 && sx < w) {
            out[i][c][y][x] = images[i][c][sy][sx].item<float>();
          }
        }
      }
    }
  }
  return out;
}

TEST(MakeBatch, AugmentationIsTheDocumentedCropAndFlip) {
  const Dataset data = counting_dataset(8, 2, 6, 7, true);
  const torch::Tensor shard = torch::tensor({5, 1, 7, 2, 0, 3, 6, 4}, torch::kInt64);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const Batch b = make_batch(data, shard, 1, 6, seed);
    ASSERT_EQ(b.images.sizes().vec(), (std::vector<int64_t>{6, 2, 6, 7}));
    EXPECT_EQ(int_values(b.labels), (std::vector<int64_t>{1, 7, 2, 0, 3, 6}));
    const torch::Tensor plain = data.images.index_select(0, shard.narrow(0, 1, 6));
    EXPECT_TRUE(torch::equal(b.images, reference_augment(plain, seed))) << "seed " << seed;
  }
}

// Which (dy, dx, flip) produced `out` from `in` (one C x H x W sample): every candidate that
// matches exactly. Pixels of `in` are distinct and nonzero, so the answer is unique unless the
// crop shows at most one column.
std::vector<std::tuple<int, int, bool>> matching_transforms(const torch::Tensor& in,
                                                            const torch::Tensor& out) {
  std::vector<std::tuple<int, int, bool>> found;
  const auto src = in.accessor<float, 3>();
  const auto dst = out.accessor<float, 3>();
  const int64_t h = in.size(1);
  const int64_t w = in.size(2);
  for (int dy = -4; dy <= 4; ++dy) {
    for (int dx = -4; dx <= 4; ++dx) {
      for (bool flip : {false, true}) {
        bool match = true;
        for (int64_t c = 0; c < in.size(0) && match; ++c) {
          for (int64_t y = 0; y < h && match; ++y) {
            for (int64_t x = 0; x < w && match; ++x) {
              const int64_t sy = y + dy;
              const int64_t sx = (flip ? w - 1 - x : x) + dx;
              const bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
              match = dst[c][y][x] == (inside ? src[c][sy][sx] : 0.0f);
            }
          }
        }
        if (match) found.emplace_back(dy, dx, flip);
      }
    }
  }
  return found;
}

TEST(MakeBatch, AugmentedPixelsComeFromThePaddedSourceAndCoverAllCropsAndFlips) {
  // A hand-made 1 x 5 x 6 image with pixels 1..30.
  const Dataset data = counting_dataset(1, 1, 5, 6, true);
  const torch::Tensor shard = torch::zeros({64}, torch::kInt64);
  std::set<int> dys;
  std::set<int> dxs;
  int flips = 0;
  int total = 0;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    const Batch b = make_batch(data, shard, 0, 64, seed);
    ASSERT_EQ(b.images.sizes().vec(), (std::vector<int64_t>{64, 1, 5, 6}));
    for (int64_t i = 0; i < 64; ++i) {
      // Every output pixel is 0 (padding) or a pixel of the source.
      const torch::Tensor v = b.images[i];
      EXPECT_TRUE(((v == 0) | ((v >= 1) & (v <= 30))).all().item<bool>());
      const auto found = matching_transforms(data.images[0], v);
      ASSERT_EQ(found.size(), 1U) << "seed " << seed << " sample " << i;
      const auto [dy, dx, flip] = found[0];
      dys.insert(dy);
      dxs.insert(dx);
      flips += flip ? 1 : 0;
      ++total;
    }
  }
  EXPECT_EQ(dys.size(), 9U);
  EXPECT_EQ(dxs.size(), 9U);
  EXPECT_GT(flips, total / 2 - total / 8);  // p = 0.5 over 512 draws
  EXPECT_LT(flips, total / 2 + total / 8);
}

TEST(MakeBatch, FlipWithoutShiftMirrorsRows) {
  // Find a sample the generator drew as (0, 0, flip) and check it against a hand-written mirror.
  Dataset data;
  data.images = torch::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}).reshape({1, 1, 2, 3});
  data.labels = torch::zeros({1}, torch::kInt64);
  data.augment = true;
  const torch::Tensor mirrored = torch::tensor({3.f, 2.f, 1.f, 6.f, 5.f, 4.f}).reshape({1, 2, 3});
  const torch::Tensor shifted = torch::tensor({0.f, 0.f, 0.f, 1.f, 2.f, 3.f}).reshape({1, 2, 3});
  bool saw_mirror = false;
  bool saw_shift = false;
  for (uint64_t seed = 0; seed < 200 && !(saw_mirror && saw_shift); ++seed) {
    const Batch b = make_batch(data, torch::zeros({16}, torch::kInt64), 0, 16, seed);
    for (int64_t i = 0; i < 16; ++i) {
      saw_mirror = saw_mirror || torch::equal(b.images[i], mirrored);
      saw_shift = saw_shift || torch::equal(b.images[i], shifted);  // dy = -1, dx = 0, no flip
    }
  }
  EXPECT_TRUE(saw_mirror);
  EXPECT_TRUE(saw_shift);
}

TEST(MakeBatch, AugmentationIsDeterministicPerSeedAndDiffersAcrossSeeds) {
  const Dataset data = counting_dataset(100, 3, 8, 8, true);
  const torch::Tensor shard = torch::arange(100, torch::kInt64);
  const Batch a = make_batch(data, shard, 10, 32, 1234);
  const Batch again = make_batch(data, shard, 10, 32, 1234);
  const Batch other = make_batch(data, shard, 10, 32, 1235);
  EXPECT_TRUE(torch::equal(a.images, again.images));
  EXPECT_FALSE(torch::equal(a.images, other.images));
  EXPECT_TRUE(torch::equal(a.labels, other.labels));
}

TEST(MakeBatch, SixtyFourSamplesWellUnderAMillisecond) {
  const Dataset data = counting_dataset(10000, 1, 28, 28, false);
  const torch::Tensor shard = torch::randperm(10000, torch::kInt64);
  constexpr int kBatches = 150;
  const auto start = std::chrono::steady_clock::now();
  int64_t checksum = 0;
  for (int i = 0; i < kBatches; ++i) {
    checksum += make_batch(data, shard, i * 64, 64, 0).labels.size(0);
  }
  const double per_batch_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
      kBatches;
  std::printf("make_batch(64 x 1x28x28): %.3f ms\n", per_batch_ms);
  EXPECT_EQ(checksum, 64 * kBatches);
  EXPECT_LT(per_batch_ms, 1.0);
}

}  // namespace
}  // namespace psrt::pstrain
