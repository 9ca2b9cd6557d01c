// The tcp backend's shared state: options, the receiver, the progress loop, the listeners and the
// live connections. Plain sockets, epoll, TCP_NODELAY; payloads go out with sendmsg from the
// caller's buffers and come in with recv straight into the buffer the receiver placed.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "transport/event_loop.h"
#include "transport/listeners.h"
#include "transport/registration_cache.h"
#include "transport/socket.h"
#include "transport/transport.h"

namespace psrt::transport::tcp {

class TcpConnection;

class TcpContext : public std::enable_shared_from_this<TcpContext> {
 public:
  TcpContext(std::shared_ptr<Receiver> receiver, Options options);
  ~TcpContext();

  void start();
  std::string_view name() const { return "tcp"; }
  std::string listen(const std::string& address);
  std::shared_ptr<Connection> connect(const std::string& address);
  bool supports(MemoryType type) const { return type == MemoryType::kHost; }
  void register_memory(MutableBuffer region);
  void unregister_memory(const void* base);
  bool is_registered(const void* data, std::size_t size) const;
  void shutdown();
  bool on_progress_thread() const { return loop_.in_loop(); }

  // Used by TcpConnection.
  EventLoop& loop() { return loop_; }
  Receiver& receiver() { return *receiver_; }
  const Options& options() const { return options_; }
  void forget_on_loop(std::uint64_t id);

 private:
  std::shared_ptr<TcpConnection> adopt_on_loop(Fd fd, std::string peer);
  void accept_on_loop(int listen_fd);

  const Options options_;
  std::shared_ptr<Receiver> receiver_;
  EventLoop loop_;
  Listeners listeners_{loop_};
  std::unordered_map<std::uint64_t, std::shared_ptr<TcpConnection>> connections_;  // loop only
  std::atomic<std::uint64_t> next_id_{1};
  std::atomic<bool> shut_down_{false};
  std::mutex shutdown_mutex_;
  struct NoHandle {};
  RegistrationCache<NoHandle> registrations_;
};

}  // namespace psrt::transport::tcp
