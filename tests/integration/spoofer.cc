// An attacker that never learns the job secret and speaks only the wire formats: it tries to
// inject PUSH, SHUTDOWN and UNREGISTER into a running job as if they came from the job's
// authenticated peers.
//
//   ps_spoofer ucx SCHEDULER SERVER COUNT   raw UCX (libucp only): a bootstrap hello (version
//       3, with a made-up proof of the secret) to each target, printing "HELLO REFUSED" where it
//       is refused; where it is taken (a build that created endpoints from unproven hellos),
//       active messages with forged routes (random route tokens), then the same messages on its
//       own connection, which must be refused as unauthenticated
//   ps_spoofer tcp SCHEDULER SERVER COUNT   raw sockets: the same messages, each on a fresh
//       connection that never authenticated
//
// COUNT is the element count of key 0 (one slice, index 0, on the server). Prints "SENT <what>"
// for every message that left and "GOT ERROR <text>" for every ERROR that came back; exits 0
// unless the attack could not be carried out at all. Whether the job stayed exact is for the
// job's workers to say (ps_worker victim).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>
#if PSRT_SPOOFER_UCX
#include <ucp/api/ucp.h>
#endif

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ps/session/protocol.h"  // constants only: magic, version, message type numbers

namespace {

using Bytes = std::vector<unsigned char>;

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "spoofer: %s\n", why.c_str());
  std::exit(2);
}

void put(Bytes& b, std::size_t at, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i)
    b[at + i] = static_cast<unsigned char>(v >> (8 * i));
}
std::uint64_t get(const unsigned char* p, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i)
    v |= std::uint64_t{p[i]} << (8 * i);
  return v;
}

// The PS header (ps/session/protocol.h layout), little-endian.
Bytes ps_header(psrt::ps::MsgType type, std::uint8_t dtype, std::uint64_t count) {
  Bytes h(64, 0);
  put(h, 0, psrt::ps::kMagic, 4);
  put(h, 4, psrt::ps::kProtocolVersion, 2);
  h[6] = static_cast<unsigned char>(type);
  h[7] = dtype;
  put(h, 8, 77, 8);  // request id
  put(h, 32, count, 8);
  put(h, 40, count, 8);  // total: the key is one slice
  return h;
}

struct Attack {
  const char* what;
  bool to_server;  // else to the scheduler
  Bytes header;
  Bytes payload;
};

std::vector<Attack> attacks(std::uint64_t count) {
  using psrt::ps::MsgType;
  std::vector<Attack> out;
  // A gradient of 1000s: applied once, every weight is off by thousands.
  Bytes grad(count * 4);
  for (std::size_t i = 0; i < count; ++i)
    put(grad, i * 4, 0x447a0000u, 4);  // 1000.0f
  out.push_back({"PUSH", true, ps_header(MsgType::kPush, 0, count), grad});
  Bytes reason = {'s', 'p', 'o', 'o', 'f'};
  out.push_back({"SHUTDOWN", true, ps_header(MsgType::kShutdown, 3, 0), reason});
  out.push_back({"UNREGISTER", false, ps_header(MsgType::kUnregister, 3, 0), {}});
  return out;
}

int tcp_connect(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) die("bad address " + address);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1))));
  if (inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr) != 1)
    die("bad address " + address);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    die("cannot connect to " + address + ": " + std::strerror(errno));
  return fd;
}

