#include "pstrain/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "base/log.h"
#include "ps/job_checkpoint.h"
#include "psrt/psrt.h"
#include "pstrain/checkpoint.h"
#include "pstrain/data/batch.h"
#include "pstrain/data/dataset.h"
#include "pstrain/data/shard.h"
#include "pstrain/device.h"
#include "pstrain/epoch_plan.h"
#include "pstrain/evaluate.h"
#include "pstrain/job_checkpoint.h"
#include "pstrain/lr_schedule.h"
#include "pstrain/optimizer.h"
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

// True when a step that moved `before` to `after` passed a multiple of `every`: without backup
// workers every step moves by one (after % every == 0); with them a worker whose pushes were
// dropped jumps over rounds, and still checkpoints or evaluates once per boundary it passed.
bool crossed(std::int64_t before, std::int64_t after, std::int64_t every) {
  return every > 0 && before / every != after / every;
}

std::string metrics_path(const std::string& path, int rank) {
  const auto at = path.find("{rank}");
  if (at == std::string::npos) return rank == 0 ? path : "";
  std::string p = path;
  p.replace(at, 6, std::to_string(rank));
  return p;
}

DataSplit load_data(const TrainOptions& o) {
  SyntheticSpec synthetic;
  synthetic.train_size = o.synthetic_size;
  synthetic.seed = o.seed;
  return load_dataset(o.dataset, o.data_dir, synthetic);
}

// The step at which this run starts: 0, or --resume's latest checkpoint (loaded into `model` and
// the optimizer's state). Refuses a --train-dir that holds an earlier run without --resume, and
// a checkpoint whose job does not continue with these options.
std::int64_t resume(const TrainOptions& o, int world, ::torch::nn::Module& model,
                    TrainOptimizer& opt, ::torch::Device device) {
  if (!o.resume && !o.train_dir.empty()) {
    if (auto old = latest_checkpoint(o.train_dir))
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("--train-dir {} holds the checkpoints of an earlier run (latest: "
                              "step {}): pass --resume to continue it, or another --train-dir",
                              o.train_dir, old->step));
  }
  if (!o.resume) return 0;
  auto ck = latest_checkpoint(o.train_dir);
  if (!ck) {
    PSRT_LOG_INFO("--resume: no checkpoint in {} yet; starting from step 0", o.train_dir);
    return 0;
  }
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
  load_checkpoint(*ck, model, opt.checkpoint_state(), device);
  PSRT_LOG_INFO("resumed from {} at step {} (epoch {}), weights {}", ck->weights, ck->step,
                ck->epoch, weights_digest(model));
  return ck->step;
}

// How many steps, of how many samples, and when to evaluate and checkpoint. An epoch's workers
// (its plan, pstrain/epoch_plan.h) fix its steps; the job's last step follows from the epochs
// left.
struct Schedule {
  std::int64_t samples = 0;  // in the training set
  std::int64_t per_epoch = 0;
  std::int64_t total = 0;
  std::int64_t checkpoint_every = 0;  // besides every epoch end; 0: none
  std::int64_t eval_every = 0;        // the same
  std::int64_t batch = 0;             // per worker
  EpochPlan epoch;                    // the epoch the steps are in now
  // The samples `epoch` is cut from (pstrain/data/shard.h); empty: all of them. Only the epoch
  // a job of fewer workers resumed in has less (psrun --min-workers).
  EpochPool pool;
  std::int64_t epoch_end() const { return epoch.first_step + per_epoch; }
};

// Enters the epoch of `plan`, cut from s.pool.
void enter_epoch(Schedule& s, const TrainOptions& o, const EpochPlan& plan) {
  const std::int64_t size = pool_size(s.pool, s.samples);
  if (size < plan.world)
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("{} training samples cannot be shared by {} workers", size, plan.world));
  s.epoch = plan;
  s.per_epoch = steps_per_epoch(size, plan.world, o.batch_size);
  s.batch = std::min(o.batch_size, size / plan.world);
  s.total = plan.first_step + s.per_epoch +
            (o.epochs - plan.epoch - 1) * steps_per_epoch(s.samples, plan.world, o.batch_size);
  if (o.max_steps > 0) s.total = std::min(s.total, o.max_steps);
}

// The epoch that step `step` of a job of `world` workers (all of them from the start) is in.
EpochPlan fixed_epoch(const TrainOptions& o, std::int64_t n, std::int64_t step, int rank, int world,
                      std::int64_t step_base) {
  const std::int64_t per = steps_per_epoch(n, world, o.batch_size);
  return {step / per, step / per * per, step_base, world, rank};
}

