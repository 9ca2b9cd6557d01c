#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <unordered_map>

#include "base/fnv.h"
#include "base/log.h"
#include "libtorch/impl.h"
#include "libtorch/registry.h"

namespace psrt::torch {
namespace {

std::span<float> floats_of(const at::Tensor& t) {
  return {t.data_ptr<float>(), static_cast<std::size_t>(t.numel())};
}

// A tensor's bytes as psrt sees them: host or CUDA memory (the worker picks the GPU path).
MutableBuffer view_of(const at::Tensor& t) {
  return {t.data_ptr(), static_cast<std::size_t>(t.numel()) * t.element_size(),
          t.is_cuda() ? MemoryType::kCuda : MemoryType::kHost};
}

at::ScalarType wire_type(GradType t) {
  switch (t) {
    case GradType::kF16:
      return at::kHalf;
    case GradType::kBF16:
      return at::kBFloat16;
    case GradType::kF32:
      break;
  }
  return at::kFloat;
}

}  // namespace

Key key_of(const std::string& parameter_name) {
  return fnv1a(parameter_name.data(), parameter_name.size());
}

DistributedOptimizer::Impl::Impl(Worker& worker, ::torch::nn::Module& model, Options options)
    : worker_(worker), options_(options) {
  const auto slot_of = add_slots(model);
  const auto modules = map_modules(model, slot_of);
  join();
  hook(modules);
  pump_thread_ = std::thread([this] { pump(); });
  PSRT_LOG_INFO("DistributedOptimizer: {} parameters ({} bytes of gradients per step) as keys",
                slots_.size(), [this] {
                  std::size_t b = 0;
                  for (auto& s : slots_)
                    b += s.bytes;
                  return b;
                }());
}

void DistributedOptimizer::Impl::check_parameter(const std::string& name, const at::Tensor& p) {
  if (!p.device().is_cpu() && !p.device().is_cuda())
    throw Error(ErrorCode::kUnsupported,
                fmt::format("parameter '{}' is on {}: psrt trains CPU and CUDA tensors", name,
                            p.device().str()));
  if (p.scalar_type() != at::kFloat)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("parameter '{}' is {}; psrt keeps fp32 weights: convert the model "
                            "with model->to(torch::kFloat)",
                            name, c10::toString(p.scalar_type())));
  if (!p.is_contiguous())
    throw Error(ErrorCode::kInvalidArgument, fmt::format("parameter '{}' is not contiguous", name));
  if (!p.requires_grad())
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("parameter '{}' does not require a gradient (frozen): every "
                            "parameter of the model is trained through the servers; give the "
                            "optimizer a module without frozen parameters",
                            name));
}

std::unordered_map<const c10::TensorImpl*, int> DistributedOptimizer::Impl::add_slots(
    ::torch::nn::Module& model) {
  std::unordered_map<Key, std::string> names_by_key;
  std::unordered_map<const c10::TensorImpl*, int> slot_of;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const at::Tensor& p = item.value();
    const std::string& name = item.key();
    check_parameter(name, p);
    if (auto it = slot_of.find(p.unsafeGetTensorImpl()); it != slot_of.end())
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("parameters '{}' and '{}' are one tensor (tied weights), which "
                              "psrt does not train yet",
                              slots_[static_cast<std::size_t>(it->second)].name, name));
    Slot s;
    s.name = name;
    s.key = key_of(name);
    if (auto [it, fresh] = names_by_key.emplace(s.key, name); !fresh)
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("parameters '{}' and '{}' map to the same key {}; rename one",
                              it->second, name, s.key));
    s.param = p;
    s.bytes = static_cast<std::size_t>(p.numel()) * (options_.grad_type == GradType::kF32 ? 4 : 2);
    slot_of[p.unsafeGetTensorImpl()] = static_cast<int>(slots_.size());
    all_slots_.push_back(static_cast<int>(slots_.size()));
    names_.push_back(name);
    slots_.push_back(std::move(s));
  }
  if (slots_.empty())
    throw Error(ErrorCode::kInvalidArgument, "the model has no parameters to train");
  return slot_of;
}

