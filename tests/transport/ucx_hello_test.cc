// The UCX bootstrap hello under attack (issue 30): a UCX endpoint is created from the worker
// address a hello carries, and that address names where UCX connects and which shared memory it
// attaches. An attacker on raw TCP to the listener sends forged, replayed, unproven, oversized
// and flooding hellos; no endpoint is created from any of them (hello_stats() counts every
// endpoint this process creates) and the real connection goes on. Before, the listener created
// an endpoint from any well-formed hello.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <thread>

#include "harness.h"
#include "transport/socket.h"
#include "transport/ucx/hello.h"
#include "transport/ucx/hello_admission.h"
#include "transport/ucx/hello_auth.h"
#include "transport/wire.h"

namespace psrt::transport::testing {
namespace {

namespace ucx = transport::ucx;
using Bytes = std::vector<std::byte>;

constexpr const char* kSecret = "ucx-hello-test-secret-0123456789abcdef";

Options with_secret(const std::string& secret) {
  Options o;
  o.bootstrap_secret = secret;
  o.connect_timeout = 3s;
  o.accept_timeout = 5s;
  return o;
}

auto soon(std::chrono::milliseconds d = 5s) {
  return std::chrono::steady_clock::now() + d;
}

// What a real connector with `options` sends to a listener that challenges it with `nonce`
// (authenticated when `authenticated`): the whole hello, worker address included. The
// connector's transport stays alive while `keep` does, so its worker address stays valid.
Bytes capture_hello(const Options& options, bool authenticated, const ucx::HelloNonce& nonce,
                    std::unique_ptr<Transport>& keep) {
  std::string bound;
  Fd listener = listen_tcp("127.0.0.1:0", bound);
  keep = create_transport("ucx", std::make_shared<RecordingReceiver>(), options);
  std::thread connector([&] {
    try {
      keep->connect(bound);
    } catch (const Error&) {  // we never answer
    }
  });
  pollfd p{listener.get(), POLLIN, 0};
  EXPECT_GT(::poll(&p, 1, 5000), 0);
  std::string peer;
  Fd fd = accept_tcp(listener.get(), peer);
  const auto challenge =
      ucx::encode_challenge({authenticated ? ucx::kHelloAuthenticated : std::uint16_t{0}, nonce});
  write_all(fd.get(), challenge.data(), challenge.size(), soon());
  Bytes hello(ucx::kHelloFixedBytes);
  read_all(fd.get(), hello.data(), hello.size(), soon());
  hello.resize(ucx::kHelloFixedBytes + wire::load<std::uint32_t>(hello.data() + 64));
  read_all(fd.get(), hello.data() + ucx::kHelloFixedBytes, hello.size() - ucx::kHelloFixedBytes,
           soon());
  fd.reset();  // the connector gives up
  connector.join();
  return hello;
}

// The connector's nonce in an encoded hello.
ucx::HelloNonce nonce_of(const Bytes& hello) {
  ucx::HelloNonce n;
  std::copy_n(hello.begin() + 68, n.size(), n.begin());
  return n;
}

// An attacker's raw connection to the listener: the challenge it was sent.
struct Raw {
  Fd fd;
  ucx::Challenge challenge;
};

Raw raw_connect(const std::string& address) {
  Raw r;
  r.fd = connect_tcp(address, 5s);
  std::array<std::byte, ucx::kChallengeBytes> bytes;
  read_all(r.fd.get(), bytes.data(), bytes.size(), soon());
  EXPECT_EQ(ucx::decode_challenge(bytes, r.challenge), "");
  return r;
}

// What the listener does with `hello` on `raw`: the number of bytes it answers before it closes
// the socket (0: closed without a reply), or -1 when it neither answers nor closes in time.
long answer_to(Raw& raw, const Bytes& hello) {
  try {
    write_all(raw.fd.get(), hello.data(), hello.size(), soon());
  } catch (const Error&) {
    return 0;  // closed while we were still writing
  }
  long got = 0;
  auto deadline = soon(3s);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{raw.fd.get(), POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    ssize_t n = ::recv(raw.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return got;
    if (n > 0) got += n;
    if (got >= static_cast<long>(ucx::kHelloFixedBytes)) return got;  // a reply: an endpoint
  }
  return -1;
}

// A listener with the job secret, and a real connection to it that carries messages.
struct Job {
  std::shared_ptr<RecordingReceiver> server_rx = std::make_shared<RecordingReceiver>();
  std::unique_ptr<Transport> server;
  std::string address;
  std::unique_ptr<Transport> client;
  std::shared_ptr<Connection> conn;
  std::size_t sent = 0;

  explicit Job(const Options& options = with_secret(kSecret)) {
    server = create_transport("ucx", server_rx, options);
    address = server->listen("127.0.0.1:0");
    client = create_transport("ucx", std::make_shared<RecordingReceiver>(), options);
    conn = client->connect(address);
    expect_it_still_works();
  }
  ~Job() {
    client->shutdown();
    server->shutdown();
  }
  void expect_it_still_works() {
    auto payload = pattern(100000, static_cast<std::uint32_t>(sent));
    ConstBuffer b{payload.data(), payload.size()};
    SendWaiter w;
    conn->send(bytes_of("message " + std::to_string(sent)), {&b, 1}, w.callback());
    ++sent;
    ASSERT_TRUE(w.wait(1));
    EXPECT_TRUE(w.statuses()[0].ok()) << w.statuses()[0].message();
    ASSERT_TRUE(server_rx->wait_messages(sent));
    EXPECT_EQ(server_rx->messages().back().payload, payload);
    EXPECT_TRUE(conn->is_open());
  }
};

// ---- the proof ---------------------------------------------------------------------------------

TEST(UcxHelloAuth, TheProofCoversTheAddressTheTokenTheNoncesAndTheSide) {
  ucx::Hello h;
  h.route_token = ucx::random_route_token();
  h.boot_id = "host";
  h.nonce = ucx::random_hello_nonce();
  h.worker_address.assign(300, std::byte{7});
  const auto listener_nonce = ucx::random_hello_nonce();
  Bytes signed_hello = ucx::encode_hello(h);
  ucx::sign_hello(kSecret, ucx::HelloSide::kConnector, listener_nonce, h.nonce, signed_hello);
  auto proves = [&](const Bytes& b, ucx::HelloSide side = ucx::HelloSide::kConnector) {
    return ucx::hello_proves_secret(kSecret, side, listener_nonce, h.nonce, b);
  };
  EXPECT_TRUE(proves(signed_hello));
  EXPECT_FALSE(proves(signed_hello, ucx::HelloSide::kListener)) << "reflected";
  EXPECT_FALSE(ucx::hello_proves_secret("another-job-secret-0123456789abcdef",
                                        ucx::HelloSide::kConnector, listener_nonce, h.nonce,
                                        signed_hello));
  EXPECT_FALSE(ucx::hello_proves_secret(kSecret, ucx::HelloSide::kConnector,
                                        ucx::random_hello_nonce(), h.nonce, signed_hello))
      << "replayed to another challenge";
  for (std::size_t at : {std::size_t{8}, std::size_t{30}, std::size_t{64}, std::size_t{70},
                         ucx::kHelloFixedBytes, signed_hello.size() - 1}) {
    Bytes b = signed_hello;
    b[at] ^= std::byte{1};
    EXPECT_FALSE(proves(b)) << "byte " << at << " altered";
  }
  Bytes unflagged = signed_hello;
  unflagged[6] = std::byte{0};
  EXPECT_FALSE(proves(unflagged)) << "the flag says whether there is a proof";
}

TEST(UcxHelloAdmission, EndpointsWithoutASecretAreRateLimitedPerHost) {
  ucx::HelloAdmission a;
  const auto t0 = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  int admitted = 0;
  for (int i = 0; i < 200; ++i)
    admitted += a.admit_endpoint("10.0.0.1:" + std::to_string(1000 + i), t0).empty() ? 1 : 0;
  EXPECT_EQ(admitted, 128) << "the burst";
  const std::string why = a.admit_endpoint("10.0.0.1:9", t0);
  EXPECT_NE(why.find("more than 64 UCX endpoints a second from 10.0.0.1"), std::string::npos)
      << why;
  EXPECT_EQ(a.admit_endpoint("10.0.0.2:9", t0), "") << "another host has its own bucket";
  admitted = 0;
  for (int i = 0; i < 100; ++i)
    admitted += a.admit_endpoint("10.0.0.1:9", t0 + 500ms).empty() ? 1 : 0;
  EXPECT_EQ(admitted, 32) << "64 a second";
}

TEST(UcxHelloAdmission, PendingHandshakesAreCappedPerHostAndInTotal) {
  ucx::HelloAdmission a;
  for (std::size_t i = 0; i < ucx::HelloAdmission::kMaxPendingPerHost; ++i)
    ASSERT_EQ(a.admit("10.0.0.1:" + std::to_string(i)), "");
  EXPECT_NE(a.admit("10.0.0.1:1").find("128 UCX handshakes from 10.0.0.1 are pending"),
            std::string::npos);
  a.release("10.0.0.1:5");
  EXPECT_EQ(a.admit("10.0.0.1:5"), "");
  for (int h = 2; a.pending() < ucx::HelloAdmission::kMaxPending; ++h)
    ASSERT_EQ(a.admit("10.0.0." + std::to_string(h) + ":1"), "");
  EXPECT_NE(a.admit("10.0.1.1:1").find("512 UCX handshakes are pending"), std::string::npos);
}

// ---- the attacker on raw TCP -------------------------------------------------------------------

// A hello with a real worker address (another UCX process's, as a sniffer or a local process can
// have it) and a forged proof; a real connector's hello replayed to another challenge; a hello
// that claims no proof. None creates an endpoint; the real connection goes on.
TEST(UcxHello, ForgedReplayedAndUnprovenHellosCreateNoEndpoint) {
  Job job;
  std::unique_ptr<Transport> other;
  // A genuine hello of a job member, proven for a challenge the attacker chose.
  const auto attacker_nonce = ucx::random_hello_nonce();
  const Bytes genuine = capture_hello(with_secret(kSecret), true, attacker_nonce, other);
  ASSERT_TRUE(ucx::hello_proves_secret(kSecret, ucx::HelloSide::kConnector, attacker_nonce,
                                       nonce_of(genuine), genuine));
  const auto before = ucx::hello_stats();

  {  // Forged: the genuine address and token, the proof bytes flipped.
    Raw raw = raw_connect(job.address);
    EXPECT_EQ(raw.challenge.flags, ucx::kHelloAuthenticated);
    Bytes forged = genuine;
    forged[ucx::kHelloMacOffset] ^= std::byte{0xff};
    EXPECT_EQ(answer_to(raw, forged), 0) << "closed without a reply";
  }
  {  // Replayed: proven, but for the attacker's challenge, not this one.
    Raw raw = raw_connect(job.address);
    EXPECT_EQ(answer_to(raw, genuine), 0);
  }
  {  // Unproven: flag clear, proof zero (a build or a process without the secret).
    Raw raw = raw_connect(job.address);
    Bytes plain = genuine;
    plain[6] = std::byte{0};
    std::fill_n(plain.begin() + ucx::kHelloMacOffset, ucx::kHelloMacBytes, std::byte{0});
    EXPECT_EQ(answer_to(raw, plain), 0);
  }
  const auto after = ucx::hello_stats();
  EXPECT_EQ(after.endpoints_created, before.endpoints_created) << "no endpoint from any of them";
  EXPECT_EQ(after.hellos_refused - before.hellos_refused, 3u);
  job.expect_it_still_works();
  EXPECT_TRUE(job.server_rx->closed().empty());
}

// An address of 1 MiB, or one byte over the bound: refused from the fixed part, before a byte of
// the address is read or anything is allocated for it.
TEST(UcxHello, AnOversizedAddressIsRefusedBeforeItIsRead) {
  Job job;
  const auto before = ucx::hello_stats();
  for (std::size_t len : {std::size_t{1} << 20, ucx::kMaxWorkerAddressBytes + 1}) {
    Raw raw = raw_connect(job.address);
    ucx::Hello h;
    h.flags = ucx::kHelloAuthenticated;
    h.worker_address.assign(1, std::byte{1});
    Bytes bytes = ucx::encode_hello(h);
    bytes.resize(ucx::kHelloFixedBytes);  // the fixed part only, announcing `len`
    wire::store<std::uint32_t>(bytes.data() + 64, static_cast<std::uint32_t>(len));
    EXPECT_EQ(answer_to(raw, bytes), 0) << len;
  }
  const auto after = ucx::hello_stats();
  EXPECT_EQ(after.endpoints_created, before.endpoints_created);
  EXPECT_EQ(after.hellos_refused - before.hellos_refused, 2u);
  job.expect_it_still_works();
}

// 300 forged hellos from 10 threads at once: not one endpoint; a new real connection and the old
// one both work afterwards.
TEST(UcxHello, AFloodOfForgedHellosCreatesNoEndpointAndTheJobGoesOn) {
  Job job;
  std::unique_ptr<Transport> other;
  const Bytes genuine = capture_hello(with_secret(kSecret), true, ucx::random_hello_nonce(), other);
  const auto before = ucx::hello_stats();
  std::atomic<int> closed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 10; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 30; ++i) {
        try {
          Raw raw = raw_connect(job.address);
          Bytes forged = genuine;
          forged[ucx::kHelloMacOffset + static_cast<std::size_t>(i)] ^= std::byte{1};
          if (answer_to(raw, forged) == 0) ++closed;
        } catch (const Error&) {
        }
      }
    });
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(closed.load(), 300);
  const auto after = ucx::hello_stats();
  EXPECT_EQ(after.endpoints_created, before.endpoints_created);
  EXPECT_EQ(after.hellos_refused - before.hellos_refused, 300u);
  job.expect_it_still_works();
  auto rx = std::make_shared<RecordingReceiver>();
  auto late = create_transport("ucx", rx, with_secret(kSecret));
  auto conn = late->connect(job.address);
  EXPECT_EQ(ucx::hello_stats().endpoints_created - after.endpoints_created, 2u)
      << "one endpoint on each side of the real connection";
  SendWaiter w;
  conn->send(bytes_of("late"), {}, w.callback());
  ASSERT_TRUE(w.wait(1));
  EXPECT_TRUE(job.server_rx->wait_messages(job.sent + 1));
  late->shutdown();
}

