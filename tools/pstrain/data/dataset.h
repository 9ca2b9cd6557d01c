// pstrain's data sets: in-memory tensors, loaded once per process.
//
//   DataSplit data = load_dataset("fashion-mnist", /*dir=*/"");     // Debian's files
//   ::torch::Tensor shard = epoch_shard(data.train.images.size(0), rank, world, seed, epoch);
//   for (int64_t step = 0; step < steps_per_epoch(n, world, batch); ++step) {
//     Batch b = make_batch(data.train, shard, step * batch, batch, mix_seed(seed, step));
//     ...
//   }
//
// Every function here is deterministic in its arguments (no global RNG), so all workers of a
// job see the same data, the same permutation and the same augmentation for the same seeds.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace psrt::pstrain {

struct Dataset {
  ::torch::Tensor images;  // float32 [N, C, H, W], normalised with the data set's standard mean/std
  ::torch::Tensor labels;  // int64 [N], values in [0, num_classes)
  int64_t num_classes = 10;
  std::string name;      // "fashion-mnist", "mnist", "cifar10", "synthetic"
  bool augment = false;  // true for CIFAR-10 training data: random crop + flip in make_batch
};

struct DataSplit {
  Dataset train;
  Dataset test;
};

// The learnable random data set of `--dataset synthetic` (for tests and benchmarks).
struct SyntheticSpec {
  int64_t train_size = 4096, test_size = 1024;
  int64_t channels = 1, height = 28, width = 28, classes = 10;
  uint64_t seed = 1;
};

// Names accepted by load_dataset, for --help and error messages.
const std::vector<std::string>& dataset_names();

// Loads a data set. `dir` = where its files are; empty = the default (fashion-mnist:
// /usr/share/datasets/fashion-mnist; mnist: /usr/share/datasets/mnist; cifar10:
// ./data/cifar-10-batches-bin); ignored for "synthetic", which is built from `synthetic`.
//
// Blocking (reads and decompresses the files; Fashion-MNIST takes a fraction of a second).
// Throws psrt::Error: kNotFound naming the missing file and how to get it; kInvalidArgument for a
// malformed file (naming it) or an unknown name (listing the known ones).
DataSplit load_dataset(const std::string& name, const std::string& dir,
                       const SyntheticSpec& synthetic = {});

}  // namespace psrt::pstrain
