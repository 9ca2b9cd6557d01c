// DistributedOptimizer's state: one slot per parameter, the push queue, and the pump thread that
// issues what push credit held back.
#pragma once
#include <torch/torch.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "psrt/torch.h"

namespace psrt::torch {

class DistributedOptimizer::Impl {
 public:
  Impl(Worker& worker, ::torch::nn::Module& model, Options options);
  ~Impl();

  void zero_grad();
  void step();
  void synchronize();
  void set_learning_rate(float lr);
  void wait(const ::torch::nn::Module& module);
  std::int64_t steps() const { return steps_; }
  std::uint64_t version();
  std::uint64_t dropped() const { return dropped_; }
  std::uint64_t catch_up(std::uint64_t version);
  void set_last_round(std::uint64_t last);
  const std::vector<std::string>& names() const { return names_; }

 private:
  struct Slot {
    std::string name;
    Key key = 0;
    at::Tensor param;  // pulled weights land in its storage
    at::Tensor grad;   // what this step pushes (fp32, or fp16/bf16 bits); held until sent
    at::Tensor zeros;  // pushed for a parameter that backward did not reach
    std::size_t bytes = 0;
    float lr = 0.f;  // the learning rate of the step `grad` belongs to
    unsigned hook = 0;
    bool reached = false;       // a gradient arrived in this step
    bool queued = false;        // waiting in pending_ for push credit
    bool gated = false;         // a pre_forward waited for it since the last step
    bool counted = true;        // `pull` is seen: version() took its version and dropped pushes
    std::uint64_t version = 0;  // of the weights it holds, as far as version() has seen
    Handle push;
    Handle pull;
  };
  struct InFlight {
    int slot;
    std::size_t bytes;
    Handle push;
  };

  // The constructor's steps: a slot per parameter (checked), the slots each module waits for,
  // the first weights from rank 0 through the servers, then the gradient hooks.
  static void check_parameter(const std::string& name, const at::Tensor& p);
  std::unordered_map<const c10::TensorImpl*, int> add_slots(::torch::nn::Module& model);
  std::vector<const ::torch::nn::Module*> map_modules(
      ::torch::nn::Module& model, const std::unordered_map<const c10::TensorImpl*, int>& slot_of);
  void join();
  void hook(const std::vector<const ::torch::nn::Module*>& modules);
  void on_grad(int index, const at::Tensor& grad);
  void enqueue_locked(int index, at::Tensor grad);
  void dispatch_locked();  // issues queued gradients in forward order while credit lasts
  void pump();
  void issue_locked(int index);
  void reclaim_locked();
  void wait_slots(const std::vector<int>& indices, bool mark_gated);
  void rethrow_locked();

  Worker& worker_;
  Options options_;
  std::vector<Slot> slots_;
  std::vector<std::string> names_;
  std::unordered_map<const ::torch::nn::Module*, std::vector<int>> module_slots_;
  std::vector<int> all_slots_;
  std::int64_t steps_ = 0;
  std::uint64_t dropped_ = 0;     // training thread only
  std::uint64_t last_round_ = 0;  // set_last_round(): under mu_

  std::mutex mu_;
  std::condition_variable cv_;  // pump: work queued or stop; waiters: a slot issued
  std::set<int> pending_;       // slot indices in forward order
  std::deque<InFlight> in_flight_;
  std::size_t in_flight_bytes_ = 0;
  std::exception_ptr error_;
  float lr_ = 0.f;         // stamped on gradients as they arrive
  float worker_lr_ = 0.f;  // what the worker stamps on its pushes now (set under mu_)
  bool stop_ = false;
  std::thread pump_thread_;
};

}  // namespace psrt::torch
