#include "ps/send_window.h"

#include <algorithm>
#include <exception>

#include "base/log.h"

namespace psrt::ps {

std::size_t send_window_for(std::int64_t configured, bool byte_streams) {
  if (configured >= 0) return static_cast<std::size_t>(configured);
  return byte_streams ? kTcpSendWindow : 0;
}

void SendWindow::submit(std::uint64_t priority, std::size_t bytes, Start start) {
  std::unique_lock lock(mu_);
  queue_.emplace(std::pair{priority, sequence_++}, Item{bytes, std::move(start)});
  drain(lock);
}

void SendWindow::release(std::size_t bytes) {
  std::unique_lock lock(mu_);
  if (bytes > outstanding_) {
    PSRT_LOG_ERROR("send window: released {} bytes with {} outstanding", bytes, outstanding_);
    bytes = outstanding_;
  }
  outstanding_ -= bytes;
  drain(lock);
}

std::size_t SendWindow::outstanding() const {
  std::lock_guard lock(mu_);
  return outstanding_;
}

std::size_t SendWindow::queued() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

void SendWindow::drain(std::unique_lock<std::mutex>& lock) {
  if (draining_) return;  // the draining thread sees what this one queued or released
  draining_ = true;
  while (!queue_.empty()) {
    auto first = queue_.begin();
    const std::size_t bytes = first->second.bytes;
    if (outstanding_ != 0 && bytes > limit_ - std::min(limit_, outstanding_)) break;
    outstanding_ += bytes;
    Start start = std::move(first->second.start);
    queue_.erase(first);
    lock.unlock();
    bool started = true;
    try {
      start();
    } catch (const std::exception& e) {  // breaks Start's contract: keep the window going
      PSRT_LOG_ERROR("send window: a send failed to start: {}", e.what());
      started = false;
    }
    lock.lock();
    if (!started) outstanding_ -= std::min(outstanding_, bytes);
  }
  draining_ = false;
}

}  // namespace psrt::ps
