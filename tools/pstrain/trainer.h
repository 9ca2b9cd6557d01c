// The training run behind pstrain: data, model, optimizer (through the parameter servers or
// --no-ps), the step loop, evaluation, checkpoints, metrics and the final summary line.
#pragma once
#include "pstrain/options.h"

namespace psrt::pstrain {

// Trains as `options` say. Prints the summary JSON line on rank 0. Throws psrt::Error.
void train(const TrainOptions& options);

}  // namespace psrt::pstrain
