// The bad-input half of the fault test: worker rank 0 of a 3-worker job registers like any
// worker, then sends the scheduler and a server what a broken or hostile peer would — a wrong
// secret, a wrong protocol version, garbage, requests before authentication, a push of the wrong
// length, an unknown key — and checks each gets an ERROR naming the cause and a closed
// connection; then what a peer holding the secret may not do: connect to a server as another
// rank, or send a message its role may not send. Then it unregisters; ranks 1 and 2 check that
// their rounds stayed exact.
#include "tests/integration/attacker.h"

#include <bit>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "ps/session/endpoint.h"
#include "ps/session/requests.h"
#include "psrt/psrt.h"
#include "tests/integration/raw_worker.h"
#include "transport/factory.h"

namespace psrt::test {
namespace {

using namespace std::chrono_literals;

// A raw transport peer: what came back, and whether the connection closed.
class Raw final : public transport::Receiver {
 public:
  transport::Placement place(transport::Connection&, std::span<const std::byte>,
                             std::size_t size) override {
    payload_.resize(size);
    return {{payload_.data(), size}};
  }
  void on_message(transport::Connection&, std::span<const std::byte> header,
                  const transport::Placement& p) override {
    std::lock_guard lock(mu_);
    ps::Header h;
    if (ps::decode(header, p.dest.size, {}, h).ok() && h.type == ps::MsgType::kError)
      error_ = std::string(reinterpret_cast<const char*>(payload_.data()), payload_.size());
    cv_.notify_all();
  }
  void on_closed(transport::Connection&, const Status&) override {
    std::lock_guard lock(mu_);
    closed_ = true;
    cv_.notify_all();
  }
  // The ERROR text, once the connection is also closed (empty on timeout).
  std::string error_then_close() {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, 10s, [&] { return error_ && closed_; });
    return error_ && closed_ ? *error_ : std::string();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::byte> payload_;
  std::optional<std::string> error_;
  bool closed_ = false;
};

// An authenticated worker-side handler: replies go to Requests, closes are recorded.
class Client final : public RequestsHandler {
 public:
  void on_peer_closed(ps::Peer& peer, const Status& why) override {
    RequestsHandler::on_peer_closed(peer, why);
    std::lock_guard lock(mu);
    closed.insert(peer.id());
    cv.notify_all();
  }
  bool wait_closed(std::uint64_t id) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, 10s, [&] { return closed.count(id) > 0; });
  }
  std::mutex mu;
  std::condition_variable cv;
  std::set<std::uint64_t> closed;
};

void expect(bool ok, const std::string& what) {
  expect_or_exit(ok, what, "attack");
}

// Sends `header` on a fresh unauthenticated connection; returns the ERROR text once closed.
// `secret`: the UCX bootstrap's (the attacker holds the job secret).
std::string raw_exchange(const std::string& backend, const std::string& secret,
                         const std::string& address, std::span<const std::byte> header) {
  auto rx = std::make_shared<Raw>();
  auto t = transport::create_transport(backend, rx, job_transport_options(secret));
  auto conn = t->connect(address);
  conn->send(header, {}, [](const Status&) {});
  auto text = rx->error_then_close();
  t->shutdown();
  return text;
}

}  // namespace

