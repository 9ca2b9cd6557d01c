#include "transport/tcp/connection.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "base/exception_status.h"
#include "base/log.h"
#include "base/sys_check.h"
#include "transport/tcp/context.h"

namespace psrt::transport::tcp {
namespace {

constexpr std::size_t kMaxIov = 256;
// A readable event handles at most this many bytes before the loop serves other sockets.
constexpr std::size_t kReadBudgetBytes = 8u << 20;

bool would_block(int err) {
  return err == EAGAIN || err == EWOULDBLOCK;
}

}  // namespace

TcpConnection::TcpConnection(std::shared_ptr<TcpContext> ctx, Fd fd, std::uint64_t id,
                             std::string peer)
    : ctx_(std::move(ctx)),
      id_(id),
      peer_(std::move(peer)),
      fd_(std::move(fd)),
      rbuf_(kReadAheadBytes) {}

TcpConnection::~TcpConnection() = default;

void TcpConnection::start_on_loop() {
  std::weak_ptr<TcpConnection> weak = weak_from_this();
  ctx_->loop().add_fd_on_loop(fd_.get(), EPOLLIN | EPOLLRDHUP, [weak](std::uint32_t ev) {
    if (auto self = weak.lock()) self->on_events_on_loop(ev);
  });
}

void TcpConnection::send(std::span<const std::byte> header, std::span<const ConstBuffer> payload,
                         SendDone done) {
  auto reject = [&](ErrorCode code, std::string why) {
    std::vector<SendDone> one;
    one.push_back(std::move(done));
    complete(std::move(one), Status(code, std::move(why)));
  };
  if (header.size() > kMaxHeaderBytes) {
    return reject(ErrorCode::kInvalidArgument,
                  "message header of " + std::to_string(header.size()) + " bytes exceeds the " +
                      std::to_string(kMaxHeaderBytes) + "-byte limit");
  }
  OutMessage msg;
  std::size_t payload_bytes = 0;
  msg.payload.reserve(payload.size());
  for (const ConstBuffer& b : payload) {
    if (b.memory != MemoryType::kHost) {
      return reject(ErrorCode::kUnsupported,
                    "the tcp transport cannot send from CUDA memory; stage it in host memory or "
                    "use a transport that supports it");
    }
    if (b.size == 0) continue;
    msg.payload.push_back(iovec{const_cast<void*>(b.data), b.size});
    payload_bytes += b.size;
  }
  if (payload_bytes > ctx_->options().max_payload_bytes) {
    return reject(ErrorCode::kInvalidArgument,
                  "payload of " + std::to_string(payload_bytes) +
                      " bytes exceeds max_payload_bytes (" +
                      std::to_string(ctx_->options().max_payload_bytes) + ")");
  }
  encode_frame_prefix({static_cast<std::uint16_t>(header.size()), payload_bytes}, msg.head.data());
  std::memcpy(msg.head.data() + kFramePrefixBytes, header.data(), header.size());
  msg.head_len = kFramePrefixBytes + header.size();
  msg.total = msg.head_len + payload_bytes;
  msg.done = std::move(done);

  std::vector<SendDone> finished;
  Status error;
  bool arm = false;
  {
    std::lock_guard lock(send_mutex_);
    if (send_closed_) {
      std::vector<SendDone> one;
      one.push_back(std::move(msg.done));
      complete(std::move(one),
               Status(ErrorCode::kConnectionClosed, "connection to " + peer_ + " is closed"));
      return;
    }
    bool idle = out_.empty();
    out_.push_back(std::move(msg));
    if (idle) error = flush_locked(finished);
    if (error.ok() && !out_.empty() && !write_armed_) {
      write_armed_ = true;
      arm = true;
    }
  }
  if (!finished.empty()) complete(std::move(finished), Status());
  if (!error.ok()) {
    auto self = shared_from_this();
    ctx_->loop().defer([self, error] { self->close_on_loop(error); });
  } else if (arm) {
    auto self = shared_from_this();
    ctx_->loop().defer([self] {
      std::lock_guard lock(self->send_mutex_);
      if (self->fd_ && self->write_armed_) {
        self->ctx_->loop().set_events_on_loop(self->fd_.get(), EPOLLIN | EPOLLOUT | EPOLLRDHUP);
      }
    });
  }
}

Status TcpConnection::flush_locked(std::vector<SendDone>& finished) {
  iovec iov[kMaxIov];
  while (!out_.empty()) {
    std::size_t n = 0;
    for (auto it = out_.begin(); it != out_.end() && n < kMaxIov; ++it) {
      std::size_t skip = it->sent;
      if (skip < it->head_len) {
        iov[n++] = iovec{it->head.data() + skip, it->head_len - skip};
        skip = 0;
      } else {
        skip -= it->head_len;
      }
      for (const iovec& p : it->payload) {
        if (n == kMaxIov) break;
        if (skip >= p.iov_len) {
          skip -= p.iov_len;
          continue;
        }
        iov[n++] = iovec{static_cast<char*>(p.iov_base) + skip, p.iov_len - skip};
        skip = 0;
      }
    }
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = n;
    ssize_t wrote = ::sendmsg(fd_.get(), &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (wrote < 0) {
      if (errno == EINTR) continue;
      if (would_block(errno)) return {};
      return Status(ErrorCode::kPeerFailed, "send to " + peer_ + " failed: " + errno_string(errno));
    }
    auto left = static_cast<std::size_t>(wrote);
    while (left > 0 && !out_.empty()) {
      OutMessage& m = out_.front();
      std::size_t take = std::min(left, m.total - m.sent);
      m.sent += take;
      left -= take;
      if (m.sent == m.total) {
        finished.push_back(std::move(m.done));
        out_.pop_front();
      }
    }
  }
  return {};
}

void TcpConnection::complete(std::vector<SendDone> finished, const Status& status) {
  for (auto& d : finished)
    ctx_->loop().complete(std::move(d), status);
}

void TcpConnection::on_events_on_loop(std::uint32_t events) {
  if (events & EPOLLOUT) {
    std::vector<SendDone> finished;
    Status error;
    {
      std::lock_guard lock(send_mutex_);
      error = flush_locked(finished);
      if (error.ok() && out_.empty() && write_armed_) {
        write_armed_ = false;
        ctx_->loop().set_events_on_loop(fd_.get(), EPOLLIN | EPOLLRDHUP);
      }
    }
    if (!finished.empty()) complete(std::move(finished), Status());
    if (!error.ok()) return close_on_loop(error);
  }
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP)) read_on_loop();
}

