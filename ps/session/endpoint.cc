#include "ps/session/endpoint.h"

#include <fmt/core.h>

#include <future>

#include "base/exception_status.h"
#include "base/interfaces.h"
#include "base/log.h"
#include "ps/session/permissions.h"
#include "transport/socket.h"

namespace psrt::ps {
inline namespace session {
namespace {

std::int64_t now_ticks() {
  return std::chrono::steady_clock::now().time_since_epoch().count();
}

// Refusals after an exception (std::bad_alloc under a memory limit) come at the rate peers send:
// logged at a bounded rate, with a count of the lines suppressed.
log::RateLimit& exception_log_limit() {
  static log::RateLimit limit;
  return limit;
}

}  // namespace

Status Endpoint::not_permitted(const Peer& peer, MsgType type) const {
  return Status(ErrorCode::kProtocol,
                fmt::format("a {} does not accept {} from a {} (ps/session/permissions.h)",
                            to_string(self_), to_string(type), to_string(peer.role())));
}

Endpoint::Endpoint(std::string secret, Role self, Limits limits, Admission admission)
    : secret_(std::move(secret)), self_(self), limits_(limits), admission_(admission) {
  linger_thread_ = std::thread([this] {
    std::unique_lock lock(linger_mu_);
    while (!stopping_) {
      linger_cv_.wait_for(lock, std::chrono::milliseconds(20));
      const auto now = std::chrono::steady_clock::now();
      std::vector<std::shared_ptr<transport::Connection>> due;
      std::erase_if(lingering_, [&](auto& e) {
        if (e.first > now && !stopping_) return false;
        if (auto c = e.second.lock()) due.push_back(std::move(c));
        return true;
      });
      lock.unlock();
      for (auto& c : due) {
        try {
          c->close();
        } catch (...) {  // no memory to post the close: the transport's shutdown closes it
        }
      }
      expire_handshakes(now);
      expire_messages(now);
      lock.lock();
    }
  });
}

Endpoint::~Endpoint() {
  {
    std::lock_guard lock(linger_mu_);
    stopping_ = true;
  }
  linger_cv_.notify_all();
  linger_thread_.join();
}

void Endpoint::set_credential(const Credential& c) {
  std::lock_guard lock(mu_);
  credential_ = c;
}

void Endpoint::close_later(std::weak_ptr<transport::Connection> conn) {
  std::lock_guard lock(linger_mu_);
  lingering_.emplace_back(std::chrono::steady_clock::now() + std::chrono::milliseconds(200),
                          std::move(conn));
}

void Peer::send(const Header& h, std::span<const ConstBuffer> payload, transport::SendDone done) {
  auto bytes = encode(h);
  if (!done) done = [](const Status&) {};
  conn_->send(bytes, payload, std::move(done));
}

void Peer::send_bytes(Header h, std::vector<std::byte> bytes, transport::SendDone done) {
  h.dtype = WireType::kBytes;
  auto owned = std::make_shared<std::vector<std::byte>>(std::move(bytes));
  ConstBuffer b{owned->data(), owned->size()};
  send(h, {&b, 1}, [owned, done = std::move(done)](const Status& s) {
    if (done) done(s);
  });
}

void Peer::send_error(std::uint64_t request_id, ErrorCode code, const std::string& message,
                      bool then_close) {
  Header h;
  h.type = MsgType::kError;
  h.request_id = request_id;
  h.set_error_code(code);
  // Before authentication the peer accepts no more than kMaxPreAuthPayloadBytes.
  auto text = message.substr(0, authenticated() ? kMaxControlBytes : kMaxPreAuthPayloadBytes);
  if (then_close) closing_.store(true);
  auto b = as_bytes(text);
  std::weak_ptr<transport::Connection> weak = conn_;
  Endpoint* endpoint = endpoint_;
  send_bytes(h, {b.begin(), b.end()}, [weak, then_close, endpoint](const Status&) {
    if (!then_close) return;
    if (endpoint) return endpoint->close_later(weak);
    if (auto c = weak.lock()) c->close();
  });
}

void Peer::set_rank(std::uint32_t r) {
  rank_.store(r, std::memory_order_relaxed);
}

std::string Peer::name() const {
  auto r = rank_.load(std::memory_order_relaxed);
  // An accepted peer is what it proved only once authenticated; before, what it claims.
  if (state_ == State::kAwaitHello) return fmt::format("unauthenticated peer ({})", address());
  if (state_ == State::kAwaitAuth)
    return r == kAnyRank
               ? fmt::format("unauthenticated peer claiming {} ({})", to_string(role_), address())
               : fmt::format("unauthenticated peer claiming {} {} ({})", to_string(role_), r,
                             address());
  if (role_ == Role::kScheduler) return fmt::format("scheduler ({})", address());
  if (r == kAnyRank) return fmt::format("{} ({})", to_string(role_), address());
  return fmt::format("{} {} ({})", to_string(role_), r, address());
}

std::shared_ptr<Peer> Endpoint::find(std::uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = peers_.find(id);
  return it == peers_.end() ? nullptr : it->second;
}

std::shared_ptr<Peer> Endpoint::find_or_add(const std::shared_ptr<transport::Connection>& conn) {
  std::lock_guard lock(mu_);
  auto& p = peers_[conn->id()];
  if (!p) {
    p = std::make_shared<Peer>(conn);
    p->endpoint_ = this;
    p->last_seen_.store(now_ticks());
  }
  return p;
}

void Endpoint::on_connected(const std::shared_ptr<transport::Connection>& conn) {
  auto peer = find_or_add(conn);
  std::string refused;
  {
    std::lock_guard lock(mu_);
    if (dialling_.count(conn->peer())) return;  // the connection connect() is making
    const std::string host = transport::host_of(conn->peer());  // the per-host cap's unit
    auto& on_host = pending_by_host_[host];
    if (pending_total_ >= admission_.max_pending) {
      refused = fmt::format(
          "{} connections are already waiting to authenticate "
          "(PSRT_MAX_UNAUTHENTICATED)",
          pending_total_);
    } else if (on_host >= admission_.max_pending_per_host) {
      refused = fmt::format(
          "{} connections from {} are already waiting to authenticate "
          "(PSRT_MAX_UNAUTHENTICATED_PER_HOST)",
          on_host, host);
    } else {
      ++on_host;
      ++pending_total_;
      peer->pending_ = true;
      peer->host_ = host;
      deadlines_.emplace_back(std::chrono::steady_clock::now() + admission_.handshake_timeout,
                              conn->id());
    }
    if (on_host == 0) pending_by_host_.erase(host);
  }
  if (refused.empty()) return;
  PSRT_LOG_WARN_LIMITED("refusing a connection from {}: {}", conn->peer(), refused);
  peer->closing_.store(true);
  conn->close();
}

void Endpoint::release_pending_locked(Peer& peer) {
  if (!peer.pending_) return;
  peer.pending_ = false;
  --pending_total_;
  auto it = pending_by_host_.find(peer.host_);
  if (it != pending_by_host_.end() && --it->second == 0) pending_by_host_.erase(it);
}

void Endpoint::expire_handshakes(std::chrono::steady_clock::time_point now) {
  std::vector<std::shared_ptr<Peer>> late;
  {
    std::lock_guard lock(mu_);
    while (!deadlines_.empty() && deadlines_.front().first <= now) {
      auto it = peers_.find(deadlines_.front().second);
      deadlines_.pop_front();
      if (it != peers_.end() && it->second->pending_) late.push_back(it->second);
    }
  }
  for (auto& peer : late) {
    PSRT_LOG_WARN_LIMITED(
        "closing the connection from {}: no authentication within {} ms "
        "(PSRT_HANDSHAKE_TIMEOUT_MS)",
        peer->address(), admission_.handshake_timeout.count());
    peer->closing_.store(true);
    peer->close();
  }
}

void Endpoint::note_receiving(std::uint64_t conn_id, std::uint64_t cookie) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mu_);
  auto it = peers_.find(conn_id);
  if (it == peers_.end() || it->second->closing_.load()) return;
  it->second->receiving_.emplace(cookie, now);
  message_deadlines_.emplace_back(now + admission_.message_deadline, conn_id, cookie);
}