void run_attacks() {
  // Named references, not structured bindings: the lambdas below capture them, which clang 14
  // (clang-tidy's) does not accept for bindings.
  const JobEnv env = job_env();
  const std::string& backend = env.backend;
  const std::string& secret = env.secret;
  const std::string& scheduler_addr = env.scheduler;

  Client client;
  auto raw = connect_raw_worker(backend, secret, client, scheduler_addr);
  auto& endpoint = raw.endpoint;
  auto& t = raw.transport;
  auto& sched = raw.scheduler;
  auto reply = register_raw_worker(raw, client.requests);  // rank 0's credential, proven to servers
  std::vector<std::string> servers;
  expect(ps::decode_lines(reply.payload, servers).ok() && !servers.empty(), "registered");
  ps::Header barrier;
  barrier.type = ps::MsgType::kBarrier;
  client.requests.call(*sched, barrier, {}, "BARRIER", 60s);  // the others have run init()
  ps::Header locate;
  locate.type = ps::MsgType::kLocate;
  locate.key = 0;
  auto loc = client.requests.call(*sched, locate, {}, "LOCATE", 10s);
  std::vector<ps::SliceRecord> slices;
  expect(ps::decode_slices(loc.payload, loc.header.total, 1, slices).ok(), "located key 0");

  {  // A wrong secret is refused by the scheduler and by a server.
    for (const auto& [addr, role] : {std::pair{scheduler_addr, ps::Role::kScheduler},
                                     std::pair{servers[0], ps::Role::kServer}}) {
      Client other;
      auto bad =
          std::make_shared<ps::Endpoint>("not-the-job-secret", ps::Role::kWorker, ps::Limits{});
      bad->set_handler(&other);
      auto bt =
          transport::create_transport(backend, bad, job_transport_options("not-the-job-secret"));
      std::string what;
      ErrorCode code = ErrorCode::kOk;
      try {
        bad->connect(*bt, addr, 5, role, 0, 10s);
      } catch (const Error& e) {
        what = e.what();
        code = e.code();
      }
      bt->shutdown();
      // Over ucx the bootstrap hello is refused already (transport/ucx/hello.h).
      expect(code == ErrorCode::kAuthentication &&
                 (has(what, "wrong job secret") || has(what, "a different job secret")),
             "wrong secret refused by " + std::string(ps::to_string(role)) + ": " + what);
    }
  }
  {  // A wrong protocol version.
    ps::Header hello;
    hello.type = ps::MsgType::kHello;
    auto bytes = ps::encode(hello);
    bytes[4] = std::byte{ps::kProtocolVersion + 1};
    auto text = raw_exchange(backend, secret, servers[0], bytes);
    expect(has(text, "protocol version " + std::to_string(ps::kProtocolVersion + 1)),
           "wrong version refused: " + text);
  }
  {  // Garbage.
    std::vector<std::byte> junk(ps::kHeaderBytes, std::byte{0xab});
    auto text = raw_exchange(backend, secret, scheduler_addr, junk);
    expect(has(text, "bad magic"), "garbage refused: " + text);
  }
  {  // A request before authentication.
    ps::Header pull;
    pull.type = ps::MsgType::kPull;
    pull.dtype = ps::WireType::kF32;
    pull.count = pull.total = 1;
    auto text = raw_exchange(backend, secret, servers[0], ps::encode(pull));
    expect(has(text, "before authentication"), "unauthenticated PULL refused: " + text);
  }
  const auto& s0 = slices[0];
  auto server = [&] {
    return endpoint->connect(*t, servers[s0.server], 0, ps::Role::kServer, s0.server, 10s);
  };
  {  // A push of the wrong length: refused, and the weights stay as they were (ranks 1 and 2
     // check every round exactly).
    auto peer = server();
    std::vector<float> grad(s0.count - 1, 1000.f);
    ps::Header push;
    push.type = ps::MsgType::kPush;
    push.dtype = ps::WireType::kF32;
    push.key = 0;
    push.offset = s0.offset;
    push.count = s0.count - 1;
    push.total = loc.header.total;
    push.set_slice(s0.index);
    std::string error;
    push.request_id = client.requests.add(
        *peer, "bad PUSH", [&](const Status& s, const ps::Header&, auto) { error = s.message(); });
    ConstBuffer b{grad.data(), grad.size() * sizeof(float)};
    peer->send(push, {&b, 1});
    bool closed = client.wait_closed(peer->id());
    expect(closed && has(error, "wrong length"), "wrong-length PUSH refused: " + error);
  }
  {  // A push whose learning rate is not a number: refused before it reaches the weights.
    auto peer = server();
    std::vector<float> grad(s0.count, 1000.f);
    ps::Header push;
    push.type = ps::MsgType::kPush;
    push.dtype = ps::WireType::kF32;
    push.key = 0;
    push.offset = s0.offset;
    push.count = s0.count;
    push.total = loc.header.total;
    push.set_slice(s0.index);
    push.set_learning_rate(std::bit_cast<float>(0x7fc00000u));  // quiet NaN
    std::string error;
    push.request_id =
        client.requests.add(*peer, "PUSH with a NaN learning rate",
                            [&](const Status& s, const ps::Header&, auto) { error = s.message(); });
    ConstBuffer b{grad.data(), grad.size() * sizeof(float)};
    peer->send(push, {&b, 1});
    bool closed = client.wait_closed(peer->id());
    expect(closed && has(error, "carries learning rate nan"),
           "NaN learning rate refused: " + error);
  }
  {  // An unknown key.
    auto peer = server();
    ps::Header pull;
    pull.type = ps::MsgType::kPull;
    pull.dtype = ps::WireType::kF32;
    pull.key = 999;
    pull.count = pull.total = 1;
    std::string error;
    std::vector<float> out(1);
    pull.request_id =
        client.requests.add(*peer, "PULL of key 999",
                            [&](const Status& s, const ps::Header&, auto) { error = s.message(); },
                            {out.data(), sizeof(float)});
    peer->send(pull);
    bool closed = client.wait_closed(peer->id());
    expect(closed && has(error, "unknown key 999"), "unknown key refused: " + error);
  }
  {  // Holding the secret is not being another worker: rank 0 connects to the server as rank 1
     // (a live member) with its own credential, as rank 1 with none, and as rank 7 (no member).
    auto try_as = [&](std::uint32_t rank, bool with_credential) {
      Client other;
      auto ep = std::make_shared<ps::Endpoint>(secret, ps::Role::kWorker, ps::Limits{});
      ep->set_handler(&other);
      if (with_credential) ep->set_credential(ps::credential_of(reply.header));
      auto ot = transport::create_transport(backend, ep, job_transport_options(secret));
      std::string what = "accepted";
      try {
        auto peer = ep->connect(*ot, servers[s0.server], rank, ps::Role::kServer, s0.server, 10s);
        // Accepted (the old build): push 1000s as that rank; ranks 1 and 2 then see it.
        std::vector<float> grad(s0.count, 1000.f);
        ps::Header push;
        push.type = ps::MsgType::kPush;
        push.dtype = ps::WireType::kF32;
        push.offset = s0.offset;
        push.count = s0.count;
        push.total = loc.header.total;
        push.set_slice(s0.index);
        ConstBuffer b{grad.data(), grad.size() * sizeof(float)};
        peer->send(push, {&b, 1});
        std::this_thread::sleep_for(200ms);
      } catch (const Error& e) {
        if (e.code() == ErrorCode::kAuthentication) what = e.what();
      }
      ot->shutdown();
      expect(has(what, "only as the rank"),
             "connection as worker " + std::to_string(rank) + " refused: " + what);
    };
    try_as(1, true);
    try_as(1, false);
    try_as(7, true);
  }
  {  // Per-role permissions: a peer that authenticated as a server may not LOCATE (a worker's
     // request) at the scheduler.
    Client other;
    auto ep = std::make_shared<ps::Endpoint>(secret, ps::Role::kServer, ps::Limits{});
    ep->set_handler(&other);
    auto ot = transport::create_transport(backend, ep, job_transport_options(secret));
    auto peer = ep->connect(*ot, scheduler_addr, 0, ps::Role::kScheduler, 0, 10s);
    ps::Header loc2;
    loc2.type = ps::MsgType::kLocate;
    loc2.key = 4242;
    loc2.total = 1000;
    std::string what = "answered";
    try {
      other.requests.call(*peer, loc2, {}, "LOCATE", 10s);
    } catch (const Error& e) {
      what = e.what();
    }
    ot->shutdown();
    expect(has(what, "does not accept LOCATE from a server"),
           "LOCATE from a server refused: " + what);
  }
  ps::Header unreg;
  unreg.type = ps::MsgType::kUnregister;
  client.requests.call(*sched, unreg, {}, "UNREGISTER", 10s);
  t->shutdown();
}

