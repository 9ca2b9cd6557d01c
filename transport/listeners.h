// The TCP listening sockets of one transport (the tcp backend's data port, the UCX backend's
// handshake port), watched by its progress loop.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "transport/event_loop.h"
#include "transport/socket.h"

namespace psrt::transport {

class Listeners {
 public:
  explicit Listeners(EventLoop& loop) : loop_(loop) {}

  // Binds `address`, then calls `on_ready(listen_fd)` on the loop whenever a connection waits.
  // Returns the bound "host:port". Blocking; throws psrt::Error. Not from the loop thread.
  std::string add(const std::string& address, std::function<void(int)> on_ready);
  void close_all_on_loop();

 private:
  EventLoop& loop_;
  std::vector<Fd> fds_;  // loop thread only
};

}  // namespace psrt::transport
