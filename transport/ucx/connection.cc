#include "transport/ucx/connection.h"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <cstring>

#include "base/exception_status.h"
#include "base/log.h"
#include "transport/ucx/check.h"
#include "transport/ucx/context.h"
#include "transport/ucx/hello_admission.h"
#include "transport/wire.h"

namespace psrt::transport::ucx {

struct SendOp {
  std::shared_ptr<UcxConnection> conn;
  std::array<std::byte, kAmRouteBytes + kMaxHeaderBytes> header{};
  std::size_t header_len = 0;
  std::vector<ucp_dt_iov_t> iov;
  MemoryType memory = MemoryType::kHost;
  SendDone done;
  bool orphaned = false;  // completed by orphan_sends_on_loop; owned by the context from then on
};

// A payload being received by rendezvous into the receiver's placement.
struct RecvOp {
  std::shared_ptr<UcxConnection> conn;  // null once abandoned; owned by the context from then on
  std::uint64_t arrival = 0;            // its key in the connection's undelivered_
};

namespace {

// Send ops are recycled on the progress thread, where every send completes: the steady state of
// a stream of sends allocates nothing.
thread_local std::vector<std::unique_ptr<SendOp>> t_free_ops;
// Below this size a payload travels eager (copied through UCX's buffers), so the registration
// cache is not consulted.
constexpr std::size_t kMemhMinBytes = 8192;
constexpr std::size_t kMaxFreeOps = 256;

std::unique_ptr<SendOp> acquire_op(bool on_loop) {
  if (on_loop && !t_free_ops.empty()) {
    auto op = std::move(t_free_ops.back());
    t_free_ops.pop_back();
    return op;
  }
  return std::make_unique<SendOp>();
}

void recycle_op(std::unique_ptr<SendOp> op) {
  op->conn.reset();
  op->done = nullptr;
  op->iov.clear();
  op->memory = MemoryType::kHost;
  if (t_free_ops.size() < kMaxFreeOps) t_free_ops.push_back(std::move(op));
}

Status status_from_ucs(ucs_status_t st, const std::string& peer, const char* what) {
  if (st == UCS_OK) return {};
  if (st == UCS_ERR_CANCELED) {
    return Status(ErrorCode::kConnectionClosed, std::string("connection to ") + peer +
                                                    " closed before the " + what + " finished");
  }
  return Status(ucs_error_code(st),
                std::string(what) + " with " + peer + " failed: " + ucs_status_string(st));
}

}  // namespace

UcxConnection::UcxConnection(std::shared_ptr<UcxContext> ctx, std::uint64_t id, std::string peer)
    : ctx_(std::move(ctx)), id_(id), peer_(std::move(peer)) {}

UcxConnection::~UcxConnection() = default;

void UcxConnection::establish_on_loop(const RouteToken& remote_token,
                                      const std::vector<std::byte>& worker_address,
                                      bool same_host) {
  remote_token_ = remote_token;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(worker_address.data());
  // See context.h: PEER across hosts only, so shared-memory lanes survive on one host.
  params.err_mode = same_host ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &UcxConnection::on_ep_error;
  error_arg_ = std::make_shared<std::weak_ptr<UcxConnection>>(weak_from_this());
  params.err_handler.arg = error_arg_.get();
  PSRT_UCS_CHECK(ucp_ep_create(ctx_->worker(), &params, &ep_));
  count_endpoint_created();
  PSRT_LOG_DEBUG("ucx: connection {} to {} established ({} host, error mode {})", id_, peer_,
                 same_host ? "same" : "remote", same_host ? "none" : "peer");
}

void UcxConnection::watch_liveness_on_loop(Fd control) {
  control_ = std::move(control);
  std::weak_ptr<UcxConnection> weak = weak_from_this();
  ctx_->loop().add_fd_on_loop(control_.get(), EPOLLIN | EPOLLRDHUP, [weak](std::uint32_t ev) {
    if (auto self = weak.lock()) self->on_control_on_loop(ev);
  });
}

void UcxConnection::on_control_on_loop(std::uint32_t /*events*/) {
  char byte;
  ssize_t n = ::recv(control_.get(), &byte, 1, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n > 0) {
    PSRT_LOG_WARN_LIMITED(
        "ucx: closing connection {} with {}: unexpected bytes on the liveness socket", id_, peer_);
    return close_on_loop(Status(ErrorCode::kProtocol,
                                "peer " + peer_ + " sent unexpected bytes on the liveness socket"),
                         false);
  }
  std::string cause = n == 0 ? std::string("closed the connection (process exited or closed it)")
                             : "is unreachable: " + std::string(std::strerror(errno));
  close_on_loop(Status(ErrorCode::kPeerFailed, "peer " + peer_ + " " + cause), true);
}

void UcxConnection::on_ep_error(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto self = static_cast<std::weak_ptr<UcxConnection>*>(arg)->lock();
  if (!self || !self->is_open()) return;
  PSRT_LOG_WARN("ucx: endpoint to {} failed: {}", self->peer_, ucs_status_string(status));
  self->close_on_loop(Status(ErrorCode::kPeerFailed, "endpoint to " + self->peer_ +
                                                         " failed: " + ucs_status_string(status)),
                      true);
}

void UcxConnection::send(std::span<const std::byte> header, std::span<const ConstBuffer> payload,
                         SendDone done) {
  auto op = acquire_op(ctx_->loop().in_loop());
  op->done = std::move(done);
  auto fail = [&](ErrorCode code, std::string why) {
    ctx_->loop().complete(std::move(op->done), Status(code, std::move(why)));
  };
  if (header.size() > kMaxHeaderBytes) {
    return fail(ErrorCode::kInvalidArgument, "message header of " + std::to_string(header.size()) +
                                                 " bytes exceeds the " +
                                                 std::to_string(kMaxHeaderBytes) + "-byte limit");
  }
  std::size_t total = 0;
  for (const ConstBuffer& b : payload) {
    if (b.size == 0) continue;
    if (!ctx_->supports(b.memory)) {
      return fail(ErrorCode::kUnsupported,
                  "this UCX build cannot send from CUDA memory (ucp_context_query reports no "
                  "CUDA support); use a CUDA-enabled UCX or stage through host memory");
    }
    if (!op->iov.empty() && b.memory != op->memory) {
      return fail(ErrorCode::kInvalidArgument, "one message cannot mix host and CUDA buffers");
    }
    op->memory = b.memory;
    op->iov.push_back(ucp_dt_iov_t{const_cast<void*>(b.data), b.size});
    total += b.size;
  }
  if (total > ctx_->options().max_payload_bytes) {
    return fail(ErrorCode::kInvalidArgument,
                "payload of " + std::to_string(total) + " bytes exceeds max_payload_bytes (" +
                    std::to_string(ctx_->options().max_payload_bytes) + ")");
  }
  op->header_len = kAmRouteBytes + header.size();
  std::memcpy(op->header.data() + kAmRouteBytes, header.data(), header.size());
  // On the loop a send goes out at once, unless sends from other threads still wait in the
  // loop's queue: it queues behind them, so a connection's messages leave in the order sent.
  if (ctx_->loop().in_loop() && posted_sends_.load(std::memory_order_acquire) == 0) {
    issue_on_loop(std::move(op));
  } else {
    // Hand-off to the progress thread; the loop's wake-up is ucp_worker_signal.
    op->conn = shared_from_this();
    posted_sends_.fetch_add(1, std::memory_order_acq_rel);
    ctx_->loop().post([op = op.release()] {
      auto conn = op->conn;
      conn->posted_sends_.fetch_sub(1, std::memory_order_acq_rel);
      conn->issue_on_loop(std::unique_ptr<SendOp>(op));
    });
  }
}

void UcxConnection::issue_on_loop(std::unique_ptr<SendOp> op) {
  if (!is_open() || ep_ == nullptr) {
    ctx_->loop().complete(std::move(op->done), Status(ErrorCode::kConnectionClosed,
                                                      "connection to " + peer_ + " is closed"));
    return recycle_op(std::move(op));
  }
  std::memcpy(op->header.data(), remote_token_.data(), kRouteTokenBytes);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_MEMORY_TYPE | UCP_OP_ATTR_FIELD_DATATYPE;
  param.cb.send = &UcxConnection::on_send_done;
  param.user_data = op.get();
  param.memory_type = op->memory == MemoryType::kCuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
  const void* buffer = nullptr;
  std::size_t count = 0;
  if (op->iov.size() == 1) {
    buffer = op->iov[0].buffer;
    count = op->iov[0].length;
    param.datatype = ucp_dt_make_contig(1);
    // Small payloads go eager through UCX's own buffers: a registration would not be used.
    if (count >= kMemhMinBytes) {
      if (ucp_mem_h memh = ctx_->find_memh(buffer, count)) {
        param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        param.memh = memh;
      }
    }
  } else if (op->iov.size() > 1) {
    buffer = op->iov.data();
    count = op->iov.size();
    param.datatype = ucp_dt_make_iov();
  } else {
    param.datatype = ucp_dt_make_contig(1);
  }
  ucs_status_ptr_t req = ucp_am_send_nbx(ep_, UcxContext::kAmId, op->header.data(), op->header_len,
                                         buffer, count, &param);
  if (req == nullptr) {
    ctx_->loop().complete(std::move(op->done), Status());
    return recycle_op(std::move(op));
  }
  if (UCS_PTR_IS_ERR(req)) {
    ctx_->loop().complete(std::move(op->done), status_from_ucs(UCS_PTR_STATUS(req), peer_, "send"));
    return recycle_op(std::move(op));
  }
  if (!op->conn) op->conn = shared_from_this();  // alive until UCX completes the send
  sends_.insert(op.release());                   // owned by UCX until on_send_done
}

void UcxConnection::on_send_done(void* request, ucs_status_t status, void* user_data) {
  ucp_request_free(request);
  if (static_cast<SendOp*>(user_data)->orphaned) return;
  std::unique_ptr<SendOp> op(static_cast<SendOp*>(user_data));
  UcxConnection& conn = *op->conn;
  conn.sends_.erase(op.get());
  conn.ctx_->loop().complete(std::move(op->done), status_from_ucs(status, conn.peer_, "send"));
  recycle_op(std::move(op));
}

void UcxConnection::receive_on_loop(std::span<const std::byte> header, void* data,
                                    std::size_t length, bool rendezvous) {
  Receiver& rx = ctx_->receiver();
  if (length == 0) return deliver_or_queue_on_loop(header, Placement{});
  Placement placement;
  try {
    placement = rx.place(*this, header, length);
  } catch (const Error& e) {
    PSRT_LOG_WARN_LIMITED("ucx: closing connection {} with {}: receiver refused the message: {}",
                          id_, peer_, e.what());
    return close_on_loop(Status(e.code(), std::string("receiver refused the message: ") + e.what()),
                         false);
  } catch (...) {
    // Never let it unwind into UCX's callback (the process would end): std::bad_alloc under a
    // memory limit ends this connection, not the process.
    Status why = current_exception_status("receiver failed on the message");
    PSRT_LOG_WARN("ucx: closing connection {} with {}: {}", id_, peer_, why.message());
    return close_on_loop(why, false);
  }
  if (!is_open()) return;
  std::string bad;
  if (placement.dest.size != length || placement.dest.data == nullptr) {
    bad = "receiver placed " + std::to_string(placement.dest.size) + " bytes for a payload of " +
          std::to_string(length);
  } else if (!ctx_->supports(placement.dest.memory)) {
    bad = "receiver placed the payload in CUDA memory, which this UCX build cannot write";
  }
  if (!bad.empty()) {
    PSRT_LOG_WARN("ucx: closing connection {} with {}: {}", id_, peer_, bad);
    return close_on_loop(Status(ErrorCode::kInvalidArgument, bad), false);
  }
  if (!rendezvous && placement.dest.memory == MemoryType::kHost) {
    // Eager: UCX already holds the bytes in its receive buffer; one copy into place.
    std::memcpy(placement.dest.data, data, length);
    return deliver_or_queue_on_loop(header, placement);
  }
  auto op = std::make_unique<RecvOp>();
  op->conn = shared_from_this();
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_MEMORY_TYPE | UCP_OP_ATTR_FIELD_DATATYPE;
  param.cb.recv_am = [](void* request, ucs_status_t status, std::size_t, void* user_data) {
    auto* op = static_cast<RecvOp*>(user_data);
    ucp_request_free(request);
    if (op->conn) op->conn->finish_recv_on_loop(op, status);
  };
  param.user_data = op.get();
  param.datatype = ucp_dt_make_contig(1);
  param.memory_type =
      placement.dest.memory == MemoryType::kCuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
  if (ucp_mem_h memh = ctx_->find_memh(placement.dest.data, length)) {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    param.memh = memh;
  }
  ucs_status_ptr_t req =
      ucp_am_recv_data_nbx(ctx_->worker(), data, placement.dest.data, length, &param);
  if (req == nullptr) return deliver_or_queue_on_loop(header, placement);
  if (UCS_PTR_IS_ERR(req)) {
    Status st = status_from_ucs(UCS_PTR_STATUS(req), peer_, "receive");
    PSRT_LOG_WARN("ucx: closing connection {} with {}: {}", id_, peer_, st.message());
    return close_on_loop(st, false);
  }
  op->arrival = queue_on_loop(header, placement, /*landed=*/false);
  recvs_.insert(op.release());
}

std::uint64_t UcxConnection::queue_on_loop(std::span<const std::byte> header,
                                           const Placement& placement, bool landed) {
  const std::uint64_t arrival = next_arrival_++;
  auto& u = undelivered_[arrival];
  u.header_len = header.size();
  std::memcpy(u.header.data(), header.data(), header.size());
  u.placement = placement;
  u.landed = landed;
  return arrival;
}

void UcxConnection::deliver_or_queue_on_loop(std::span<const std::byte> header,
                                             const Placement& placement) {
  if (undelivered_.empty()) return deliver_on_loop(header, placement);
  queue_on_loop(header, placement, /*landed=*/true);
}

void UcxConnection::deliver_in_order_on_loop() {
  while (!undelivered_.empty() && undelivered_.begin()->second.landed && is_open()) {
    Undelivered u = undelivered_.begin()->second;
    undelivered_.erase(undelivered_.begin());
    deliver_on_loop(std::span<const std::byte>(u.header.data(), u.header_len), u.placement);
  }
}

void UcxConnection::deliver_on_loop(std::span<const std::byte> header, const Placement& placement) {
  try {
    ctx_->receiver().on_message(*this, header, placement);
  } catch (...) {
    Status why = current_exception_status("receiver failed on the message");
    PSRT_LOG_WARN("ucx: closing connection {} with {}: {}", id_, peer_, why.message());
    close_on_loop(why, false);
  }
}

void UcxConnection::finish_recv_on_loop(RecvOp* raw, ucs_status_t status) {
  std::unique_ptr<RecvOp> op(raw);
  recvs_.erase(raw);
  if (!is_open()) {
    if (recvs_.empty()) finish_close_on_loop();
    return;
  }
  if (status != UCS_OK) {
    Status st = status_from_ucs(status, peer_, "receive");
    PSRT_LOG_WARN("ucx: closing connection {} with {}: {}", id_, peer_, st.message());
    return close_on_loop(st, true);
  }
  undelivered_[op->arrival].landed = true;
  deliver_in_order_on_loop();
}

void UcxConnection::close() {
  auto self = shared_from_this();
  if (ctx_->loop().in_loop()) {
    close_on_loop(Status(ErrorCode::kConnectionClosed, "closed locally"), false);
  } else {
    ctx_->loop().post([self] {
      self->close_on_loop(Status(ErrorCode::kConnectionClosed, "closed locally"), false);
    });
  }
}

void UcxConnection::close_on_loop(const Status& why, bool peer_dead) {
  if (!open_.exchange(false, std::memory_order_acq_rel)) return;
  close_status_ = why;
  if (control_) {
    ctx_->loop().remove_fd_on_loop(control_.get());
    control_.reset();  // the peer sees EOF on its liveness socket and closes its side
  }
  if (ep_ != nullptr) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    // FORCE cancels what is in flight at once (a dead peer would never answer a flush);
    // a live peer gets a flush so that sends already issued are delivered.
    param.flags = peer_dead ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t req = ucp_ep_close_nbx(ep_, &param);
    if (req != nullptr && !UCS_PTR_IS_ERR(req)) ctx_->track_close_request_on_loop(req);
    ep_ = nullptr;
  }
  ctx_->retire_on_loop(std::move(error_arg_));
  Status send_status = why.code() == ErrorCode::kConnectionClosed
                           ? Status(ErrorCode::kConnectionClosed,
                                    "connection to " + peer_ + " closed before the send finished")
                           : why;
  if (peer_dead) orphan_sends_on_loop(send_status);
  if (!sends_.empty() || !recvs_.empty()) {
    // A live peer: sends flush and receives land, but no longer than the peer timeout.
    std::weak_ptr<UcxConnection> weak = weak_from_this();
    ctx_->loop().add_timer_on_loop(EventLoop::Clock::now() + ctx_->options().peer_timeout,
                                   [weak, send_status] {
                                     if (auto self = weak.lock()) {
                                       self->orphan_sends_on_loop(send_status);
                                       self->finish_close_on_loop();
                                     }
                                   });
  }
  // Otherwise the last receive to land reports the close (finish_recv_on_loop).
  if (peer_dead || recvs_.empty()) finish_close_on_loop();
}

void UcxConnection::orphan_sends_on_loop(const Status& why) {
  for (SendOp* op : sends_) {
    op->orphaned = true;
    ctx_->loop().complete(std::move(op->done), why);
    op->conn.reset();
    ctx_->retire_on_loop(std::shared_ptr<SendOp>(op));
  }
  sends_.clear();
}

void UcxConnection::finish_close_on_loop() {
  if (close_reported_) return;
  close_reported_ = true;
  auto self = shared_from_this();  // alive through the callbacks below
  // Receives still in flight (dead peer) no longer report.
  for (RecvOp* op : recvs_) {
    op->conn.reset();
    ctx_->retire_on_loop(std::shared_ptr<RecvOp>(op));
  }
  recvs_.clear();
  undelivered_.clear();
  ctx_->receiver().on_closed(*this, close_status_);
  ctx_->forget_on_loop(*this);
}

}  // namespace psrt::transport::ucx
