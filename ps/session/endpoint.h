// Authenticated peers on top of a transport: every connection first runs the HELLO / CHALLENGE /
// AUTH / WELCOME handshake (ps/session/auth.h); only then are its messages decoded for the role's
// Handler. Each message is decoded and checked against the permissions once: at place() when it
// carries a payload (the result waits under the placement's cookie until on_message()), at
// on_message() when it does not. The endpoint numbers every placement, the handler's included:
// one cookie space from place() to on_message(). A bad message (malformed header, wrong version,
// wrong secret, a message before auth) gets an ERROR reply naming the cause, then the connection is
// closed; other peers carry on. Once authenticated, a peer may send only what
// ps/session/permissions.h allows its role; a worker connecting to a server also proves the
// membership credential the scheduler gave its rank (Handler::credential_for,
// Endpoint::set_credential).
//
// Threads: Handler callbacks run on the transport's progress thread and must not block.
// Peer::send and Peer::close may be called from any thread.
//
// Admission (see Admission): an accepted connection must authenticate within a deadline; the
// connections not yet authenticated are capped per remote host and in total; before
// authentication no message may carry more than kMaxPreAuthPayloadBytes (a larger one closes the
// connection at once, nothing is allocated for it); after any refusal (a wrong proof included)
// the connection closes and nothing further on it is processed.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "ps/session/auth.h"
#include "ps/session/protocol.h"
#include "transport/transport.h"

