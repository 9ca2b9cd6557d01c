#include "transport/listeners.h"

#include "base/log.h"

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

void Listeners::close_all_on_loop() {
  for (Fd& fd : fds_)
    loop_.remove_fd_on_loop(fd.get());
  fds_.clear();
}

}  // namespace psrt::transport
