// Training checkpoints in --train-dir: ckpt-<step>.pt (every parameter and buffer of the model,
// LibTorch's archive format, always CPU tensors whatever --device trained the model) and
// ckpt-<step>.json (step, epoch, model, data set, input shape, weights digest).
// Each file is written to a temporary name and renamed; the .json comes last and marks the
// checkpoint complete, so a reader (pseval, --resume) never sees half a checkpoint.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pstrain/models/model.h"

namespace psrt::pstrain {

struct CheckpointInfo {
  std::int64_t step = 0;   // steps done
  std::int64_t epoch = 0;  // the epoch the next step belongs to
  std::string model;
  std::string dataset;
  std::string data_dir;
  ModelSpec spec;
  int workers = 1;
  std::int64_t batch_size = 0;  // per worker
  std::uint64_t seed = 1;       // --seed: the synthetic data set depends on it
  std::string digest;           // weights_digest() of the saved weights
  std::string weights;          // path of the .pt file (set when listing)
};

// Writes the checkpoint of `info.step` from `model` on any device; `local` (the --no-ps
// optimizer, may be null) is saved beside it (its state on the device it trains on) so that
// --resume restores its momentum too. Throws psrt::Error naming the path.
void save_checkpoint(const std::string& dir, ::torch::nn::Module& model,
                     ::torch::optim::Optimizer* local, CheckpointInfo info);
// Complete checkpoints in `dir`, oldest first. A missing directory gives an empty list.
std::vector<CheckpointInfo> list_checkpoints(const std::string& dir);
std::optional<CheckpointInfo> latest_checkpoint(const std::string& dir);
// Loads weights (and `local`'s state when given and saved) onto `device`, where `model` (and
// `local`'s parameters) must already be: a checkpoint from any device loads on any other.
// Throws psrt::Error when the file is unreadable or does not fit the model.
void load_checkpoint(const CheckpointInfo& info, ::torch::nn::Module& model,
                     ::torch::optim::Optimizer* local, ::torch::Device device = ::torch::kCPU);

// FNV-1a 64 over every parameter's bytes (CPU copies of device tensors) in registration order,
// as 16 hex digits: equal digests = bit-identical weights, on whichever devices they live.
std::string weights_digest(const ::torch::nn::Module& model);

}  // namespace psrt::pstrain
