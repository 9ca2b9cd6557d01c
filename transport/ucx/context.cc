#include "transport/ucx/context.h"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/exception_status.h"
#include "base/host.h"
#include "base/log.h"
#include "transport/ucx/check.h"
#include "transport/ucx/connection.h"
#include "transport/ucx/hello.h"
#include "transport/ucx/hello_auth.h"
#include "transport/wire.h"

namespace psrt::transport::ucx {

UcxContext::UcxContext(std::shared_ptr<Receiver> receiver, Options options)
    : ContextBase("ucx", std::move(receiver), std::move(options)) {
  ucp_config_t* config = nullptr;
  PSRT_UCS_CHECK(ucp_config_read(nullptr, nullptr, &config));
  ucp_params_t params{};
  params.field_mask =
      UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  params.name = "psrt";
  ucs_status_t st = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (st != UCS_OK) throw ucs_error("ucp_init", st);

  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  PSRT_UCS_CHECK(ucp_context_query(context_, &attr));
  // A bit set, not a value: UCX reports every memory type it can handle.
  cuda_capable_ = (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // only the progress thread touches the worker
  st = ucp_worker_create(context_, &wp, &worker_);
  if (st != UCS_OK) {
    ucp_cleanup(context_);
    throw ucs_error("ucp_worker_create", st);
  }
  address_ = worker_address();
  boot_id_ = psrt::local_host_id();  // "" if unreadable: every peer then counts as remote

  ucp_am_handler_param_t am{};
  am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  am.id = kAmId;
  am.cb = &UcxContext::on_am;
  am.arg = this;
  am.flags = UCP_AM_FLAG_WHOLE_MSG;
  PSRT_UCS_CHECK(ucp_worker_set_am_recv_handler(worker_, &am));
  PSRT_LOG_DEBUG("ucx: context ready, CUDA memory {}",
                 cuda_capable_ ? "supported" : "not supported");
}

UcxContext::~UcxContext() {
  shutdown();
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
  retired_.clear();  // nothing in UCX can reach these any more
}

std::vector<std::byte> UcxContext::worker_address() const {
  ucp_worker_attr_t wa{};
  wa.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS;
  PSRT_UCS_CHECK(ucp_worker_query(worker_, &wa));
  auto* p = reinterpret_cast<const std::byte*>(wa.address);
  std::vector<std::byte> out(p, p + wa.address_length);
  ucp_worker_release_address(worker_, wa.address);
  return out;
}

void UcxContext::start() {
  int efd = -1;
  PSRT_UCS_CHECK(ucp_worker_get_efd(worker_, &efd));
  EventLoop::Hooks hooks;
  hooks.poll = [this] {
    bool any = false;
    while (ucp_worker_progress(worker_) != 0)
      any = true;
    if (!close_requests_.empty()) progress_close_requests();
    return any;
  };
  hooks.arm = [this] { return ucp_worker_arm(worker_) == UCS_OK; };
  hooks.wake = [this] { ucp_worker_signal(worker_); };
  loop_.start(std::move(hooks));
  // The worker's event fd only has to wake epoll_wait; the poll hook does the work. Edge-
  // triggered: after a successful ucp_worker_arm, UCX's fd can stay readable with nothing new
  // behind it, and a level-triggered watch would then spin the idle loop at 100% CPU.
  loop_.run_sync(
      [this, efd] { loop_.add_fd_on_loop(efd, EPOLLIN | EPOLLET, [](std::uint32_t) {}); });
}

bool UcxContext::progress_close_requests() {
  std::erase_if(close_requests_, [](void* req) {
    if (ucp_request_check_status(req) == UCS_INPROGRESS) return false;
    ucp_request_free(req);
    return true;
  });
  return close_requests_.empty();
}

void UcxContext::track_close_request_on_loop(void* request) {
  close_requests_.push_back(request);
}

void UcxContext::retire_on_loop(std::shared_ptr<void> thing) {
  if (thing) retired_.push_back(std::move(thing));
}

ucs_status_t UcxContext::on_am(void* arg, const void* header, std::size_t header_length, void* data,
                               std::size_t length, const ucp_am_recv_param_t* param) {
  // An exception must not unwind through UCX: the connection paths catch their own; this is the
  // last resort (e.g. no memory for a receive request), and the message is dropped.
  try {
    return static_cast<UcxContext*>(arg)->on_am_on_loop(header, header_length, data, length, param);
  } catch (...) {
    PSRT_LOG_ERROR("ucx: dropping an active message: {}",
                   current_exception_status("cannot receive it").message());
    return (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0 ? UCS_ERR_NO_MEMORY : UCS_OK;
  }
}

ucs_status_t UcxContext::on_am_on_loop(const void* header, std::size_t header_length, void* data,
                                       std::size_t length, const ucp_am_recv_param_t* param) {
  const bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  if (header_length < kAmRouteBytes || header_length > kAmRouteBytes + kMaxHeaderBytes) {
    PSRT_LOG_WARN_LIMITED("ucx: dropping an active message with a {}-byte header (expected {}..{})",
                          header_length, kAmRouteBytes, kAmRouteBytes + kMaxHeaderBytes);
    return rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;
  }
  // The token binds the message to a connection: only the peer that received it in our
  // bootstrap hello has it. Anything else is dropped, not answered, and no connection is closed
  // for it (that would hand any process that can reach the worker a way to cut peers off).
  auto* h = static_cast<const std::byte*>(header);
  auto it = connections_.find(route_key(h));
  if (it == connections_.end()) {
    // Also what a late message for a connection closed here looks like: not worth a warning.
    PSRT_LOG_DEBUG("ucx: dropping an active message with an unknown route token");
    return rndv ? UCS_ERR_NOT_CONNECTED : UCS_OK;
  }
  if (!it->second->carries_route_token(h)) {
    if (++forged_dropped_ <= 10 || (forged_dropped_ & (forged_dropped_ - 1)) == 0)
      PSRT_LOG_WARN(
          "ucx: dropping an active message for connection {} with a wrong route token (forged; "
          "{} so far)",
          it->second->id(), forged_dropped_);
    return rndv ? UCS_ERR_NOT_CONNECTED : UCS_OK;
  }
  if (!it->second->is_open()) {
    PSRT_LOG_DEBUG("ucx: dropping a message for closed connection {}", it->second->id());
    return rndv ? UCS_ERR_NOT_CONNECTED : UCS_OK;
  }
  const std::uint64_t id = it->second->id();
  if (length > options_.max_payload_bytes) {
    auto conn = it->second;
    std::string why = "payload of " + std::to_string(length) +
                      " bytes exceeds the limit (Options::max_payload_bytes = " +
                      std::to_string(options_.max_payload_bytes) + ")";
    PSRT_LOG_WARN_LIMITED("ucx: closing connection {} with {}: {}", id, conn->peer(), why);
    conn->close_on_loop(Status(ErrorCode::kProtocol, why), false);
    return rndv ? UCS_ERR_MESSAGE_TRUNCATED : UCS_OK;
  }
  auto conn = it->second;  // keep alive: the receiver may close it
  conn->receive_on_loop(
      std::span<const std::byte>(h + kAmRouteBytes, header_length - kAmRouteBytes), data, length,
      rndv);
  return UCS_OK;
}

void UcxContext::tune_accepted(int fd) {
  tune_stream(fd, options_.peer_timeout);
}

void UcxContext::adopt_accepted_on_loop(Fd fd, std::string peer) {
  if (std::string why = admission_.admit(peer); !why.empty()) {
    count_hello_refused();
    PSRT_LOG_WARN_LIMITED("ucx: dropping connection from {}: {}", peer, why);
    return;  // closes the socket
  }
  Challenge challenge;
  challenge.flags = options_.bootstrap_secret.empty() ? 0 : kHelloAuthenticated;
  try {
    challenge.nonce = random_hello_nonce();
  } catch (const Error& e) {
    admission_.release(peer);
    PSRT_LOG_WARN_LIMITED("ucx: dropping connection from {}: {}", peer, e.what());
    return;
  }
  // 24 bytes into a fresh socket's empty send buffer: a short write means the socket is broken.
  const auto bytes = encode_challenge(challenge);
  if (::send(fd.get(), bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL) !=
      static_cast<ssize_t>(bytes.size())) {
    admission_.release(peer);
    count_hello_refused();
    PSRT_LOG_WARN_LIMITED("ucx: dropping connection from {}: cannot send the handshake challenge",
                          peer);
    return;
  }
  int raw = fd.get();
  PendingHello& h = hellos_[raw];
  h.fd = std::move(fd);
  h.peer = std::move(peer);
  h.need = kHelloFixedBytes;
  h.challenge = challenge.nonce;
  h.timer = loop_.add_timer_on_loop(EventLoop::Clock::now() + options_.accept_timeout, [this, raw] {
    drop_hello_on_loop(raw, "no complete handshake in time");
  });
  loop_.add_fd_on_loop(raw, EPOLLIN | EPOLLRDHUP,
                       [this, raw](std::uint32_t) { read_hello_on_loop(raw); });
}

void UcxContext::drop_hello_on_loop(int fd, const std::string& why) {
  auto it = hellos_.find(fd);
  if (it == hellos_.end()) return;
  PSRT_LOG_WARN_LIMITED("ucx: dropping connection from {}: {}", it->second.peer, why);
  count_hello_refused();
  admission_.release(it->second.peer);
  loop_.cancel_timer_on_loop(it->second.timer);
  loop_.remove_fd_on_loop(fd);
  hellos_.erase(it);  // closes the socket
}

void UcxContext::read_hello_on_loop(int fd) {
  auto it = hellos_.find(fd);
  if (it == hellos_.end()) return;
  PendingHello& h = it->second;
  while (h.buf.size() < h.need) {
    std::size_t have = h.buf.size();
    h.buf.resize(h.need);
    ssize_t n = ::recv(fd, h.buf.data() + have, h.need - have, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      h.buf.resize(have);
      return;
    }
    if (n <= 0) {
      h.buf.resize(have);
      return drop_hello_on_loop(
          fd, n == 0 ? "closed during the handshake (truncated hello)" : "handshake read failed");
    }
    h.buf.resize(have + static_cast<std::size_t>(n));
    if (h.buf.size() == kHelloFixedBytes && h.need == kHelloFixedBytes) {
      std::size_t address_len = 0;
      std::string why = decode_hello_fixed(
          std::span<const std::byte, kHelloFixedBytes>(h.buf.data(), kHelloFixedBytes), h.hello,
          address_len);
      if (!why.empty()) return drop_hello_on_loop(fd, why);
      if (!options_.bootstrap_secret.empty() && (h.hello.flags & kHelloAuthenticated) == 0)
        return drop_hello_on_loop(
            fd,
            "its hello proves no job secret (a peer without PSRT_SECRET, or not of this job); "
            "no endpoint created");
      h.need = kHelloFixedBytes + address_len;
    }
  }
  if (std::string why = refuse_hello_on_loop(h); !why.empty()) return drop_hello_on_loop(fd, why);
  // Whole hello: create our side, answer with our own hello, and hand the connection out.
  Hello hello = std::move(h.hello);
  std::vector<std::byte> peer_address(h.buf.begin() + kHelloFixedBytes, h.buf.end());
  loop_.cancel_timer_on_loop(h.timer);
  loop_.remove_fd_on_loop(fd);
  Fd control = std::move(h.fd);
  std::string peer = h.peer;
  const HelloNonce challenge = h.challenge;
  admission_.release(peer);
  hellos_.erase(it);

  auto conn = std::make_shared<UcxConnection>(shared_from_this(), next_id_++, peer);
  try {
    while (connections_.count(conn->route_key()))
      conn->redraw_route_token_on_loop();
    Hello reply{0, conn->route_token(), boot_id_, hello.nonce, {}, address_};
    auto bytes = encode_hello(reply);
    if (!options_.bootstrap_secret.empty())
      sign_hello(options_.bootstrap_secret, HelloSide::kListener, challenge, hello.nonce, bytes);
    conn->establish_on_loop(hello.route_token, peer_address,
                            hello.boot_id == boot_id_ && !boot_id_.empty());
    write_all(control.get(), bytes.data(), bytes.size(),
              std::chrono::steady_clock::now() + std::chrono::seconds(1));
  } catch (const Error& e) {
    PSRT_LOG_WARN_LIMITED("ucx: dropping connection from {}: {}", peer, e.what());
    conn->close_on_loop(Status(e.code(), e.what()), true);
    return;
  }
  conn->watch_liveness_on_loop(std::move(control));
  add_connection_on_loop(conn);
  receiver_->on_connected(conn);
}

std::shared_ptr<Connection> UcxContext::connect(const std::string& address) {
  throw_if_shut_down();
  auto deadline = std::chrono::steady_clock::now() + options_.connect_timeout;
  Fd fd = connect_tcp(address, options_.connect_timeout);
  tune_stream(fd.get(), options_.peer_timeout);
  auto conn = std::make_shared<UcxConnection>(shared_from_this(), next_id_++, address);
  // Registered before the hello goes out: the peer may send as soon as it has read it.
  loop_.run_sync([&] { add_connection_on_loop(conn); });
  try {
    Hello reply = exchange_hellos(fd.get(), *conn, deadline);
    loop_.run_sync([&] {
      conn->establish_on_loop(reply.route_token, reply.worker_address,
                              reply.boot_id == boot_id_ && !boot_id_.empty());
      conn->watch_liveness_on_loop(std::move(fd));
      receiver_->on_connected(conn);
    });
  } catch (const Error& e) {
    loop_.run_sync([&] { conn->close_on_loop(Status(e.code(), e.what()), true); });
    throw Error(e.code(), "cannot connect to " + address + ": " + e.what());
  }
  return conn;
}

std::string UcxContext::refuse_hello_on_loop(const PendingHello& h) {
  if (options_.bootstrap_secret.empty())
    return admission_.admit_endpoint(h.peer);  // nothing to check it with: rate-limited
  if (!hello_proves_secret(options_.bootstrap_secret, HelloSide::kConnector, h.challenge,
                           h.hello.nonce, h.buf))
    return "its hello fails authentication (another job's secret, or forged); no endpoint "
           "created";
  return {};
}

Hello UcxContext::exchange_hellos(int fd, const UcxConnection& conn,
                                  std::chrono::steady_clock::time_point deadline) {
  const std::string& secret = options_.bootstrap_secret;
  std::array<std::byte, kChallengeBytes> challenge_bytes;
  read_all(fd, challenge_bytes.data(), challenge_bytes.size(), deadline);
  Challenge challenge;
  if (std::string why = decode_challenge(challenge_bytes, challenge); !why.empty())
    throw Error(ErrorCode::kProtocol, why);
  const bool listener_checks = (challenge.flags & kHelloAuthenticated) != 0;
  if (listener_checks != !secret.empty())
    throw Error(ErrorCode::kAuthentication,
                listener_checks
                    ? "the listener requires a hello proving the job secret and this process has "
                      "none (set PSRT_SECRET as for the rest of the job)"
                    : "the listener does not check the job secret (it runs without PSRT_SECRET, "
                      "or is not of this job); no endpoint created");
  Hello mine{0, conn.route_token(), boot_id_, random_hello_nonce(), {}, address_};
  auto bytes = encode_hello(mine);
  if (!secret.empty())
    sign_hello(secret, HelloSide::kConnector, challenge.nonce, mine.nonce, bytes);
  write_all(fd, bytes.data(), bytes.size(), deadline);
  std::vector<std::byte> reply_bytes(kHelloFixedBytes);
  try {
    read_all(fd, reply_bytes.data(), kHelloFixedBytes, deadline);
  } catch (const Error& e) {
    if (secret.empty() || e.code() != ErrorCode::kConnectionClosed) throw;
    // A listener closes at once on a hello it cannot verify.
    throw Error(ErrorCode::kAuthentication,
                std::string(e.what()) +
                    ": the listener refused our hello (a different job secret: every process "
                    "of a job needs the same PSRT_SECRET)");
  }
  Hello reply;
  std::size_t address_len = 0;
  std::string why = decode_hello_fixed(
      std::span<const std::byte, kHelloFixedBytes>(reply_bytes.data(), kHelloFixedBytes), reply,
      address_len);
  if (!why.empty()) throw Error(ErrorCode::kProtocol, why);
  reply_bytes.resize(kHelloFixedBytes + address_len);
  read_all(fd, reply_bytes.data() + kHelloFixedBytes, address_len, deadline);
  if (!secret.empty() &&
      !hello_proves_secret(secret, HelloSide::kListener, challenge.nonce, mine.nonce, reply_bytes))
    throw Error(ErrorCode::kAuthentication,
                "the listener's hello fails authentication (another job's secret, or forged); "
                "no endpoint created");
  reply.worker_address.assign(reply_bytes.begin() + kHelloFixedBytes, reply_bytes.end());
  return reply;
}

void UcxContext::add_connection_on_loop(const std::shared_ptr<UcxConnection>& conn) {
  while (connections_.count(conn->route_key()))
    conn->redraw_route_token_on_loop();
  connections_[conn->route_key()] = conn;
}

void UcxContext::forget_on_loop(const UcxConnection& conn) {
  auto it = connections_.find(conn.route_key());
  if (it != connections_.end() && it->second.get() == &conn) connections_.erase(it);
}

ucp_mem_h UcxContext::find_memh(const void* data, std::size_t size) const {
  auto h = registrations_.find(data, size);
  return h ? *h : nullptr;
}

void UcxContext::register_memory(MutableBuffer region) {
  if (!supports(region.memory)) {
    throw Error(ErrorCode::kUnsupported, "this UCX build cannot register CUDA memory");
  }
  if (!registrations_.needs_registration(region.data, region.size)) return;
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                  UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  mp.address = region.data;
  mp.length = region.size;
  mp.memory_type = region.memory == MemoryType::kCuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
  ucp_mem_h memh = nullptr;
  PSRT_UCS_CHECK(ucp_mem_map(context_, &mp, &memh));
  registrations_.insert(region.data, region.size, memh);
}

void UcxContext::unregister_memory(const void* base) {
  auto memh = registrations_.erase(base);
  if (!memh) return;
  // Unmapped on the loop: a send or receive in flight there may still reference it.
  auto unmap = [ctx = context_, h = *memh] { ucp_mem_unmap(ctx, h); };
  if (loop_.in_loop()) {
    loop_.defer(unmap);
  } else {
    loop_.post(unmap);
  }
}

void UcxContext::finish_sends_before_close() {
  const auto wait = std::min(kShutdownSendWait, options().peer_timeout);
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    std::size_t in_flight = 0;
    loop_.run_sync([&] {
      for (const auto& [id, conn] : connections_)
        in_flight += conn->sends_in_flight_on_loop();
    });
    if (in_flight == 0) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      PSRT_LOG_WARN(
          "ucx: shutting down with {} send(s) still in flight after {} ms; they complete as "
          "cancelled, and a peer still reading one may deliver what the caller writes next into "
          "its buffer",
          in_flight, wait.count());
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void UcxContext::close_all_on_loop() {
  for (auto& [fd, h] : hellos_) {
    loop_.cancel_timer_on_loop(h.timer);
    loop_.remove_fd_on_loop(fd);
  }
  hellos_.clear();
  auto all = connections_;  // finish_close_on_loop erases from connections_
  for (auto& [id, conn] : all) {
    conn->close_on_loop(Status(ErrorCode::kCancelled, "transport shut down"), true);
  }
}

void UcxContext::after_loop_stopped() {
  // Bounded: let endpoint closes finish, then give up on the rest.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!close_requests_.empty() && std::chrono::steady_clock::now() < deadline) {
    ucp_worker_progress(worker_);
    progress_close_requests();
  }
  for (ucp_mem_h h : registrations_.clear())
    ucp_mem_unmap(context_, h);
}

}  // namespace psrt::transport::ucx
