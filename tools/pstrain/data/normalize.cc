#include "pstrain/data/normalize.h"

#include <ATen/Parallel.h>

#include <array>
#include <string>

#include "psrt/error.h"

namespace psrt::pstrain {

torch::Tensor normalize_pixels(const torch::Tensor& pixels, const PixelStats& stats) {
  if (pixels.scalar_type() != torch::kUInt8 || pixels.dim() != 4) {
    throw Error(ErrorCode::kInvalidArgument,
                "normalize_pixels: expected uint8 [N, C, H, W] pixels, got " +
                    std::string(c10::toString(pixels.scalar_type())) + " with " +
                    std::to_string(pixels.dim()) + " dims");
  }
  const int64_t channels = pixels.size(1);
  if (static_cast<int64_t>(stats.mean.size()) != channels ||
      static_cast<int64_t>(stats.std.size()) != channels) {
    throw Error(ErrorCode::kInvalidArgument, "normalize_pixels: " + std::to_string(channels) +
                                                 " channels but " +
                                                 std::to_string(stats.mean.size()) + " means and " +
                                                 std::to_string(stats.std.size()) + " stds");
  }
  std::vector<std::array<float, 256>> table(channels);
  for (int64_t c = 0; c < channels; ++c) {
    for (int v = 0; v < 256; ++v) {
      table[c][v] = static_cast<float>((v / 255.0 - stats.mean[c]) / stats.std[c]);
    }
  }

  const torch::Tensor in = pixels.contiguous();
  torch::Tensor out = torch::empty(in.sizes(), torch::kFloat32);
  const uint8_t* src = in.data_ptr<uint8_t>();
  auto* dst = out.data_ptr<float>();
  const int64_t plane = in.size(2) * in.size(3);
  const int64_t planes = in.size(0) * channels;
  // Each grain is a run of whole channel planes, so one table serves a plane's inner loop.
  at::parallel_for(0, planes, std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(plane, 1)),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t p = begin; p < end; ++p) {
                       const std::array<float, 256>& lut = table[p % channels];
                       const uint8_t* s = src + p * plane;
                       float* d = dst + p * plane;
                       for (int64_t i = 0; i < plane; ++i)
                         d[i] = lut[s[i]];
                     }
                   });
  return out;
}

}  // namespace psrt::pstrain
