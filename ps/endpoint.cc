#include "ps/endpoint.h"

#include <future>

#include <fmt/core.h>

#include "base/log.h"

namespace psrt::ps {
namespace {

std::int64_t now_ticks() { return std::chrono::steady_clock::now().time_since_epoch().count(); }

bool is_handshake(MsgType t) {
  return t == MsgType::kHello || t == MsgType::kChallenge || t == MsgType::kAuth ||
         t == MsgType::kWelcome;
}

// Byte payloads are received by the endpoint itself; data payloads go where the handler says.
bool is_data(MsgType t) {
  return t == MsgType::kInit || t == MsgType::kPush || t == MsgType::kPushPull ||
         t == MsgType::kPullReply;
}

}  // namespace

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
  h.arg0 = static_cast<std::uint32_t>(code);
  auto text = message.substr(0, kMaxControlBytes);
  auto b = as_bytes(text);
  std::weak_ptr<transport::Connection> weak = conn_;
  send_bytes(h, {b.begin(), b.end()}, [weak, then_close](const Status&) {
    if (!then_close) return;
    if (auto c = weak.lock()) c->close();
  });
}

void Peer::set_rank(std::uint32_t r) { rank_.store(r, std::memory_order_relaxed); }

std::string Peer::name() const {
  auto r = rank_.load(std::memory_order_relaxed);
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
    p->last_seen_.store(now_ticks());
  }
  return p;
}

void Endpoint::on_connected(const std::shared_ptr<transport::Connection>& conn) {
  find_or_add(conn);
}

std::shared_ptr<Peer> Endpoint::connect(transport::Transport& t, const std::string& address,
                                        std::uint32_t my_rank, Role remote,
                                        std::uint32_t remote_rank,
                                        std::chrono::milliseconds timeout) {
  std::string what = remote == Role::kScheduler ? std::string("scheduler")
                                                 : fmt::format("{} {}", to_string(remote),
                                                               remote_rank);
  std::shared_ptr<transport::Connection> conn;
  try {
    conn = t.connect(address);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("cannot reach {}: {}", what, e.what()));
  }
  auto peer = find_or_add(conn);
  auto done = std::make_shared<std::promise<Status>>();
  auto result = done->get_future();
  peer->role_ = remote;
  peer->rank_ = remote_rank;
  {
    std::lock_guard lock(mu_);
    peer->state_ = Peer::State::kClientAwaitChallenge;
    peer->my_nonce_ = random_nonce();
    peer->on_handshake_ = [done](const Status& s) { done->set_value(s); };
  }
  Header h;
  h.type = MsgType::kHello;
  h.arg0 = static_cast<std::uint32_t>(self_);
  h.arg1 = my_rank;
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
  PSRT_LOG_WARN("refusing {}: {}", peer.name(), why.message());
  peer.send_error(request_id, why.code(), why.message(), /*then_close=*/true);
}

transport::Placement Endpoint::place(transport::Connection& conn,
                                     std::span<const std::byte> header, std::size_t size) {
  auto peer = find(conn.id());
  if (!peer) throw Error(ErrorCode::kInternal, "message from an unknown connection");
  Header h;
  if (Status s = decode(header, size, limits_, h); !s.ok()) {
    reject(*peer, 0, s);
    throw Error(s.code(), s.message());
  }
  if (is_data(h.type)) {
    if (!peer->authenticated()) {
      Status s(ErrorCode::kAuthentication, fmt::format("{} before authentication",
                                                       to_string(h.type)));
      reject(*peer, h.request_id, s);
      throw Error(s.code(), s.message());
    }
    try {
      return handler_->place(*peer, h, size);
    } catch (const Error& e) {
      reject(*peer, h.request_id, Status(e));
      throw;
    }
  }
  auto buf = std::make_unique<std::vector<std::byte>>(size);
  transport::Placement p{{buf->data(), size}, next_cookie_.fetch_add(1)};
  std::lock_guard lock(mu_);
  peer->inflight_[p.cookie] = std::move(buf);
  return p;
}

void Endpoint::on_message(transport::Connection& conn, std::span<const std::byte> header,
                          const transport::Placement& placement) {
  auto peer = find(conn.id());
  if (!peer) return;
  peer->last_seen_.store(now_ticks(), std::memory_order_relaxed);
  Header h;
  // place() has decoded headers with payloads already; header-only messages are checked here.
  if (Status s = decode(header, placement.dest.size, limits_, h); !s.ok())
    return reject(*peer, 0, s);
  std::unique_ptr<std::vector<std::byte>> bytes;
  if (!is_data(h.type) && placement.dest.size > 0) {
    std::lock_guard lock(mu_);
    auto it = peer->inflight_.find(placement.cookie);
    if (it != peer->inflight_.end()) {
      bytes = std::move(it->second);
      peer->inflight_.erase(it);
    }
  }
  std::span<const std::byte> payload;
  if (bytes) payload = *bytes;

  if (is_handshake(h.type) || !peer->authenticated()) {
    if (h.type == MsgType::kError && !peer->authenticated() && peer->on_handshake_) {
      std::string text(reinterpret_cast<const char*>(payload.data()), payload.size());
      auto code = h.arg0 <= static_cast<std::uint32_t>(ErrorCode::kNotFound)
                      ? static_cast<ErrorCode>(h.arg0)
                      : ErrorCode::kProtocol;
      auto cb = std::move(peer->on_handshake_);
      cb(Status(code, "refused the connection: " + text));
      return;
    }
    return handshake(*peer, h, payload);
  }
  try {
    handler_->on_message(*peer, h, payload, placement);
  } catch (const Error& e) {
    reject(*peer, h.request_id, Status(e));
  }
}

