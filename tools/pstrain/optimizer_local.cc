// --no-ps: LibTorch's SGD in this process, with the options the servers would apply.
#include "pstrain/optimizer.h"

namespace psrt::pstrain {
namespace {

class LocalOptimizer final : public TrainOptimizer {
 public:
  LocalOptimizer(const TrainOptions& o, ::torch::nn::Module& model)
      : lr_(o.lr),
        sgd_(model.parameters(), ::torch::optim::SGDOptions(o.lr)
                                     .momentum(o.momentum)
                                     .dampening(o.dampening)
                                     .weight_decay(o.weight_decay)
                                     .nesterov(o.nesterov)) {}

  int rank() const override { return 0; }
  int world() const override { return 1; }
  int processes() const override { return 1; }
  ::torch::optim::Optimizer* checkpoint_state() override { return &sgd_; }
  float start(::torch::nn::Module&) override { return lr_; }

  void set_learning_rate(float lr) override {
    for (auto& group : sgd_.param_groups())
      static_cast<::torch::optim::SGDOptions&>(group.options()).lr(lr);
  }
  void zero_grad() override { sgd_.zero_grad(); }
  void step() override { sgd_.step(); }
  void synchronize() override {}
  void finish() override {}

 private:
  float lr_;
  ::torch::optim::SGD sgd_;
};

}  // namespace

std::unique_ptr<TrainOptimizer> make_local_optimizer(const TrainOptions& o,
                                                     ::torch::nn::Module& model) {
  return std::make_unique<LocalOptimizer>(o, model);
}

}  // namespace psrt::pstrain