void Endpoint::note_received(Peer& peer, std::uint64_t cookie) {
  std::lock_guard lock(mu_);
  if (auto it = peer.receiving_.find(cookie); it != peer.receiving_.end())
    peer.receiving_.erase(it);
}

void Endpoint::expire_messages(std::chrono::steady_clock::time_point now) {
  std::vector<std::shared_ptr<Peer>> late;
  {
    std::lock_guard lock(mu_);
    while (!message_deadlines_.empty() && std::get<0>(message_deadlines_.front()) <= now) {
      const auto [deadline, id, cookie] = message_deadlines_.front();
      message_deadlines_.pop_front();
      auto it = peers_.find(id);
      if (it == peers_.end()) continue;
      auto [first, last] = it->second->receiving_.equal_range(cookie);
      for (auto m = first; m != last; ++m)
        if (m->second + admission_.message_deadline == deadline) {
          late.push_back(it->second);
          break;
        }
    }
  }
  for (auto& peer : late) {
    PSRT_LOG_WARN_LIMITED(
        "closing the connection from {}: a message it began {} ms ago has not arrived whole "
        "(the deadline for a message once begun)",
        peer->name(), admission_.message_deadline.count());
    peer->closing_.store(true);
    peer->close();
  }
}

std::shared_ptr<Peer> Endpoint::connect(transport::Transport& t, const std::string& address,
                                        std::uint32_t my_rank, Role remote,
                                        std::uint32_t remote_rank,
                                        std::chrono::milliseconds timeout) {
  std::string what = remote == Role::kScheduler
                         ? std::string("scheduler")
                         : fmt::format("{} {}", to_string(remote), remote_rank);
  std::shared_ptr<transport::Connection> conn;
  {
    std::lock_guard lock(mu_);
    ++dialling_[address];
  }
  auto dialled = [&] {
    std::lock_guard lock(mu_);
    if (--dialling_[address] == 0) dialling_.erase(address);
  };
  try {
    conn = t.connect(address);
  } catch (const Error& e) {
    dialled();
    // Name the interface this host tried from: a wrong one (a route to nowhere, a firewall)
    // is the usual cause across hosts.
    std::string from;
    try {
      from = describe_route(transport::parse_address(address).host);
    } catch (const Error&) {
    }
    throw Error(e.code(), fmt::format("cannot reach {} at {} (from {}): {}", what, address,
                                      from.empty() ? "?" : from, e.what()));
  }
  dialled();
  auto peer = find_or_add(conn);
  auto done = std::make_shared<std::promise<Status>>();
  auto result = done->get_future();
  bool closed = false;
  peer->role_ = remote;
  peer->rank_ = remote_rank;
  peer->hello_rank_ = my_rank;
  {
    std::lock_guard lock(mu_);
    // The connection is live from t.connect() on: its progress thread may already have taken a
    // message (a secure peer's HELLO, refused) and closed it, running on_closed() before the
    // callback below existed, or find_or_add() above may have re-added a peer for the closed
    // connection. Waiting for that callback then sat out the whole timeout (the flaky
    // SecureJob.ProcessWithoutTheSecureModeCannotJoin under load); a closed connection fails now.
    if (!conn->is_open()) {
      if (auto it = peers_.find(conn->id()); it != peers_.end() && it->second == peer)
        peers_.erase(it);
      closed = true;
    } else {
      peer->state_ = Peer::State::kClientAwaitChallenge;
      peer->my_nonce_ = random_nonce();
      peer->on_handshake_ = [done](const Status& s) { done->set_value(s); };
    }
  }
  if (closed) {
    throw Error(ErrorCode::kConnectionClosed,
                fmt::format("{} at {} closed the connection before the authentication handshake "
                            "began (see the warning above for why)",
                            what, address));
  }
  Header h;
  h.type = MsgType::kHello;
  h.set_role(self_);
  h.set_rank(my_rank);
  peer->send_bytes(h, {peer->my_nonce_.begin(), peer->my_nonce_.end()});
  if (result.wait_for(timeout) != std::future_status::ready) {
    conn->close();
    throw Error(ErrorCode::kTimeout,
                fmt::format("{} at {} did not complete the authentication handshake within {} ms",
                            what, address, timeout.count()));
  }
  Status s = result.get();
  if (!s.ok()) {
    conn->close();
    throw Error(s.code(), fmt::format("{} at {}: {}", what, address, s.message()));
  }
  return peer;
}