void run_stale_rank(const std::string& sync) {
  const auto [backend, secret, scheduler_addr] = job_env();
  Client client;
  auto raw = connect_raw_worker(backend, secret, client, scheduler_addr);
  auto& [endpoint, t, sched] = raw;
  auto reply = register_raw_worker(raw, client.requests);  // and its credential
  expect(reply.header.assigned_rank() == 0, "registered as rank 0");
  std::vector<std::string> servers;
  expect(ps::decode_lines(reply.payload, servers).ok() && servers.size() == 1, "one server");
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!std::filesystem::exists(sync + ".inited")) {
    expect(std::chrono::steady_clock::now() < deadline, "rank 1 initialised key 0 within 30 s");
    std::this_thread::sleep_for(5ms);
  }
  // The connection that outlives the registration it was made under.
  auto old = endpoint->connect(*t, servers[0], 0, ps::Role::kServer, 0, 10s);
  ps::Header unreg;
  unreg.type = ps::MsgType::kUnregister;
  client.requests.call(*sched, unreg, {}, "UNREGISTER", 10s);

  WorkerOptions o;
  o.scheduler = scheduler_addr;
  o.transport = backend;
  o.secret = secret;
  o.rank = 0;
  Worker again = Worker::join(o);
  expect(again.rank() == 0, "rejoined as rank 0 (a new registration)");

  std::vector<float> grad(4, 1000.f);
  ps::Header push;
  push.type = ps::MsgType::kPush;
  push.dtype = ps::WireType::kF32;
  push.count = push.total = 4;
  std::string error = "accepted";
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  push.request_id = client.requests.add(*old, "PUSH on the old connection",
                                        [&](const Status& s, const ps::Header&, auto) {
                                          std::lock_guard lock(mu);
                                          if (!s.ok()) error = s.message();
                                          done = true;
                                          cv.notify_all();
                                        });
  ConstBuffer b{grad.data(), grad.size() * sizeof(float)};
  old->send(push, {&b, 1});
  {
    std::unique_lock lock(mu);
    cv.wait_for(lock, 10s, [&] { return done; });
  }
  std::this_thread::sleep_for(300ms);  // an accepted push (async) is applied by now
  std::vector<float> out(4, -1.f);
  again.pull(0, out).wait();
  expect(has(error, "no longer a live member"),
         "push on a connection of an earlier registration refused: " + error);
  expect(out == std::vector<float>(4, 0.f), "weights untouched (" + std::to_string(out[0]) + ")");
  again.shutdown();
  t->shutdown();
  if (std::FILE* f = std::fopen(sync.c_str(), "w")) std::fclose(f);
}

}  // namespace psrt::test