std::vector<const ::torch::nn::Module*> DistributedOptimizer::Impl::map_modules(
    ::torch::nn::Module& model, const std::unordered_map<const c10::TensorImpl*, int>& slot_of) {
  // Each module waits for its own parameters and its children's.
  std::vector<const ::torch::nn::Module*> modules{&model};
  module_slots_[&model] = all_slots_;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    std::vector<int> indices;
    for (const auto& p : item.value()->parameters(/*recurse=*/true))
      indices.push_back(slot_of.at(p.unsafeGetTensorImpl()));
    module_slots_[item.value().get()] = std::move(indices);
    modules.push_back(item.value().get());
  }
  return modules;
}

void DistributedOptimizer::Impl::join() {
  // Every worker starts from rank 0's values (or the job's checkpoint, which init keeps).
  if (options_.set_sgd) worker_.set_optimizer(options_.sgd);
  // A worker that joined a running job finds the weights stored and the others training: no
  // barrier (it would wait for them forever), its pull below takes the current round's.
  if (worker_.rank() == 0 && !worker_.joined()) {
    ::torch::NoGradGuard no_grad;
    for (auto& s : slots_)
      worker_.init(s.key, floats_of(s.param.cpu()));
  }
  if (!worker_.joined()) worker_.barrier();
  {
    ::torch::NoGradGuard no_grad;
    std::vector<Handle> pulls;
    for (auto& s : slots_)
      pulls.push_back(worker_.pull(s.key, view_of(s.param)));
    for (std::size_t i = 0; i < pulls.size(); ++i) {
      pulls[i].wait();
      slots_[i].version = pulls[i].version();
    }
  }
  worker_.set_learning_rate(0.f);  // the configured rate until set_learning_rate()
}

void DistributedOptimizer::Impl::hook(const std::vector<const ::torch::nn::Module*>& modules) {
  int hooked = 0;
  try {
    for (; hooked < static_cast<int>(slots_.size()); ++hooked) {
      const int i = hooked;
      slots_[i].hook =
          slots_[i].param.register_hook([this, i](const at::Tensor& g) { on_grad(i, g); });
    }
    detail::register_modules(modules, this);
  } catch (...) {
    for (int i = 0; i < hooked; ++i)
      slots_[i].param.remove_hook(slots_[i].hook);
    throw;
  }
}

DistributedOptimizer::Impl::~Impl() {
  detail::unregister_owner(this);
  for (auto& s : slots_)
    s.param.remove_hook(s.hook);
  // Every issued operation must be over, and its gradient bytes released by the transport,
  // before the gradients are freed: wait for each one, whatever the others did.
  std::vector<Handle> handles;
  {
    std::lock_guard lock(mu_);
    for (int i : pending_)
      slots_[i].queued = false;
    pending_.clear();
    for (auto& s : slots_) {
      handles.push_back(s.push);
      handles.push_back(s.pull);
    }
  }
  int failed = 0;
  std::string first;
  for (const auto& h : handles) {
    try {
      h.wait();
    } catch (const std::exception& e) {
      if (failed++ == 0) first = e.what();
    }
    h.wait_sent_for(options_.timeout);
  }
  if (failed)
    PSRT_LOG_WARN("DistributedOptimizer: {} operations failed before shutdown, first: {}", failed,
                  first);
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  pump_thread_.join();
}

void DistributedOptimizer::Impl::on_grad(int index, const at::Tensor& grad) {
  at::Tensor t = grad.contiguous();
  if (options_.grad_type != GradType::kF32) t = t.to(wire_type(options_.grad_type));
  {
    std::lock_guard lock(mu_);
    Slot& s = slots_[index];
    if (s.reached)
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("parameter '{}' received a second gradient before step(): call "
                              "step() after every backward (accumulating several backward "
                              "passes into one step is not supported)",
                              s.name));
    s.reached = true;
    enqueue_locked(index, std::move(t));
    dispatch_locked();
  }
}

void DistributedOptimizer::Impl::enqueue_locked(int index, at::Tensor grad) {
  Slot& s = slots_[index];
  s.grad = std::move(grad);
  s.lr = lr_;
  s.queued = true;
  pending_.insert(index);
}

