// Which DistributedOptimizer manages a module: pre_forward() looks a module up here.
#pragma once
#include <torch/nn/module.h>

#include "psrt/torch.h"

namespace psrt::torch::detail {

void register_modules(const std::vector<const ::torch::nn::Module*>& modules,
                      DistributedOptimizer::Impl* owner);
void unregister_owner(DistributedOptimizer::Impl* owner);

}  // namespace psrt::torch::detail
