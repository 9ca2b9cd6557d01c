// Training through the parameter servers: this process is one worker of the job psrun started.
#include <optional>

#include "base/log.h"
#include "kernels/fused_adam.h"
#include "psrt/psrt.h"
#include "psrt/torch.h"
#include "pstrain/optimizer.h"
#include "runtime/env_contract.h"

namespace psrt::pstrain {
namespace {

GradType grad_type_of(const std::string& s) {
  if (s == "fp16") return GradType::kF16;
  if (s == "bf16") return GradType::kBF16;
  return GradType::kF32;
}

class DistributedSgd final : public TrainOptimizer {
 public:
  explicit DistributedSgd(const TrainOptions& o) : o_(o), worker_(Worker::from_env()) {}

  int rank() const override { return worker_.rank(); }
  int world() const override { return worker_.num_workers(); }
  int processes() const override { return worker_.num_workers() + worker_.num_servers(); }
  ::torch::optim::Optimizer* checkpoint_state() override { return nullptr; }

  float start(::torch::nn::Module& model) override {
    // --lr is the rate of a round that averages N gradients (sync). In async and ssp every
    // gradient is applied alone, N times as often: each gets lr / N, the same step per sample.
    float base_lr = o_.lr;
    const std::string mode = runtime::env_string("PSRT_MODE");
    if (mode != "sync" && world() > 1) {
      base_lr = o_.lr / static_cast<float>(world());
      if (rank() == 0)
        PSRT_LOG_INFO("mode {}: each gradient is applied alone, with lr {} / {} workers = {}", mode,
                      o_.lr, world(), base_lr);
    }
    psrt::torch::Options opt;
    opt.set_sgd = true;
    opt.sgd = {.lr = base_lr,
               .momentum = o_.momentum,
               .dampening = o_.dampening,
               .weight_decay = o_.weight_decay,
               .nesterov = o_.nesterov};
    if (o_.optimizer != "sgd") {  // Adam/AdamW: betas replace SGD's momentum
      (void)kernels::parse_algorithm(o_.optimizer, opt.sgd.algorithm);  // validate() checked it
      opt.sgd.momentum = opt.sgd.dampening = 0.f;
      opt.sgd.beta1 = o_.beta1();
      opt.sgd.beta2 = o_.beta2();
      opt.sgd.eps = o_.eps;
    }
    opt.grad_type = grad_type_of(o_.grad_dtype);
    opt.push_credit_bytes = static_cast<std::size_t>(o_.push_credit);
    dist_.emplace(worker_, model, opt);
    return base_lr;
  }

  // The servers keep the rate configured above unless a schedule changes it.
  void set_learning_rate(float lr) override {
    if (o_.lr_schedule != "none") dist_->set_learning_rate(lr);
  }
  void zero_grad() override { dist_->zero_grad(); }
  void step() override { dist_->step(); }
  void synchronize() override {
    if (dist_) dist_->synchronize();
  }
  void finish() override {
    dist_.reset();
    worker_.shutdown();
  }
  std::uint64_t resume_round() const override { return worker_.resume_round(); }
  void barrier() override { worker_.barrier(); }
  int num_servers() const override { return worker_.num_servers(); }
  std::uint64_t version() override { return dist_ ? dist_->version() : 0; }
  std::uint64_t dropped() const override { return dist_ ? dist_->dropped() : 0; }
  bool joined() const override { return worker_.joined(); }
  std::uint64_t catch_up(std::uint64_t version) override { return dist_->catch_up(version); }
  void set_last_round(std::uint64_t last) override {
    if (dist_) dist_->set_last_round(last);
  }
  Worker* worker() override { return &worker_; }

 private:
  TrainOptions o_;
  Worker worker_;
  // Declared after the worker it uses: destroyed first.
  std::optional<psrt::torch::DistributedOptimizer> dist_;
};

}  // namespace

std::unique_ptr<TrainOptimizer> make_distributed_optimizer(const TrainOptions& o) {
  return std::make_unique<DistributedSgd>(o);
}

}  // namespace psrt::pstrain