void Endpoint::reject(Peer& peer, std::uint64_t request_id, const Status& why) {
  PSRT_LOG_WARN_LIMITED("refusing {}: {}", peer.name(), why.message());
  peer.send_error(request_id, why.code(), why.message(), /*then_close=*/true);
}

transport::Placement Endpoint::refuse_at_place(Peer& peer, Peer::Arrival a, const Status& why,
                                               std::size_t size) {
  if (size > kMaxDrainBytes) {
    reject(peer, a.header.request_id, why);
    throw Error(why.code(), why.message());
  }
  a.bytes = std::make_unique<std::vector<std::byte>>(size);
  a.refused = why;
  MutableBuffer dest{a.bytes->data(), size};
  return hold(peer, next_cookie_.fetch_add(1), std::move(a), dest);
}

transport::Placement Endpoint::hold(Peer& peer, std::uint64_t cookie, Peer::Arrival a,
                                    MutableBuffer dest) {
  std::lock_guard lock(mu_);
  peer.arrivals_.insert_or_assign(cookie, std::move(a));
  return {dest, cookie};
}

// The transport's entry points run on its progress thread, where an exception that escaped would
// end the process: anything but psrt::Error (std::bad_alloc under a memory limit, a handler's
// std::exception) becomes an ERROR to the peer naming it, and the connection closes.
transport::Placement Endpoint::place(transport::Connection& conn, std::span<const std::byte> header,
                                     std::size_t size) {
  try {
    transport::Placement p = place_checked(conn, header, size);
    if (size > 0) note_receiving(conn.id(), p.cookie);
    return p;
  } catch (const Error&) {
    throw;
  } catch (...) {
    Status why = current_exception_status("cannot take the message");
    refuse_after_exception(conn, header, size, why);
    throw Error(why.code(), why.message());
  }
}

