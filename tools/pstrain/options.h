// pstrain's command line: what to train, on what, for how long, and where results go.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace psrt::pstrain {

struct TrainOptions {
  std::string model = "lenet";
  std::string dataset = "fashion-mnist";
  std::string data_dir;  // empty = the data set's default location
  std::int64_t epochs = 1;
  std::int64_t max_steps = 0;  // 0 = epochs decide
  // Defaults: LeNet on Fashion-MNIST, >= 0.89 test accuracy in 5 epochs with 4 workers.
  std::int64_t batch_size = 16;   // per worker
  std::string optimizer = "sgd";  // sgd | adam | adamw
  float lr = 0.04f;
  float momentum = 0.9f;            // sgd only
  std::string betas = "0.9,0.999";  // adam, adamw: B1,B2
  float eps = 1e-8f;                // adam, adamw
  float dampening = 0.f;
  float weight_decay = 0.f;
  bool nesterov = false;
  std::string lr_schedule = "cosine";  // none | step | cosine
  std::int64_t eval_every = 0;         // steps; 0 = at the end of every epoch
  std::string train_dir;               // checkpoints; empty = none
  std::int64_t checkpoint_every = 0;   // steps; 0 = at the end of every epoch
  bool resume = false;
  int threads = 0;  // 0 = cores / (workers + servers), --no-ps: cores
  std::uint64_t seed = 1;
  bool no_ps = false;
  std::string device = "cpu";       // cpu | cuda | cuda:N: model, batches and evaluation
  std::string metrics;              // JSON lines; "{rank}" in the path is replaced
  std::string grad_dtype = "fp32";  // fp32 | fp16 | bf16
  std::int64_t push_credit = std::int64_t{4} << 20;  // unsent gradient bytes before queueing
  bool digest = false;                               // weights digest in every metrics line
  std::int64_t log_every = 50;  // steps between log lines when not on a terminal
  std::int64_t synthetic_size = 4096;
  // A straggler on purpose (docs/elastic.md, perf/): worker slow_rank sleeps (slow_factor - 1)
  // times its previous step's compute before each step. -1 = nobody.
  int slow_rank = -1;
  double slow_factor = 2.0;

  // --betas' two values (validate() checked that it parses).
  float beta1() const;
  float beta2() const;
};

// Declares every flag on `app`, with its default and documentation.
void add_train_options(CLI::App& app, TrainOptions& o);
// Checks values CLI11 cannot (ranges, combinations); throws psrt::Error naming the flag.
void validate(const TrainOptions& o);

}  // namespace psrt::pstrain
