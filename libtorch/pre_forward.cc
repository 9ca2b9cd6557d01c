#include <atomic>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "libtorch/impl.h"
#include "libtorch/registry.h"

namespace psrt::torch {
namespace {

struct Registry {
  std::shared_mutex mu;
  std::unordered_map<const ::torch::nn::Module*, DistributedOptimizer::Impl*> owners;
  std::atomic<std::size_t> size{0};  // lets pre_forward skip the lock when nothing is managed
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

namespace detail {

void register_modules(const std::vector<const ::torch::nn::Module*>& modules,
                      DistributedOptimizer::Impl* owner) {
  auto& r = registry();
  std::unique_lock lock(r.mu);
  for (const auto* m : modules)
    r.owners[m] = owner;
  r.size = r.owners.size();
}

void unregister_owner(DistributedOptimizer::Impl* owner) {
  auto& r = registry();
  std::unique_lock lock(r.mu);
  std::erase_if(r.owners, [owner](const auto& kv) { return kv.second == owner; });
  r.size = r.owners.size();
}

}  // namespace detail

void pre_forward(const ::torch::nn::Module& module) {
  auto& r = registry();
  if (r.size.load(std::memory_order_acquire) == 0) return;
  // Held while waiting: unregister_owner() (the optimizer's destructor) waits for it.
  std::shared_lock lock(r.mu);
  auto it = r.owners.find(&module);
  if (it != r.owners.end()) it->second->wait(module);
}

}  // namespace psrt::torch
