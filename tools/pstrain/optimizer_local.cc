// --no-ps: LibTorch's SGD, Adam or AdamW in this process, with the options the servers would
// apply.
#include <memory>
#include <tuple>

#include "pstrain/optimizer.h"

namespace psrt::pstrain {
namespace {

std::unique_ptr<::torch::optim::Optimizer> make_torch_optimizer(const TrainOptions& o,
                                                                ::torch::nn::Module& model) {
  const std::tuple<double, double> betas{o.beta1(), o.beta2()};
  if (o.optimizer == "adam")
    return std::make_unique<::torch::optim::Adam>(
        model.parameters(),
        ::torch::optim::AdamOptions(o.lr).betas(betas).eps(o.eps).weight_decay(o.weight_decay));
  if (o.optimizer == "adamw")
    return std::make_unique<::torch::optim::AdamW>(
        model.parameters(),
        ::torch::optim::AdamWOptions(o.lr).betas(betas).eps(o.eps).weight_decay(o.weight_decay));
  return std::make_unique<::torch::optim::SGD>(model.parameters(), ::torch::optim::SGDOptions(o.lr)
                                                                       .momentum(o.momentum)
                                                                       .dampening(o.dampening)
                                                                       .weight_decay(o.weight_decay)
                                                                       .nesterov(o.nesterov));
}

class LocalOptimizer final : public TrainOptimizer {
 public:
  LocalOptimizer(const TrainOptions& o, ::torch::nn::Module& model)
      : lr_(o.lr), opt_(make_torch_optimizer(o, model)) {}

  int rank() const override { return 0; }
  int world() const override { return 1; }
  int processes() const override { return 1; }
  ::torch::optim::Optimizer* checkpoint_state() override { return opt_.get(); }
  float start(::torch::nn::Module&) override { return lr_; }

  void set_learning_rate(float lr) override {
    for (auto& group : opt_->param_groups())
      group.options().set_lr(lr);
  }
  void zero_grad() override { opt_->zero_grad(); }
  void step() override { opt_->step(); }
  void synchronize() override {}
  void finish() override {}

 private:
  float lr_;
  std::unique_ptr<::torch::optim::Optimizer> opt_;
};

}  // namespace

std::unique_ptr<TrainOptimizer> make_local_optimizer(const TrainOptions& o,
                                                     ::torch::nn::Module& model) {
  return std::make_unique<LocalOptimizer>(o, model);
}

}  // namespace psrt::pstrain