void DistributedOptimizer::Impl::dispatch_locked() {
  reclaim_locked();
  const std::size_t credit = options_.push_credit_bytes;
  bool issued = false;
  while (!pending_.empty() && (credit == 0 || in_flight_.empty() || in_flight_bytes_ < credit)) {
    const int index = *pending_.begin();
    pending_.erase(pending_.begin());
    issue_locked(index);
    issued = true;
  }
  // wait() may be blocked on a slot just issued; the pump takes over what credit holds back.
  if (issued || !pending_.empty()) cv_.notify_all();
}

void DistributedOptimizer::Impl::pump() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !pending_.empty(); });
    if (stop_) return;
    dispatch_locked();
    if (!pending_.empty() && !in_flight_.empty()) {
      // Out of credit: wait until the oldest push's bytes have left, then go round again.
      Handle oldest = in_flight_.front().push;
      lock.unlock();
      oldest.wait_sent_for(std::chrono::milliseconds(20));
      lock.lock();
    }
  }
}

void DistributedOptimizer::Impl::issue_locked(int index) {
  Slot& s = slots_[index];
  s.queued = false;
  // The job's last round is already in this slot's weights (version() counted them): no push,
  // which with backup workers could start a round past the last one.
  if (last_round_ > 0 && s.counted && s.version >= last_round_) return;
  try {
    if (s.lr != worker_lr_) {
      worker_.set_learning_rate(s.lr);
      worker_lr_ = s.lr;
    }
    s.counted = false;
    if (options_.grad_type == GradType::kF32) {
      // One message per slice each way; the reply lands in the parameter itself.
      s.push = s.pull = worker_.push_pull(s.key, view_of(s.grad), GradType::kF32, view_of(s.param));
    } else {
      s.push = worker_.push(s.key, view_of(s.grad), options_.grad_type);
      s.pull = worker_.pull(s.key, view_of(s.param));
    }
  } catch (...) {
    if (!error_) error_ = std::current_exception();
    s.push = s.pull = Handle();
    return;
  }
  // CUDA parameters are outside the credit: on CUDA IPC a push counts as sent only once its round
  // is applied, which needs every worker's push, so a credit on it could deadlock a sync round
  // when two workers issue keys in different orders.
  if (s.param.is_cuda()) return;
  in_flight_.push_back({index, s.bytes, s.push});
  in_flight_bytes_ += s.bytes;
}

void DistributedOptimizer::Impl::reclaim_locked() {
  // Credit counts bytes not yet sent: it never waits for other workers, so it cannot deadlock
  // a sync round. Failures surface through the pulls.
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (!it->push.sent()) {
      ++it;
      continue;
    }
    in_flight_bytes_ -= it->bytes;
    it = in_flight_.erase(it);
  }
}

void DistributedOptimizer::Impl::rethrow_locked() {
  if (error_) std::rethrow_exception(error_);
}

void DistributedOptimizer::Impl::wait_slots(const std::vector<int>& indices, bool mark_gated) {
  std::vector<Handle> pulls;
  {
    std::unique_lock lock(mu_);
    const bool issued = cv_.wait_for(lock, options_.timeout, [&] {
      return error_ || std::none_of(indices.begin(), indices.end(),
                                    [this](int i) { return slots_[i].queued; });
    });
    if (!issued)
      throw Error(ErrorCode::kTimeout,
                  fmt::format("gradients queued for push credit were not sent within {} ms: the "
                              "transport did not release earlier pushes (a stalled server?)",
                              options_.timeout.count()));
    rethrow_locked();
    pulls.reserve(indices.size());
    for (int i : indices) {
      pulls.push_back(slots_[i].pull);
      if (mark_gated) slots_[i].gated = true;
    }
  }
  for (const auto& h : pulls)
    h.wait();
}

void DistributedOptimizer::Impl::wait(const ::torch::nn::Module& module) {
  auto it = module_slots_.find(&module);
  if (it != module_slots_.end()) wait_slots(it->second, /*mark_gated=*/true);
}

void DistributedOptimizer::Impl::zero_grad() {
  for (auto& s : slots_)
    if (s.param.grad().defined()) s.param.mutable_grad() = at::Tensor();
}