void Endpoint::on_message(transport::Connection& conn, std::span<const std::byte> header,
                          const transport::Placement& placement) {
  try {
    deliver(conn, header, placement);
  } catch (...) {
    Status why = current_exception_status("cannot handle the message");
    refuse_after_exception(conn, header, placement.dest.size, why);
  }
}

void Endpoint::refuse_after_exception(transport::Connection& conn,
                                      std::span<const std::byte> header, std::size_t size,
                                      const Status& why) noexcept {
  try {
    auto peer = find(conn.id());
    if (!peer) {
      log::emit_limited(exception_log_limit(), log::Level::kError,
                        "closing connection {} with {}: {}", conn.id(), conn.peer(), why.message());
      conn.close();
      return;
    }
    Header h;
    (void)decode(header, size, limits_, h);  // for the request id, if any
    log::emit_limited(exception_log_limit(), log::Level::kError, "{}: {}", peer->name(),
                      why.message());
    peer->send_error(h.request_id, why.code(), why.message(), /*then_close=*/true);
  } catch (...) {
    // Not even the ERROR could be sent (no memory for it): close without one.
    conn.close();
  }
}

transport::Placement Endpoint::place_checked(transport::Connection& conn,
                                             std::span<const std::byte> header, std::size_t size) {
  auto peer = find(conn.id());
  if (!peer) throw Error(ErrorCode::kInternal, "message from an unknown connection");
  if (peer->closing_.load()) {
    // Refused earlier: its ERROR is on the way and the connection closes after the linger.
    // Small payloads are drained and dropped meanwhile; a larger one closes it now.
    if (size > (peer->authenticated() ? kMaxDrainBytes : kMaxPreAuthPayloadBytes))
      throw Error(ErrorCode::kConnectionClosed, "refused earlier");
    return {{drain_.data(), size}, 0};
  }
  if (!peer->authenticated() && size > kMaxPreAuthPayloadBytes) {
    // Nothing is read or allocated for it: the transport closes the connection at once.
    peer->closing_.store(true);
    auto why = fmt::format("a {}-byte payload before authentication (at most {})", size,
                           kMaxPreAuthPayloadBytes);
    PSRT_LOG_WARN_LIMITED("refusing {}: {}; closing the connection", peer->name(), why);
    throw Error(ErrorCode::kAuthentication, why);
  }
  Peer::Arrival a;
  if (Status s = decode(header, size, limits_, a.header); !s.ok())
    return refuse_at_place(*peer, std::move(a), s, size);
  const Header& h = a.header;
  if (peer->authenticated()) {
    if (!may_send(self_, peer->role(), h.type))
      return refuse_at_place(*peer, std::move(a), not_permitted(*peer, h.type), size);
    a.permitted = true;
  }
  if (carries_data(h.type)) {  // placed by the handler; byte payloads by the endpoint
    if (!peer->authenticated())
      return refuse_at_place(
          *peer, std::move(a),
          Status(ErrorCode::kAuthentication,
                 fmt::format("{} before authentication: send HELLO first", to_string(h.type))),
          size);
    const std::uint64_t cookie = next_cookie_.fetch_add(1);
    MutableBuffer dest;
    try {
      dest = handler_->place(*peer, h, size, cookie);
    } catch (const Error& e) {
      return refuse_at_place(*peer, std::move(a), Status(e), size);
    }
    return hold(*peer, cookie, std::move(a), dest);
  }
  a.bytes = std::make_unique<std::vector<std::byte>>(size);
  MutableBuffer dest{a.bytes->data(), size};
  return hold(*peer, next_cookie_.fetch_add(1), std::move(a), dest);
}

