// What every backend context shares: its options, the receiver, the progress loop, the listeners,
// the registration cache, connection ids, and the lifecycle around them (accepting, refusing
// work once shut down, and the shutdown sequence). A backend (tcp/context.h, ucx/context.h)
// derives from ContextBase<Backend, MemHandle> and provides the steps that differ:
//
//   void tune_accepted(int fd);                         accept: socket options; throws
//                                                       psrt::Error to drop the connection
//   void adopt_accepted_on_loop(Fd fd, std::string peer);   accept: the backend's connection
//   void finish_sends_before_close();                   shutdown, off the loop while it runs:
//                                                       wait (bounded) for sends the peer may
//                                                       still be reading
//   void close_all_on_loop();                           shutdown: close every connection (and
//                                                       whatever is still connecting)
//   void after_loop_stopped();                          shutdown: on the caller, loop stopped
//
// The shutdown sequence: once only (later calls return at once); off the loop, the backend lets
// sends in flight finish (bounded), then the listeners and the backend's connections are closed
// on the loop; the loop stops; the backend finishes
// (after_loop_stopped); the receiver is released, which breaks the cycle context -> receiver ->
// (connections it keeps) -> context.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "base/log.h"
#include "psrt/error.h"
#include "transport/event_loop.h"
#include "transport/listeners.h"
#include "transport/registration_cache.h"
#include "transport/socket.h"
#include "transport/transport.h"

namespace psrt::transport {

template <typename Backend, typename MemHandle>
class ContextBase {
 public:
  ContextBase(const ContextBase&) = delete;
  ContextBase& operator=(const ContextBase&) = delete;

  std::string_view name() const { return name_; }
  // Binds `address` and accepts on the loop: up to 64 connections per wake-up, each tuned and
  // then adopted by the backend.
  std::string listen(const std::string& address) {
    return listeners_.add(address, [this](int fd) { accept_on_loop(fd); });
  }
  bool is_registered(const void* data, std::size_t size) const {
    return registrations_.covers(data, size);
  }
  bool on_progress_thread() const { return loop_.in_loop(); }
  void shutdown();

  // Used by the backend's connections.
  EventLoop& loop() { return loop_; }
  Receiver& receiver() { return *receiver_; }
  const Options& options() const { return options_; }

 protected:
  // `name` ("tcp", "ucx") names the loop thread and prefixes errors and log lines; a literal.
  ContextBase(std::string_view name, std::shared_ptr<Receiver> receiver, Options options)
      : name_(name),
        options_(std::move(options)),
        receiver_(std::move(receiver)),
        loop_(std::string(name), options.spin) {}
  ~ContextBase() = default;

  void throw_if_shut_down() const {
    if (shut_down_)
      throw Error(ErrorCode::kCancelled, std::string(name_) + " transport is shut down");
  }

  const std::string_view name_;
  const Options options_;
  std::shared_ptr<Receiver> receiver_;
  EventLoop loop_;
  Listeners listeners_{loop_};
  std::atomic<std::uint64_t> next_id_{1};
  RegistrationCache<MemHandle> registrations_;

 private:
  Backend& backend() { return static_cast<Backend&>(*this); }
  void accept_on_loop(int listen_fd);

  std::atomic<bool> shut_down_{false};
  std::mutex shutdown_mutex_;
};

template <typename Backend, typename MemHandle>
void ContextBase<Backend, MemHandle>::accept_on_loop(int listen_fd) {
  for (int i = 0; i < 64; ++i) {
    std::string peer;
    Fd fd = listeners_.accept_on_loop(listen_fd, peer, name_);
    if (!fd) return;
    try {
      backend().tune_accepted(fd.get());
    } catch (const Error& e) {
      PSRT_LOG_WARN_LIMITED("{}: dropping connection from {}: {}", name_, peer, e.what());
      continue;
    }
    backend().adopt_accepted_on_loop(std::move(fd), std::move(peer));
  }
}

template <typename Backend, typename MemHandle>
void ContextBase<Backend, MemHandle>::shutdown() {
  std::lock_guard lock(shutdown_mutex_);
  if (shut_down_.exchange(true)) return;
  if (!loop_.in_loop()) {
    backend().finish_sends_before_close();
    loop_.run_sync([this] {
      listeners_.close_all_on_loop();
      backend().close_all_on_loop();
    });
  }
  loop_.stop();
  backend().after_loop_stopped();
  receiver_.reset();
}

}  // namespace psrt::transport
