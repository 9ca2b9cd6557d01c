// The tcp backend's shared state: what every backend has (transport/context_base.h: options, the
// receiver, the progress loop, the listeners, the lifecycle) and the live connections. Plain
// sockets, epoll, TCP_NODELAY; payloads go out with sendmsg from the caller's buffers and come in
// with recv straight into the buffer the receiver placed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "transport/context_base.h"
#include "transport/socket.h"
#include "transport/transport.h"

namespace psrt::transport::tcp {

class TcpConnection;

// Registered memory needs no handle over TCP: the cache only answers is_registered.
struct NoMemHandle {};

class TcpContext : public ContextBase<TcpContext, NoMemHandle>,
                   public std::enable_shared_from_this<TcpContext> {
 public:
  TcpContext(std::shared_ptr<Receiver> receiver, Options options);
  ~TcpContext();

  void start();
  std::shared_ptr<Connection> connect(const std::string& address);
  bool supports(MemoryType type) const { return type == MemoryType::kHost; }
  void register_memory(MutableBuffer region);
  void unregister_memory(const void* base);

  // Used by TcpConnection.
  void forget_on_loop(std::uint64_t id);

 private:
  friend class ContextBase<TcpContext, NoMemHandle>;
  // The steps of ContextBase.
  void tune_accepted(int fd);
  void adopt_accepted_on_loop(Fd fd, std::string peer);
  // A frame cut short by the close never reaches a receiver whole: nothing to wait for.
  void finish_sends_before_close() {}
  void close_all_on_loop();
  void after_loop_stopped() {}

  std::shared_ptr<TcpConnection> adopt_on_loop(Fd fd, std::string peer);

  std::unordered_map<std::uint64_t, std::shared_ptr<TcpConnection>> connections_;  // loop only
};

}  // namespace psrt::transport::tcp
