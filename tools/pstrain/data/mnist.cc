#include "pstrain/data/mnist.h"

#include <filesystem>

#include "psrt/error.h"
#include "pstrain/data/idx.h"
#include "pstrain/data/normalize.h"

namespace psrt::pstrain {
namespace {

constexpr int64_t kSide = 28;
constexpr int64_t kClasses = 10;

struct VariantInfo {
  const char* name;
  const char* default_dir;
  double mean;
  double std;
  const char* how_to_get;
};

VariantInfo info(MnistVariant variant) {
  if (variant == MnistVariant::kFashionMnist) {
    return {"fashion-mnist", "/usr/share/datasets/fashion-mnist", 0.2860, 0.3530,
            "install it with `apt-get install dataset-fashion-mnist` (or run "
            "scripts/install_deps.sh), or pass --data-dir to a directory holding the four "
            "Fashion-MNIST IDX files"};
  }
  return {"mnist", "/usr/share/datasets/mnist", 0.1307, 0.3081,
          "download the four IDX files (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
          "t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz) from the MNIST site "
          "(http://yann.lecun.com/exdb/mnist/) into a directory and pass it as --data-dir"};
}

// `dir/base` or `dir/base.gz`, whichever exists (the raw file when both do).
std::string find_idx_file(const VariantInfo& v, const std::string& dir, const std::string& base) {
  const std::filesystem::path raw = std::filesystem::path(dir) / base;
  std::error_code ec;
  if (std::filesystem::exists(raw, ec)) return raw.string();
  std::string gz = raw.string() + ".gz";
  if (std::filesystem::exists(gz, ec)) return gz;
  throw Error(ErrorCode::kNotFound, std::string(v.name) + ": missing " + raw.string() + " (or " +
                                        gz + "); " + v.how_to_get);
}

Dataset load_part(const VariantInfo& v, const std::string& dir, const std::string& prefix) {
  const std::string images_path = find_idx_file(v, dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_idx_file(v, dir, prefix + "-labels-idx1-ubyte");
  const torch::Tensor images = read_idx(images_path);
  const torch::Tensor labels = read_idx(labels_path);

  if (images.dim() != 3 || images.size(1) != kSide || images.size(2) != kSide) {
    throw Error(ErrorCode::kInvalidArgument, std::string(v.name) + ": '" + images_path +
                                                 "' should hold idx3 images of 28x28, found dims " +
                                                 c10::str(images.sizes()));
  }
  if (labels.dim() != 1) {
    throw Error(ErrorCode::kInvalidArgument, std::string(v.name) + ": '" + labels_path +
                                                 "' should hold idx1 labels, found dims " +
                                                 c10::str(labels.sizes()));
  }
  if (images.size(0) != labels.size(0)) {
    throw Error(ErrorCode::kInvalidArgument, std::string(v.name) + ": '" + images_path +
                                                 "' holds " + std::to_string(images.size(0)) +
                                                 " images but '" + labels_path + "' holds " +
                                                 std::to_string(labels.size(0)) + " labels");
  }
  const torch::Tensor bad = (labels >= kClasses).nonzero();
  if (bad.size(0) > 0) {
    const auto index = bad[0][0].item<int64_t>();
    throw Error(ErrorCode::kInvalidArgument,
                std::string(v.name) + ": '" + labels_path + "' label " + std::to_string(index) +
                    " is " + std::to_string(labels[index].item<int>()) + ", outside [0, 10)");
  }

  Dataset out;
  out.images = normalize_pixels(images.unsqueeze(1), {{v.mean}, {v.std}});
  out.labels = labels.to(torch::kInt64);
  out.num_classes = kClasses;
  out.name = v.name;
  out.augment = false;
  return out;
}

}  // namespace

DataSplit load_mnist(MnistVariant variant, const std::string& dir) {
  const VariantInfo v = info(variant);
  const std::string where = dir.empty() ? v.default_dir : dir;
  return {load_part(v, where, "train"), load_part(v, where, "t10k")};
}

}  // namespace psrt::pstrain
