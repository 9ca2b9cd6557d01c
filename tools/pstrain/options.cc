#include "pstrain/options.h"

#include <fmt/format.h>

#include <cmath>

#include "device/cuda_device.h"
#include "kernels/fused_adam.h"
#include "psrt/error.h"

namespace psrt::pstrain {

void add_train_options(CLI::App& app, TrainOptions& o) {
  app.add_option("--model", o.model,
                 "lenet | resnet18 | resnet34 | resnet50 | resnet20 | resnet32 | resnet56 | "
                 "resnet110")
      ->capture_default_str();
  app.add_option("--dataset", o.dataset, "fashion-mnist | mnist | cifar10 | synthetic")
      ->capture_default_str();
  app.add_option("--data-dir", o.data_dir,
                 "where the data set's files are (default: fashion-mnist "
                 "/usr/share/datasets/fashion-mnist, mnist /usr/share/datasets/mnist, cifar10 "
                 "./data/cifar-10-batches-bin)");
  app.add_option("--epochs", o.epochs, "passes over the training set")->capture_default_str();
  app.add_option("--max-steps", o.max_steps, "stop after this many steps (0 = no limit)")
      ->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "samples per step per worker")
      ->capture_default_str();
  app.add_option("--optimizer", o.optimizer,
                 "sgd | adam | adamw: torch.optim's, on the servers (and in --no-ps)")
      ->capture_default_str();
  app.add_option("--lr", o.lr, "learning rate")->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum (sgd only)")->capture_default_str();
  app.add_option("--betas", o.betas, "Adam/AdamW betas as B1,B2")->capture_default_str();
  app.add_option("--eps", o.eps, "Adam/AdamW eps")->capture_default_str();
  app.add_option("--dampening", o.dampening, "SGD dampening")->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay,
                 "weight decay: L2 for sgd and adam, decoupled for adamw")
      ->capture_default_str();
  app.add_flag("--nesterov", o.nesterov, "Nesterov momentum");
  app.add_option("--lr-schedule", o.lr_schedule,
                 "none | step (x0.1 at 50% and 75% of the steps) | cosine (to 0 at the end)")
      ->capture_default_str();
  app.add_option("--eval-every", o.eval_every,
                 "evaluate on the test set every N steps (0 = at the end of every epoch)")
      ->capture_default_str();
  app.add_option("--train-dir", o.train_dir, "directory for checkpoints (none when empty)");
  app.add_option("--checkpoint-every", o.checkpoint_every,
                 "checkpoint every N steps (0 = at the end of every epoch)")
      ->capture_default_str();
  app.add_flag("--resume", o.resume, "continue from the latest checkpoint in --train-dir");
  app.add_option("--threads", o.threads,
                 "intra-op threads per worker (0 = cores / (workers + servers) of the job on this "
                 "host; --no-ps: all cores)")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed for the model, the shuffles and augmentation")
      ->capture_default_str();
  app.add_flag("--no-ps", o.no_ps,
               "train in this process with torch::optim::SGD (the single-machine baseline)");
  app.add_option(
         "--device", o.device,
         "where the model trains and evaluates: cpu, cuda (this worker's GPU: PSRT_GPU, else "
         "the worker-local rank) or cuda:N (needs a CUDA LibTorch)")
      ->capture_default_str();
  app.add_option("--metrics", o.metrics,
                 "write per-step metrics as JSON lines to FILE (rank 0; '{rank}' in FILE makes "
                 "every worker write its own)");
  app.add_option("--grad-dtype", o.grad_dtype, "fp32 | fp16 | bf16 gradients on the wire")
      ->capture_default_str();
  app.add_option("--push-credit", o.push_credit,
                 "gradient bytes handed to the transport and not yet sent before later gradients "
                 "queue in forward order (0 = no bound)")
      ->capture_default_str();
  app.add_flag("--digest", o.digest,
               "add a digest of the weights to every metrics line (waits for each step's pulls)");
  app.add_option("--log-every", o.log_every, "steps between log lines (when not on a terminal)")
      ->capture_default_str();
  app.add_option("--synthetic-size", o.synthetic_size, "training samples of --dataset synthetic")
      ->capture_default_str();
  app.add_option("--slow-rank", o.slow_rank,
                 "slow this worker down on purpose, a straggler for backup workers "
                 "(docs/elastic.md; -1 = none)")
      ->capture_default_str();
  app.add_option("--slow-factor", o.slow_factor,
                 "--slow-rank's worker takes this many times its compute per step (it sleeps the "
                 "rest)")
      ->capture_default_str();
}