// The epoch of a job resumed at `part.step` from `part` (a job checkpoint's), for worker `rank`
// of `world`: the part's epoch as it was cut when the workers are as many as then; the next
// epoch when the part's was done; else (psrun --min-workers restarted it with fewer workers) the
// part's epoch again, from the resumed step on, cut from the samples its workers had not
// trained yet (remaining_pool), so that the epoch still trains each of its samples once.
void resume_epoch(Schedule& s, const TrainOptions& o, const WorkerPart& part, int rank, int world,
                  std::int64_t step_base) {
  s.pool = part.pool;
  enter_epoch(s, o, {part.epoch, part.first_step, step_base, part.world, 0});
  if (part.step >= s.epoch_end()) {
    s.pool.clear();
    enter_epoch(s, o, {part.epoch + 1, s.epoch_end(), step_base, world, rank});
  } else if (part.world == world) {
    s.epoch.part = rank;
  } else {
    s.pool =
        remaining_pool(part.pool, s.samples, part.world, part.step - part.first_step, o.batch_size);
    enter_epoch(s, o, {part.epoch, part.step, step_base, world, rank});
    if (rank == 0)
      PSRT_LOG_INFO(
          "epoch {}: the {} samples its {} workers had not trained yet are cut in {} parts "
          "(the job resumed with {} workers)",
          part.epoch, pool_size(s.pool, s.samples), part.world, world, world);
  }
}

// One training run: set up in the constructor, then run().
class TrainRun {
 public:
  explicit TrainRun(const TrainOptions& o);
  void run();

 private:
  // The epoch at the start: this worker's place in it, agreed with the others.
  void enter_first_epoch();
  // A worker that joined a running job: rounds without samples until the job reaches the next
  // epoch, which it then trains with the others. False: no epoch is left for it.
  bool join_next_epoch();
  // At an epoch's last step: the next epoch's plan (a joiner counts from here on).
  void next_epoch();
  void train_step();
  // --slow-rank: sleeps (--slow-factor - 1) times the previous step's compute.
  void straggle();
  void checkpoint();
  // The job checkpoint (pstrain/job_checkpoint.h): resume from round `round`, write this step's.
  // Sets resumed_.
  std::int64_t resume_from_job(std::uint64_t round);
  void job_checkpoint();
  void evaluate_now();
  void summarize() const;

  const TrainOptions& o_;
  // Before the job is joined: a worker that cannot use its device fails at once, and the
  // others (failing the same way) do not wait for it.
  const ::torch::Device device_;
  const Clock::time_point wall_start_ = Clock::now();
  const DataSplit data_;
  const ModelSpec spec_;
  std::shared_ptr<ClassifierImpl> model_;
  std::unique_ptr<TrainOptimizer> opt_;
  const int rank_, world_;
  std::int64_t step_ = 0;
  // Backup workers (psrun --backup-workers, docs/elastic.md): the step loop follows the servers'
  // rounds. step_ is then round_base_ + the version of the weights this worker holds, so a
  // worker whose pushes were dropped moves on to the current round instead of replaying the
  // ones the job ran without it, and every worker stops when the job reached the last round.
  bool by_round_ = false;
  // step_ - the version of the weights (0 for a fresh job).
  std::int64_t round_base_ = 0;
  // Sync jobs without backup workers or job checkpoints agree on every epoch's workers
  // (pstrain/epoch_plan.h): a joiner trains from the next epoch on and the data is re-sharded.
  std::unique_ptr<EpochPlanner> planner_;
  std::int64_t first_step_ = 0;
  double last_compute_ = 0;  // seconds, of this worker's previous step (--slow-rank)
  float base_lr_ = 0.f;
  // psrun's --checkpoint-dir and --checkpoint-every in a sync job through the servers: this
  // worker writes its part of every job checkpoint round there (every job_every_ steps, 0: only
  // on demand). Empty: none.
  std::string job_dir_;
  std::int64_t job_every_ = 0;
  std::optional<WorkerPart> resumed_;  // the part this worker resumed from, if any
  Schedule sched_;
  std::optional<MetricsFile> metrics_;
  std::optional<Progress> progress_;

  double train_seconds_ = 0;
  std::int64_t steps_done_ = 0;
  std::optional<EvalResult> last_eval_;
  std::int64_t last_eval_step_ = -1;
  ::torch::Tensor shard_;
  std::int64_t shard_epoch_ = -1;
};

