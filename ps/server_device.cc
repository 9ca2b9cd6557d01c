// The cuda server's side of Server: where payloads land, how they reach the device, the update
// on the compute stream, and what pulls are sent from. See the path notes in set_transport().
#include "ps/server_device.h"

#include <fmt/core.h>

#include <cstring>

#include "base/host.h"
#include "base/log.h"
#include "kernels/dispatch.h"
#include "kernels/fused_adam.h"
#include "ps/server.h"
#include "ps/session/protocol_device.h"

namespace psrt::ps {

std::string Server::set_transport(const transport::Transport& t) {
  if (!gpu_) return {};
  gpu_->transport_cuda = t.supports(MemoryType::kCuda);
  std::string line =
      gpu_->transport_cuda
          ? fmt::format(
                "slices on cuda:{} ({}); the {} transport carries CUDA memory: "
                "gradients land in device receive slots and pulls are sent from the "
                "device weights (path a, zero-copy)",
                gpu_->index, gpu_->name, t.name())
          : fmt::format(
                "slices on cuda:{} ({}); the {} transport has no CUDA memory support: "
                "gradients land in pinned host slots and are copied to device receive "
                "slots on a copy stream as they arrive, pulls are sent from a pinned host "
                "mirror refreshed after each update (path c, staged)",
                gpu_->index, gpu_->name, t.name());
  PSRT_LOG_INFO("{}", line);
  return line;
}

void Server::place_on_device(GradBuf& g, std::size_t size, transport::Placement& p) {
  // A buffer from the free list is of this server's one mode already (the transport's).
  if (gpu_->transport_cuda) {
    auto* d = std::get_if<DeviceGrad>(&g.where);
    if (!d) {
      g.where = DeviceGrad{device::DeviceMemory::allocate(gpu_->index, size)};
      g.size = size;
      d = &std::get<DeviceGrad>(g.where);
    }
    p.dest = {d->dev.data(), size, MemoryType::kCuda};
    return;
  }
  auto* st = std::get_if<StagedGrad>(&g.where);
  if (!st) {
    StagedGrad fresh;
    fresh.dev = device::DeviceMemory::allocate(gpu_->index, size);
    fresh.pinned = device::PinnedMemory::allocate(size, gpu_->index);
    g.where = std::move(fresh);
    g.size = size;
    st = &std::get<StagedGrad>(g.where);
  }
  p.dest = {st->pinned.data(), size, MemoryType::kHost};
}

void Server::after_receive_on_device(GradBuf& g) {
  auto* st = std::get_if<StagedGrad>(&g.where);
  if (!st) return;  // landed in device memory directly
  // Queued now, while later payloads are still arriving: the copy overlaps the receives, and
  // the update only waits for the event.
  device::copy_async(st->dev.data(), st->pinned.data(), g.size, gpu_->copies);
  st->copied = device::Event::record(gpu_->copies);
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
  if (!gpu_->transport_cuda) {
    s.mirror = device::PinnedMemory::allocate(bytes, gpu_->index);
    std::memcpy(s.mirror.data(), s.weights.data(), bytes);
  }
}

kernels::StepResult Server::update_on_device(Slice& s, Update& u, const OptimizerConfig& cfg,
                                             bool checkpoint_due) {
  if (kernels::is_adam(cfg))
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{} on a cuda server (--server-device cuda) is not supported yet: its "
                            "moments live in host memory only; run cpu servers for Adam/AdamW",
                            kernels::to_string(cfg.algorithm)));
  Gpu& gpu = *gpu_;
  const std::size_t bytes = s.count * sizeof(float);
  bool first_step = false;
  if (cfg.momentum != 0.f && !s.d_momentum) {
    s.d_momentum = device::DeviceMemory::allocate(gpu.index, bytes);
    first_step = true;
  }
  std::vector<const void*> grads;
  for (const auto& g : u.grads) {
    if (const auto* st = std::get_if<StagedGrad>(&g.where)) {
      if (st->copied) st->copied.wait_on(gpu.compute);
      grads.push_back(st->dev.data());
    } else if (const auto* d = std::get_if<DeviceGrad>(&g.where)) {
      grads.push_back(d->dev.data());
    } else if (const auto* ipc = std::get_if<IpcGrad>(&g.where)) {
      if (ipc->remote_event) device::wait_event(ipc->remote_event, gpu.compute);  // its writes
      grads.push_back(ipc->remote);
    } else {
      throw Error(ErrorCode::kInternal, "a gradient in host memory reached the device update");
    }
  }
  const kernels::SliceUpdate k = stage_->slice_update(
      s, u, grads, static_cast<float*>(s.d_weights.data()),
      s.d_momentum ? static_cast<float*>(s.d_momentum.data()) : nullptr, first_step);
  kernels::StepResult result;
  try {
    result = kernels::apply_update(k, cfg, MemoryType::kCuda, gpu.compute.handle());
  } catch (...) {
    // The buffer was never written: keep it "not yet initialised" for the next round.
    if (first_step) s.d_momentum = device::DeviceMemory();
    throw;
  }
  // A skipped first step wrote nothing: the buffer stays "not yet initialised" (see
  // UpdateStage::run).
  if (result.skipped && first_step) s.d_momentum = device::DeviceMemory();
  if (!gpu.transport_cuda)
    device::copy_async(s.mirror.data(), s.d_weights.data(), bytes, gpu.compute);
  if (checkpoint_due) device::copy_async(s.weights.data(), s.d_weights.data(), bytes, gpu.compute);
  if (checkpoint_due && s.d_momentum) {
    s.momentum.resize(s.count);
    device::copy_async(s.momentum.data(), s.d_momentum.data(), bytes, gpu.compute);
  }
  gpu.compute.synchronize();
  return result;
}

