// One UCX endpoint to a peer plus its liveness socket. Sends from other threads are handed to
// the progress loop; on the loop they go straight to ucp_am_send_nbx from the caller's buffers.
#pragma once

#include <ucp/api/ucp.h>

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "transport/socket.h"
#include "transport/transport.h"
#include "transport/ucx/hello.h"

namespace psrt::transport::ucx {

class UcxContext;

// Active-message header on the wire: the receiver's route token for the connection (16 bytes,
// from its bootstrap hello), then the caller's header. The receiver drops a message whose token
// is not one of its connections' (context.h).
inline constexpr std::size_t kAmRouteBytes = kRouteTokenBytes;

struct RecvOp;
struct SendOp;

class UcxConnection final : public Connection, public std::enable_shared_from_this<UcxConnection> {
 public:
  UcxConnection(std::shared_ptr<UcxContext> ctx, std::uint64_t id, std::string peer);
  ~UcxConnection() override;

  void send(std::span<const std::byte> header, std::span<const ConstBuffer> payload,
            SendDone done) override;
  void close() override;
  const std::string& peer() const override { return peer_; }
  std::uint64_t id() const override { return id_; }
  bool is_open() const override { return open_.load(std::memory_order_acquire); }

  // The token the peer must put in every active message for this connection; sent to the peer
  // in our bootstrap hello. The context draws a new one (before the hello) if its key collides.
  const RouteToken& route_token() const { return token_; }
  std::uint64_t route_key() const noexcept { return ucx::route_key(token_.data()); }
  void redraw_route_token_on_loop() { token_ = random_route_token(); }
  // Whether `bytes` (kRouteTokenBytes) are this connection's token, in constant time.
  bool carries_route_token(const std::byte* bytes) const noexcept {
    return same_route_token(bytes, token_);
  }

  // Creates the endpoint to the peer's worker; `remote_token` goes into every message sent on
  // it. Throws.
  void establish_on_loop(const RouteToken& remote_token,
                         const std::vector<std::byte>& worker_address, bool same_host);
  // From now on EOF or an error on `control` (the handshake socket) means the peer is gone.
  void watch_liveness_on_loop(Fd control);
  // Closes the endpoint and the liveness socket. on_closed() runs once no rendezvous receive
  // can write into a placement any more: at once when the peer is dead, else once the receives
  // in flight have landed (bounded by Options::peer_timeout).
  void close_on_loop(const Status& why, bool peer_dead);
  // Sends UCX has not completed, and sends posted to the loop and not issued yet.
  std::size_t sends_in_flight_on_loop() const {
    return sends_.size() + posted_sends_.load(std::memory_order_relaxed);
  }

  // Receive bookkeeping (the context's AM handler runs these).
  void receive_on_loop(std::span<const std::byte> header, void* data, std::size_t length,
                       bool rendezvous);
  void finish_recv_on_loop(RecvOp* op, ucs_status_t status);

 private:
  void issue_on_loop(std::unique_ptr<SendOp> op);
  void on_control_on_loop(std::uint32_t events);
  static void on_send_done(void* request, ucs_status_t status, void* user_data);
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  void finish_close_on_loop();
  // Hands `header` to on_message now when nothing that arrived before it is still landing,
  // else queues it (complete) behind the rendezvous receive that is.
  void deliver_or_queue_on_loop(std::span<const std::byte> header, const Placement& placement);
  // Appends a message to undelivered_ (its payload landed, or a rendezvous receive still
  // fetching it); returns its arrival number.
  std::uint64_t queue_on_loop(std::span<const std::byte> header, const Placement& placement,
                              bool landed);
  // Delivers the complete messages at the front of undelivered_, in arrival order.
  void deliver_in_order_on_loop();
  // Hands one message to the receiver; an exception from it closes this connection.
  void deliver_on_loop(std::span<const std::byte> header, const Placement& placement);
  // Completes the sends UCX still holds with `why`; UCX 1.13 does not complete them itself when
  // an endpoint in error mode NONE is closed, however it is closed.
  void orphan_sends_on_loop(const Status& why);

  std::shared_ptr<UcxContext> ctx_;
  const std::uint64_t id_;
  RouteToken token_ = random_route_token();  // fixed once the hello went out
  const std::string peer_;
  std::atomic<bool> open_{true};
  std::atomic<std::uint32_t> posted_sends_{0};  // sends handed to the loop, not issued yet
  // Loop thread only:
  RouteToken remote_token_{};
  ucp_ep_h ep_ = nullptr;
  Fd control_;
  std::unordered_set<RecvOp*> recvs_;  // rendezvous receives in flight
  // Messages that arrived after a rendezvous receive still landing, keyed by arrival: the
  // transport contract delivers a connection's messages in the order they were sent, and an
  // eager message may arrive while an earlier rendezvous payload is still being fetched.
  struct Undelivered {
    std::array<std::byte, kMaxHeaderBytes> header{};
    std::size_t header_len = 0;
    Placement placement;
    bool landed = false;
  };
  std::map<std::uint64_t, Undelivered> undelivered_;
  std::uint64_t next_arrival_ = 0;
  std::unordered_set<SendOp*> sends_;  // sends UCX has not completed yet
  Status close_status_;
  bool close_reported_ = false;
  // The endpoint error callback's argument; handed to the context at close because UCX may
  // still call it while the endpoint is being closed.
  std::shared_ptr<std::weak_ptr<UcxConnection>> error_arg_;
};

}  // namespace psrt::transport::ucx
