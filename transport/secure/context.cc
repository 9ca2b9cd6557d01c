#include "transport/secure/context.h"

#include "transport/secure/connection.h"

namespace psrt::transport::secure {
namespace {

// The send buffers kept for reuse (a fresh multi-MiB buffer costs page faults on every send).
constexpr std::size_t kPoolBuffers = 16;
constexpr std::size_t kPoolBytes = std::size_t{256} << 20;
// Messages kept for a connection the backend has not announced yet (see on_message).
constexpr std::size_t kMaxEarlyMessages = 2;

}  // namespace

SecureContext::SecureContext(std::shared_ptr<Receiver> upper, Options options)
    : options_(std::move(options)), upper_(std::move(upper)) {}

SecureContext::~SecureContext() {
  shutdown();
}

void SecureContext::start() {
  reaper_ = std::thread([this] { reap(); });
}

void SecureContext::shutdown(bool release_upper) {
  {
    std::lock_guard lock(mutex_);
    if (release_upper) upper_.reset();
    stopping_ = true;
    connections_.clear();
    early_.clear();
    failed_.clear();
    deadlines_.clear();
  }
  cv_.notify_all();
  if (reaper_.joinable()) {
    if (reaper_.get_id() == std::this_thread::get_id()) {
      reaper_.detach();  // the last reference went away on the timer thread itself
    } else {
      reaper_.join();
    }
  }
}

void SecureContext::reap() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (deadlines_.empty()) {
      cv_.wait(lock);
      continue;
    }
    auto first = deadlines_.begin();
    if (const auto when = first->first; std::chrono::steady_clock::now() < when) {
      cv_.wait_until(lock, when);  // a copy: the entry may be gone when this wakes
      continue;
    }
    auto weak = std::move(first->second);
    deadlines_.erase(first);
    lock.unlock();
    if (auto conn = weak.lock()) conn->expire_handshake();
    lock.lock();
  }
}

std::shared_ptr<SecureConnection> SecureContext::find(std::uint64_t id) {
  std::lock_guard lock(mutex_);
  auto it = connections_.find(id);
  return it == connections_.end() ? nullptr : it->second;
}

void SecureContext::on_connected(const std::shared_ptr<Connection>& conn) {
  auto secure = std::make_shared<SecureConnection>(shared_from_this(), conn);
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return conn->close();
    connections_[conn->id()] = secure;
    deadlines_.emplace(std::chrono::steady_clock::now() + options_.connect_timeout, secure);
  }
  cv_.notify_all();
  secure->start_on_loop();
  // The peer's HELLO may have come first (UCX routes messages to a connection before its
  // on_connected): hand it over now, in order.
  std::vector<std::vector<std::byte>> early;
  {
    std::lock_guard lock(mutex_);
    if (auto it = early_.find(conn->id()); it != early_.end()) {
      early = std::move(it->second);
      early_.erase(it);
    }
  }
  for (const auto& header : early)
    secure->on_message_on_loop(header, Placement{});
}

Placement SecureContext::place(Connection& conn, std::span<const std::byte> header,
                               std::size_t payload_size) {
  auto secure = find(conn.id());
  if (!secure) throw Error(ErrorCode::kConnectionClosed, "connection is closing");
  return secure->place_on_loop(header, payload_size);
}

void SecureContext::on_message(Connection& conn, std::span<const std::byte> header,
                               const Placement& placement) {
  if (auto secure = find(conn.id())) return secure->on_message_on_loop(header, placement);
  // Before on_connected: only the peer's HELLO can be here. More is kept for nobody (the
  // handshake then fails on its own).
  std::lock_guard lock(mutex_);
  auto& kept = early_[conn.id()];
  if (kept.size() < kMaxEarlyMessages) kept.emplace_back(header.begin(), header.end());
}

