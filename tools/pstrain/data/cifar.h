// CIFAR-10 in its binary version (https://www.cs.toronto.edu/~kriz/cifar.html).
#pragma once

#include <string>
#include <vector>

#include "pstrain/data/dataset.h"

namespace psrt::pstrain {

// Reads CIFAR-10 binary batch files: records of 1 label byte + 3072 pixel bytes (3x32x32,
// channel-major: 1024 red, 1024 green, 1024 blue, rows top to bottom). Returns the records of all
// files in order, normalised with CIFAR-10's per-channel mean/std; augment = train.
// Throws psrt::Error: kNotFound naming a missing file and how to get the data set;
// kInvalidArgument naming the file when its size is not a multiple of 3073 (says the size) or a
// label is above 9 (says the record index within that file).
Dataset read_cifar_batches(const std::vector<std::string>& paths, bool train);

// Train = data_batch_1.bin..data_batch_5.bin, test = test_batch.bin, in `dir` or in
// `dir`/cifar-10-batches-bin (empty dir = ./data/cifar-10-batches-bin). Throws as above.
DataSplit load_cifar10(const std::string& dir);

}  // namespace psrt::pstrain
