// psrt LibTorch integration: train an existing LibTorch model through the parameter servers.
//
// Drop a DistributedOptimizer into the training loop in place of torch::optim::SGD. The servers
// apply SGD (psrun --lr/--momentum/... or Options::sgd) to the mean of the workers' gradients.
//
//   #include <psrt/psrt.h>
//   #include <psrt/torch.h>
//   psrt::Worker worker = psrt::Worker::from_env();
//   Net model;                                            // any torch::nn::Module
//   psrt::torch::DistributedOptimizer opt(worker, *model, {.sgd = {.lr = 0.05f, .momentum =
//   0.9f}}); for (auto& batch : loader) {
//     opt.zero_grad();
//     auto loss = torch::nll_loss(model->forward(batch.data), batch.target);
//     loss.backward();                                    // gradients are pushed from here on
//     opt.step();                                         // returns without waiting for pulls
//   }
//   opt.synchronize();                                    // the model holds the final weights
//
// How the work overlaps:
// - Every parameter is a key (FNV-1a of its name). A gradient hook sends each gradient as soon
//   as autograd produces it (one PUSH_PULL per slice), while backward goes on with earlier
//   layers. Bytes sent but not yet on the wire are bounded by Options::push_credit_bytes; beyond
//   that gradients queue in forward order (the first layers' first), so the weights that the
//   next forward needs first come back first.
// - The pulled weights land in the parameters' own storage, without a copy. The next forward
//   waits for a parameter only where the model calls pre_forward(*this) (typically at the top of
//   each block's forward); LibTorch's C++ modules have no forward pre-hooks, so this is the one
//   line a model adds. A model that does not call it for every parameter is still correct:
//   step() then waits for every pull before returning.
//
// CUDA models: parameters on GPUs are pushed and pulled from device memory without host copies
// on the worker side: the path to each server is picked and logged by the worker (CUDA IPC to a
// CUDA server on this host, the transport itself when it carries CUDA memory, else pinned
// staging; psrt/psrt.h). psrt orders its reads of a gradient and its writes of a parameter
// after the work queued on the device's legacy default stream, LibTorch's default: a model run
// on other streams must synchronise them before backward() returns.
//
// BatchNorm running statistics are buffers, not parameters: they stay local to each worker.
// Every worker holds the same weights and draws an i.i.d. shard of the data, so each worker's
// running averages estimate the same statistics; pstrain evaluates and checkpoints rank 0's.
//
// Contracts:
// - Blocking: the constructor, step() when the model is not gated, synchronize(). zero_grad()
//   never blocks. Errors (lost server, refused request, timeout) throw psrt::Error from step(),
//   synchronize() or the pre_forward() that waits.
// - Threads: one training thread calls zero_grad/step/synchronize and runs forward/backward; the
//   optimizer runs one helper thread that issues the pushes credit held back.
// - Lifetime: the model and the worker must outlive the optimizer. The destructor removes the
//   hooks and waits for every outstanding operation (each bounded), errors logged.
// - From a parameter's gradient hook until the next forward's pre_forward() (or
//   synchronize()), its pulled weights may land at any moment: do not read or write parameters
//   in that window (EMA, logging, saving) without synchronize() first. Gradients changed after
//   backward() (e.g. clipping) are not seen: each was pushed as autograd produced it.
#pragma once
#include <torch/nn/module.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "psrt/psrt.h"

namespace psrt::torch {

struct Options {
  // The servers' optimizer, set by rank 0 (every worker must pass the same). Leave `set_sgd`
  // false to keep what psrun's --lr/--momentum/... configured.
  bool set_sgd = false;
  OptimizerConfig sgd{};
  // Gradient bytes handed to the transport and not yet sent; later gradients queue in forward
  // order. 0 = no bound. CPU parameters only: CUDA ones are issued at once.
  std::size_t push_credit_bytes = std::size_t{4} << 20;
  // fp16/bf16 halve the bytes pushed (servers accumulate in fp32).
  GradType grad_type = GradType::kF32;
  // Bound on the optimizer's own waits (a gradient queued for credit), like PSRT_OP_TIMEOUT_MS
  // bounds the worker's.
  std::chrono::milliseconds timeout{300'000};
};

// The key a parameter name maps to (FNV-1a 64 of the name). Same on every worker.
Key key_of(const std::string& parameter_name);

class DistributedOptimizer {
 public:
  // Maps `model`'s parameters (named_parameters(), registration order) to keys, stores rank 0's
  // values as the job's initial weights (a resumed job keeps its checkpoint's), pulls them into
  // the model on every worker, and installs the gradient hooks. Blocking; call it on every worker
  // with the same model structure. Throws psrt::Error when two names collide on one key, a
  // parameter is not a contiguous fp32 CPU or CUDA tensor that requires a gradient, two names
  // are one tensor (tied weights), or the servers refuse.
  DistributedOptimizer(Worker& worker, ::torch::nn::Module& model, Options options = {});
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Drops the local .grad tensors (the pushed gradients live in the optimizer until sent).
  void zero_grad();
  // Ends the step: pushes a zero gradient for every parameter that backward did not reach (so
  // every key takes part in the round), then returns; the pulls complete in the background.
  // Blocks until every pull is in when the last forward did not gate every parameter.
  void step();
  // Waits for every outstanding push and pull: the model then holds the servers' weights.
  void synchronize();
  // The learning rate for the gradients of the steps from now on (a schedule; 0 = the
  // configured one). Use this rather than Worker::set_learning_rate: a step's pushes may still
  // be queued when the next step's rate is set, and each carries the rate of its own step.
  void set_learning_rate(float lr);
  // Waits for the pulls of `module`'s parameters (its own and its children's). What
  // pre_forward() calls; usable directly for modules that do not call it.
  void wait(const ::torch::nn::Module& module);

  std::int64_t steps() const;
  const std::vector<std::string>& parameter_names() const;

  // Waits for every outstanding pull (as synchronize()) and returns the lowest version among the
  // parameters' weights (Handle::version(): the servers' rounds of the key; the version pulled
  // at construction before the first step). In sync mode without backup workers this is the
  // starting version plus steps(); with backup workers (docs/elastic.md) a step whose pushes
  // were dropped as late moves it on by more than one: the worker then holds a later round's
  // weights, and its next step is for the round after them.
  std::uint64_t version();
  // This worker's pushes (one per slice) that the servers dropped as late (backup workers),
  // over the steps version() has waited for. 0 without backup workers.
  std::uint64_t dropped() const;
  // For a worker that joined a running job and waits for a point to start from (pstrain: the
  // next epoch): one round without samples. Pushes a zero gradient for every parameter whose
  // weights are older than `version` (so that the rounds that wait for this worker run), waits
  // for their pulls and returns version(). Call it, between steps, until it returns `version`;
  // the model then holds the weights of that version.
  std::uint64_t catch_up(std::uint64_t version);
  // With backup workers, the job's last round (0: none, the default). A parameter whose weights
  // already hold round `last` is not pushed again: a worker whose keys' versions differ (some of
  // its pushes dropped as late, others applied) catches up on the keys behind without starting
  // a round past the job's last on the others.
  void set_last_round(std::uint64_t last);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Call at the top of a module's forward(): waits for the pulls of this module's parameters when
// a DistributedOptimizer manages them, returns at once otherwise (no optimizer, --no-ps runs,
// evaluation after synchronize()). Thread-safe; an optimizer being destroyed waits for it.
void pre_forward(const ::torch::nn::Module& module);

}  // namespace psrt::torch
