#include "pstrain/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "base/log.h"
#include "psrt/psrt.h"
#include "psrt/torch.h"
#include "pstrain/checkpoint.h"
#include "pstrain/data/batch.h"
#include "pstrain/data/dataset.h"
#include "pstrain/data/shard.h"
#include "pstrain/device.h"
#include "pstrain/evaluate.h"
#include "pstrain/lr_schedule.h"
#include "pstrain/report.h"
#include "runtime/env_contract.h"

namespace psrt::pstrain {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// This host's cores shared by `processes`: psrun's local launcher starts every worker and
// server of the job here, and a server needs a core too.
int threads_per_process(int processes) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, processes));
}

// The augmentation seed of one step: the same on every run, different for every step.
std::uint64_t step_seed(std::uint64_t seed, int rank, std::int64_t epoch, std::int64_t index) {
  std::uint64_t z =
      seed + 0x9e3779b97f4a7c15ull *
                 static_cast<std::uint64_t>((epoch * 1000003 + index) * 65537 + rank + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

GradType grad_type_of(const std::string& s) {
  if (s == "fp16") return GradType::kF16;
  if (s == "bf16") return GradType::kBF16;
  return GradType::kF32;
}

std::string metrics_path(const std::string& path, int rank) {
  const auto at = path.find("{rank}");
  if (at == std::string::npos) return rank == 0 ? path : "";
  std::string p = path;
  p.replace(at, 6, std::to_string(rank));
  return p;
}

}  // namespace

void train(const TrainOptions& o) {
  validate(o);
  // Before the job is joined: a worker that cannot use its device fails at once, and the
  // others (failing the same way) do not wait for it.
  const ::torch::Device device = resolve_device(o.device);
  const auto wall_start = Clock::now();

  SyntheticSpec synthetic;
  synthetic.train_size = o.synthetic_size;
  synthetic.seed = o.seed;
  const DataSplit data = load_dataset(o.dataset, o.data_dir, synthetic);
  const ModelSpec spec{data.train.images.size(1), data.train.images.size(2),
                       data.train.images.size(3), data.train.num_classes};
  ::torch::manual_seed(o.seed);
  auto model = make_model(o.model, spec);
  // Initialised on the CPU (the same weights for every --device), then moved: before the
  // optimizers take the parameters, which must not change storage afterwards.
  model->to(device);

  std::optional<Worker> worker;
  int rank = 0, world = 1;
  if (!o.no_ps) {
    worker.emplace(Worker::from_env());
    rank = worker->rank();
    world = worker->num_workers();
  }
  at::set_num_threads(
      o.threads > 0 ? o.threads : threads_per_process(worker ? world + worker->num_servers() : 1));

  std::unique_ptr<::torch::optim::SGD> local;
  if (o.no_ps)
    local =
        std::make_unique<::torch::optim::SGD>(model->parameters(), ::torch::optim::SGDOptions(o.lr)
                                                                       .momentum(o.momentum)
                                                                       .dampening(o.dampening)
                                                                       .weight_decay(o.weight_decay)
                                                                       .nesterov(o.nesterov));

  std::int64_t step = 0;
  if (!o.resume && !o.train_dir.empty()) {
    if (auto old = latest_checkpoint(o.train_dir))
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("--train-dir {} holds the checkpoints of an earlier run (latest: "
                              "step {}): pass --resume to continue it, or another --train-dir",
                              o.train_dir, old->step));
  }
  if (o.resume) {
    if (auto ck = latest_checkpoint(o.train_dir)) {
      if (ck->workers != world || ck->batch_size != o.batch_size)
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("--resume: the checkpoint in {} was written by {} worker(s) with "
                                "--batch-size {}, this run has {} and {}: the data order and the "
                                "steps per epoch would not continue; resume with the same",
                                o.train_dir, ck->workers, ck->batch_size, world, o.batch_size));
      if (ck->model != o.model || ck->dataset != o.dataset)
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("--resume: the latest checkpoint in {} trains {} on {}, not {} "
                                "on {}; pass the same --model and --dataset or another "
                                "--train-dir",
                                o.train_dir, ck->model, ck->dataset, o.model, o.dataset));
      load_checkpoint(*ck, *model, local.get(), device);
      step = ck->step;
      PSRT_LOG_INFO("resumed from {} at step {} (epoch {}), weights {}", ck->weights, ck->step,
                    ck->epoch, weights_digest(*model));
    } else {
      PSRT_LOG_INFO("--resume: no checkpoint in {} yet; starting from step 0", o.train_dir);
    }
  }

  // --lr is the rate of a round that averages N gradients (sync). In async and ssp every
  // gradient is applied alone, N times as often: each gets lr / N, the same step per sample.
  float base_lr = o.lr;
  if (worker) {
    const std::string mode = runtime::env_string("PSRT_MODE");
    if (mode != "sync" && world > 1) {
      base_lr = o.lr / static_cast<float>(world);
      if (rank == 0)
        PSRT_LOG_INFO("mode {}: each gradient is applied alone, with lr {} / {} workers = {}", mode,
                      o.lr, world, base_lr);
    }
  }
  std::unique_ptr<psrt::torch::DistributedOptimizer> dist;
  if (worker) {
    psrt::torch::Options opt;
    opt.set_sgd = true;
    opt.sgd = {.lr = base_lr,
               .momentum = o.momentum,
               .dampening = o.dampening,
               .weight_decay = o.weight_decay,
               .nesterov = o.nesterov};
    opt.grad_type = grad_type_of(o.grad_dtype);
    opt.push_credit_bytes = static_cast<std::size_t>(o.push_credit);
    dist = std::make_unique<psrt::torch::DistributedOptimizer>(*worker, *model, opt);
  }
  auto synchronize = [&] {
    if (dist) dist->synchronize();
  };

  const std::int64_t n = data.train.images.size(0);
  if (n < world)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{} training samples cannot be shared by {} workers", n, world));
  const std::int64_t per_epoch = steps_per_epoch(n, world, o.batch_size);
  std::int64_t total = o.epochs * per_epoch;
  if (o.max_steps > 0) total = std::min(total, o.max_steps);
  const std::int64_t checkpoint_every = o.checkpoint_every ? o.checkpoint_every : per_epoch;
  const std::int64_t eval_every = o.eval_every ? o.eval_every : per_epoch;
  const std::int64_t batch = std::min(o.batch_size, n / world);

  MetricsFile metrics(metrics_path(o.metrics, rank));
  if (rank == 0 && !o.train_dir.empty()) {
    std::error_code ignored;  // pseval --watch must not take an earlier run's DONE for this one
    std::filesystem::remove(std::filesystem::path(o.train_dir) / "DONE", ignored);
  }
  Progress progress(o.log_every, rank == 0);
  if (rank == 0)
    PSRT_LOG_INFO(
        "training {} on {} ({} samples) with {} worker(s) on {}, batch {} per worker, "
        "{} steps per epoch, {} steps, {} threads",
        o.model, o.dataset, n, world, device.str(), batch, per_epoch, total, at::get_num_threads());

  double train_seconds = 0;
  std::int64_t steps_done = 0;
  std::optional<EvalResult> last_eval;
  std::int64_t last_eval_step = -1;
  auto run_eval = [&] {
    synchronize();
    last_eval = evaluate(*model, data.test);
    last_eval_step = step;
    metrics.write({{"step", step},
                   {"epoch", step > 0 ? (step - 1) / per_epoch : 0},  // of the last step done
                   {"time_s", seconds_since(wall_start)},
                   {"test_loss", last_eval->loss},
                   {"test_accuracy", last_eval->accuracy}});
    progress.note(fmt::format("step {} test_accuracy {:.4f} test_loss {:.4f}", step,
                              last_eval->accuracy, last_eval->loss));
  };

  ::torch::Tensor shard;
  std::int64_t shard_epoch = -1;
  while (step < total) {
    const std::int64_t epoch = step / per_epoch;
    const std::int64_t index = step % per_epoch;
    if (epoch != shard_epoch) {
      shard = epoch_shard(n, rank, world, o.seed, epoch);
      shard_epoch = epoch;
    }
    const Batch b =
        make_batch(data.train, shard, index * batch, batch, step_seed(o.seed, rank, epoch, index));
    // Built on the CPU (the same samples for every --device); no copy when device is the CPU.
    const ::torch::Tensor images = b.images.to(device), labels = b.labels.to(device);
    const float lr = lr_at(o.lr_schedule, base_lr, step, total);
    if (local) {
      for (auto& group : local->param_groups())
        static_cast<::torch::optim::SGDOptions&>(group.options()).lr(lr);
    } else if (o.lr_schedule != "none") {
      dist->set_learning_rate(lr);
    }

    const auto t0 = Clock::now();
    model->train();
    if (local)
      local->zero_grad();
    else
      dist->zero_grad();
    auto logits = model->forward(images);
    auto loss = ::torch::nn::functional::cross_entropy(logits, labels);
    loss.backward();
    if (local)
      local->step();
    else
      dist->step();
    const double loss_value = loss.item<double>();
    const double acc = logits.argmax(1).eq(labels).to(::torch::kFloat).mean().item<double>();
    const double dt = seconds_since(t0);
    train_seconds += dt;
    ++steps_done;
    ++step;

    nlohmann::json line{{"step", step},
                        {"epoch", epoch},
                        {"time_s", seconds_since(wall_start)},
                        {"loss", loss_value},
                        {"train_acc", acc},
                        {"samples_per_sec", static_cast<double>(batch) / dt},
                        {"lr", lr}};
    if (o.digest) {
      synchronize();
      line["weights_digest"] = weights_digest(*model);
    }
    metrics.write(line);
    progress.step({step, total, epoch, loss_value, acc,
                   static_cast<double>(batch * steps_done) / train_seconds, lr});

    const bool epoch_end = step % per_epoch == 0;
    if (rank == 0 && !o.train_dir.empty() &&
        (step % checkpoint_every == 0 || epoch_end || step == total)) {
      synchronize();
      CheckpointInfo info;
      info.step = step;
      info.epoch = step / per_epoch;
      info.model = o.model;
      info.dataset = o.dataset;
      info.data_dir = o.data_dir;
      info.spec = spec;
      info.workers = world;
      info.batch_size = o.batch_size;
      info.seed = o.seed;
      save_checkpoint(o.train_dir, *model, local.get(), info);
      progress.note(fmt::format("checkpoint at step {} in {} (weights {})", step, o.train_dir,
                                weights_digest(*model)));
    }
    if (rank == 0 && (step % eval_every == 0 || epoch_end)) run_eval();
  }
  synchronize();
  progress.finish();

  if (rank == 0) {
    if (last_eval_step != step) run_eval();
    if (!o.train_dir.empty())
      std::ofstream(std::filesystem::path(o.train_dir) / "DONE") << step << "\n";
    const double per_worker =
        train_seconds > 0 ? static_cast<double>(batch * steps_done) / train_seconds : 0;
    nlohmann::json summary{{"model", o.model},
                           {"dataset", o.dataset},
                           {"device", device.str()},
                           {"workers", world},
                           {"epochs", o.epochs},
                           {"steps", step},
                           {"test_accuracy", last_eval->accuracy},
                           {"test_loss", last_eval->loss},
                           {"samples_per_sec", per_worker * world},
                           {"samples_per_sec_per_worker", per_worker},
                           {"wall_s", seconds_since(wall_start)},
                           {"ps", !o.no_ps}};
    std::printf("%s\n", summary.dump().c_str());
    std::fflush(stdout);
  }
  dist.reset();
  if (worker) worker->shutdown();
}

}  // namespace psrt::pstrain
