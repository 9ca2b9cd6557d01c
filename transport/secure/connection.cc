#include "transport/secure/connection.h"

#include <algorithm>
#include <cstring>

#include "base/log.h"
#include "transport/secure/context.h"
#include "transport/wire.h"

namespace psrt::transport::secure {
namespace {

std::array<std::byte, 8> length_bytes(std::size_t n) {
  std::array<std::byte, 8> b;
  wire::store<std::uint64_t>(b.data(), n);
  return b;
}

// Encrypts bytes [from, from + size) of the gathered payload into `out`.
void crypt_gathered(Aead& aead, std::span<const ConstBuffer> payload, std::size_t from,
                    std::size_t size, std::byte* out) {
  for (const ConstBuffer& b : payload) {
    if (size == 0) return;
    if (from >= b.size) {
      from -= b.size;
      continue;
    }
    const std::size_t n = std::min(b.size - from, size);
    aead.crypt(static_cast<const std::byte*>(b.data) + from, out, n);
    out += n;
    size -= n;
    from = 0;
  }
}

}  // namespace

SecureConnection::SecureConnection(std::shared_ptr<SecureContext> ctx,
                                   std::shared_ptr<Connection> inner)
    : ctx_(std::move(ctx)), inner_(std::move(inner)) {}

SecureConnection::~SecureConnection() = default;

void SecureConnection::start_on_loop() {
  my_nonce_ = random_nonce();
  send_handshake(HandshakeType::kHello, my_nonce_);
}

void SecureConnection::send_handshake(HandshakeType type, std::span<const std::byte, 32> body) {
  HandshakeMessage m;
  m.type = type;
  std::memcpy(m.body.data(), body.data(), body.size());
  std::array<std::byte, kHandshakeBytes> bytes;
  encode_handshake(m, bytes.data());
  inner_->send(bytes, {}, [](const Status&) {});
}

void SecureConnection::refuse(SendDone done, Status status) {
  // The backend refuses a header over kMaxHeaderBytes before anything reaches the wire and
  // completes that send on its progress thread, where every completion must run.
  static constexpr std::array<std::byte, kMaxHeaderBytes + 1> kTooLong{};
  inner_->send(kTooLong, {}, [done = std::move(done), status = std::move(status)](const Status&) {
    done(status);
  });
}

void SecureConnection::send(std::span<const std::byte> header, std::span<const ConstBuffer> payload,
                            SendDone done) {
  if (header.size() > kMaxPlainHeaderBytes) {
    return refuse(std::move(done),
                  Status(ErrorCode::kInvalidArgument,
                         "message header of " + std::to_string(header.size()) +
                             " bytes exceeds the secure mode's " +
                             std::to_string(kMaxPlainHeaderBytes) + "-byte limit"));
  }
  std::size_t total = 0;
  for (const ConstBuffer& b : payload) {
    if (b.size == 0) continue;
    if (b.memory != MemoryType::kHost) {
      return refuse(std::move(done),
                    Status(ErrorCode::kUnsupported,
                           "the secure mode cannot send from CUDA memory (payloads are sealed in "
                           "host memory); stage it in host memory"));
    }
    total += b.size;
  }
  if (total > ctx_->options().max_payload_bytes) {
    return refuse(
        std::move(done),
        Status(ErrorCode::kInvalidArgument,
               "payload of " + std::to_string(total) + " bytes exceeds max_payload_bytes (" +
                   std::to_string(ctx_->options().max_payload_bytes) + ")"));
  }
  std::shared_ptr<CipherBuffer> cipher;
  if (total > 0) cipher = std::make_shared<CipherBuffer>(ctx_->acquire(total));
  std::array<std::byte, kMaxHeaderBytes> sealed;
  std::size_t pos = kSeqBytes;
  // Sealing and handing to the backend under one lock: the backend sends in sequence order.
  std::lock_guard lock(send_mutex_);
  if (!seal_[0]) {
    return refuse(std::move(done),
                  Status(ErrorCode::kConnectionClosed,
                         "connection to " + peer() + " has not finished its secure handshake"));
  }
  const std::uint64_t seq = send_seq_++;
  wire::store<std::uint64_t>(sealed.data(), seq);
  if (total > 0) {
    const std::size_t segments = segment_count(total);
    std::array<Tag, kMaxSegments> tags;
    std::byte* out = cipher->data.get();
    ctx_->crypt_pool().run(segments, [&](std::size_t i) {
      const Segment seg = segment_of(total, i);
      Aead& aead = *seal_[i];
      aead.begin(Domain::kPayload, seq, static_cast<std::uint32_t>(i));
      crypt_gathered(aead, payload, seg.offset, seg.size, out + seg.offset);
      tags[i] = aead.seal_tag();
    });
    for (std::size_t i = 0; i < segments; ++i) {
      std::memcpy(sealed.data() + pos, tags[i].data(), kTagBytes);
      pos += kTagBytes;
    }
  }
  Aead& seal = *seal_[0];
  seal.begin(Domain::kHeader, seq);
  seal.aad({sealed.data(), pos});
  seal.aad(length_bytes(total));
  seal.crypt(header.data(), sealed.data() + pos, header.size());
  pos += header.size();
  const Tag tag = seal.seal_tag();
  std::memcpy(sealed.data() + pos, tag.data(), tag.size());
  pos += tag.size();
  ConstBuffer body{cipher ? cipher->data.get() : nullptr, total};
  inner_->send({sealed.data(), pos}, std::span<const ConstBuffer>(&body, total > 0 ? 1 : 0),
               [ctx = ctx_, cipher, done = std::move(done)](const Status& st) {
                 if (cipher) ctx->release(std::move(*cipher));
                 done(st);
               });
}

std::string SecureConnection::open_header_on_loop(std::span<const std::byte> sealed,
                                                  std::size_t payload_size, Placed& out) {
  const std::size_t segments = segment_count(payload_size);
  const std::size_t fixed = kSeqBytes + segments * kTagBytes;
  if (sealed.size() < fixed + kTagBytes || sealed.size() - fixed - kTagBytes > kMaxPlainHeaderBytes)
    return "a " + std::to_string(sealed.size()) + "-byte header that is no sealed header";
  const std::size_t n = sealed.size() - fixed - kTagBytes;
  out.seq = wire::load<std::uint64_t>(sealed.data());
  for (std::size_t i = 0; i < segments; ++i)
    std::memcpy(out.tags[i].data(), sealed.data() + kSeqBytes + i * kTagBytes, kTagBytes);
  Aead& open = *open_[0];
  open.begin(Domain::kHeader, out.seq);
  open.aad(sealed.first(fixed));
  open.aad(length_bytes(payload_size));
  open.crypt(sealed.data() + fixed, out.header.data(), n);
  Tag tag;
  std::memcpy(tag.data(), sealed.data() + fixed + n, kTagBytes);
  if (!open.open_tag(tag)) {
    std::memset(out.header.data(), 0, n);
    return "a header that failed authentication (altered on the way, or not sealed with this "
           "connection's key)";
  }
  out.header_len = n;
  return {};
}

Error SecureConnection::refuse_on_loop(ErrorCode code, const std::string& why) {
  dead_ = true;  // the backend logs the reason and closes the connection
  {
    std::lock_guard lock(state_mutex_);
    if (failure_.ok()) failure_ = Status(code, why);
  }
  return Error(code, why);
}

void SecureConnection::note_dropped(const std::string& why) {
  ++dropped_;
  ctx_->count_dropped();
  PSRT_LOG_WARN_LIMITED(
      "secure: dropped a message on connection {} from {}: {} ({} dropped on this connection; "
      "it goes on)",
      id(), peer(), why, dropped_);
}

Placement SecureConnection::discard_on_loop(const std::string& why, std::size_t payload_size) {
  Placed p;
  p.discard = true;
  if (payload_size > 0) {
    if (discards_in_flight_ >= kMaxDiscardsInFlight) {
      throw refuse_on_loop(ErrorCode::kAuthentication,
                           "peer " + peer() + " sent " + why + ", while " +
                               std::to_string(kMaxDiscardsInFlight) +
                               " dropped payloads were still landing on this connection");
    }
    p.sink = ctx_->acquire(payload_size);
    p.placement.dest = MutableBuffer{p.sink.data.get(), payload_size};
    ++discards_in_flight_;
  }
  note_dropped(why);
  Placement placement = p.placement;
  placed_.push_back(std::move(p));
  return placement;
}

namespace {

std::string replay_reason(std::uint64_t seq, std::uint64_t expected) {
  return "message " + std::to_string(seq) + " out of sequence (at least " +
         std::to_string(expected) + " expected): replayed";
}

}  // namespace

Placement SecureConnection::place_on_loop(std::span<const std::byte> header,
                                          std::size_t payload_size) {
  if (dead_) throw Error(ErrorCode::kConnectionClosed, "connection is closing");
  if (!announced_) {
    throw refuse_on_loop(ErrorCode::kProtocol,
                         "peer " + peer() +
                             " sent a payload during the secure handshake: both "
                             "ends must run in secure mode (psrun --secure)");
  }
  Placed p;
  std::string why = open_header_on_loop(header, payload_size, p);
  const bool for_orphan = why.empty() && orphan_ && orphan_->seq == p.seq;
  if (why.empty() && p.seq < min_place_seq_ && !for_orphan)
    why = replay_reason(p.seq, min_place_seq_);
  if (!why.empty()) return discard_on_loop(why, payload_size);
  if (for_orphan) {
    // The same sequence number under this connection's key: the same header and payload length.
    p.placement = orphan_->placement;
    orphan_.reset();
  } else {
    p.placement = ctx_->upper().place(*this, {p.header.data(), p.header_len}, payload_size);
    if (p.placement.dest.memory != MemoryType::kHost) {
      throw Error(ErrorCode::kUnsupported,
                  "receiver placed the payload in CUDA memory; the secure mode opens payloads in "
                  "host memory");
    }
  }
  min_place_seq_ = std::max(min_place_seq_, p.seq + 1);
  Placement placement = p.placement;
  placed_.push_back(std::move(p));
  return placement;
}

void SecureConnection::on_message_on_loop(std::span<const std::byte> header,
                                          const Placement& placement) {
  if (dead_) return;
  if (!announced_) return handshake_on_loop(header);
  auto self = shared_from_this();  // the caller's receiver may close and drop it
  if (placement.dest.size > 0) {
    if (placed_.empty() || placed_.front().placement.dest.data != placement.dest.data) {
      return fail_on_loop(ErrorCode::kInternal, "a payload arrived that was never placed");
    }
    Placed p = std::move(placed_.front());
    placed_.pop_front();
    if (p.discard) {
      --discards_in_flight_;
      ctx_->release(std::move(p.sink));
      return;
    }
    auto* data = static_cast<std::byte*>(placement.dest.data);
    const std::size_t size = placement.dest.size;
    if (p.seq != recv_next_) {
      std::memset(data, 0, size);
      return fail_on_loop(ErrorCode::kAuthentication,
                          "peer " + peer() + " sent message " + std::to_string(p.seq) + " where " +
                              std::to_string(recv_next_) +
                              " was due: a message was dropped, replayed or reordered");
    }
    if (!open_payload_on_loop(p, data, size)) {
      // Nothing of an unauthenticated payload stays where the receiver would look.
      std::memset(data, 0, size);
      const std::string why = "the payload of message " + std::to_string(p.seq) +
                              " failed authentication (altered on the way, or not sealed with "
                              "this connection's key)";
      if (orphan_) return fail_on_loop(ErrorCode::kAuthentication, why + " from " + peer());
      // A forged payload behind a copy of the real header: the real message may follow.
      note_dropped(why);
      orphan_ = std::move(p);
      return;
    }
    ++recv_next_;
    min_place_seq_ = std::max(min_place_seq_, recv_next_);
    return ctx_->upper().on_message(*this, {p.header.data(), p.header_len}, p.placement);
  }
  Placed p;
  std::string why = open_header_on_loop(header, 0, p);
  if (why.empty() && p.seq < recv_next_) why = replay_reason(p.seq, recv_next_);
  if (!why.empty()) return note_dropped(why);
  if (p.seq != recv_next_) {
    return fail_on_loop(ErrorCode::kAuthentication,
                        "peer " + peer() + " sent message " + std::to_string(p.seq) + " where " +
                            std::to_string(recv_next_) +
                            " was due: a message was dropped or reordered");
  }
  ++recv_next_;
  min_place_seq_ = std::max(min_place_seq_, recv_next_);
  ctx_->upper().on_message(*this, {p.header.data(), p.header_len}, Placement{});
}

bool SecureConnection::open_payload_on_loop(const Placed& p, std::byte* data, std::size_t size) {
  const std::size_t segments = segment_count(size);
  std::array<bool, kMaxSegments> ok{};
  ctx_->crypt_pool().run(segments, [&](std::size_t i) {
    const Segment seg = segment_of(size, i);
    Aead& aead = *open_[i];
    aead.begin(Domain::kPayload, p.seq, static_cast<std::uint32_t>(i));
    aead.crypt(data + seg.offset, data + seg.offset, seg.size);
    ok[i] = aead.open_tag(p.tags[i]);
  });
  return std::all_of(ok.begin(), ok.begin() + static_cast<std::ptrdiff_t>(segments),
                     [](bool b) { return b; });
}

void SecureConnection::handshake_on_loop(std::span<const std::byte> header) {
  HandshakeMessage m;
  if (std::string why = decode_handshake(header, m); !why.empty()) {
    return fail_on_loop(ErrorCode::kProtocol,
                        "peer " + peer() + " sent " + why +
                            " during the secure handshake: both ends must run in secure mode "
                            "(psrun --secure / PSRT_SECURE=1)");
  }
  if (m.type == HandshakeType::kHello) {
    if (have_keys_)
      return fail_on_loop(ErrorCode::kProtocol, "peer " + peer() + " sent a second HELLO");
    SessionKeys keys;
    try {
      keys = derive_session(ctx_->secret(), my_nonce_, m.body);
    } catch (const Error& e) {
      return fail_on_loop(e.code(), "secure handshake with " + peer() + ": " + e.what());
    }
    for (auto& open : open_)
      open = std::make_unique<Aead>(keys.recv, /*seal=*/false);
    {
      std::lock_guard lock(send_mutex_);
      for (auto& seal : seal_)
        seal = std::make_unique<Aead>(keys.send, /*seal=*/true);
    }
    peer_confirm_ = keys.peer_confirm;
    have_keys_ = true;
    return send_handshake(HandshakeType::kConfirm, keys.my_confirm);
  }
  if (!have_keys_)
    return fail_on_loop(ErrorCode::kProtocol, "peer " + peer() + " sent CONFIRM before HELLO");
  if (!same_mac(m.body, peer_confirm_)) {
    return fail_on_loop(ErrorCode::kAuthentication,
                        "peer " + peer() +
                            " failed to prove the job secret in the secure handshake: it holds "
                            "another secret (give every process of the job the same "
                            "PSRT_SECRET) or the handshake was altered on the way");
  }
  announced_ = true;
  auto self = shared_from_this();
  ctx_->upper().on_connected(self);
  {
    std::lock_guard lock(state_mutex_);
    if (state_ == State::kHandshake) state_ = State::kOpen;
  }
  state_cv_.notify_all();
}

void SecureConnection::fail_on_loop(ErrorCode code, const std::string& why) {
  if (dead_) return;
  dead_ = true;
  PSRT_LOG_WARN("secure: closing connection {} with {}: {}", id(), peer(), why);
  {
    std::lock_guard lock(state_mutex_);
    if (failure_.ok()) failure_ = Status(code, why);
  }
  inner_->close();
}

void SecureConnection::on_closed_on_loop(const Status& why) {
  Status reported;
  bool was_handshake = false;
  bool explained = false;  // the cause was logged where it was found
  {
    std::lock_guard lock(state_mutex_);
    was_handshake = state_ == State::kHandshake;
    explained = !failure_.ok();
    state_ = State::kClosed;
    if (failure_.ok() && !announced_ && have_keys_) {
      // The peer answered HELLO and closed before its CONFIRM: it found ours wrong. (Over UCX
      // its close can overtake its CONFIRM, so this side may not see the CONFIRM itself.)
      failure_ = Status(ErrorCode::kAuthentication,
                        "the peer closed the connection before proving the job secret (" +
                            why.message() + "): it holds another job secret");
    } else if (failure_.ok() && !announced_) {
      failure_ = Status(why.ok() ? ErrorCode::kConnectionClosed : why.code(),
                        "the connection closed during the secure handshake (" + why.message() +
                            "): the peer may hold another job secret or not run in secure mode");
    }
    reported = failure_.ok() ? why : failure_;
  }
  state_cv_.notify_all();
  placed_.clear();
  discards_in_flight_ = 0;
  orphan_.reset();
  if (announced_) {
    auto self = shared_from_this();
    ctx_->upper().on_closed(*this, reported);
  } else if (was_handshake && !explained) {
    PSRT_LOG_WARN(
        "secure: handshake with {} ended before it finished ({}): the peer may hold "
        "another job secret or not run in secure mode",
        peer(), why.message());
  }
}

Status SecureConnection::wait_established(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(state_mutex_);
  state_cv_.wait_until(lock, deadline, [&] { return state_ != State::kHandshake; });
  if (state_ == State::kOpen) return {};
  if (state_ == State::kClosed) return failure_;
  if (failure_.ok()) {
    failure_ = Status(ErrorCode::kTimeout, "the secure handshake with " + peer() +
                                               " did not finish within the connect timeout");
  }
  return failure_;
}

void SecureConnection::expire_handshake() {
  {
    std::lock_guard lock(state_mutex_);
    if (state_ != State::kHandshake) return;
    if (failure_.ok()) {
      failure_ = Status(ErrorCode::kTimeout,
                        "the secure handshake with " + peer() + " did not finish within " +
                            std::to_string(ctx_->options().connect_timeout.count()) + " ms");
    }
  }
  PSRT_LOG_WARN("secure: closing connection {} with {}: handshake not finished within {} ms", id(),
                peer(), ctx_->options().connect_timeout.count());
  inner_->close();
}

}  // namespace psrt::transport::secure