float TrainOptions::beta1() const {
  OptimizerConfig c;
  (void)kernels::parse_betas(betas, c);
  return c.beta1;
}

float TrainOptions::beta2() const {
  OptimizerConfig c;
  (void)kernels::parse_betas(betas, c);
  return c.beta2;
}

void validate(const TrainOptions& o) {
  auto bad = [](const std::string& what) { throw Error(ErrorCode::kInvalidArgument, what); };
  if (o.epochs < 1) bad(fmt::format("--epochs {}: must be at least 1", o.epochs));
  if (o.max_steps < 0) bad(fmt::format("--max-steps {}: must be >= 0", o.max_steps));
  if (o.batch_size < 1) bad(fmt::format("--batch-size {}: must be at least 1", o.batch_size));
  if (!(o.lr > 0.f) || !std::isfinite(o.lr))
    bad(fmt::format("--lr {}: must be a finite number > 0", o.lr));
  for (float v : {o.momentum, o.weight_decay, o.dampening})
    if (!(v >= 0.f) || !std::isfinite(v))
      bad("--momentum, --dampening and --weight-decay must be finite numbers >= 0");
  if (o.nesterov && (o.momentum <= 0.f || o.dampening != 0.f))
    bad("--nesterov needs --momentum > 0 and --dampening 0");
  OptimizerConfig adam;
  if (!kernels::parse_algorithm(o.optimizer, adam.algorithm))
    bad(fmt::format("--optimizer '{}': use sgd, adam or adamw", o.optimizer));
  if (!kernels::parse_betas(o.betas, adam))
    bad(fmt::format("--betas '{}': use B1,B2 (e.g. 0.9,0.999)", o.betas));
  if (o.optimizer != "sgd" &&
      !(adam.beta1 >= 0.f && adam.beta1 < 1.f && adam.beta2 >= 0.f && adam.beta2 < 1.f))
    bad(fmt::format("--betas {}: each beta must be in [0, 1)", o.betas));
  if (o.optimizer != "sgd" && !(o.eps > 0.f && std::isfinite(o.eps)))
    bad(fmt::format("--eps {}: must be a finite number > 0", o.eps));
  if (o.optimizer != "sgd" && o.nesterov)
    bad(fmt::format("--nesterov is SGD's; --optimizer {} takes --betas", o.optimizer));
  if (o.lr_schedule != "none" && o.lr_schedule != "step" && o.lr_schedule != "cosine")
    bad(fmt::format("--lr-schedule '{}': use none, step or cosine", o.lr_schedule));
  if (o.eval_every < 0 || o.checkpoint_every < 0 || o.log_every < 1)
    bad("--eval-every and --checkpoint-every must be >= 0, --log-every >= 1");
  if (o.resume && o.train_dir.empty()) bad("--resume needs --train-dir");
  if (o.threads < 0) bad(fmt::format("--threads {}: must be >= 0", o.threads));
  if (o.grad_dtype != "fp32" && o.grad_dtype != "fp16" && o.grad_dtype != "bf16")
    bad(fmt::format("--grad-dtype '{}': use fp32, fp16 or bf16", o.grad_dtype));
  if (o.no_ps && o.grad_dtype != "fp32") bad("--grad-dtype applies to PS training, not --no-ps");
  try {
    device::parse_device(o.device);
  } catch (const Error& e) {
    bad(fmt::format("--device: {}", e.what()));  // as psrun words --server-device's error
  }
  if (o.synthetic_size < 1) bad("--synthetic-size must be at least 1");
  if (o.push_credit < 0) bad(fmt::format("--push-credit {}: must be >= 0", o.push_credit));
  if (o.slow_rank < -1) bad(fmt::format("--slow-rank {}: use a worker's rank, or -1", o.slow_rank));
  if (!(o.slow_factor >= 1.0 && o.slow_factor <= 100.0))
    bad(fmt::format("--slow-factor {}: must be in [1, 100]", o.slow_factor));
}

}  // namespace psrt::pstrain