void TcpConnection::fail_on_loop(ErrorCode code, std::string reason) {
  PSRT_LOG_WARN_LIMITED("tcp: closing connection {} with {}: {}", id_, peer_, reason);
  close_on_loop(Status(code, std::move(reason)));
}

void TcpConnection::read_on_loop() {
  std::size_t budget = kReadBudgetBytes;
  while (is_open() && budget > 0) {
    if (state_ == RecvState::kPayload) {
      std::size_t want = frame_.payload_len - payload_received_;
      ssize_t n =
          ::recv(fd_.get(), static_cast<char*>(placement_.dest.data) + payload_received_, want, 0);
      if (n > 0) {
        payload_received_ += static_cast<std::size_t>(n);
        budget -= std::min(budget, static_cast<std::size_t>(n));
        if (payload_received_ == frame_.payload_len) deliver_on_loop();
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && would_block(errno)) return;
      return fail_on_loop(n == 0 ? ErrorCode::kConnectionClosed : ErrorCode::kPeerFailed,
                          (n == 0 ? std::string("peer closed the connection")
                                  : "receive failed: " + errno_string(errno)) +
                              " mid-payload (" + std::to_string(payload_received_) + " of " +
                              std::to_string(frame_.payload_len) + " bytes received)");
    }
    // Prefix or header: parse what the read-ahead buffer holds, else read more into it.
    if (state_ == RecvState::kPrefix && rend_ - rbegin_ >= kFramePrefixBytes) {
      if (!parse_prefix_on_loop()) return;
      continue;
    }
    if (state_ == RecvState::kHeader && rend_ - rbegin_ >= frame_.header_len) {
      if (!finish_header_on_loop()) return;
      continue;
    }
    if (rbegin_ > 0) {
      std::memmove(rbuf_.data(), rbuf_.data() + rbegin_, rend_ - rbegin_);
      rend_ -= rbegin_;
      rbegin_ = 0;
    }
    ssize_t n = ::recv(fd_.get(), rbuf_.data() + rend_, rbuf_.size() - rend_, 0);
    if (n > 0) {
      rend_ += static_cast<std::size_t>(n);
      budget -= std::min(budget, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && would_block(errno)) return;
    if (n == 0 && state_ == RecvState::kPrefix && rend_ == rbegin_) {
      return close_on_loop(
          Status(ErrorCode::kConnectionClosed, "peer " + peer_ + " closed the connection"));
    }
    return fail_on_loop(n == 0 ? ErrorCode::kConnectionClosed : ErrorCode::kPeerFailed,
                        (n == 0 ? std::string("peer closed the connection")
                                : "receive failed: " + errno_string(errno)) +
                            " mid-frame (truncated frame)");
  }
}

bool TcpConnection::parse_prefix_on_loop() {
  std::span<const std::byte, kFramePrefixBytes> prefix(rbuf_.data() + rbegin_, kFramePrefixBytes);
  std::string why = decode_frame_prefix(prefix, ctx_->options().max_payload_bytes, frame_);
  if (!why.empty()) {
    fail_on_loop(ErrorCode::kProtocol, why);
    return false;
  }
  rbegin_ += kFramePrefixBytes;
  state_ = RecvState::kHeader;
  return true;
}

bool TcpConnection::finish_header_on_loop() {
  std::memcpy(header_.data(), rbuf_.data() + rbegin_, frame_.header_len);
  rbegin_ += frame_.header_len;
  std::span<const std::byte> header(header_.data(), frame_.header_len);
  placement_ = Placement{};
  payload_received_ = 0;
  if (frame_.payload_len > 0) {
    try {
      placement_ = ctx_->receiver().place(*this, header, frame_.payload_len);
    } catch (const Error& e) {
      fail_on_loop(e.code(), std::string("receiver refused the message: ") + e.what());
      return false;
    } catch (...) {
      // Never let it reach the progress thread's top (the process would end): std::bad_alloc
      // under a memory limit ends this connection, not the process.
      Status why = current_exception_status("receiver failed on the message");
      fail_on_loop(why.code(), why.message());
      return false;
    }
    if (!is_open()) return false;
    if (placement_.dest.size != frame_.payload_len || placement_.dest.data == nullptr) {
      fail_on_loop(ErrorCode::kInvalidArgument,
                   "receiver placed " + std::to_string(placement_.dest.size) +
                       " bytes for a payload of " + std::to_string(frame_.payload_len));
      return false;
    }
    if (placement_.dest.memory != MemoryType::kHost) {
      fail_on_loop(ErrorCode::kUnsupported,
                   "receiver placed the payload in CUDA memory, which the tcp transport cannot "
                   "write");
      return false;
    }
    std::size_t have = std::min<std::size_t>(rend_ - rbegin_, frame_.payload_len);
    std::memcpy(placement_.dest.data, rbuf_.data() + rbegin_, have);
    rbegin_ += have;
    payload_received_ = have;
  }
  state_ = RecvState::kPayload;
  if (payload_received_ == frame_.payload_len) deliver_on_loop();
  return is_open();
}

void TcpConnection::deliver_on_loop() {
  state_ = RecvState::kPrefix;
  std::span<const std::byte> header(header_.data(), frame_.header_len);
  try {
    ctx_->receiver().on_message(*this, header, placement_);
  } catch (...) {
    Status why = current_exception_status("receiver failed on the message");
    fail_on_loop(why.code(), why.message());
  }
}

void TcpConnection::close() {
  auto self = shared_from_this();
  if (ctx_->loop().in_loop()) {
    close_on_loop(Status(ErrorCode::kConnectionClosed, "closed locally"));
  } else {
    ctx_->loop().post(
        [self] { self->close_on_loop(Status(ErrorCode::kConnectionClosed, "closed locally")); });
  }
}

void TcpConnection::close_on_loop(const Status& why) {
  if (!open_.exchange(false, std::memory_order_acq_rel)) return;
  std::deque<OutMessage> pending;
  {
    std::lock_guard lock(send_mutex_);
    send_closed_ = true;
    pending.swap(out_);
    if (fd_) {
      ctx_->loop().remove_fd_on_loop(fd_.get());
      fd_.reset();
    }
  }
  std::vector<SendDone> failed;
  failed.reserve(pending.size());
  for (auto& m : pending)
    failed.push_back(std::move(m.done));
  if (!failed.empty()) {
    Status st = why.code() == ErrorCode::kConnectionClosed || why.ok()
                    ? Status(ErrorCode::kConnectionClosed,
                             "connection to " + peer_ + " closed before the send finished")
                    : why;
    complete(std::move(failed), st);
  }
  auto self = shared_from_this();  // keep alive through the callbacks
  ctx_->receiver().on_closed(*this, why);
  ctx_->forget_on_loop(id_);
}

}  // namespace psrt::transport::tcp
