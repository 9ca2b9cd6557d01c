// MNIST and Fashion-MNIST: four IDX files each, same layout (28x28 grey images, 10 classes).
#pragma once

#include <string>

#include "pstrain/data/dataset.h"

namespace psrt::pstrain {

enum class MnistVariant { kMnist, kFashionMnist };

// Loads train-{images-idx3,labels-idx1}-ubyte and t10k-{images-idx3,labels-idx1}-ubyte from
// `dir` (each raw or with .gz; empty dir = the variant's default directory), normalised with the
// variant's standard mean/std. Throws psrt::Error: kNotFound naming the missing file and how to
// get it; kInvalidArgument naming the file(s) for a malformed file, images that are not 28x28,
// image/label counts that differ, or a label >= 10.
DataSplit load_mnist(MnistVariant variant, const std::string& dir);

}  // namespace psrt::pstrain
