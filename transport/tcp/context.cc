#include "transport/tcp/context.h"

#include "base/log.h"
#include "transport/tcp/connection.h"

namespace psrt::transport::tcp {
namespace {
// Loopback bulk transfers stall on the default socket buffers; 4 MiB keeps a window in flight.
constexpr int kSocketBufferBytes = 4 << 20;
}  // namespace

TcpContext::TcpContext(std::shared_ptr<Receiver> receiver, Options options)
    : options_(std::move(options)), receiver_(std::move(receiver)), loop_("tcp", options_.spin) {}

TcpContext::~TcpContext() = default;

void TcpContext::start() {
  loop_.start();
}

std::string TcpContext::listen(const std::string& address) {
  return listeners_.add(address, [this](int fd) { accept_on_loop(fd); });
}

void TcpContext::accept_on_loop(int listen_fd) {
  for (int i = 0; i < 64; ++i) {
    std::string peer;
    Fd fd = listeners_.accept_on_loop(listen_fd, peer, "tcp");
    if (!fd) return;
    try {
      tune_stream(fd.get(), options_.peer_timeout);
      set_socket_buffers(fd.get(), kSocketBufferBytes);
    } catch (const Error& e) {
      PSRT_LOG_WARN_LIMITED("tcp: dropping connection from {}: {}", peer, e.what());
      continue;
    }
    auto conn = adopt_on_loop(std::move(fd), peer);
    receiver_->on_connected(conn);
  }
}

std::shared_ptr<TcpConnection> TcpContext::adopt_on_loop(Fd fd, std::string peer) {
  auto conn = std::make_shared<TcpConnection>(shared_from_this(), std::move(fd), next_id_++,
                                              std::move(peer));
  connections_[conn->id()] = conn;
  conn->start_on_loop();
  return conn;
}

std::shared_ptr<Connection> TcpContext::connect(const std::string& address) {
  if (shut_down_) throw Error(ErrorCode::kCancelled, "tcp transport is shut down");
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
  registrations_.insert(region.data, region.size, NoHandle{});
}

void TcpContext::unregister_memory(const void* base) {
  registrations_.erase(base);
}

bool TcpContext::is_registered(const void* data, std::size_t size) const {
  return registrations_.covers(data, size);
}

void TcpContext::shutdown() {
  std::lock_guard lock(shutdown_mutex_);
  if (shut_down_.exchange(true)) return;
  if (!loop_.in_loop()) {
    loop_.run_sync([this] {
      listeners_.close_all_on_loop();
      auto all = connections_;  // close_on_loop erases from connections_
      for (auto& [id, conn] : all) {
        conn->close_on_loop(Status(ErrorCode::kCancelled, "transport shut down"));
      }
    });
  }
  loop_.stop();
  // Breaks the cycle context -> receiver -> (connections it keeps) -> context.
  receiver_.reset();
}

}  // namespace psrt::transport::tcp