void DistributedOptimizer::Impl::step() {
  bool gated = true;
  {
    std::lock_guard lock(mu_);
    rethrow_locked();
    for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
      Slot& s = slots_[i];
      if (!s.reached) {
        // Every key takes part in every round, so a parameter backward did not reach pushes 0.
        if (!s.zeros.defined())
          s.zeros = at::zeros_like(s.param, s.param.options().dtype(wire_type(options_.grad_type)));
        enqueue_locked(i, s.zeros);
      }
      s.reached = false;
      gated = gated && s.gated;
      s.gated = false;
    }
    dispatch_locked();
  }
  ++steps_;
  if (!gated) synchronize();
}

void DistributedOptimizer::Impl::set_learning_rate(float lr) {
  if (!std::isfinite(lr) || lr < 0.f)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("learning rate {} is not a finite number >= 0", lr));
  std::lock_guard lock(mu_);
  lr_ = lr;
}

void DistributedOptimizer::Impl::synchronize() {
  wait_slots(all_slots_, /*mark_gated=*/false);
  std::vector<Handle> pushes;
  {
    std::lock_guard lock(mu_);
    for (auto& s : slots_)
      pushes.push_back(s.push);
  }
  for (const auto& h : pushes)
    h.wait();
}

std::uint64_t DistributedOptimizer::Impl::version() {
  synchronize();
  std::uint64_t lowest = UINT64_MAX;
  std::lock_guard lock(mu_);
  for (auto& s : slots_) {
    // A slot not issued since the last call keeps the version it had (its Handle may be the
    // default one, of version 0).
    if (!s.counted && s.pull.ready()) {
      s.version = s.pull.version();
      dropped_ += s.pull.dropped();
      s.counted = true;
    }
    lowest = std::min(lowest, s.version);
  }
  return lowest;
}

void DistributedOptimizer::Impl::set_last_round(std::uint64_t last) {
  std::lock_guard lock(mu_);
  last_round_ = last;
}

std::uint64_t DistributedOptimizer::Impl::catch_up(std::uint64_t target) {
  const std::uint64_t now = version();
  if (now >= target) return now;
  std::vector<Handle> pulls;
  {
    std::lock_guard lock(mu_);
    if (lr_ != worker_lr_) {
      worker_.set_learning_rate(lr_);
      worker_lr_ = lr_;
    }
    ::torch::NoGradGuard no_grad;
    for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
      Slot& s = slots_[i];
      if (s.version >= target) continue;
      // fp32 zeros whatever the wire type: a zero is a zero. Kept in the slot until the next
      // push of it, as the pushes of a step are.
      s.grad = at::zeros_like(s.param);
      s.counted = false;
      s.push = s.pull = worker_.push_pull(s.key, view_of(s.grad), GradType::kF32, view_of(s.param));
      pulls.push_back(s.pull);
    }
  }
  for (const auto& h : pulls)
    h.wait();
  return version();
}

// --- the public class ---

DistributedOptimizer::DistributedOptimizer(Worker& worker, ::torch::nn::Module& model,
                                           Options options)
    : impl_(std::make_unique<Impl>(worker, model, options)) {}
DistributedOptimizer::~DistributedOptimizer() = default;
void DistributedOptimizer::zero_grad() {
  impl_->zero_grad();
}
void DistributedOptimizer::step() {
  impl_->step();
}
void DistributedOptimizer::synchronize() {
  impl_->synchronize();
}
void DistributedOptimizer::set_learning_rate(float lr) {
  impl_->set_learning_rate(lr);
}
void DistributedOptimizer::wait(const ::torch::nn::Module& module) {
  impl_->wait(module);
}
std::int64_t DistributedOptimizer::steps() const {
  return impl_->steps();
}
const std::vector<std::string>& DistributedOptimizer::parameter_names() const {
  return impl_->names();
}
std::uint64_t DistributedOptimizer::version() {
  return impl_->version();
}
std::uint64_t DistributedOptimizer::dropped() const {
  return impl_->dropped();
}
std::uint64_t DistributedOptimizer::catch_up(std::uint64_t version) {
  return impl_->catch_up(version);
}
void DistributedOptimizer::set_last_round(std::uint64_t last) {
  impl_->set_last_round(last);
}

}  // namespace psrt::torch
