// How pstrain's step loop updates the weights: one interface, two implementations. The local one
// (--no-ps) is LibTorch's SGD in this process; the distributed one joins the job as a psrt
// worker and trains through the parameter servers (psrt::torch::DistributedOptimizer).
#pragma once
#include <torch/torch.h>

#include <memory>

#include "psrt/psrt.h"
#include "pstrain/options.h"

namespace psrt::pstrain {

class TrainOptimizer {
 public:
  virtual ~TrainOptimizer() = default;

  // This process's place in the job: rank 0 of 1 for --no-ps.
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Processes of the job sharing this host's cores (workers and servers; 1 for --no-ps).
  virtual int processes() const = 0;
  // The optimizer state a checkpoint saves and --resume restores beside the weights; null when
  // the servers hold it.
  virtual ::torch::optim::Optimizer* checkpoint_state() = 0;
  // Called once the model holds its starting weights (after --resume): from here on the
  // optimizer trains them. Returns the base learning rate the schedule scales.
  virtual float start(::torch::nn::Module& model) = 0;

  // The step loop, as torch::optim::Optimizer's.
  virtual void set_learning_rate(float lr) = 0;
  virtual void zero_grad() = 0;
  virtual void step() = 0;
  // Returns once the model holds the weights of every step so far (before reading them).
  virtual void synchronize() = 0;
  // Ends training: waits for what is outstanding and leaves the job.
  virtual void finish() = 0;

  // The job checkpoint round the servers resumed from (0: a fresh job, or --no-ps).
  virtual std::uint64_t resume_round() const { return 0; }
  // Returns once every worker of the job called it (no-op for --no-ps).
  virtual void barrier() {}
  virtual int num_servers() const { return 0; }
  // The version of the weights the model holds (psrt::torch::DistributedOptimizer::version():
  // the servers' rounds; waits for the pulls), and this worker's pushes dropped as late
  // (backup workers). 0 for --no-ps.
  virtual std::uint64_t version() { return 0; }
  virtual std::uint64_t dropped() const { return 0; }
  // This worker joined a running job (psrt::Worker::joined()).
  virtual bool joined() const { return false; }
  // A joiner's round without samples (psrt::torch::DistributedOptimizer::catch_up).
  virtual std::uint64_t catch_up(std::uint64_t version) { return version; }
  // Backup workers: the job's last round (psrt::torch::DistributedOptimizer::set_last_round).
  virtual void set_last_round(std::uint64_t /*last*/) {}
  // The job's worker (null for --no-ps): for the epoch plan (pstrain/epoch_plan.h).
  virtual Worker* worker() { return nullptr; }
};

// --no-ps: torch::optim::SGD over `model`'s parameters.
std::unique_ptr<TrainOptimizer> make_local_optimizer(const TrainOptions& o,
                                                     ::torch::nn::Module& model);
// Joins the job (psrt::Worker::from_env) now; start() builds the DistributedOptimizer.
std::unique_ptr<TrainOptimizer> make_distributed_optimizer(const TrainOptions& o);

inline std::unique_ptr<TrainOptimizer> make_optimizer(const TrainOptions& o,
                                                      ::torch::nn::Module& model) {
  return o.no_ps ? make_local_optimizer(o, model) : make_distributed_optimizer(o);
}

}  // namespace psrt::pstrain