void Server::on_device_info(Peer& peer, const Header& h, std::span<const std::byte> payload) {
  if (!payload.empty()) {
    // A probe: open the worker's buffer as a PUSH_IPC would, so a worker only picks CUDA IPC
    // where it works (another container, no peer access: it stages instead).
    std::vector<device::IpcRecord> probe;
    if (Status st = decode_ipc(payload, 1, probe); !st.ok()) throw Error(st.code(), st.message());
    if (!gpu_)
      return peer.send_error(h.request_id, ErrorCode::kUnsupported,
                             "this server keeps its slices on the cpu", false);
    try {
      gpu_->ipc.open(probe[0], 1);
    } catch (const Error& e) {
      return peer.send_error(h.request_id, e.code(), e.what(), false);
    }
  }
  const std::vector<std::string> lines = {device::to_string(config_.device), local_boot_id()};
  Header r;
  r.type = MsgType::kDeviceInfoReply;
  r.request_id = h.request_id;
  peer.send_bytes(r, encode_lines(lines));
}

void Server::on_ipc(Peer& peer, const Header& h, std::span<const std::byte> payload) {
  Slice& s = checked_slice(peer, h);
  if (!gpu_)
    return peer.send_error(h.request_id, ErrorCode::kUnsupported,
                           fmt::format("{} to a server that keeps its slices on the cpu: CUDA IPC "
                                       "needs psrun --server-device cuda (or PSRT_CUDA_IPC=0 on "
                                       "the workers)",
                                       to_string(h.type)),
                           false);
  std::vector<device::IpcRecord> records;
  const std::size_t n = h.type == MsgType::kPushPullIpc ? 2 : 1;
  if (Status st = decode_ipc(payload, n, records); !st.ok()) throw Error(st.code(), st.message());
  const bool pushes = h.type != MsgType::kPullIpc;
  const std::size_t grad_bytes = h.count * wire_size(h.dtype);
  device::IpcImporter::Opened grad, out;
  try {
    if (pushes) grad = gpu_->ipc.open(records[0], grad_bytes);
    if (h.type != MsgType::kPushIpc) out = gpu_->ipc.open(records.back(), h.count * sizeof(float));
  } catch (const Error& e) {
    // Not the peer's fault as a rule (another container, no peer access): refuse this request
    // and keep the connection, so the worker can say what to change.
    PSRT_LOG_WARN("{} of key {} slice {} from {}: {}", to_string(h.type), h.key, h.slice(),
                  peer.name(), e.what());
    return peer.send_error(h.request_id, e.code(),
                           fmt::format("CUDA IPC on {}: {} (set PSRT_CUDA_IPC=0 on the workers "
                                       "to stage through host memory instead)",
                                       to_string(config_.device), e.what()),
                           false);
  }
  const auto rank = peer.rank();
  {
    std::lock_guard lock(s.mu);
    if (pushes) {
      const float lr = admit_push_locked(s, h, rank);
      IpcGrad ipc;
      ipc.remote = grad.data;
      ipc.remote_event = grad.event;
      ipc.hold = std::move(grad.hold);
      if (h.type == MsgType::kPushIpc) {
        ipc.ack_peer = peer.shared_from_this();
        ipc.ack_request = h.request_id;
      }
      GradBuf g;
      g.where = std::move(ipc);
      g.size = grad_bytes;
      g.dtype = h.dtype;
      g.lr = lr;
      auto& w = s.workers.at(rank);
      tag_push_locked(w, g);
      w.queued.push_back(std::move(g));
      w.received++;
    }
    if (h.type != MsgType::kPushIpc) {
      auto w = s.workers.find(rank);
      const std::uint64_t target = w == s.workers.end() ? 0 : w->second.received;
      s.waiters.push_back({peer.shared_from_this(), h.request_id, rank, target, out.data, out.event,
                           std::move(out.hold)});
    }
  }
  after_change(s);
}

void Server::reply_ipc_pull(Slice& s, PullWaiter w) {
  gpu_->post([this, &s, w = std::move(w)] {
    Status copied;
    try {
      // After the worker's queued work on its output (its event), then into it; the weights
      // cannot change meanwhile (this waiter is counted in s.readers).
      device::wait_event(w.out_event, gpu_->replies);
      device::copy_async(w.out, s.d_weights.data(), s.count * sizeof(float), gpu_->replies);
      gpu_->replies.synchronize();
    } catch (const Error& e) {
      copied = Status(e);
    }
    if (!copied.ok()) {
      w.peer->send_error(w.request_id, copied.code(), copied.message(), false);
      return release_reader(s);
    }
    Header r;
    r.type = MsgType::kPullIpcReply;
    r.request_id = w.request_id;
    r.key = s.key;
    r.set_slice(s.index);
    r.set_round_info(w.round_workers, w.late_dropped);
    {
      std::lock_guard lock(s.mu);
      r.round = s.version;
    }
    w.peer->send(r, {}, [this, &s](const Status&) { release_reader(s); });
  });
}

ConstBuffer Server::pull_source(const Slice& s) const {
  if (gpu_ && gpu_->transport_cuda)
    return {s.d_weights.data(), s.count * sizeof(float), MemoryType::kCuda};
  if (gpu_) return {s.mirror.data(), s.count * sizeof(float), MemoryType::kHost};
  return {s.weights.data(), s.count * sizeof(float), MemoryType::kHost};
}

}  // namespace psrt::ps
