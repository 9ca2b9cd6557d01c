#include "pstrain/data/dataset.h"

#include "psrt/error.h"
#include "pstrain/data/cifar.h"
#include "pstrain/data/mnist.h"
#include "pstrain/data/synthetic.h"

namespace psrt::pstrain {

const std::vector<std::string>& dataset_names() {
  static const std::vector<std::string> names = {"fashion-mnist", "mnist", "cifar10", "synthetic"};
  return names;
}

DataSplit load_dataset(const std::string& name, const std::string& dir,
                       const SyntheticSpec& synthetic) {
  if (name == "fashion-mnist") return load_mnist(MnistVariant::kFashionMnist, dir);
  if (name == "mnist") return load_mnist(MnistVariant::kMnist, dir);
  if (name == "cifar10") return load_cifar10(dir);
  if (name == "synthetic") return make_synthetic(synthetic);
  std::string known;
  for (const std::string& n : dataset_names())
    known += (known.empty() ? "" : ", ") + n;
  throw Error(ErrorCode::kInvalidArgument,
              "unknown data set '" + name + "'; known data sets: " + known);
}

}  // namespace psrt::pstrain
