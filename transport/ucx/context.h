// The UCX backend's shared state: one ucp context and one ucp worker, driven by one progress
// thread (the EventLoop), which busy-polls ucp_worker_progress and then sleeps on the worker's
// event fd (ucp_worker_arm). Other threads never touch the worker: they hand work to the loop,
// whose wake-up is ucp_worker_signal. Data and control both travel as active messages: eager for
// small payloads, rendezvous for large ones, received with ucp_am_recv_data_nbx straight into the
// buffer the receiver placed.
//
// Peers find each other through a small TCP handshake (hello.h) that exchanges worker addresses,
// each proven with the job secret (Options::bootstrap_secret) before an endpoint is created from
// it; that socket then stays open as the liveness channel.
//
// Which connection a message belongs to: a UCX worker receives the active messages of every
// endpoint on one handler, and nothing UCX hands the handler identifies the sender reliably.
// UCX 1.13's reply_ep (UCP_AM_SEND_FLAG_REPLY) does not: the receiver finds it by an endpoint id
// that the sender itself writes into UCX's AM header, and an endpoint created from a worker
// address is paired with ours only through UCX's per-peer connection sequence numbers, which
// drift apart as soon as one side creates an endpoint the other does not (a failed bootstrap),
// so it cannot be mapped to our connection reliably either. A connection id in our own header
// would be the sender's word too (it was, in hello version 1: ids were sequential, and any
// process that bootstrapped a connection could name another one). So each side draws a 128-bit
// random route token per connection (getrandom) and sends it in its bootstrap hello; the peer
// puts it in front of every active message, the receiver finds the connection by the token's
// first 8 bytes and compares all 16 in constant time, and drops anything else. A process that
// bootstraps its own connection learns only its own token, and guessing another is a 2^-128
// shot per message. The token is not a secret against someone who can read the bootstrap
// socket; that is what the PS handshake and the secure mode are for. The route is 8 bytes more
// per message than the old id; `psbench transport --transport ucx --mode lat --size 8` p50 was
// 0.125 µs before and after (median of 6 alternating runs), where an id + token route of 24
// bytes measured 0.130-0.135 µs.
//
// UCX 1.13 (Debian 12) quirks handled here on purpose:
//  - Error-handling mode PEER makes UCX drop its shared-memory lanes (sysv/posix/cma) between
//    two processes on one host, which would cost most of the bandwidth. So endpoints to a peer on
//    the same host (equal boot ids) use mode NONE and learn of the peer's death from the liveness
//    socket (EOF at once when the process dies); endpoints to other hosts use PEER, and keepalive
//    on the liveness socket bounds detection of a dead host.
//  - Both ends of an endpoint must use the same mode: each side decides from the two boot ids,
//    which both sides see, so they always agree.
//  - The AM header buffer must stay valid until the send completes: every send copies its header
//    into the SendOp that lives until UCX calls the completion callback.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "transport/context_base.h"
#include "transport/socket.h"
#include "transport/transport.h"
#include "transport/ucx/hello.h"
#include "transport/ucx/hello_admission.h"

namespace psrt::transport::ucx {

class UcxConnection;

// The shared state and lifecycle of a backend (options, receiver, loop, listeners, registration
// cache, shutdown sequence) are ContextBase's (transport/context_base.h).
class UcxContext : public ContextBase<UcxContext, ucp_mem_h>,
                   public std::enable_shared_from_this<UcxContext> {
 public:
  static constexpr unsigned kAmId = 0;

  UcxContext(std::shared_ptr<Receiver> receiver, Options options);
  ~UcxContext();

  void start();
  std::shared_ptr<Connection> connect(const std::string& address);
  bool supports(MemoryType type) const {
    return type == MemoryType::kHost || (type == MemoryType::kCuda && cuda_capable_);
  }
  void register_memory(MutableBuffer region);
  void unregister_memory(const void* base);

  // Used by UcxConnection.
  ucp_worker_h worker() const { return worker_; }
  ucp_mem_h find_memh(const void* data, std::size_t size) const;
  void forget_on_loop(const UcxConnection& conn);
  void track_close_request_on_loop(void* request);
  // Keeps `thing` alive until the worker is destroyed: for objects UCX may still point to
  // (endpoint error arguments, requests of a closed endpoint that UCX never completes).
  void retire_on_loop(std::shared_ptr<void> thing);
  const std::string& boot_id() const { return boot_id_; }

 private:
  friend class ContextBase<UcxContext, ucp_mem_h>;
  // The steps of ContextBase. An accepted socket is the bootstrap of a connection: it becomes
  // one once the peer's hello is read (read_hello_on_loop).
  void tune_accepted(int fd);
  void adopt_accepted_on_loop(Fd fd, std::string peer);
  // A rendezvous payload is read by the peer from the sender's memory (shared memory, CMA,
  // RDMA) until the peer acknowledges it; completing the send earlier would hand the buffer back
  // while the peer may still read it, and the peer would deliver what the caller wrote next.
  // So shutdown waits for the sends in flight, at most kShutdownSendWait (then logs how many).
  static constexpr std::chrono::milliseconds kShutdownSendWait{2000};
  void finish_sends_before_close();
  void close_all_on_loop();
  void after_loop_stopped();

  struct PendingHello {
    Fd fd;
    std::string peer;
    std::vector<std::byte> buf;
    std::size_t need = 0;    // total bytes expected so far (fixed part, then + address)
    Hello hello;             // decoded once the fixed part is in
    HelloNonce challenge{};  // the nonce of the CHALLENGE sent to it
    std::uint64_t timer = 0;
  };

  static ucs_status_t on_am(void* arg, const void* header, std::size_t header_length, void* data,
                            std::size_t length, const ucp_am_recv_param_t* param);
  ucs_status_t on_am_on_loop(const void* header, std::size_t header_length, void* data,
                             std::size_t length, const ucp_am_recv_param_t* param);
  void read_hello_on_loop(int fd);
  // Why the whole HELLO of `h` may not create an endpoint ("" when it may): unproven with a
  // secret, over the rate without one.
  std::string refuse_hello_on_loop(const PendingHello& h);
  void drop_hello_on_loop(int fd, const std::string& why);
  // The connector's side of the exchange on `fd`, up to the listener's checked HELLO.
  Hello exchange_hellos(int fd, const UcxConnection& conn,
                        std::chrono::steady_clock::time_point deadline);
  // Registers `conn` under its route key, redrawing its token first if the key is taken.
  void add_connection_on_loop(const std::shared_ptr<UcxConnection>& conn);
  std::vector<std::byte> worker_address() const;
  bool progress_close_requests();

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  bool cuda_capable_ = false;
  std::string boot_id_;  // local_host_id(): boot id + network namespace (base/host.h)
  std::vector<std::byte> address_;

  std::unordered_map<int, PendingHello> hellos_;  // loop only
  HelloAdmission admission_;                      // loop only
  // By route key (the first 8 bytes of the connection's route token). Loop only. An ordered map:
  // a hash map's bucket index of a random 64-bit key costs a 64-bit division per message.
  std::map<std::uint64_t, std::shared_ptr<UcxConnection>> connections_;
  std::vector<void*> close_requests_;           // loop only
  std::vector<std::shared_ptr<void>> retired_;  // loop only; freed after ucp_worker_destroy
  std::uint64_t forged_dropped_ = 0;  // loop only: messages with a known key, a wrong token
};

}  // namespace psrt::transport::ucx