void Endpoint::handshake(Peer& peer, const Header& h, std::span<const std::byte> payload) {
  auto fail = [&](ErrorCode code, std::string why) { reject(peer, h.request_id, {code, why}); };
  switch (peer.state_) {
    case Peer::State::kAwaitHello: {
      if (h.type != MsgType::kHello)
        return fail(ErrorCode::kAuthentication,
                    fmt::format("{} before authentication: send HELLO first", to_string(h.type)));
      if (h.arg0 > static_cast<std::uint32_t>(Role::kWorker) ||
          h.arg0 == static_cast<std::uint32_t>(Role::kScheduler))
        return fail(ErrorCode::kProtocol, fmt::format("HELLO from unknown role {}", h.arg0));
      peer.role_ = static_cast<Role>(h.arg0);
      peer.rank_ = h.arg1;
      std::copy(payload.begin(), payload.end(), peer.their_nonce_.begin());
      peer.my_nonce_ = random_nonce();
      auto proof = prove(secret_, "acceptor", peer.their_nonce_, peer.my_nonce_);
      std::vector<std::byte> body(peer.my_nonce_.begin(), peer.my_nonce_.end());
      body.insert(body.end(), proof.begin(), proof.end());
      peer.state_ = Peer::State::kAwaitAuth;
      Header c;
      c.type = MsgType::kChallenge;
      return peer.send_bytes(c, std::move(body));
    }
    case Peer::State::kAwaitAuth: {
      if (h.type != MsgType::kAuth)
        return fail(ErrorCode::kAuthentication,
                    fmt::format("{} before authentication: send AUTH", to_string(h.type)));
      if (!same_digest(payload, prove(secret_, "client", peer.my_nonce_, peer.their_nonce_)))
        return fail(ErrorCode::kAuthentication,
                    "wrong job secret: the peer's proof does not match; start every process with "
                    "the job's PSRT_SECRET (psrun sets it)");
      peer.state_ = Peer::State::kReady;
      Header w;
      w.type = MsgType::kWelcome;
      peer.send(w);
      return handler_->on_peer_ready(peer);
    }
    case Peer::State::kClientAwaitChallenge: {
      if (h.type != MsgType::kChallenge)
        return fail(ErrorCode::kProtocol,
                    fmt::format("expected CHALLENGE, got {}", to_string(h.type)));
      std::copy(payload.begin(), payload.begin() + kNonceBytes, peer.their_nonce_.begin());
      auto theirs = payload.subspan(kNonceBytes);
      if (!same_digest(theirs, prove(secret_, "acceptor", peer.my_nonce_, peer.their_nonce_))) {
        auto cb = std::move(peer.on_handshake_);
        peer.close();
        if (cb)
          cb(Status(ErrorCode::kAuthentication,
                    "the peer failed to prove the job secret: it belongs to another job or has a "
                    "different PSRT_SECRET"));
        return;
      }
      peer.state_ = Peer::State::kClientAwaitWelcome;
      auto proof = prove(secret_, "client", peer.their_nonce_, peer.my_nonce_);
      Header a;
      a.type = MsgType::kAuth;
      return peer.send_bytes(a, {proof.begin(), proof.end()});
    }
    case Peer::State::kClientAwaitWelcome: {
      if (h.type != MsgType::kWelcome)
        return fail(ErrorCode::kProtocol,
                    fmt::format("expected WELCOME, got {}", to_string(h.type)));
      peer.state_ = Peer::State::kReady;
      if (auto cb = std::move(peer.on_handshake_)) cb(Status());
      return;
    }
    case Peer::State::kReady:
      return fail(ErrorCode::kProtocol,
                  fmt::format("{} after authentication completed", to_string(h.type)));
  }
}

void Endpoint::on_closed(transport::Connection& conn, const Status& why) {
  std::shared_ptr<Peer> peer;
  {
    std::lock_guard lock(mu_);
    auto it = peers_.find(conn.id());
    if (it == peers_.end()) return;
    peer = std::move(it->second);
    peers_.erase(it);
    peer->inflight_.clear();
  }
  if (auto cb = std::move(peer->on_handshake_))
    cb(Status(why.ok() ? ErrorCode::kConnectionClosed : why.code(),
              "connection closed during the handshake: " + why.message()));
  if (peer->authenticated()) handler_->on_peer_closed(*peer, why);
}

}  // namespace psrt::ps
