#include "pstrain/models/cifar_resnet.h"

#include <fmt/format.h>

#include "psrt/error.h"

namespace psrt::pstrain {

ResNetConfig cifar_resnet_config(int64_t depth) {
  // Each BasicBlock holds 2 convs; 3 stages of n blocks plus the stem conv and fc: 6n+2 layers.
  if (depth < 8 || (depth - 2) % 6 != 0)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("no CIFAR ResNet of depth {}: the depth must be 6n+2 with n >= 1 "
                            "(20, 32, 44, 56, 110, ...)",
                            depth));
  const int64_t n = (depth - 2) / 6;
  return {fmt::format("resnet{}", depth), ResNetBlock::kBasic, {n, n, n}, {16, 32, 64}};
}

}  // namespace psrt::pstrain
