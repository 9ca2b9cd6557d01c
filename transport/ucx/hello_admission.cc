#include "transport/ucx/hello_admission.h"

#include <fmt/core.h>

#include <algorithm>
#include <atomic>

#include "transport/socket.h"

namespace psrt::transport::ucx {
namespace {

std::atomic<std::uint64_t> g_endpoints{0};
std::atomic<std::uint64_t> g_refused{0};

}  // namespace

std::string HelloAdmission::admit(const std::string& peer) {
  const std::string host = host_of(peer);
  if (pending_ >= kMaxPending)
    return fmt::format("{} UCX handshakes are pending, the most a listener takes at once",
                       pending_);
  std::size_t& from_host = pending_by_host_[host];
  if (from_host >= kMaxPendingPerHost)
    return fmt::format("{} UCX handshakes from {} are pending, the most one host may have",
                       from_host, host);
  ++from_host;
  ++pending_;
  return {};
}

void HelloAdmission::release(const std::string& peer) {
  auto it = pending_by_host_.find(host_of(peer));
  if (it == pending_by_host_.end()) return;
  if (--it->second == 0) pending_by_host_.erase(it);
  --pending_;
}

std::string HelloAdmission::admit_endpoint(const std::string& peer, Clock::time_point now) {
  const std::string host = host_of(peer);
  auto [it, fresh] = buckets_.try_emplace(host);
  Bucket& b = it->second;
  if (!fresh) {
    const double elapsed = std::chrono::duration<double>(now - b.at).count();
    b.tokens = std::min(kEndpointBurst, b.tokens + std::max(elapsed, 0.0) * kEndpointsPerSecond);
  }
  b.at = now;
  if (b.tokens < 1)
    return fmt::format(
        "more than {:.0f} UCX endpoints a second from {} (without a job secret a hello cannot be "
        "checked, so endpoints from it are rate-limited)",
        kEndpointsPerSecond, host);
  b.tokens -= 1;
  // Hosts whose bucket is full again are forgotten, so the map stays as small as the flood.
  if (buckets_.size() > 4096)
    std::erase_if(buckets_, [&](const auto& kv) {
      return kv.second.tokens +
                 std::chrono::duration<double>(now - kv.second.at).count() * kEndpointsPerSecond >=
             kEndpointBurst;
    });
  return {};
}

HelloStats hello_stats() noexcept {
  return {g_endpoints.load(std::memory_order_relaxed), g_refused.load(std::memory_order_relaxed)};
}

void count_endpoint_created() noexcept {
  g_endpoints.fetch_add(1, std::memory_order_relaxed);
}

void count_hello_refused() noexcept {
  g_refused.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace psrt::transport::ucx
