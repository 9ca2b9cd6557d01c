// pstrain's part of a job checkpoint (ps/job_checkpoint.h): when psrun runs the job with
// --checkpoint-dir D --checkpoint-every R, every worker writes D/r<step>/w<rank>.part at each
// step that is a multiple of R (the servers write their slices, with momentum, at the same
// round) and rank 0 declares the round complete once every part is on disk. A job started again
// on D (by hand or by psrun --max-restarts) resumes every worker from the round the servers
// resume from: the same step (hence the same data position, augmentation seeds and LR schedule
// step), its own BatchNorm buffers and LibTorch's CPU generator state; and the epoch's cut (its
// first step, workers and samples), from which a job of fewer workers cuts the rest of the epoch.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "pstrain/data/shard.h"

namespace psrt::pstrain {

struct WorkerPart {
  std::int64_t step = 0;
  std::string model;
  std::string dataset;
  // The epoch the step was in, as it was cut: its first step, its workers and its samples. A
  // job resumed with other workers (psrun --min-workers) cuts the rest of it for its own. world
  // 0: a part written before pstrain kept them (every epoch cut for the workers of the start).
  std::int64_t epoch = 0;
  std::int64_t first_step = 0;
  int world = 0;
  EpochPool pool;
};

// The part of this worker at `part.step`: the step, the epoch's cut, every buffer of `model` (CPU
// copies) and the CPU generator's state.
std::vector<std::byte> encode_worker_part(const WorkerPart& part, const ::torch::nn::Module& model);
// Restores the buffers into `model` (on its device) and the generator state; returns the step,
// model, data set and epoch cut it was written for (world 0 in a part without the cut). Throws
// psrt::Error naming `what` when the bytes are not a part of this model.
WorkerPart decode_worker_part(const std::vector<std::byte>& bytes, ::torch::nn::Module& model,
                              const std::string& what);

}  // namespace psrt::pstrain
