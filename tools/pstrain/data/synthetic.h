// The synthetic data set: a learnable classification task drawn from a seed.
#pragma once

#include "pstrain/data/dataset.h"

namespace psrt::pstrain {

// Each class has a fixed prototype image of i.i.d. N(0, 1) pixels; a sample is its class's
// prototype plus N(0, 1) noise, scaled by 1/sqrt(2) so pixels have unit variance. Labels are
// balanced (counts differ by at most one) in a shuffled order. Train and test share the
// prototypes and draw their own samples.
//
// Deterministic in `spec` alone: the same tensors on every process, run, thread count and
// machine with the same libm. Throws psrt::Error (kInvalidArgument) for a non-positive size or
// fewer than 2 classes.
DataSplit make_synthetic(const SyntheticSpec& spec);

}  // namespace psrt::pstrain
