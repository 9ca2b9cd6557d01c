// The cuda server's side of Server: where payloads land, how they reach the device, the update
// on the compute stream, and what pulls are sent from. See the path notes in set_transport().
#include <fmt/core.h>

#include "base/log.h"
#include "kernels/dispatch.h"
#include "ps/server.h"
#include "ps/server_device.h"

namespace psrt::ps {

std::string Server::set_transport(const transport::Transport& t) {
  if (!gpu_) return {};
  gpu_->transport_cuda = t.supports(MemoryType::kCuda);
  std::string line =
      gpu_->transport_cuda
          ? fmt::format("slices on cuda:{} ({}); the {} transport carries CUDA memory: "
                        "gradients land in device receive slots and pulls are sent from the "
                        "device weights (path a, zero-copy)",
                        gpu_->index, gpu_->name, t.name())
          : fmt::format("slices on cuda:{} ({}); the {} transport has no CUDA memory support: "
                        "gradients land in pinned host slots and are copied to device receive "
                        "slots on a copy stream as they arrive, pulls are sent from a pinned host "
                        "mirror refreshed after each update (path c, staged)",
                        gpu_->index, gpu_->name, t.name());
  PSRT_LOG_INFO("{}", line);
  return line;
}

void Server::place_on_device(GradBuf& g, std::size_t size, transport::Placement& p) {
  if (!g.dev) {
    g.dev = device::DeviceMemory::allocate(gpu_->index, size);
    g.size = size;
  }
  if (gpu_->transport_cuda) {
    p.dest = {g.dev.data(), size, MemoryType::kCuda};
    return;
  }
  if (!g.pinned) g.pinned = device::PinnedMemory::allocate(size);
  p.dest = {g.pinned.data(), size, MemoryType::kHost};
}

void Server::after_receive_on_device(GradBuf& g) {
  if (gpu_->transport_cuda) return;
  // Queued now, while later payloads are still arriving: the copy overlaps the receives, and
  // the update only waits for the event.
  device::copy_async(g.dev.data(), g.pinned.data(), g.size, gpu_->copies);
  g.copied = device::Event::record(gpu_->copies);
}

void Server::init_on_device(Slice& s) {
  const std::size_t bytes = s.count * sizeof(float);
  s.d_weights = device::DeviceMemory::allocate(gpu_->index, bytes);
  device::copy_async(s.d_weights.data(), s.weights.data(), bytes, gpu_->copies);
  if (!s.momentum.empty()) {  // resumed from a checkpoint
    s.d_momentum = device::DeviceMemory::allocate(gpu_->index, bytes);
    device::copy_async(s.d_momentum.data(), s.momentum.data(), bytes, gpu_->copies);
  }
  gpu_->copies.synchronize();
  // The host mirror never resizes from here on, so it can stay pinned for its lifetime.
  s.pinned_weights = device::HostRegistration::pin(s.weights.data(), bytes);
}

void Server::update_on_device(Slice& s, Update& u, const kernels::SgdConfig& cfg,
                              bool checkpoint_due) {
  Gpu& gpu = *gpu_;
  const std::size_t bytes = s.count * sizeof(float);
  bool first_step = false;
  if (cfg.momentum != 0.f && !s.d_momentum) {
    s.d_momentum = device::DeviceMemory::allocate(gpu.index, bytes);
    first_step = true;
  }
  std::vector<const void*> grads;
  for (const auto& g : u.grads) {
    if (g.copied) g.copied.wait_on(gpu.compute);
    grads.push_back(g.dev.data());
  }
  kernels::SliceUpdate k;
  k.weights = static_cast<float*>(s.d_weights.data());
  k.momentum = s.d_momentum ? static_cast<float*>(s.d_momentum.data()) : nullptr;
  k.grads = grads.data();
  k.num_grads = static_cast<int>(grads.size());
  k.dtype = to_dtype(u.grads.front().dtype);
  k.count = s.count;
  k.grad_scale = config_.average ? 1.f / static_cast<float>(grads.size()) : 1.f;
  k.first_step = first_step;
  kernels::apply_update(k, cfg, MemoryType::kCuda, gpu.compute.handle());
  if (!gpu.transport_cuda || checkpoint_due)
    device::copy_async(s.weights.data(), s.d_weights.data(), bytes, gpu.compute);
  if (checkpoint_due && s.d_momentum) {
    s.momentum.resize(s.count);
    device::copy_async(s.momentum.data(), s.d_momentum.data(), bytes, gpu.compute);
  }
  gpu.compute.synchronize();
}

ConstBuffer Server::pull_source(const Slice& s) const {
  if (gpu_ && gpu_->transport_cuda)
    return {s.d_weights.data(), s.count * sizeof(float), MemoryType::kCuda};
  return {s.weights.data(), s.count * sizeof(float), MemoryType::kHost};
}

}  // namespace psrt::ps
