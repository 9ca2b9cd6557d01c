#include "pstrain/data/synthetic.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "psrt/error.h"
#include "pstrain/data/random.h"

namespace psrt::pstrain {
namespace {

// Stream ids mixed into the seed, so that the parts of the data set draw independent numbers.
constexpr uint64_t kPrototypeStream = 1;
constexpr uint64_t kTrainStream = 2;
constexpr uint64_t kTestStream = 3;
constexpr uint64_t kLabelStream = 0;  // per split: mix_seed(split stream, kLabelStream)

void fill_normal(std::mt19937_64& rng, float* out, int64_t count, double scale) {
  int64_t i = 0;
  for (; i + 1 < count; i += 2) {
    const NormalPair z = standard_normal_pair(rng);
    out[i] = static_cast<float>(z.first * scale);
    out[i + 1] = static_cast<float>(z.second * scale);
  }
  if (i < count) out[i] = static_cast<float>(standard_normal_pair(rng).first * scale);
}

Dataset make_split(const SyntheticSpec& spec, const torch::Tensor& prototypes, int64_t size,
                   uint64_t stream) {
  const uint64_t split_seed = mix_seed(spec.seed, stream);

  // Balanced labels i % classes, then a Fisher-Yates shuffle.
  torch::Tensor labels = torch::empty({size}, torch::kInt64);
  auto* label = labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < size; ++i)
    label[i] = i % spec.classes;
  std::mt19937_64 label_rng(mix_seed(split_seed, kLabelStream));
  for (int64_t i = size - 1; i > 0; --i) {
    std::swap(label[i], label[uniform_below(label_rng, static_cast<uint64_t>(i) + 1)]);
  }

  const int64_t pixels = spec.channels * spec.height * spec.width;
  torch::Tensor images = torch::empty({size, spec.channels, spec.height, spec.width});
  auto* image = images.data_ptr<float>();
  const float* prototype = prototypes.data_ptr<float>();
  const double scale = 1.0 / std::sqrt(2.0);
  // One generator per sample (seeded from its index), so the result does not depend on how
  // parallel_for splits the range.
  at::parallel_for(0, size, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      std::mt19937_64 rng(mix_seed(split_seed, static_cast<uint64_t>(i) + 1));
      float* out = image + i * pixels;
      fill_normal(rng, out, pixels, scale);
      const float* proto = prototype + label[i] * pixels;
      for (int64_t p = 0; p < pixels; ++p)
        out[p] += static_cast<float>(proto[p] * scale);
    }
  });

  Dataset out;
  out.images = std::move(images);
  out.labels = std::move(labels);
  out.num_classes = spec.classes;
  out.name = "synthetic";
  out.augment = false;
  return out;
}

}  // namespace

DataSplit make_synthetic(const SyntheticSpec& spec) {
  if (spec.train_size <= 0 || spec.test_size <= 0 || spec.channels <= 0 || spec.height <= 0 ||
      spec.width <= 0 || spec.classes < 2) {
    throw Error(ErrorCode::kInvalidArgument,
                "synthetic data set: sizes must be positive and classes >= 2 (train_size " +
                    std::to_string(spec.train_size) + ", test_size " +
                    std::to_string(spec.test_size) + ", channels " + std::to_string(spec.channels) +
                    ", height " + std::to_string(spec.height) + ", width " +
                    std::to_string(spec.width) + ", classes " + std::to_string(spec.classes) + ")");
  }
  torch::Tensor prototypes = torch::empty({spec.classes, spec.channels, spec.height, spec.width});
  std::mt19937_64 rng(mix_seed(spec.seed, kPrototypeStream));
  fill_normal(rng, prototypes.data_ptr<float>(), prototypes.numel(), 1.0);
  return {make_split(spec, prototypes, spec.train_size, kTrainStream),
          make_split(spec, prototypes, spec.test_size, kTestStream)};
}

}  // namespace psrt::pstrain