void SecureContext::on_closed(Connection& conn, const Status& why) {
  std::shared_ptr<SecureConnection> secure;
  {
    std::lock_guard lock(mutex_);
    auto it = connections_.find(conn.id());
    if (it == connections_.end()) {
      early_.erase(conn.id());
      return;
    }
    secure = std::move(it->second);
    connections_.erase(it);
    // A connect() under way may not have claimed this one yet (the progress thread can finish
    // the handshake and see the close first): keep it so that connect() finds out what happened.
    if (connecting_ > 0) failed_[conn.id()] = secure;
  }
  secure->on_closed_on_loop(why);
}

void SecureContext::begin_connect() {
  std::lock_guard lock(mutex_);
  ++connecting_;
}

std::shared_ptr<SecureConnection> SecureContext::claim(std::uint64_t id) {
  std::lock_guard lock(mutex_);
  if (auto it = connections_.find(id); it != connections_.end()) return it->second;
  if (auto it = failed_.find(id); it != failed_.end()) {
    auto secure = std::move(it->second);
    failed_.erase(it);
    return secure;
  }
  return nullptr;
}

void SecureContext::end_connect() {
  std::lock_guard lock(mutex_);
  if (--connecting_ == 0) failed_.clear();
}

CipherBuffer SecureContext::acquire(std::size_t size) {
  {
    std::lock_guard lock(pool_mutex_);
    auto best = pool_.end();
    for (auto it = pool_.begin(); it != pool_.end(); ++it) {
      if (it->capacity >= size && (best == pool_.end() || it->capacity < best->capacity)) best = it;
    }
    if (best != pool_.end()) {
      CipherBuffer b = std::move(*best);
      pool_.erase(best);
      return b;
    }
  }
  // Uninitialised on purpose: every byte is written by the seal.
  return CipherBuffer{std::unique_ptr<std::byte[]>(new std::byte[size]), size};
}

void SecureContext::release(CipherBuffer buffer) {
  if (buffer.capacity > kPoolBytes) return;
  std::lock_guard lock(pool_mutex_);
  std::size_t held = buffer.capacity;
  for (const auto& b : pool_)
    held += b.capacity;
  if (pool_.size() < kPoolBuffers && held <= kPoolBytes) pool_.push_back(std::move(buffer));
}

SecureTransport::SecureTransport(std::shared_ptr<Receiver> receiver, Options options,
                                 const MakeInner& make_inner)
    : ctx_(std::make_shared<SecureContext>(std::move(receiver), options)) {
  if (options.bootstrap_secret.empty()) options.bootstrap_secret = options.secure_secret;
  options.secure_secret.clear();
  inner_ = make_inner(ctx_, options);
  ctx_->start();
}

SecureTransport::~SecureTransport() {
  shutdown();
}

std::shared_ptr<Connection> SecureTransport::connect(const std::string& address) {
  ctx_->begin_connect();
  struct EndConnect {
    SecureContext& ctx;
    ~EndConnect() { ctx.end_connect(); }
  } end{*ctx_};
  auto inner = inner_->connect(address);
  auto secure = ctx_->claim(inner->id());
  if (!secure) {
    inner->close();
    throw Error(ErrorCode::kConnectionClosed,
                "connection to " + address + " closed before its secure handshake began");
  }
  Status st =
      secure->wait_established(std::chrono::steady_clock::now() + ctx_->options().connect_timeout);
  if (!st.ok()) {
    inner->close();
    throw Error(st.code(), "secure handshake with " + address + " failed: " + st.message());
  }
  return secure;
}

void SecureTransport::register_memory(MutableBuffer region) {
  if (region.memory != MemoryType::kHost) {
    throw Error(ErrorCode::kUnsupported,
                "the secure mode cannot register CUDA memory: payloads are sealed and opened in "
                "host memory");
  }
  inner_->register_memory(region);
}

void SecureTransport::shutdown() {
  const bool on_loop = inner_->on_progress_thread();
  inner_->shutdown();
  ctx_->shutdown(/*release_upper=*/!on_loop);
}

}  // namespace psrt::transport::secure