// Whether the job's epochs are planned (pstrain/epoch_plan.h). Not with cuda servers or
// --replicas 2, which refuse its key: then every epoch is cut for the workers of the start.
std::unique_ptr<EpochPlanner> make_planner(TrainOptimizer& opt, bool by_round, bool job_dir) {
  if (!opt.worker() || by_round || job_dir || runtime::env_string("PSRT_MODE") != "sync")
    return nullptr;
  // What the servers would refuse (an aggregate-only key needs cpu servers and no replicas),
  // not asked: the refusal is logged as an error on the servers.
  if (runtime::env_string("PSRT_SERVER_DEVICE").starts_with("cuda") ||
      runtime::env_int("PSRT_REPLICAS", 1, 2) > 1)
    return nullptr;
  try {
    return std::make_unique<EpochPlanner>(*opt.worker());
  } catch (const Error& e) {
    if (opt.rank() == 0)
      PSRT_LOG_INFO("no epoch plan ({}): every epoch is cut for the workers of the start",
                    e.what());
    return nullptr;
  }
}

TrainRun::TrainRun(const TrainOptions& o)
    : o_(o),
      device_(resolve_device(o.device)),
      data_(load_data(o)),
      spec_{data_.train.images.size(1), data_.train.images.size(2), data_.train.images.size(3),
            data_.train.num_classes},
      model_([&] {
        ::torch::manual_seed(o.seed);
        auto m = make_model(o.model, spec_);
        // Initialised on the CPU (the same weights for every --device), then moved: before the
        // optimizers take the parameters, which must not change storage afterwards.
        m->to(device_);
        return m;
      }()),
      opt_(make_optimizer(o, *model_)),
      rank_(opt_->rank()),
      world_(opt_->world()) {
  at::set_num_threads(o.threads > 0 ? o.threads : threads_per_process(opt_->processes()));
  if (!o.no_ps && runtime::env_string("PSRT_MODE") == "sync") {
    job_dir_ = runtime::env_string("PSRT_CHECKPOINT_DIR");
    if (!job_dir_.empty()) job_every_ = runtime::env_int("PSRT_CHECKPOINT_EVERY", 0, 1LL << 40);
    by_round_ = runtime::env_int("PSRT_BACKUP_WORKERS", 0, 4095) > 0;
    // A job checkpoint's round is every worker's step; a straggler's dropped rounds break that.
    if (!job_dir_.empty() && by_round_)
      throw Error(ErrorCode::kInvalidArgument,
                  "pstrain's job checkpoints (psrun --checkpoint-dir) take a worker's step for the "
                  "servers' round, which --backup-workers breaks (a straggler's rounds are "
                  "dropped): use one of them (docs/elastic.md)");
  }
  // A job resumed from a job checkpoint continues from its round, whatever --train-dir holds.
  // A joiner starts from the weights the others hold.
  if (!job_dir_.empty() && opt_->resume_round() > 0)
    step_ = resume_from_job(opt_->resume_round());
  else if (!opt_->joined())
    step_ = resume(o, world_, *model_, *opt_, device_);
  if (!job_dir_.empty() && rank_ == 0) ps::mark_job_checkpoints(job_dir_);
  base_lr_ = opt_->start(*model_);
  if (!o.no_ps && opt_->joined()) {
    step_ = static_cast<std::int64_t>(opt_->version());  // until the epoch plan says otherwise
  } else if (!o.no_ps) {
    round_base_ = step_ - static_cast<std::int64_t>(opt_->version());
  }
  first_step_ = step_;
  planner_ = make_planner(*opt_, by_round_, !job_dir_.empty());
  sched_.samples = data_.train.images.size(0);
  sched_.checkpoint_every = o.checkpoint_every;
  sched_.eval_every = o.eval_every;
  if (resumed_ && resumed_->world > 0)
    resume_epoch(sched_, o, *resumed_, rank_, world_, std::max<std::int64_t>(0, round_base_));
  else
    enter_epoch(sched_, o,
                fixed_epoch(o, sched_.samples, step_, rank_, world_,
                            std::max<std::int64_t>(0, round_base_)));
  if (!job_dir_.empty() && opt_->resume_round() > 0 && rank_ == 0) {
    opt_->synchronize();
    PSRT_LOG_INFO("resumed from job checkpoint round {} in {} at step {} (epoch {}), weights {}",
                  opt_->resume_round(), job_dir_, step_, sched_.epoch.epoch,
                  weights_digest(*model_));
  }
  metrics_.emplace(metrics_path(o.metrics, rank_));
  if (rank_ == 0 && !o.train_dir.empty()) {
    std::error_code ignored;  // pseval --watch must not take an earlier run's DONE for this one
    std::filesystem::remove(std::filesystem::path(o.train_dir) / "DONE", ignored);
  }
  progress_.emplace(o.log_every, rank_ == 0);
  if (rank_ == 0)
    PSRT_LOG_INFO(
        "training {} on {} ({} samples) with {} worker(s) on {}, batch {} per worker, "
        "{} steps per epoch, {} steps, {} threads",
        o.model, o.dataset, sched_.samples, world_, device_.str(), sched_.batch, sched_.per_epoch,
        sched_.total, at::get_num_threads());
}

