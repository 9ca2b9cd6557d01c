// The CIFAR-10 ResNets of He et al. 2016 ("Deep Residual Learning for Image Recognition", §4.2):
// depth 6n+2 — resnet20, resnet32, resnet56, resnet110.
#pragma once

#include <cstdint>

#include "pstrain/models/resnet.h"

namespace psrt::pstrain {

// 3x3 conv 16 - BN - ReLU, three stages of n BasicBlocks 16/32/64 wide (the second and third
// start with stride 2), global average pooling, fc. Built by ResNetImpl (resnet.h), so the
// names, stem and initialisation are the torchvision ResNets'.
//
// Shortcuts where the shape changes are projections, 1x1 conv with stride 2 + BN (the paper's
// option B), not option A's zero-padded identity: the same block as ResNet-18/34, and every
// path through the network has weights the optimizer syncs. Option B adds 2,752 parameters to
// option A's count for 10 classes ((16*32 + 2*32) + (32*64 + 2*64)), whatever the depth:
//   resnet20 272,474   resnet32 466,906   resnet56 855,770   resnet110 1,730,714.
//
// Throws psrt::Error(kInvalidArgument) for a depth that is not 6n+2 with n >= 1.
ResNetConfig cifar_resnet_config(int64_t depth);

}  // namespace psrt::pstrain