namespace psrt::ps {
inline namespace session {

class Endpoint;

// The largest payload an unauthenticated peer may send (HELLO, AUTH: 32 bytes) or be sent (an
// ERROR's text is cut to this before authentication).
inline constexpr std::size_t kMaxPreAuthPayloadBytes = 1024;
// A refused payload after authentication is drained through a buffer of at most this size so
// that the ERROR reply arrives in order; a larger one closes the connection at once.
inline constexpr std::size_t kMaxDrainBytes = std::size_t{64} << 10;

// Limits on connections that have not authenticated (PSRT_HANDSHAKE_TIMEOUT_MS,
// PSRT_MAX_UNAUTHENTICATED, PSRT_MAX_UNAUTHENTICATED_PER_HOST in the env contract).
struct Admission {
  // An accepted connection that has not completed the handshake by then is closed.
  std::chrono::milliseconds handshake_timeout{5'000};
  // Accepted connections not yet authenticated, in total and per remote host (IP address);
  // a connection beyond either is closed at once.
  std::size_t max_pending = 512;
  std::size_t max_pending_per_host = 128;
  // Authenticated accepted connections of one role and rank at once (a job needs one, and one
  // more while a closed one lingers): a holder of the secret and a rank's credential cannot pin
  // memory by opening many, each with a half-sent message.
  std::size_t max_per_rank = 4;
  // Authenticated accepted connections with no rank yet (a worker before its REGISTER is
  // answered), in total and per remote host: a holder of the secret cannot pin memory with many
  // such connections, each with a half-sent REGISTER. A job registers its workers at once up to
  // these; the next connection is refused naming the limit.
  std::size_t max_unranked = 1024;
  std::size_t max_unranked_per_host = 128;
  // A message whose header arrived must arrive whole within this (issue 30): a peer that leaves a
  // message half-sent (a 1 MiB REGISTER, a 4 MiB PUSH, each pinning its payload's memory) has its
  // connection closed then, and what was placed for the message is released.
  std::chrono::milliseconds message_deadline{30'000};
};

class Peer : public std::enable_shared_from_this<Peer> {
 public:
  explicit Peer(std::shared_ptr<transport::Connection> conn) : conn_(std::move(conn)) {}

  // Sends a header and an optional payload read in place until `done` runs.
  void send(const Header& h, std::span<const ConstBuffer> payload = {},
            transport::SendDone done = {});
  // Sends a header with a byte payload that the send owns.
  void send_bytes(Header h, std::vector<std::byte> bytes, transport::SendDone done = {});
  // Replies ERROR(code, message) to `request` (request_id 0 for none). With `then_close` the
  // connection is closed once the reply is out.
  void send_error(std::uint64_t request_id, ErrorCode code, const std::string& message,
                  bool then_close);
  void close() { conn_->close(); }

  Role role() const { return role_; }
  std::uint32_t rank() const { return rank_; }
  void set_rank(std::uint32_t r);
  // "worker 3 (127.0.0.1:41234)" for messages.
  std::string name() const;
  const std::string& address() const { return conn_->peer(); }
  bool authenticated() const { return state_ == State::kReady; }
  // The membership credential this (accepted) peer proved in its handshake, if it had to.
  const std::optional<Credential>& credential() const { return credential_; }
  std::uint64_t id() const { return conn_->id(); }
  std::chrono::steady_clock::time_point last_seen() const {
    return std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(last_seen_.load(std::memory_order_relaxed)));
  }

  // The role's own per-peer state (set once the peer is ready).
  std::shared_ptr<void> user;

 private:
  friend class Endpoint;
  enum class State { kAwaitHello, kAwaitAuth, kClientAwaitChallenge, kClientAwaitWelcome, kReady };

  std::shared_ptr<transport::Connection> conn_;
  Endpoint* endpoint_ = nullptr;
  State state_ = State::kAwaitHello;
  Role role_ = Role::kWorker;
  std::atomic<std::uint32_t> rank_{kAnyRank};
  std::optional<Credential> credential_;  // set before the peer is ready, then constant
  std::uint32_t hello_rank_ = kAnyRank;   // client side: the rank this end claimed in HELLO
  bool accepted_ = false;                 // an accepted (not dialled) peer that authenticated
  Nonce my_nonce_{};
  Nonce their_nonce_{};
  std::atomic<std::int64_t> last_seen_{0};
  std::function<void(const Status&)> on_handshake_;  // client side
  // A message between place() and on_message(): what place() found, so that on_message()
  // decodes and checks nothing again.
  struct Arrival {
    Header header;           // decoded at place()
    bool permitted = false;  // checked against ps/session/permissions.h at place()
    // A byte payload, received by the endpoint itself (data payloads go where the handler said).
    std::unique_ptr<std::vector<std::byte>> bytes;
    // Refused at place(): the payload is drained into `bytes` (never read) so that the ERROR
    // reply goes out in order and the connection closes after it.
    std::optional<Status> refused;
  };
  // Messages being received, by placement cookie (guarded by the endpoint's mu_).
  std::unordered_map<std::uint64_t, Arrival> arrivals_;
  // Admission (guarded by the endpoint's mu_): an accepted connection not yet authenticated,
  // counted against the caps under host_.
  bool pending_ = false;
  std::string host_;
  // Messages whose payload is still arriving: placement cookie → when its header came (guarded
  // by the endpoint's mu_; Admission::message_deadline).
  std::multimap<std::uint64_t, std::chrono::steady_clock::time_point> receiving_;
  // Set once the connection is being closed after a refusal: nothing more on it is processed.
  std::atomic<bool> closing_{false};
};

class Handler {
 public:
  virtual ~Handler() = default;
  // An accepted peer finished authentication.
  virtual void on_peer_ready(Peer& /*peer*/) {}
  // An accepting endpoint asks this once a peer proved the job secret: the membership credential
  // a peer of `role` claiming `rank` must also prove, or std::nullopt when it needs none.
  // Throwing psrt::Error refuses the peer with that message (e.g. a rank that is not a member).
  virtual std::optional<Credential> credential_for(Role /*role*/, std::uint32_t /*rank*/) {
    return std::nullopt;
  }
  // Where the payload of a data message (INIT, PUSH, PUSH_PULL, PULL_REPLY, REPLICATE) goes:
  // payload_size bytes. `cookie` is the endpoint's number for this message, unique on this
  // endpoint: on_message() gets it back as placement.cookie, so a handler keeps what it needs
  // between the two under it. Throwing psrt::Error refuses the message: the peer gets an ERROR
  // with that message and is disconnected.
  virtual MutableBuffer place(Peer& peer, const Header& h, std::size_t payload_size,
                              std::uint64_t cookie) = 0;
  // A complete authenticated message. Byte payloads are in `payload`; data payloads are where
  // place() put them (`placement`, with place()'s cookie). Throwing psrt::Error disconnects the
  // peer like place().
  virtual void on_message(Peer& peer, const Header& h, std::span<const std::byte> payload,
                          const transport::Placement& placement) = 0;
  virtual void on_peer_closed(Peer& /*peer*/, const Status& /*why*/) {}
};

class Endpoint final : public transport::Receiver {
 public:
  Endpoint(std::string secret, Role self, Limits limits, Admission admission = {});
  ~Endpoint() override;

  // Must be set before the transport delivers anything and outlive the transport.
  void set_handler(Handler* handler) { handler_ = handler; }
  // The rank this process proves as an acceptor (a server's rank; 0 for the scheduler). Set
  // before listening.
  void set_self_rank(std::uint32_t rank) { self_rank_ = rank; }
  // The membership credential from the scheduler's REGISTER reply: proven in the handshake with
  // every server this endpoint connects to from now on.
  void set_credential(const Credential& c);

  // Connects to the acceptor (`remote`, `remote_rank`: who it is, for messages) and
  // authenticates as (self role, my_rank). Blocking, bounded by `timeout`; throws psrt::Error
  // naming the remote and the cause.
  std::shared_ptr<Peer> connect(transport::Transport& t, const std::string& address,
                                std::uint32_t my_rank, Role remote, std::uint32_t remote_rank,
                                std::chrono::milliseconds timeout);

  // transport::Receiver
  void on_connected(const std::shared_ptr<transport::Connection>& conn) override;
  transport::Placement place(transport::Connection& conn, std::span<const std::byte> header,
                             std::size_t payload_size) override;
  void on_message(transport::Connection& conn, std::span<const std::byte> header,
                  const transport::Placement& placement) override;
  void on_closed(transport::Connection& conn, const Status& why) override;

 private:
  // place() and on_message() proper; the public ones turn any exception into a refusal.
  transport::Placement place_checked(transport::Connection& conn, std::span<const std::byte> header,
                                     std::size_t payload_size);
  void deliver(transport::Connection& conn, std::span<const std::byte> header,
               const transport::Placement& placement);
  // What place() found for the message now delivered (by its cookie), or, for a message without
  // a payload, its header decoded now; std::nullopt after a refusal sent here.
  std::optional<Peer::Arrival> arrival(Peer& peer, std::span<const std::byte> header,
                                       const transport::Placement& placement);
  // Keeps `a` under `cookie` until on_message(), its payload going to `dest`.
  transport::Placement hold(Peer& peer, std::uint64_t cookie, Peer::Arrival a, MutableBuffer dest);
  // An exception other than psrt::Error escaped a handler: ERROR(why) to the peer, then close.
  void refuse_after_exception(transport::Connection& conn, std::span<const std::byte> header,
                              std::size_t size, const Status& why) noexcept;
  std::shared_ptr<Peer> find(std::uint64_t id);
  std::shared_ptr<Peer> find_or_add(const std::shared_ptr<transport::Connection>& conn);
  void handshake(Peer& peer, const Header& h, std::span<const std::byte> payload);
  // The handshake's steps, by the peer's state: an acceptor takes HELLO then AUTH, a client
  // CHALLENGE then WELCOME.
  void on_hello(Peer& peer, const Header& h, std::span<const std::byte> payload);
  void on_auth(Peer& peer, const Header& h, std::span<const std::byte> payload);
  // Why `peer`, authenticated with no rank, would exceed Admission::max_unranked(_per_host); empty
  // when it does not.
  std::string unranked_over_cap(const Peer& peer);
  void on_challenge(Peer& peer, const Header& h, std::span<const std::byte> payload);
  void on_welcome(Peer& peer, const Header& h, std::span<const std::byte> payload);
  void reject(Peer& peer, std::uint64_t request_id, const Status& why);
  // The refusal of a message ps/session/permissions.h does not allow from this peer's role.
  Status not_permitted(const Peer& peer, MsgType type) const;
  // place() for a refused message: a discard buffer, the refusal sent once it arrived. Payloads
  // above kMaxDiscardBytes are not drained: the reply goes out at once and the connection
  // closes without waiting.
  transport::Placement refuse_at_place(Peer& peer, Peer::Arrival a, const Status& why,
                                       std::size_t size);

  // Closes `conn` after kErrorLinger: an ERROR reply's send completing locally does not mean it
  // arrived (UCX reports a closed endpoint to the peer faster than its last active message).
  void close_later(std::weak_ptr<transport::Connection> conn);
  // Admission bookkeeping (mu_ held).
  void admit_locked(Peer& peer);
  void release_pending_locked(Peer& peer);
  // Closes accepted connections whose handshake deadline passed (timer thread).
  void expire_handshakes(std::chrono::steady_clock::time_point now);
  // Admission::message_deadline: a message placed starts its clock; its arrival stops it; the
  // timer thread closes the connections of messages past it.
  void note_receiving(std::uint64_t conn_id, std::uint64_t cookie);
  void note_received(Peer& peer, std::uint64_t cookie);
  void expire_messages(std::chrono::steady_clock::time_point now);
  friend class Peer;

  const std::string secret_;
  const Role self_;
  std::uint32_t self_rank_ = 0;
  std::optional<Credential> credential_;  // guarded by mu_
  const Limits limits_;
  const Admission admission_;
  Handler* handler_ = nullptr;
  std::mutex mu_;
  std::unordered_map<std::uint64_t, std::shared_ptr<Peer>> peers_;
  // Placement cookies: every message with a payload, the handler's data messages included.
  std::atomic<std::uint64_t> next_cookie_{1};
  // Where payloads of a peer refused earlier land (never read): closing its connection at once
  // could overtake the ERROR still on its way (UCX), so they are drained here until the linger.
  std::array<std::byte, kMaxDrainBytes> drain_{};
  // Admission, guarded by mu_: addresses connect() is dialling (their on_connected is ours, not
  // an accepted peer), unauthenticated accepted connections by host, and their deadlines.
  std::unordered_map<std::string, int> dialling_;
  std::unordered_map<std::string, std::size_t> pending_by_host_;
  std::size_t pending_total_ = 0;
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::uint64_t>> deadlines_;
  // Messages' deadlines, in time order: (deadline, connection id, placement cookie).
  std::deque<std::tuple<std::chrono::steady_clock::time_point, std::uint64_t, std::uint64_t>>
      message_deadlines_;

  std::mutex linger_mu_;
  std::condition_variable linger_cv_;
  std::vector<
      std::pair<std::chrono::steady_clock::time_point, std::weak_ptr<transport::Connection>>>
      lingering_;
  bool stopping_ = false;
  std::thread linger_thread_;
};

}  // namespace session
}  // namespace psrt::ps