std::optional<Peer::Arrival> Endpoint::arrival(Peer& peer, std::span<const std::byte> header,
                                               const transport::Placement& placement) {
  if (placement.dest.size == 0) {  // no place(): decoded here
    Peer::Arrival a;
    if (Status s = decode(header, 0, limits_, a.header); !s.ok()) {
      reject(peer, 0, s);
      return std::nullopt;
    }
    return a;
  }
  std::optional<Peer::Arrival> a;
  {
    std::lock_guard lock(mu_);
    if (auto node = peer.arrivals_.extract(placement.cookie)) a = std::move(node.mapped());
  }
  if (!a) {
    reject(peer, 0, Status(ErrorCode::kInternal, "a payload without a placement"));
  } else if (a->refused) {
    reject(peer, a->header.request_id, *a->refused);
    a.reset();
  }
  return a;
}

void Endpoint::deliver(transport::Connection& conn, std::span<const std::byte> header,
                       const transport::Placement& placement) {
  auto peer = find(conn.id());
  if (peer && placement.dest.size > 0) note_received(*peer, placement.cookie);
  if (!peer || peer->closing_.load()) return;  // nothing after a refusal is processed
  peer->last_seen_.store(now_ticks(), std::memory_order_relaxed);
  std::optional<Peer::Arrival> a = arrival(*peer, header, placement);
  if (!a) return;
  const Header& h = a->header;
  std::span<const std::byte> payload;
  if (a->bytes) payload = *a->bytes;

  if (is_handshake(h.type) || !peer->authenticated()) {
    if (h.type == MsgType::kError && !peer->authenticated() && peer->on_handshake_) {
      std::string text(reinterpret_cast<const char*>(payload.data()), payload.size());
      auto cb = std::move(peer->on_handshake_);
      cb(Status(h.error_code(), "refused the connection: " + text));
      return;
    }
    handshake(*peer, h, payload);
    if (peer->authenticated()) {
      std::lock_guard lock(mu_);
      release_pending_locked(*peer);
    }
    return;
  }
  // Checked at place() unless it had no payload or arrived before the handshake completed.
  if (!a->permitted && !may_send(self_, peer->role(), h.type))
    return reject(*peer, h.request_id, not_permitted(*peer, h.type));
  try {
    handler_->on_message(*peer, h, payload, placement);
  } catch (const Error& e) {
    reject(*peer, h.request_id, Status(e));
  }
}

void Endpoint::handshake(Peer& peer, const Header& h, std::span<const std::byte> payload) {
  switch (peer.state_) {
    case Peer::State::kAwaitHello:
      return on_hello(peer, h, payload);
    case Peer::State::kAwaitAuth:
      return on_auth(peer, h, payload);
    case Peer::State::kClientAwaitChallenge:
      return on_challenge(peer, h, payload);
    case Peer::State::kClientAwaitWelcome:
      return on_welcome(peer, h, payload);
    case Peer::State::kReady:
      return reject(peer, h.request_id,
                    {ErrorCode::kProtocol,
                     fmt::format("{} after authentication completed", to_string(h.type))});
  }
}