void TrainRun::enter_first_epoch() {
  const EpochPlan fixed = sched_.epoch;
  if (!planner_) return;
  const EpochPlan p = planner_->agree(fixed.epoch, fixed.first_step, fixed.step_base);
  if (p.world != fixed.world && rank_ == 0)
    PSRT_LOG_INFO("epoch {}: {} workers, not {}: the data is cut in {} parts", p.epoch, p.world,
                  fixed.world, p.world);
  enter_epoch(sched_, o_, p);
}

bool TrainRun::join_next_epoch() {
  const EpochPlan now = planner_->last();
  EpochPlan next{0, 0, 0, 0, -1};  // none agreed yet: the job is at its start
  if (now.epoch >= 0) {
    enter_epoch(sched_, o_, now);  // the others' schedule, for the learning rate
    next = {now.epoch + 1, sched_.epoch_end(), now.step_base, 0, -1};
  }
  round_base_ = next.step_base;
  if (next.epoch >= o_.epochs || (o_.max_steps > 0 && next.first_step >= o_.max_steps)) {
    PSRT_LOG_INFO("joined at step {}: the job has no epoch left to train", step_);
    return false;
  }
  PSRT_LOG_INFO("joined at step {}: rounds without samples until epoch {} starts at step {}",
                round_base_ + static_cast<std::int64_t>(opt_->version()), next.epoch,
                next.first_step);
  const auto target = static_cast<std::uint64_t>(next.first_step - round_base_);
  for (std::uint64_t v = opt_->version(); v < target;) {
    const auto at = round_base_ + static_cast<std::int64_t>(v);
    opt_->set_learning_rate(lr_at(o_.lr_schedule, base_lr_, at, sched_.total));
    v = opt_->catch_up(target);
  }
  step_ = next.first_step;
  first_step_ = step_;
  enter_epoch(sched_, o_, planner_->agree(next.epoch, next.first_step, next.step_base));
  return true;
}

void TrainRun::next_epoch() {
  while (step_ >= sched_.epoch_end()) {
    const EpochPlan& e = sched_.epoch;
    EpochPlan p{e.epoch + 1, sched_.epoch_end(), e.step_base, e.world, e.part};
    if (planner_) p = planner_->agree(p.epoch, p.first_step, p.step_base);
    sched_.pool.clear();  // every epoch after a resumed one is cut from all the samples
    if (p.world != e.world && rank_ == 0)
      progress_->note(fmt::format("epoch {}: {} workers (was {}): the data is cut in {} parts",
                                  p.epoch, p.world, e.world, p.world));
    enter_epoch(sched_, o_, p);
  }
}

