#include "transport/listeners.h"

#include <algorithm>
#include <cerrno>

#include "base/log.h"
#include "base/sys_check.h"

namespace psrt::transport {

std::string Listeners::add(const std::string& address, std::function<void(int)> on_ready) {
  std::string bound;
  Fd fd = listen_tcp(address, bound);
  int raw = fd.get();
  loop_.run_sync([&] {
    fds_.push_back(std::move(fd));
    loop_.add_fd_on_loop(raw, EPOLLIN, [raw, cb = std::move(on_ready)](std::uint32_t) { cb(raw); });
  });
  PSRT_LOG_DEBUG("listening on {}", bound);
  return bound;
}

Fd Listeners::accept_on_loop(int listen_fd, std::string& peer, std::string_view backend) {
  int err = 0;
  Fd fd = accept_tcp(listen_fd, peer, &err);
  Paused& p = paused_[listen_fd];
  if (fd || err == 0) {
    if (fd) p.backoff = std::chrono::milliseconds(0);
    return fd;
  }
  const bool shortage = err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
  if (!shortage) {
    PSRT_LOG_WARN_LIMITED("{}: accept failed: {}", backend, errno_string(err));
    return Fd();
  }
  p.backoff = std::clamp(p.backoff * 2, kMinBackoff, kMaxBackoff);
  PSRT_LOG_WARN_LIMITED(
      "{}: accept failed: {}; not accepting for {} ms (raise the descriptor "
      "limit, ulimit -n, if this is not an attack)",
      backend, errno_string(err), p.backoff.count());
  if (p.timer == 0) {
    loop_.set_events_on_loop(listen_fd, 0);
    p.timer = loop_.add_timer_on_loop(EventLoop::Clock::now() + p.backoff, [this, listen_fd] {
      auto it = paused_.find(listen_fd);
      if (it == paused_.end()) return;
      it->second.timer = 0;
      loop_.set_events_on_loop(listen_fd, EPOLLIN);
    });
  }
  return Fd();
}

void Listeners::close_all_on_loop() {
  for (auto& [fd, p] : paused_)
    if (p.timer != 0) loop_.cancel_timer_on_loop(p.timer);
  paused_.clear();
  for (Fd& fd : fds_)
    loop_.remove_fd_on_loop(fd.get());
  fds_.clear();
}

}  // namespace psrt::transport