void Endpoint::on_hello(Peer& peer, const Header& h, std::span<const std::byte> payload) {
  auto fail = [&](ErrorCode code, std::string why) {
    reject(peer, h.request_id, {code, std::move(why)});
  };
  if (h.type != MsgType::kHello)
    return fail(ErrorCode::kAuthentication,
                fmt::format("{} before authentication: send HELLO first", to_string(h.type)));
  if (h.role_value() > static_cast<std::uint32_t>(Role::kWorker) ||
      h.role_value() == static_cast<std::uint32_t>(Role::kScheduler))
    return fail(ErrorCode::kProtocol, fmt::format("HELLO from unknown role {}", h.role_value()));
  peer.role_ = static_cast<Role>(h.role_value());
  peer.rank_ = h.rank();
  std::copy(payload.begin(), payload.end(), peer.their_nonce_.begin());
  peer.my_nonce_ = random_nonce();
  peer.state_ = Peer::State::kAwaitAuth;
  Header c;
  c.type = MsgType::kChallenge;
  return peer.send_bytes(c, {peer.my_nonce_.begin(), peer.my_nonce_.end()});
}

void Endpoint::on_auth(Peer& peer, const Header& h, std::span<const std::byte> payload) {
  auto fail = [&](ErrorCode code, std::string why) {
    reject(peer, h.request_id, {code, std::move(why)});
  };
  if (h.type != MsgType::kAuth)
    return fail(ErrorCode::kAuthentication,
                fmt::format("{} before authentication: send AUTH", to_string(h.type)));
  const Identity client{peer.role_, peer.rank_};
  const Identity acceptor{self_, self_rank_};
  // The credential the claimed rank must prove; a refusal (not a member) is reported only
  // to a peer that proved the secret.
  std::optional<Credential> credential;
  std::optional<Status> refused;
  try {
    credential = handler_->credential_for(peer.role_, peer.rank_);
  } catch (const Error& e) {
    refused = Status(e);
  }
  std::span<const std::byte> cred;
  if (credential) cred = *credential;
  if (refused || !same_digest(payload, prove(secret_, "client", client, acceptor, peer.my_nonce_,
                                             peer.their_nonce_, cred))) {
    const bool holds_secret = same_digest(
        payload, prove(secret_, "client", client, acceptor, peer.my_nonce_, peer.their_nonce_));
    if (!credential && !refused)
      return fail(ErrorCode::kAuthentication,
                  "wrong job secret: the peer's proof does not match; start every process "
                  "with the job's PSRT_SECRET (psrun sets it)");
    // The peer holds the secret, not the rank it claims.
    if (holds_secret && refused) return fail(refused->code(), refused->message());
    if (holds_secret)
      return fail(ErrorCode::kAuthentication,
                  fmt::format("{} {} did not prove the membership credential the scheduler "
                              "gave that rank: a {} connects to servers only as the rank "
                              "it registered as",
                              to_string(peer.role_), peer.rank_, to_string(peer.role_)));
    if (refused)
      return fail(ErrorCode::kAuthentication,
                  fmt::format("the peer's proof does not match: a wrong job secret (start every "
                              "process with the job's PSRT_SECRET), or {}",
                              refused->message()));
    return fail(ErrorCode::kAuthentication,
                fmt::format("the peer's proof does not match: a wrong job secret (start every "
                            "process with the job's PSRT_SECRET), or {} {} is not a live "
                            "member with the credential the scheduler gave it (a {} "
                            "connects to servers only as the rank it registered as)",
                            to_string(peer.role_), peer.rank_, to_string(peer.role_)));
  }
  if (peer.rank_ == kAnyRank) {
    if (std::string why = unranked_over_cap(peer); !why.empty())
      return fail(ErrorCode::kInvalidArgument, std::move(why));
  } else {
    std::size_t same = 0;
    {
      std::lock_guard lock(mu_);
      for (const auto& [id, p] : peers_)
        if (p.get() != &peer && p->state_ == Peer::State::kReady && p->accepted_ &&
            p->role_ == peer.role_ && p->rank_ == peer.rank_)
          ++same;
    }
    if (same >= admission_.max_per_rank)
      return fail(ErrorCode::kInvalidArgument,
                  fmt::format("{} {} already holds {} authenticated connections here, the most "
                              "one rank may",
                              to_string(peer.role_), peer.rank_, same));
  }
  peer.credential_ = credential;
  peer.accepted_ = true;
  peer.state_ = Peer::State::kReady;
  auto proof = prove(secret_, "acceptor", client, acceptor, peer.their_nonce_, peer.my_nonce_);
  Header w;
  w.type = MsgType::kWelcome;
  peer.send_bytes(w, {proof.begin(), proof.end()});
  return handler_->on_peer_ready(peer);
}

