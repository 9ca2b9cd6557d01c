// One TCP stream to a peer. Sends may come from any thread: the first sender to find the queue
// empty writes straight from its own thread (sendmsg, no copy of the payload); what the socket
// cannot take now is left queued and flushed by the progress loop on EPOLLOUT. Receives run on
// the loop: the frame prefix and header are read ahead into a small buffer, the payload is read
// with recv() directly into the buffer the receiver placed (bytes that the read-ahead already
// pulled in, at most kReadAheadBytes, are copied once).
#pragma once

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/socket.h"
#include "transport/tcp/frame.h"
#include "transport/transport.h"

namespace psrt::transport::tcp {

class TcpContext;

class TcpConnection final : public Connection, public std::enable_shared_from_this<TcpConnection> {
 public:
  static constexpr std::size_t kReadAheadBytes = std::size_t{16} * 1024;

  TcpConnection(std::shared_ptr<TcpContext> ctx, Fd fd, std::uint64_t id, std::string peer);
  ~TcpConnection() override;

  void send(std::span<const std::byte> header, std::span<const ConstBuffer> payload,
            SendDone done) override;
  void close() override;
  const std::string& peer() const override { return peer_; }
  std::uint64_t id() const override { return id_; }
  bool is_open() const override { return open_.load(std::memory_order_acquire); }

  void start_on_loop();
  void close_on_loop(const Status& why);

 private:
  struct OutMessage {
    std::array<std::byte, kFramePrefixBytes + kMaxHeaderBytes> head{};
    std::size_t head_len = 0;
    std::vector<iovec> payload;
    std::size_t total = 0;  // head_len + payload bytes
    std::size_t sent = 0;
    SendDone done;
  };

  void on_events_on_loop(std::uint32_t events);
  // Reads and dispatches what the socket has (bounded per call); false once closed.
  void read_on_loop();
  bool parse_prefix_on_loop();
  bool finish_header_on_loop();
  void deliver_on_loop();
  // Writes queued messages until the socket would block. Moves finished callbacks to `finished`.
  Status flush_locked(std::vector<SendDone>& finished);
  void complete(std::vector<SendDone> finished, const Status& status);
  void fail_on_loop(ErrorCode code, std::string reason);

  std::shared_ptr<TcpContext> ctx_;
  const std::uint64_t id_;
  const std::string peer_;
  std::atomic<bool> open_{true};

  std::mutex send_mutex_;
  Fd fd_;                       // closed under send_mutex_
  std::deque<OutMessage> out_;  // guarded by send_mutex_
  bool write_armed_ = false;    // guarded by send_mutex_: EPOLLOUT requested
  bool send_closed_ = false;    // guarded by send_mutex_

  // Receive state: loop thread only.
  enum class RecvState { kPrefix, kHeader, kPayload };
  RecvState state_ = RecvState::kPrefix;
  std::vector<std::byte> rbuf_;
  std::size_t rbegin_ = 0;
  std::size_t rend_ = 0;
  FramePrefix frame_;
  std::array<std::byte, kMaxHeaderBytes> header_{};
  Placement placement_;
  std::size_t payload_received_ = 0;
};

}  // namespace psrt::transport::tcp
