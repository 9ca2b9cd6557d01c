// The TCP listening sockets of one transport (the tcp backend's data port, the UCX backend's
// handshake port), watched by its progress loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
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

  // Accepts one waiting connection on `listen_fd` (from on_ready): the socket, or an empty Fd
  // when none waits or accepting must pause. Out of descriptors or kernel memory (EMFILE,
  // ENFILE, ENOBUFS, ENOMEM) the level-triggered listener would fire again at once and spin the
  // loop: it is unwatched for a back-off (kMinBackoff, doubling up to kMaxBackoff while the
  // shortage lasts) so that established connections are still served, and a rate-limited
  // warning names the cause. `backend` prefixes the log line. Loop thread only.
  Fd accept_on_loop(int listen_fd, std::string& peer, std::string_view backend);

  static constexpr std::chrono::milliseconds kMinBackoff{50};
  static constexpr std::chrono::milliseconds kMaxBackoff{500};

 private:
  struct Paused {
    std::chrono::milliseconds backoff{0};
    std::uint64_t timer = 0;  // 0 = watched
  };
  EventLoop& loop_;
  std::vector<Fd> fds_;                     // loop thread only
  std::unordered_map<int, Paused> paused_;  // loop thread only, by listen fd
};

}  // namespace psrt::transport
