#include "transport/tcp/context.h"

#include "base/log.h"
#include "transport/tcp/connection.h"

namespace psrt::transport::tcp {
namespace {
// Loopback bulk transfers stall on the default socket buffers; 4 MiB keeps a window in flight.
constexpr int kSocketBufferBytes = 4 << 20;
}  // namespace

TcpContext::TcpContext(std::shared_ptr<Receiver> receiver, Options options)
    : ContextBase("tcp", std::move(receiver), std::move(options)) {}

TcpContext::~TcpContext() = default;

void TcpContext::start() {
  loop_.start();
}

void TcpContext::tune_accepted(int fd) {
  tune_stream(fd, options_.peer_timeout);
  set_socket_buffers(fd, kSocketBufferBytes);
}

void TcpContext::adopt_accepted_on_loop(Fd fd, std::string peer) {
  auto conn = adopt_on_loop(std::move(fd), std::move(peer));
  receiver_->on_connected(conn);
}

std::shared_ptr<TcpConnection> TcpContext::adopt_on_loop(Fd fd, std::string peer) {
  auto conn = std::make_shared<TcpConnection>(shared_from_this(), std::move(fd), next_id_++,
                                              std::move(peer));
  connections_[conn->id()] = conn;
  conn->start_on_loop();
  return conn;
}

std::shared_ptr<Connection> TcpContext::connect(const std::string& address) {
  throw_if_shut_down();
  Fd fd = connect_tcp(address, options_.connect_timeout);
  tune_stream(fd.get(), options_.peer_timeout);
  set_socket_buffers(fd.get(), kSocketBufferBytes);
  std::shared_ptr<TcpConnection> conn;
  loop_.run_sync([&] {
    conn = adopt_on_loop(std::move(fd), address);
    receiver_->on_connected(conn);
  });
  return conn;
}

void TcpContext::forget_on_loop(std::uint64_t id) {
  connections_.erase(id);
}

void TcpContext::register_memory(MutableBuffer region) {
  if (region.memory != MemoryType::kHost) {
    throw Error(ErrorCode::kUnsupported, "the tcp transport cannot register CUDA memory");
  }
  if (!registrations_.needs_registration(region.data, region.size)) return;
  registrations_.insert(region.data, region.size, NoMemHandle{});
}

void TcpContext::unregister_memory(const void* base) {
  registrations_.erase(base);
}

void TcpContext::close_all_on_loop() {
  auto all = connections_;  // close_on_loop erases from connections_
  for (auto& [id, conn] : all) {
    conn->close_on_loop(Status(ErrorCode::kCancelled, "transport shut down"));
  }
}

}  // namespace psrt::transport::tcp