void TrainRun::run() {
  if (planner_ && opt_->joined()) {
    if (!join_next_epoch()) {
      opt_->finish();
      return;
    }
  } else {
    enter_first_epoch();
  }
  // The step loop stops when this worker's lowest key version reaches the last round; a key
  // already there is not pushed again (a round past the last one would otherwise run on it).
  if (by_round_) opt_->set_last_round(static_cast<std::uint64_t>(sched_.total - round_base_));
  while (step_ < sched_.total) {
    next_epoch();
    if (step_ >= sched_.total) break;
    // psrun got SIGUSR1: worker 0 asks for a checkpoint at round step + 2, before it pushes
    // step + 1. Another worker may end step + 1 before this request is written (its weights of
    // round step came earlier), but not step + 2: the forward of step + 2 waits for round
    // step + 1, which waits for worker 0's gradient of step + 1.
    if (!job_dir_.empty() && rank_ == 0 && ps::take_checkpoint_now(job_dir_)) {
      ps::request_checkpoint(job_dir_, static_cast<std::uint64_t>(step_ + 2));
      progress_->note(fmt::format("job checkpoint requested at round {}", step_ + 2));
    }
    const std::int64_t before = step_;
    train_step();
    if (!job_dir_.empty() &&
        ((job_every_ > 0 && step_ % job_every_ == 0) ||
         ps::checkpoint_requested(job_dir_, static_cast<std::uint64_t>(step_))))
      job_checkpoint();
    const bool epoch_end = before < sched_.epoch_end() && step_ >= sched_.epoch_end();
    if (rank_ == 0 && !o_.train_dir.empty() &&
        (crossed(before, step_, sched_.checkpoint_every) || epoch_end || step_ >= sched_.total))
      checkpoint();
    if (rank_ == 0 && (crossed(before, step_, sched_.eval_every) || epoch_end)) evaluate_now();
  }
  opt_->synchronize();
  progress_->finish();

  if (rank_ == 0) {
    if (last_eval_step_ != step_) evaluate_now();
    if (!o_.train_dir.empty())
      std::ofstream(std::filesystem::path(o_.train_dir) / "DONE") << step_ << "\n";
    summarize();
  }
  opt_->finish();
}

void TrainRun::train_step() {
  const EpochPlan& plan = sched_.epoch;
  const std::int64_t epoch = plan.epoch;
  const std::int64_t index = step_ - plan.first_step;
  if (epoch != shard_epoch_) {
    shard_ = pool_shard(sched_.samples, sched_.pool, plan.part, plan.world, o_.seed, epoch);
    shard_epoch_ = epoch;
  }
  const Batch b = make_batch(data_.train, shard_, index * sched_.batch, sched_.batch,
                             step_seed(o_.seed, rank_, epoch, index));
  // Built on the CPU (the same samples for every --device); no copy when device is the CPU.
  const ::torch::Tensor images = b.images.to(device_), labels = b.labels.to(device_);
  const float lr = lr_at(o_.lr_schedule, base_lr_, step_, sched_.total);
  opt_->set_learning_rate(lr);

  const auto t0 = Clock::now();
  if (rank_ == o_.slow_rank) straggle();
  const auto compute_start = Clock::now();
  model_->train();
  opt_->zero_grad();
  auto logits = model_->forward(images);
  auto loss = ::torch::nn::functional::cross_entropy(logits, labels);
  loss.backward();
  opt_->step();
  const double loss_value = loss.item<double>();
  const double acc = logits.argmax(1).eq(labels).to(::torch::kFloat).mean().item<double>();
  last_compute_ = seconds_since(compute_start);
  const std::uint64_t dropped_before = opt_->dropped();
  // With backup workers the round this step's weights come from: its own, or (its pushes
  // dropped) a later one.
  step_ = by_round_ ? round_base_ + static_cast<std::int64_t>(opt_->version()) : step_ + 1;
  const double dt = seconds_since(t0);
  train_seconds_ += dt;
  ++steps_done_;

  nlohmann::json line{{"step", step_},
                      {"epoch", epoch},
                      {"time_s", seconds_since(wall_start_)},
                      {"loss", loss_value},
                      {"train_acc", acc},
                      {"samples_per_sec", static_cast<double>(sched_.batch) / dt},
                      {"lr", lr},
                      {"world", plan.world},
                      {"part", plan.part},
                      {"batch", index}};
  if (by_round_) line["dropped"] = opt_->dropped() - dropped_before;
  if (o_.digest) {
    opt_->synchronize();
    line["weights_digest"] = weights_digest(*model_);
  }
  metrics_->write(line);
  progress_->step({step_, sched_.total, epoch, loss_value, acc,
                   static_cast<double>(sched_.batch * steps_done_) / train_seconds_, lr});
}

void TrainRun::straggle() {
  // Its pulls first, so that the compute measured next is its own and not a wait for the round.
  opt_->synchronize();
  if (last_compute_ > 0)
    std::this_thread::sleep_for(
        std::chrono::duration<double>((o_.slow_factor - 1.0) * last_compute_));
}

void TrainRun::checkpoint() {
  opt_->synchronize();
  CheckpointInfo info;
  info.step = step_;
  info.epoch = step_ >= sched_.epoch_end() ? sched_.epoch.epoch + 1 : sched_.epoch.epoch;
  info.model = o_.model;
  info.dataset = o_.dataset;
  info.data_dir = o_.data_dir;
  info.spec = spec_;
  info.workers = world_;
  info.batch_size = o_.batch_size;
  info.seed = o_.seed;
  save_checkpoint(o_.train_dir, *model_, opt_->checkpoint_state(), info);
  progress_->note(fmt::format("checkpoint at step {} in {} (weights {})", step_, o_.train_dir,
                              weights_digest(*model_)));
}

