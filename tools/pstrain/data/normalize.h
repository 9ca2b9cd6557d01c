// Pixel bytes to the normalised floats the models train on.
#pragma once

#include <torch/types.h>

#include <vector>

namespace psrt::pstrain {

// A data set's standard per-channel statistics of x / 255 (one entry per channel).
struct PixelStats {
  std::vector<double> mean;
  std::vector<double> std;
};

// uint8 [N, C, H, W] -> float32 [N, C, H, W] with out = (x / 255 - mean[c]) / std[c], computed in
// double and rounded once (a 256-entry table per channel). Throws psrt::Error (kInvalidArgument)
// when the shape or dtype is wrong or `stats` does not have C entries.
::torch::Tensor normalize_pixels(const ::torch::Tensor& pixels, const PixelStats& stats);

}  // namespace psrt::pstrain
