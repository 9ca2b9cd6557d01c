#include "ps/device_staging.h"

#include <utility>

#include "base/log.h"

namespace psrt::ps {
namespace {
// Pinned memory is a scarce system resource (it cannot be swapped): keep at most this much in
// the pool between operations.
constexpr std::size_t kMaxPooledBytes = std::size_t{256} << 20;
}  // namespace

DeviceStaging::DeviceStaging(int device) : stream_(device) {}

DeviceStaging::~DeviceStaging() {
  thread_.stop();
}

std::shared_ptr<device::PinnedMemory> DeviceStaging::take(std::size_t bytes) {
  {
    std::lock_guard lock(pool_mu_);
    auto it = pool_.lower_bound(bytes);
    // A buffer at most twice the size asked for: larger ones stay for larger slices.
    if (it != pool_.end() && it->first <= 2 * bytes + 4096) {
      auto b = std::move(it->second);
      pooled_bytes_ -= it->first;
      pool_.erase(it);
      return b;
    }
  }
  return std::make_shared<device::PinnedMemory>(
      device::PinnedMemory::allocate(bytes, stream_.device()));
}

void DeviceStaging::give(std::shared_ptr<device::PinnedMemory> buffer) {
  if (!buffer || !*buffer) return;
  std::lock_guard lock(pool_mu_);
  if (pooled_bytes_ + buffer->size() > kMaxPooledBytes) return;  // freed here
  pooled_bytes_ += buffer->size();
  pool_.emplace(buffer->size(), std::move(buffer));
}

void DeviceStaging::copy_then(void* dst, const void* src, std::size_t bytes,
                              std::function<void(const Status&)> then) {
  std::lock_guard lock(enqueue_mu_);
  device::order_after_legacy_default(stream_);
  device::copy_async(dst, src, bytes, stream_);
  thread_.push({device::Event::record(stream_), std::move(then)});
}

void DeviceStaging::run(Pending& p) {
  Status status;
  try {
    p.done.synchronize();
  } catch (const Error& e) {
    status = Status(e.code(), e.what());
  }
  try {
    p.then(status);
  } catch (const std::exception& e) {
    PSRT_LOG_ERROR("after a staging copy: {}", e.what());
  }
}

}  // namespace psrt::ps
