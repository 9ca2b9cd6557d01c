// The worker's device-memory paths (docs/ARCHITECTURE.md, "The three GPU paths"): which one a
// CUDA buffer takes to a server, the staging it needs, and the public calls that take
// memory-typed views.
#include <fmt/core.h>

#include "base/host.h"
#include "base/log.h"
#include "device/cuda_device.h"
#include "ps/session/protocol_device.h"
#include "ps/worker_impl.h"

namespace psrt {

using ps::Header;
using ps::MsgType;

int Worker::Impl::cuda_device_of(const ConstBuffer& b) {
  const device::DeviceSpec where = device::locate(b.data);
  if (where.is_cuda()) return where.index;
  std::string why;
  if (device::cuda_device_count(&why) == 0)
    throw Error(
        ErrorCode::kUnsupported,
        fmt::format("a buffer marked as CUDA memory, but this process cannot use CUDA: {}", why));
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("the buffer at {} is marked as CUDA memory but the CUDA runtime does not "
                          "know it as device memory: pass MemoryType::kHost for host memory",
                          b.data));
}

Worker::Impl::DevicePath Worker::Impl::device_path(std::uint32_t server, int device) {
  // Its own lock: the first call per server waits for a DEVICE_INFO reply, which must not hold
  // up staging() and exporter().
  std::lock_guard lock(paths_mu_);
  if (paths_.size() < servers_.size()) paths_.resize(servers_.size(), DevicePath::kUnknown);
  if (paths_[server] != DevicePath::kUnknown) return paths_[server];
  auto& peer = *servers_[server];
  DevicePath path = DevicePath::kStaged;
  std::string why;
  if (transport_->supports(MemoryType::kCuda)) {
    path = DevicePath::kDirect;
    why = fmt::format(
        "path a: the {} transport carries CUDA memory; buffers are handed to it "
        "as they are",
        transport_->name());
  } else if (!options_.cuda_ipc) {
    why = "path c: PSRT_CUDA_IPC=0; pinned host buffers, copies pipelined with the sends";
  } else {
    Header q;
    q.type = MsgType::kDeviceInfo;
    auto reply = requests_.call(peer, q, {}, "DEVICE_INFO", options_.op_timeout);
    std::vector<std::string> info;
    if (Status st = ps::decode_lines(reply.payload, info); !st.ok() || info.size() != 2)
      throw Error(ErrorCode::kProtocol, peer.name() + " sent an unusable DEVICE_INFO reply");
    const std::string here = local_boot_id();
    if (!info[0].starts_with("cuda")) {
      why = fmt::format(
          "path c: the server keeps its slices on the {} and the {} transport "
          "has no CUDA memory support; pinned host buffers, copies pipelined with "
          "the sends",
          info[0], transport_->name());
    } else if (here.empty() || info[1] != here) {
      why = fmt::format(
          "path c: the server ({}) runs on another host and the {} transport has "
          "no CUDA memory support; pinned host buffers, copies pipelined with the "
          "sends",
          info[0], transport_->name());
    } else {
      // Same host, CUDA server: prove that the server can open this process's memory before
      // relying on it (containers without a shared IPC namespace, GPUs without peer access).
      Header probe;
      probe.type = MsgType::kDeviceInfo;
      std::vector<device::IpcRecord> record = {exporter(device).probe()};
      try {
        requests_.call(peer, probe, ps::encode_ipc(record), "DEVICE_INFO (CUDA IPC probe)",
                       options_.op_timeout);
        path = DevicePath::kIpc;
        why = fmt::format(
            "path b: the server keeps its slices on {} of this host; CUDA IPC, it "
            "reads gradients and writes weights in place",
            info[0]);
      } catch (const Error& e) {
        why = fmt::format(
            "path c: the server ({}) is on this host but cannot open this "
            "process's GPU memory ({}); pinned host buffers, copies pipelined with "
            "the sends",
            info[0], e.what());
      }
    }
  }
  PSRT_LOG_INFO("{}: CUDA memory takes {}", peer.name(), why);
  paths_[server] = path;
  return path;
}

ps::DeviceStaging& Worker::Impl::staging(int device) {
  std::lock_guard lock(staging_mu_);
  auto& s = staging_[device];
  if (!s) s = std::make_unique<ps::DeviceStaging>(device);
  return *s;
}

device::IpcExporter& Worker::Impl::exporter(int device) {
  std::lock_guard lock(staging_mu_);
  auto& e = exporters_[device];
  if (!e) e = std::make_unique<device::IpcExporter>(device);
  return *e;
}

void Worker::Impl::send_ipc(ps::Peer& server, Header h, std::vector<device::IpcRecord> records,
                            const std::shared_ptr<detail::HandleState>& st,
                            const std::string& what) {
  h.type = h.type == MsgType::kPush       ? MsgType::kPushIpc
           : h.type == MsgType::kPushPull ? MsgType::kPushPullIpc
                                          : MsgType::kPullIpc;
  // The server reads the gradient in place until its update ran: "sent" only with the reply.
  const auto id = requests_.add(
      server, what, [st](const Status& status, const Header& reply, std::span<const std::byte>) {
        st->sent_part();
        if (status.ok()) st->note_version(reply);
        st->complete_part(status);
      });
  h.request_id = id;
  // Peer::send, not send_bytes: send_bytes marks the payload as control bytes (dtype kBytes),
  // and an IPC message keeps its gradient's dtype. The records live until the send completes.
  auto payload = std::make_shared<std::vector<std::byte>>(ps::encode_ipc(records));
  ConstBuffer b{payload->data(), payload->size()};
  server.send(h, {&b, 1}, [this, id, payload](const Status& status) {
    if (!status.ok()) requests_.fail(id, status);
  });
}

void Worker::Impl::stop_staging() {
  std::map<int, std::unique_ptr<ps::DeviceStaging>> stopping;
  {
    std::lock_guard lock(staging_mu_);
    stopping.swap(staging_);
  }
  stopping.clear();  // each waits for its queued copies and runs their callbacks
}

Handle Worker::push(Key key, ConstBuffer grad, GradType type) {
  return impl_->data_op(ps::MsgType::kPush, key, grad, ps::to_wire(type), {});
}

Handle Worker::pull(Key key, MutableBuffer out) {
  return impl_->data_op(ps::MsgType::kPull, key, {}, ps::WireType::kF32, out);
}

Handle Worker::push_pull(Key key, ConstBuffer grad, GradType type, MutableBuffer out) {
  const auto* g = static_cast<const std::byte*>(grad.data);
  const auto* o = static_cast<const std::byte*>(out.data);
  if (grad.size && out.size && g < o + out.size && o < g + grad.size)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("push_pull of key {}: grad and out overlap", key));
  return impl_->data_op(ps::MsgType::kPushPull, key, grad, ps::to_wire(type), out);
}

}  // namespace psrt