bool write_all(int fd, const unsigned char* p, std::size_t n) {
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

// Reads exactly n bytes within `ms`; false on EOF, error or timeout.
bool read_all(int fd, unsigned char* p, std::size_t n, int ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (n > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd pfd{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) return false;
    ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

// --- tcp: frames of the tcp backend (transport/tcp/frame.h) on connections that never
// authenticate.

int run_tcp(const std::string& scheduler, const std::string& server, std::uint64_t count) {
  for (const Attack& a : attacks(count)) {
    int fd = tcp_connect(a.to_server ? server : scheduler);
    Bytes frame(24, 0);
    put(frame, 0, 0x54525350, 4);  // 'PSRT'
    put(frame, 4, 1, 2);
    put(frame, 6, a.header.size(), 2);
    put(frame, 8, a.payload.size(), 8);
    frame.insert(frame.end(), a.header.begin(), a.header.end());
    frame.insert(frame.end(), a.payload.begin(), a.payload.end());
    if (write_all(fd, frame.data(), frame.size())) std::printf("SENT %s\n", a.what);
    // The answer: an ERROR frame, then the close.
    unsigned char prefix[24];
    if (read_all(fd, prefix, 24, 5000)) {
      std::size_t hl = get(prefix + 6, 2), pl = get(prefix + 8, 8);
      Bytes rest(hl + pl);
      if (pl < 4096 && read_all(fd, rest.data(), rest.size(), 5000) && hl == 64 && rest[6] == 5)
        std::printf("GOT ERROR %s: %.*s\n", a.what, static_cast<int>(pl),
                    reinterpret_cast<const char*>(rest.data() + hl));
    }
    ::close(fd);
  }
  std::fflush(stdout);
  return 0;
}

#if PSRT_SPOOFER_UCX
// --- ucx: the bootstrap hello (transport/ucx/hello.h), then raw active messages.

struct Ucx {
  ucp_context_h ctx = nullptr;
  ucp_worker_h worker = nullptr;
};

ucs_status_t on_am(void*, const void* header, std::size_t header_length, void* data,
                   std::size_t length, const ucp_am_recv_param_t* param) {
  // Replies to our own connection: route (8 or 24 bytes), then the PS header.
  if (header_length < 64 || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) return UCS_OK;
  auto* h = static_cast<const unsigned char*>(header) + (header_length - 64);
  if (h[6] == static_cast<unsigned char>(psrt::ps::MsgType::kError))
    std::printf("GOT ERROR %.*s\n", static_cast<int>(length), static_cast<const char*>(data));
  return UCS_OK;
}

void progress(Ucx& u, int ms) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    ucp_worker_progress(u.worker);
    ::usleep(200);
  }
}

struct Target {
  int control = -1;  // the liveness socket: held open while we send
  ucp_ep_h ep = nullptr;
  Bytes our_token;  // the target's route token for our connection
};

void ignore_ep_error(void*, ucp_ep_h, ucs_status_t) {}

// Bootstraps one connection to `address` with hello version 3: the listener's CHALLENGE, then a
// HELLO with our worker address and a made-up proof (we have no secret). Returns false, printing
// "HELLO REFUSED", when the listener closes on it; a build that took it would answer with its own
// HELLO, and the attack goes on as before on that endpoint.
bool bootstrap(Ucx& u, const std::string& address, Target& t) {
  ucp_worker_attr_t wa{};
  wa.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS;
  if (ucp_worker_query(u.worker, &wa) != UCS_OK) die("ucp_worker_query");
  Bytes mine(static_cast<unsigned char*>(static_cast<void*>(wa.address)),
             static_cast<unsigned char*>(static_cast<void*>(wa.address)) + wa.address_length);
  ucp_worker_release_address(u.worker, wa.address);
  t.control = tcp_connect(address);
  Bytes challenge(24);
  if (!read_all(t.control, challenge.data(), challenge.size(), 10000) ||
      get(challenge.data(), 4) != 0x58555350 || get(challenge.data() + 4, 2) != 3)
    die("no version 3 challenge from " + address);
  // magic, version 3, flags (1: proven), token[16], boot id[40] (empty: another host),
  // address_len, nonce[16], mac[32] (random: forged), address.
  constexpr std::size_t kFixed = 116;
  Bytes hello(kFixed, 0);
  put(hello, 0, 0x58555350, 4);  // 'PSUX'
  put(hello, 4, 3, 2);
  put(hello, 6, 1, 2);
  (void)::getrandom(hello.data() + 8, 16, 0);
  put(hello, 64, mine.size(), 4);
  (void)::getrandom(hello.data() + 68, 16 + 32, 0);
  hello.insert(hello.end(), mine.begin(), mine.end());
  Bytes reply(kFixed);
  if (!write_all(t.control, hello.data(), hello.size()) ||
      !read_all(t.control, reply.data(), kFixed, 10000)) {
    std::printf("HELLO REFUSED by %s: no endpoint\n", address.c_str());
    ::close(t.control);
    t.control = -1;
    return false;
  }
  t.our_token.assign(reply.begin() + 8, reply.begin() + 24);
  Bytes theirs(get(reply.data() + 64, 4));
  if (!read_all(t.control, theirs.data(), theirs.size(), 10000)) die("truncated hello reply");
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(theirs.data());
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = ignore_ep_error;
  if (ucp_ep_create(u.worker, &ep, &t.ep) != UCS_OK) die("ucp_ep_create");
  std::printf("BOOTSTRAPPED %s with hello version 3\n", address.c_str());
  return true;
}

// Route: the 16-byte token.
void send_am(Ucx& u, Target& t, const Bytes& route, bool own, const Attack& a) {
  Bytes header = route;
  header.insert(header.end(), a.header.begin(), a.header.end());
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
  param.datatype = ucp_dt_make_contig(1);
  ucs_status_ptr_t req =
      ucp_am_send_nbx(t.ep, 0, header.data(), header.size(),
                      a.payload.empty() ? nullptr : a.payload.data(), a.payload.size(), &param);
  if (UCS_PTR_IS_ERR(req)) return;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (req != nullptr && ucp_request_check_status(req) == UCS_INPROGRESS &&
         std::chrono::steady_clock::now() < end)
    ucp_worker_progress(u.worker);
  if (req != nullptr) ucp_request_free(req);
  std::printf("SENT %s%s\n", a.what, own ? " on our own connection" : " with a forged route");
}

int run_ucx(const std::string& scheduler, const std::string& server, std::uint64_t count) {
  Ucx u;
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM;
  if (ucp_init(&params, nullptr, &u.ctx) != UCS_OK) die("ucp_init");
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  if (ucp_worker_create(u.ctx, &wp, &u.worker) != UCS_OK) die("ucp_worker_create");
  ucp_am_handler_param_t am{};
  am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  am.id = 0;
  am.cb = on_am;
  am.flags = UCP_AM_FLAG_WHOLE_MSG;
  ucp_worker_set_am_recv_handler(u.worker, &am);

  Target targets[2];
  const bool server_took = bootstrap(u, server, targets[0]);
  const bool scheduler_took = bootstrap(u, scheduler, targets[1]);
  if (!server_took || !scheduler_took) {  // no endpoint to send on
    for (Target& t : targets)
      if (t.control >= 0) ::close(t.control);
    ucp_worker_destroy(u.worker);
    ucp_cleanup(u.ctx);
    std::fflush(stdout);
    return 0;
  }
  progress(u, 200);  // wire-up
  // Forged: seven random routes per message (ours is the only one we know; a peer's is 128
  // random bits).
  for (const Attack& a : attacks(count)) {
    Target& t = targets[a.to_server ? 0 : 1];
    for (int sent = 0; sent < 7; ++sent) {
      Bytes route(16);
      (void)::getrandom(route.data(), route.size(), 0);
      send_am(u, t, route, false, a);
    }
  }
  progress(u, 300);
  // Our own connection, with its real route: it never authenticated.
  for (const Attack& a : attacks(count)) {
    Target& t = targets[a.to_server ? 0 : 1];
    send_am(u, t, t.our_token, true, a);
  }
  progress(u, 1000);
  std::fflush(stdout);
  for (Target& t : targets) {
    ucp_request_param_t cp{};
    cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t r = ucp_ep_close_nbx(t.ep, &cp);
    while (r != nullptr && !UCS_PTR_IS_ERR(r) && ucp_request_check_status(r) == UCS_INPROGRESS)
      ucp_worker_progress(u.worker);
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) ucp_request_free(r);
    ::close(t.control);
  }
  ucp_worker_destroy(u.worker);
  ucp_cleanup(u.ctx);
  return 0;
}
#endif  // PSRT_SPOOFER_UCX

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) die("usage: ps_spoofer ucx|tcp SCHEDULER SERVER COUNT");
  const std::string mode = argv[1];
  const std::uint64_t count = std::stoull(argv[4]);
  if (mode == "tcp") return run_tcp(argv[2], argv[3], count);
#if PSRT_SPOOFER_UCX
  if (mode == "ucx") return run_ucx(argv[2], argv[3], count);
#endif
  die("unknown mode " + mode);
}