std::int64_t TrainRun::resume_from_job(std::uint64_t round) {
  const std::string what = ps::worker_part_path(job_dir_, round, static_cast<std::uint32_t>(rank_));
  WorkerPart part = decode_worker_part(
      ps::read_worker_part(job_dir_, round, static_cast<std::uint32_t>(rank_)), *model_, what);
  if (part.step != static_cast<std::int64_t>(round) || part.model != o_.model ||
      part.dataset != o_.dataset)
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("{} holds step {} of {} on {}, not round {} of {} on {}: resume "
                    "with the same --model and --dataset, or another --checkpoint-dir",
                    what, part.step, part.model, part.dataset, round, o_.model, o_.dataset));
  resumed_ = std::move(part);
  return resumed_->step;
}

// Every worker writes its part once the servers applied this step (their slices of this round
// are on disk before any pull of it is answered), then rank 0 declares the round complete after
// a barrier: every part is written by then.
void TrainRun::job_checkpoint() {
  opt_->synchronize();
  const auto round = static_cast<std::uint64_t>(step_);
  ps::write_worker_part(
      job_dir_, round, static_cast<std::uint32_t>(rank_),
      encode_worker_part({step_, o_.model, o_.dataset, sched_.epoch.epoch, sched_.epoch.first_step,
                          sched_.epoch.world, sched_.pool},
                         *model_));
  opt_->barrier();
  if (rank_ != 0) return;
  try {
    ps::complete_job_round(
        job_dir_, round, static_cast<std::uint32_t>(world_),
        static_cast<std::uint32_t>(opt_->num_servers()),
        static_cast<std::size_t>(runtime::env_int("PSRT_PARTITION_BYTES", 4, 1LL << 31)));
    if (job_every_ > 0 && step_ % job_every_ == 0 && step_ > 2 * job_every_)
      ps::remove_job_round(job_dir_, static_cast<std::uint64_t>(step_ - 2 * job_every_));
    progress_->note(fmt::format("job checkpoint round {} complete in {}", step_, job_dir_));
  } catch (const Error& e) {
    PSRT_LOG_WARN("job checkpoint round {} not declared complete: {}", step_, e.what());
  }
}

void TrainRun::evaluate_now() {
  opt_->synchronize();
  last_eval_ = evaluate(*model_, data_.test);
  last_eval_step_ = step_;
  metrics_->write({{"step", step_},
                   {"epoch", sched_.epoch.epoch},  // of the last step
                   {"time_s", seconds_since(wall_start_)},
                   {"test_loss", last_eval_->loss},
                   {"test_accuracy", last_eval_->accuracy}});
  progress_->note(fmt::format("step {} test_accuracy {:.4f} test_loss {:.4f}", step_,
                              last_eval_->accuracy, last_eval_->loss));
}

void TrainRun::summarize() const {
  const double per_worker =
      train_seconds_ > 0 ? static_cast<double>(sched_.batch * steps_done_) / train_seconds_ : 0;
  nlohmann::json summary{{"model", o_.model},
                         {"dataset", o_.dataset},
                         {"device", device_.str()},
                         {"workers", sched_.epoch.world},
                         {"epochs", o_.epochs},
                         {"steps", step_},
                         {"test_accuracy", last_eval_->accuracy},
                         {"test_loss", last_eval_->loss},
                         {"samples_per_sec", per_worker * sched_.epoch.world},
                         {"samples_per_sec_per_worker", per_worker},
                         {"wall_s", seconds_since(wall_start_)},
                         {"ps", !o_.no_ps}};
  if (by_round_) {
    // The job's pace: the servers' rounds this worker saw go by, per second of its steps.
    summary["rounds"] = step_ - first_step_;
    summary["rounds_per_sec"] =
        train_seconds_ > 0 ? static_cast<double>(step_ - first_step_) / train_seconds_ : 0;
    summary["steps_computed"] = steps_done_;
    summary["dropped"] = opt_->dropped();
  }
  std::printf("%s\n", summary.dump().c_str());
  std::fflush(stdout);
}

}  // namespace

void train(const TrainOptions& o) {
  validate(o);
  TrainRun(o).run();
}

}  // namespace psrt::pstrain