std::string Endpoint::unranked_over_cap(const Peer& peer) {
  std::size_t total = 0;
  std::size_t from_host = 0;
  std::string host;
  {
    std::lock_guard lock(mu_);
    host = peer.host_;
    for (const auto& [id, p] : peers_) {
      if (p.get() == &peer || p->state_ != Peer::State::kReady || !p->accepted_ ||
          p->rank_ != kAnyRank)
        continue;
      ++total;
      if (p->host_ == host) ++from_host;
    }
  }
  if (from_host >= admission_.max_unranked_per_host)
    return fmt::format(
        "host {} already holds {} authenticated connections with no rank yet "
        "here, the most one host may (Admission::max_unranked_per_host): "
        "register before opening more",
        host, from_host);
  if (total >= admission_.max_unranked)
    return fmt::format(
        "{} authenticated connections with no rank yet are open here, the most "
        "allowed (Admission::max_unranked): register before opening more",
        total);
  return {};
}

void Endpoint::on_challenge(Peer& peer, const Header& h, std::span<const std::byte> payload) {
  auto fail = [&](ErrorCode code, std::string why) {
    reject(peer, h.request_id, {code, std::move(why)});
  };
  if (h.type != MsgType::kChallenge)
    return fail(ErrorCode::kProtocol, fmt::format("expected CHALLENGE, got {}", to_string(h.type)));
  std::copy(payload.begin(), payload.end(), peer.their_nonce_.begin());
  peer.state_ = Peer::State::kClientAwaitWelcome;
  std::optional<Credential> credential;
  if (peer.role_ == Role::kServer) {
    std::lock_guard lock(mu_);
    credential = credential_;
  }
  std::span<const std::byte> cred;
  if (credential) cred = *credential;
  auto proof = prove(secret_, "client", {self_, peer.hello_rank_}, {peer.role_, peer.rank_},
                     peer.their_nonce_, peer.my_nonce_, cred);
  Header a;
  a.type = MsgType::kAuth;
  return peer.send_bytes(a, {proof.begin(), proof.end()});
}

void Endpoint::on_welcome(Peer& peer, const Header& h, std::span<const std::byte> payload) {
  auto fail = [&](ErrorCode code, std::string why) {
    reject(peer, h.request_id, {code, std::move(why)});
  };
  if (h.type != MsgType::kWelcome)
    return fail(ErrorCode::kProtocol, fmt::format("expected WELCOME, got {}", to_string(h.type)));
  if (!same_digest(payload, prove(secret_, "acceptor", {self_, peer.hello_rank_},
                                  {peer.role_, peer.rank_}, peer.my_nonce_, peer.their_nonce_))) {
    auto cb = std::move(peer.on_handshake_);
    peer.close();
    if (cb)
      cb(Status(ErrorCode::kAuthentication,
                "the peer failed to prove the job secret for the role and rank expected of "
                "it: it belongs to another job, has a different PSRT_SECRET, or is not that "
                "peer"));
    return;
  }
  peer.state_ = Peer::State::kReady;
  if (auto cb = std::move(peer.on_handshake_)) cb(Status());
  return;
}

void Endpoint::on_closed(transport::Connection& conn, const Status& why) {
  std::shared_ptr<Peer> peer;
  std::function<void(const Status&)> on_handshake;
  {
    std::lock_guard lock(mu_);
    auto it = peers_.find(conn.id());
    if (it == peers_.end()) return;
    peer = std::move(it->second);
    peers_.erase(it);
    peer->arrivals_.clear();
    release_pending_locked(*peer);
    on_handshake = std::move(peer->on_handshake_);  // under mu_, where connect() installs it
  }
  if (auto cb = std::move(on_handshake))
    cb(Status(why.ok() ? ErrorCode::kConnectionClosed : why.code(),
              "connection closed during the handshake: " + why.message()));
  if (peer->authenticated()) handler_->on_peer_closed(*peer, why);
}

}  // namespace session
}  // namespace psrt::ps
