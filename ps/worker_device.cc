// The worker's device-memory paths (DESIGN decision 3): which one a CUDA buffer takes to a
// server, the staging it needs, and the public calls that take memory-typed views.
#include <fmt/core.h>

#include "base/log.h"
#include "device/cuda_device.h"
#include "ps/worker_impl.h"

namespace psrt {

ps::DeviceStaging* Worker::Impl::staging_for(const ConstBuffer& b, std::uint32_t server) {
  if (b.memory == MemoryType::kHost) return nullptr;
  const device::DeviceSpec where = device::locate(b.data);
  if (!where.is_cuda()) {
    std::string why;
    if (device::cuda_device_count(&why) == 0)
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("a buffer marked as CUDA memory, but this process cannot use CUDA: "
                              "{}",
                              why));
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("the buffer at {} is marked as CUDA memory but the CUDA runtime does "
                            "not know it as device memory: pass MemoryType::kHost for host "
                            "memory",
                            b.data));
  }
  const bool direct = transport_->supports(MemoryType::kCuda);
  std::lock_guard lock(staging_mu_);
  if (path_logged_.size() < servers_.size()) path_logged_.resize(servers_.size());
  if (!path_logged_[server]) {
    path_logged_[server] = true;
    if (direct) {
      PSRT_LOG_INFO("{}: CUDA memory is handed to the {} transport as is (path a: it reports "
                    "CUDA memory support)",
                    servers_[server]->name(), transport_->name());
    } else {
      PSRT_LOG_INFO("{}: CUDA memory goes through pinned host buffers, copies pipelined with the "
                    "sends (path c: the {} transport has no CUDA memory support)",
                    servers_[server]->name(), transport_->name());
    }
  }
  if (direct) return nullptr;
  auto& staging = staging_[where.index];
  if (!staging) staging = std::make_unique<ps::DeviceStaging>(where.index);
  return staging.get();
}

void Worker::Impl::stop_staging() {
  std::map<int, std::unique_ptr<ps::DeviceStaging>> stopping;
  {
    std::lock_guard lock(staging_mu_);
    stopping.swap(staging_);
  }
  stopping.clear();  // each waits for its queued copies and runs their callbacks
}

namespace {
ps::WireType wire_type(GradType t) {
  switch (t) {
    case GradType::kF32:
      return ps::WireType::kF32;
    case GradType::kF16:
      return ps::WireType::kF16;
    case GradType::kBF16:
      return ps::WireType::kBF16;
  }
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("unknown GradType {}", static_cast<int>(t)));
}
}  // namespace

Handle Worker::push(Key key, ConstBuffer grad, GradType type) {
  return impl_->data_op(ps::MsgType::kPush, key, grad, wire_type(type), {});
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
  return impl_->data_op(ps::MsgType::kPushPull, key, grad, wire_type(type), out);
}

}  // namespace psrt
