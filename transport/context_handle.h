// The Transport a factory returns: owns a backend context through a shared_ptr (connections hold
// it too, so a Connection never outlives the state it points into) and shuts it down when the
// user lets go of the Transport.
#pragma once

#include <memory>
#include <utility>

#include "transport/transport.h"

namespace psrt::transport {

template <typename Context>
class ContextHandle final : public Transport {
 public:
  explicit ContextHandle(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  ~ContextHandle() override { ctx_->shutdown(); }

  std::string_view name() const override { return ctx_->name(); }
  std::string listen(const std::string& address) override { return ctx_->listen(address); }
  std::shared_ptr<Connection> connect(const std::string& address) override {
    return ctx_->connect(address);
  }
  bool supports(MemoryType type) const override { return ctx_->supports(type); }
  void register_memory(MutableBuffer region) override { ctx_->register_memory(region); }
  void unregister_memory(const void* base) override { ctx_->unregister_memory(base); }
  bool is_registered(const void* data, std::size_t size) const override {
    return ctx_->is_registered(data, size);
  }
  void shutdown() override { ctx_->shutdown(); }
  bool on_progress_thread() const override { return ctx_->on_progress_thread(); }

 private:
  std::shared_ptr<Context> ctx_;
};

}  // namespace psrt::transport