// Sockets that never send a hello: 128 from one host wait (each got its challenge), the next
// ones are closed at once without one; once they are gone a real connection is taken again.
TEST(UcxHello, PendingHandshakesFromOneHostAreCapped) {
  Job job;
  const auto before = ucx::hello_stats();
  std::vector<Fd> silent;
  for (int i = 0; i < 140; ++i)
    silent.push_back(connect_tcp(job.address, 5s));
  int challenged = 0, refused = 0;
  for (auto& fd : silent) {
    std::array<std::byte, ucx::kChallengeBytes> c;
    try {
      read_all(fd.get(), c.data(), c.size(), soon());
      ++challenged;
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kConnectionClosed) ++refused;
    }
  }
  EXPECT_EQ(challenged, 128);
  EXPECT_EQ(refused, 12);
  EXPECT_EQ(ucx::hello_stats().hellos_refused - before.hellos_refused, 12u);
  silent.clear();
  std::this_thread::sleep_for(200ms);  // the listener sees them close
  auto late = create_transport("ucx", std::make_shared<RecordingReceiver>(), with_secret(kSecret));
  EXPECT_NO_THROW(late->connect(job.address));
  late->shutdown();
  job.expect_it_still_works();
}

// A process with another secret, or none, is refused by the listener, and says why.
TEST(UcxHello, AConnectorWithAnotherSecretOrNoneIsRefusedNamingTheSecret) {
  Job job;
  const auto before = ucx::hello_stats();
  for (const std::string secret : {"another-job-secret-0123456789abcdef", ""}) {
    auto t = create_transport("ucx", std::make_shared<RecordingReceiver>(), with_secret(secret));
    try {
      t->connect(job.address);
      ADD_FAILURE() << "connected with secret '" << secret << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kAuthentication) << e.what();
      EXPECT_NE(std::string(e.what()).find("PSRT_SECRET"), std::string::npos) << e.what();
    }
    t->shutdown();
  }
  EXPECT_EQ(ucx::hello_stats().endpoints_created, before.endpoints_created);
  job.expect_it_still_works();
}

// Without a secret on either side the exchange works as before.
TEST(UcxHello, PlainTransportsStillConnect) {
  Job job(Options{});
  job.expect_it_still_works();
}

}  // namespace
}  // namespace psrt::transport::testing
