// The secure mode (transport/secure) under attack: a peer with another secret, a peer that does
// not run in secure mode, a silent peer, and a man in the middle on 127.0.0.1 that flips,
// replays or drops frames of a tcp connection. Every case asserts what the receiving side
// delivers (nothing altered) and that it closes the connection naming the cause.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "harness.h"
#include "mitm_relay.h"
#include "transport/secure/connection.h"
#include "transport/secure/context.h"
#include "transport/secure/crypt_pool.h"
#include "transport/secure/crypto.h"
#include "transport/secure/handshake.h"
#include "transport/secure/segments.h"
#include "transport/socket.h"
#include "transport/wire.h"

namespace psrt::transport::testing {
namespace {

Options secure_options(const std::string& secret) {
  Options o;
  o.secure_secret = secret;
  o.connect_timeout = 3s;
  return o;
}

int count_of(const std::string& text, const std::string& needle) {
  int n = 0;
  for (auto p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1))
    ++n;
  return n;
}

// ---- the primitives -------------------------------------------------------------------------

TEST(SecureCrypto, BothEndsDeriveMatchingKeysAndOnlyWithTheSameSecret) {
  using namespace secure;
  const Nonce a = random_nonce(), b = random_nonce();
  const SessionKeys ka = derive_session("job-secret-0123456789", a, b);
  const SessionKeys kb = derive_session("job-secret-0123456789", b, a);
  EXPECT_EQ(ka.send, kb.recv);
  EXPECT_EQ(ka.recv, kb.send);
  EXPECT_NE(ka.send, ka.recv) << "one key per direction";
  EXPECT_EQ(ka.my_confirm, kb.peer_confirm);
  EXPECT_EQ(ka.peer_confirm, kb.my_confirm);
  EXPECT_NE(ka.my_confirm, ka.peer_confirm) << "a reflected CONFIRM must not verify";
  const SessionKeys other = derive_session("job-secret-0123456780", b, a);
  EXPECT_NE(other.recv, ka.send);
  EXPECT_NE(other.peer_confirm, ka.my_confirm);
  const SessionKeys fresh = derive_session("job-secret-0123456789", a, random_nonce());
  EXPECT_NE(fresh.send, ka.send) << "fresh nonces, fresh keys";
  try {
    derive_session("job-secret-0123456789", a, a);
    ADD_FAILURE() << "equal nonces (a reflected HELLO) must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kAuthentication);
  }
}

TEST(SecureCrypto, SealedBytesOpenOnlyUnderTheSameKeyDomainAndSequence) {
  using namespace secure;
  Key key{};
  key[0] = std::byte{7};
  auto plain = pattern(100000, 3);
  Aead seal(key, true);
  std::vector<std::byte> sealed(plain.size());
  seal.begin(Domain::kPayload, 41);
  seal.crypt(plain.data(), sealed.data(), plain.size());
  const Tag tag = seal.seal_tag();
  EXPECT_NE(sealed, plain);
  auto open = [&](Domain d, std::uint64_t seq, std::vector<std::byte> bytes, const Key& k) {
    Aead opener(k, false);
    opener.begin(d, seq);
    opener.crypt(bytes.data(), bytes.data(), bytes.size());  // in place
    const bool ok = opener.open_tag(tag);
    return std::make_pair(ok, bytes);
  };
  auto [ok, opened] = open(Domain::kPayload, 41, sealed, key);
  EXPECT_TRUE(ok);
  EXPECT_EQ(opened, plain);
  EXPECT_FALSE(open(Domain::kPayload, 42, sealed, key).first) << "another sequence number";
  EXPECT_FALSE(open(Domain::kHeader, 41, sealed, key).first) << "the header's nonce";
  Key other = key;
  other[31] = std::byte{1};
  EXPECT_FALSE(open(Domain::kPayload, 41, sealed, other).first) << "another connection's key";
  auto flipped = sealed;
  flipped[5000] ^= std::byte{1};
  EXPECT_FALSE(open(Domain::kPayload, 41, flipped, key).first) << "one flipped bit";
}

TEST(SecureCrypto, ASegmentOpensOnlyUnderItsOwnIndex) {
  using namespace secure;
  Key key{};
  key[3] = std::byte{5};
  auto plain = pattern(4096, 9);
  std::vector<std::byte> sealed(plain.size());
  Aead seal(key, true);
  seal.begin(Domain::kPayload, 7, 1);
  seal.crypt(plain.data(), sealed.data(), plain.size());
  const Tag tag = seal.seal_tag();
  auto opens = [&](Domain d, std::uint32_t segment) {
    auto bytes = sealed;
    Aead opener(key, false);
    opener.begin(d, 7, segment);
    opener.crypt(bytes.data(), bytes.data(), bytes.size());
    return opener.open_tag(tag) && bytes == plain;
  };
  EXPECT_TRUE(opens(Domain::kPayload, 1));
  EXPECT_FALSE(opens(Domain::kPayload, 0)) << "segment 0's nonce";
  EXPECT_FALSE(opens(Domain::kPayload, 2)) << "segment 2's nonce";
  EXPECT_FALSE(opens(Domain::kHeader, 1)) << "the header's domain";
}

TEST(SecureSegments, TheCutCoversThePayloadExactlyInAlignedPiecesOfAtLeastTheMinimum) {
  using namespace secure;
  EXPECT_EQ(segment_count(0), 0u);
  EXPECT_EQ(segment_count(1), 1u);
  EXPECT_EQ(segment_count(2 * kMinSegmentBytes - 1), 1u);
  EXPECT_EQ(segment_count(2 * kMinSegmentBytes), 2u);
  EXPECT_EQ(segment_count(1 << 20), 4u);
  EXPECT_EQ(segment_count(std::size_t{1} << 31), kMaxSegments);
  for (const std::size_t total :
       {std::size_t{1}, std::size_t{65539}, 2 * kMinSegmentBytes, std::size_t{(1 << 20) + 13},
        std::size_t{4194304}, std::size_t{(64u << 20) + 1}, 3 * kMinSegmentBytes + 1}) {
    SCOPED_TRACE(total);
    const std::size_t n = segment_count(total);
    std::size_t next = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const Segment s = segment_of(total, i);
      EXPECT_EQ(s.offset, next);
      EXPECT_EQ(s.offset % kSegmentAlignment, 0u);
      EXPECT_GT(s.size, 0u);
      if (n > 1) {
        EXPECT_GE(s.size, kMinSegmentBytes - kSegmentAlignment * kMaxSegments);
      }
      if (i + 1 < n) {
        EXPECT_EQ(s.size, segment_of(total, 0).size);
      }
      next = s.offset + s.size;
    }
    EXPECT_EQ(next, total);
  }
}

TEST(SecureCryptPool, RunsEveryIndexOnceOnSeveralThreadsAndRethrowsAfterAll) {
  using namespace secure;
  for (const int threads : {0, 1, 3}) {
    SCOPED_TRACE(threads);
    CryptPool pool(threads);
    for (int round = 0; round < 200; ++round) {
      std::array<std::atomic<int>, 4> runs{};
      pool.run(4, [&](std::size_t i) { runs[i].fetch_add(1); });
      for (auto& r : runs)
        ASSERT_EQ(r.load(), 1);
    }
    std::array<std::atomic<int>, 4> runs{};
    try {
      pool.run(4, [&](std::size_t i) {
        runs[i].fetch_add(1);
        if (i == 2) throw Error(ErrorCode::kInternal, "segment 2 failed");
      });
      ADD_FAILURE() << "the failure of one index must reach the caller";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "segment 2 failed");
    }
    for (auto& r : runs)
      EXPECT_EQ(r.load(), 1) << "every index ran although one failed";
  }
  // Two callers at once share the pool threads and each gets all its indices.
  CryptPool pool(1);
  std::atomic<int> total{0};
  std::thread other([&] {
    for (int i = 0; i < 500; ++i)
      pool.run(4, [&](std::size_t) { total.fetch_add(1); });
  });
  for (int i = 0; i < 500; ++i)
    pool.run(3, [&](std::size_t) { total.fetch_add(1); });
  other.join();
  EXPECT_EQ(total.load(), 500 * 4 + 500 * 3);
}

TEST(SecureCrypto, HandshakeDecoderRefusesWhatIsNotAHandshakeMessage) {
  using namespace secure;
  HandshakeMessage m;
  m.type = HandshakeType::kConfirm;
  m.body[3] = std::byte{9};
  std::array<std::byte, kHandshakeBytes> bytes;
  encode_handshake(m, bytes.data());
  HandshakeMessage out;
  EXPECT_EQ(decode_handshake(bytes, out), "");
  EXPECT_EQ(out.type, HandshakeType::kConfirm);
  EXPECT_EQ(out.body, m.body);
  auto bad = [&](std::size_t at, std::byte value) {
    auto copy = bytes;
    copy[at] = value;
    return decode_handshake(copy, out);
  };
  EXPECT_NE(bad(0, std::byte{'X'}).find("magic"), std::string::npos);
  EXPECT_NE(bad(4, std::byte{1}).find("version 1 (this build speaks 2"), std::string::npos)
      << "a peer that seals payloads whole";
  EXPECT_NE(bad(6, std::byte{3}).find("type 3"), std::string::npos);
  EXPECT_NE(decode_handshake(std::span(bytes).first(39), out).find("39-byte"), std::string::npos);
}

class SecureMode : public ::testing::TestWithParam<std::string> {};

// Two transports of `backend` in secure mode under one secret, the client connected.
struct SecurePair {
  explicit SecurePair(const std::string& backend, bool keep_payloads = true)
      : server_rx(std::make_shared<RecordingReceiver>()),
        server(nullptr),
        client_rx(std::make_shared<RecordingReceiver>()) {
    server_rx->keep_payloads = keep_payloads;
    server = create_transport(backend, server_rx, secure_options("the-real-job-secret-0001"));
    client = create_transport(backend, client_rx, secure_options("the-real-job-secret-0001"));
    conn = client->connect(server->listen("127.0.0.1:0"));
  }
  std::shared_ptr<RecordingReceiver> server_rx;
  std::unique_ptr<Transport> server;
  std::shared_ptr<RecordingReceiver> client_rx;
  std::unique_ptr<Transport> client;
  std::shared_ptr<Connection> conn;
};

TEST_P(SecureMode, WrongSecretCannotConnectAndBothSidesSaySo) {
  auto server_rx = std::make_shared<RecordingReceiver>();
  auto server = create_transport(GetParam(), server_rx, secure_options("the-real-job-secret-0001"));
  const std::string address = server->listen("127.0.0.1:0");
  auto client_rx = std::make_shared<RecordingReceiver>();
  auto client = create_transport(GetParam(), client_rx, secure_options("a-guessed-secret-000000"));
  ::testing::internal::CaptureStderr();
  try {
    client->connect(address);
    ADD_FAILURE() << "a peer with another secret must not connect";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kAuthentication) << e.what();
    EXPECT_NE(std::string(e.what()).find("job secret"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(address), std::string::npos) << e.what();
  }
  std::this_thread::sleep_for(300ms);  // the listener's side of the failed handshake
  client->shutdown();
  server->shutdown();
  const std::string log = ::testing::internal::GetCapturedStderr();
  // Each side names the cause: the connector in its error and its log, the listener in its log.
  // Over ucx the listener already refuses the bootstrap hello (its proof under the secret, see
  // transport/ucx/hello.h), before the secure handshake: the connector says so in its error.
  EXPECT_GE(count_of(log, "secret"), GetParam() == "ucx" ? 1 : 2) << log;
  EXPECT_TRUE(server_rx->connected().empty()) << "the listener's receiver never sees the peer";
  EXPECT_EQ(server_rx->message_count(), 0u);
}

TEST_P(SecureMode, PlainPeerIsRefusedBySecureListener) {
  auto server_rx = std::make_shared<RecordingReceiver>();
  auto server = create_transport(GetParam(), server_rx, secure_options("the-real-job-secret-0001"));
  const std::string address = server->listen("127.0.0.1:0");
  auto client_rx = std::make_shared<RecordingReceiver>();
  auto client = create_transport(GetParam(), client_rx);  // not in secure mode
  if (GetParam() == "ucx") {
    // The bootstrap hello already needs the secret (transport/ucx/hello.h).
    try {
      client->connect(address);
      ADD_FAILURE() << "a plain peer must not bootstrap with a secure ucx listener";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kAuthentication) << e.what();
      EXPECT_NE(std::string(e.what()).find("PSRT_SECRET"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(server_rx->connected().empty());
    return;
  }
  auto conn = client->connect(address);
  std::vector<std::byte> payload(4096, std::byte{1});
  ConstBuffer b{payload.data(), payload.size()};
  conn->send(bytes_of("PUSH key=0 as rank 0"), {&b, 1}, [](const Status&) {});
  ASSERT_TRUE(client_rx->wait_closed(1, 5s)) << "the secure side must drop a plain peer";
  EXPECT_TRUE(server_rx->connected().empty());
  EXPECT_EQ(server_rx->message_count(), 0u);
}

TEST_P(SecureMode, SecureConnectorGivesUpOnAPlainListener) {
  auto server_rx = std::make_shared<RecordingReceiver>();
  auto server = create_transport(GetParam(), server_rx);  // not in secure mode
  const std::string address = server->listen("127.0.0.1:0");
  auto client_rx = std::make_shared<RecordingReceiver>();
  Options o = secure_options("the-real-job-secret-0001");
  o.connect_timeout = 1s;
  auto client = create_transport(GetParam(), client_rx, o);
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(client->connect(address), Error);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EXPECT_TRUE(client_rx->connected().empty());
}

TEST_P(SecureMode, HeaderLimitLeavesRoomForTheSeal) {
  SecurePair pair(GetParam());
  std::string too_long(169, 'h'), fits(168, 'h');
  SendWaiter w;
  pair.conn->send(bytes_of(too_long), {}, w.callback());
  pair.conn->send(bytes_of(fits), {}, w.callback());
  ASSERT_TRUE(w.wait(2));
  EXPECT_EQ(w.statuses()[0].code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(w.statuses()[0].message().find("168-byte limit"), std::string::npos)
      << w.statuses()[0].message();
  EXPECT_TRUE(w.statuses()[1].ok()) << w.statuses()[1].message();
  ASSERT_TRUE(pair.server_rx->wait_messages(1));
  EXPECT_EQ(pair.server_rx->messages()[0].header, fits);
}

// Sends from the caller's thread and from the progress thread (each completion sends one more)
// interleave: the secure receiver, which checks every sequence number, sees them in order.
// Regression: the ucx backend issued a send made on its progress thread at once, ahead of sends
// from other threads still waiting in the loop's queue.
TEST_P(SecureMode, SendsFromCallerAndProgressThreadStayInSequence) {
  SecurePair pair(GetParam(), /*keep_payloads=*/false);
  constexpr int kMessages = 5000;
  std::vector<std::byte> payload(1024, std::byte{5});
  ConstBuffer b{payload.data(), payload.size()};
  Connection* c = pair.conn.get();
  std::atomic<int> done{0};
  for (int i = 0; i < kMessages; ++i) {
    c->send(bytes_of("from the caller"), {&b, 1}, [c, &b, &done](const Status&) {
      c->send(bytes_of("from the loop"), {&b, 1}, [&done](const Status&) { ++done; });
    });
  }
  auto until = std::chrono::steady_clock::now() + 20s;
  while (pair.server_rx->message_count() < 2 * kMessages && pair.server_rx->closed().empty() &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(pair.server_rx->closed().empty()) << pair.server_rx->closed()[0].why.message();
  EXPECT_EQ(pair.server_rx->message_count(), 2u * kMessages);
  while (done.load() < kMessages && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(done.load(), kMessages);
}

// Large payloads (sealed in segments, in parallel) sent from the progress thread, each followed
// by a bare header and a small payload: the receiver gets every message in the order sent,
// intact.
TEST_P(SecureMode, LargePayloadsSentFromTheLoopArriveInOrderWithWhatFollowsThem) {
  SecurePair pair(GetParam());
  constexpr int kRounds = 24;
  std::vector<std::vector<std::byte>> big;
  for (int i = 0; i < kRounds; ++i)
    big.push_back(pattern((512u << 10) + static_cast<std::size_t>(i) * 4099, 100 + i));
  const auto small = pattern(100, 7);
  Connection* c = pair.conn.get();
  std::atomic<int> done{0};
  std::atomic<int> failed{0};
  auto count = [&](const Status& st) {
    if (!st.ok()) ++failed;
    ++done;
  };
  c->send(bytes_of("start"), {}, [&](const Status&) {
    for (int i = 0; i < kRounds; ++i) {
      ConstBuffer b{big[i].data(), big[i].size()};
      c->send(bytes_of("big " + std::to_string(i)), {&b, 1}, count);
      c->send(bytes_of("bare " + std::to_string(i)), {}, count);
      ConstBuffer sb{small.data(), small.size()};
      c->send(bytes_of("small " + std::to_string(i)), {&sb, 1}, count);
    }
  });
  ASSERT_TRUE(pair.server_rx->wait_messages(1 + 3 * kRounds, 30s));
  const auto got = pair.server_rx->messages();
  ASSERT_EQ(got.size(), 1u + 3 * kRounds);
  for (int i = 0; i < kRounds; ++i) {
    SCOPED_TRACE(i);
    const auto& b = got[1 + 3 * static_cast<std::size_t>(i)];
    EXPECT_EQ(b.header, "big " + std::to_string(i));
    EXPECT_TRUE(b.payload == big[i]) << "the large payload arrives intact";
    EXPECT_EQ(got[2 + 3 * static_cast<std::size_t>(i)].header, "bare " + std::to_string(i));
    EXPECT_EQ(got[3 + 3 * static_cast<std::size_t>(i)].header, "small " + std::to_string(i));
    EXPECT_TRUE(got[3 + 3 * static_cast<std::size_t>(i)].payload == small);
  }
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (done.load() < 3 * kRounds && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(done.load(), 3 * kRounds);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_TRUE(pair.server_rx->closed().empty());
}

// Shutting down while large sends from the loop are on their way: each completes exactly once,
// before shutdown() returns, and nothing runs after it.
TEST_P(SecureMode, ShutdownCompletesLargeSendsFromTheLoopExactlyOnceBeforeItReturns) {
  SecurePair pair(GetParam(), /*keep_payloads=*/false);
  constexpr int kSends = 32;
  const auto payload = pattern(1u << 20, 3);
  Connection* c = pair.conn.get();
  std::atomic<int> done{0};
  std::atomic<bool> issued{false};
  c->send(bytes_of("start"), {}, [&](const Status&) {
    ConstBuffer b{payload.data(), payload.size()};
    for (int i = 0; i < kSends; ++i)
      c->send(bytes_of("big"), {&b, 1}, [&](const Status&) { ++done; });
    issued = true;
  });
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!issued.load() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(100us);
  ASSERT_TRUE(issued.load());
  pair.client->shutdown();
  EXPECT_EQ(done.load(), kSends) << "every send completed, once, before shutdown() returned";
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(done.load(), kSends) << "and none after";
  pair.server->shutdown();
}

INSTANTIATE_TEST_SUITE_P(Backends, SecureMode, ::testing::ValuesIn(available_backends()),
                         [](const auto& info) { return info.param; });

// ---- a man in the middle on a tcp connection ------------------------------------------------

constexpr int kSent = 5;
constexpr int kTampered = 2;         // the third message
constexpr int kHandshakeFrames = 2;  // HELLO and CONFIRM from the client
constexpr std::size_t kPayloadBytes = 64 * 1024;

std::string header_of(int i) {
  return "header of message " + std::to_string(i) + " (PUSH)";
}

struct Outcome {
  std::vector<ReceivedMessage> delivered;
  std::vector<ClosedConnection> closed;
  std::vector<std::vector<std::byte>> slots;  // where each message's payload was placed
  int placed = 0;                             // how many times the receiver was asked to place
  bool client_closed = false;
  std::uint64_t dropped = 0;  // the receiving transport's dropped_messages()
};

// Sends kSent messages with payloads through a relay that applies `tamper` to message
// kTampered, and returns what the server's receiver saw. `closes`: the secure mode is expected
// to close the connection (else every message must arrive and the connection stay open).
Outcome run_through_relay(bool secure, Tamper tamper, bool closes = true,
                          std::size_t payload_bytes = kPayloadBytes) {
  Options o = secure ? secure_options("the-real-job-secret-0001") : Options{};
  auto server_rx = std::make_shared<RecordingReceiver>();
  Outcome out;
  out.slots.assign(kSent + 2, std::vector<std::byte>(payload_bytes));
  std::atomic<int> next_slot{0};
  server_rx->set_placer([&](Connection&, std::span<const std::byte>, std::size_t size) {
    auto& slot = out.slots.at(static_cast<std::size_t>(next_slot++));
    return Placement{{slot.data(), size}};
  });
  auto server = create_transport("tcp", server_rx, o);
  Relay relay(server->listen("127.0.0.1:0"), tamper, (secure ? kHandshakeFrames : 0) + kTampered);
  auto client_rx = std::make_shared<RecordingReceiver>();
  auto client = create_transport("tcp", client_rx, o);
  auto conn = client->connect(relay.address());
  std::vector<std::vector<std::byte>> payloads;
  for (int i = 0; i < kSent; ++i)
    payloads.push_back(pattern(payload_bytes, static_cast<std::uint32_t>(i)));
  for (int i = 0; i < kSent; ++i) {
    ConstBuffer b{payloads[i].data(), payloads[i].size()};
    conn->send(bytes_of(header_of(i)), {&b, 1}, [](const Status&) {});
  }
  if (secure && !closes) {
    EXPECT_TRUE(server_rx->wait_messages(kSent, 10s)) << "every real message arrives";
    std::this_thread::sleep_for(100ms);
    EXPECT_TRUE(server_rx->closed().empty()) << server_rx->closed()[0].why.message();
    EXPECT_TRUE(conn->is_open()) << "the real connection goes on";
  } else if (secure) {
    EXPECT_TRUE(server_rx->wait_closed(1, 10s)) << "the receiving side must close";
    out.client_closed = client_rx->wait_closed(1, 10s);
  } else {
    server_rx->wait_messages(kSent, 3s);
  }
  out.delivered = server_rx->messages();
  out.closed = server_rx->closed();
  out.placed = next_slot;
  out.dropped = server->dropped_messages();
  client->shutdown();
  server->shutdown();
  // Every message delivered is the one that was sent, in order.
  for (std::size_t i = 0; i < out.delivered.size() && secure; ++i) {
    EXPECT_EQ(out.delivered[i].header, header_of(static_cast<int>(i)));
    EXPECT_TRUE(out.delivered[i].payload == payloads[i]) << "message " << i << " altered";
  }
  return out;
}

void expect_authentication_close(const Outcome& out, const std::string& cause) {
  ASSERT_EQ(out.closed.size(), 1u);
  EXPECT_EQ(out.closed[0].why.code(), ErrorCode::kAuthentication) << out.closed[0].why.message();
  EXPECT_NE(out.closed[0].why.message().find(cause), std::string::npos)
      << out.closed[0].why.message();
  EXPECT_TRUE(out.client_closed) << "the sender learns that its connection is gone";
}

// A relay that alters a message in place also removes the real one: the forgery is dropped and
// the loss closes the connection at the next message.
TEST(SecureMitm, FlippedHeaderByteIsDroppedBeforeAnyPlacement) {
  auto out = run_through_relay(true, Tamper::kFlipHeader);
  EXPECT_EQ(out.delivered.size(), static_cast<std::size_t>(kTampered));
  expect_authentication_close(out, "2 was due");
  // The header is checked before the receiver is asked where the payload goes.
  EXPECT_TRUE(std::all_of(out.slots[kTampered].begin(), out.slots[kTampered].end(),
                          [](std::byte b) { return b == std::byte{0}; }));
}

TEST(SecureMitm, FlippedPayloadByteIsNeverDeliveredAndScrubbed) {
  auto out = run_through_relay(true, Tamper::kFlipPayload);
  EXPECT_EQ(out.delivered.size(), static_cast<std::size_t>(kTampered));
  expect_authentication_close(out, "2 was due");
  // The unauthenticated bytes do not stay where the receiver placed them.
  EXPECT_TRUE(std::all_of(out.slots[kTampered].begin(), out.slots[kTampered].end(),
                          [](std::byte b) { return b == std::byte{0}; }));
}

// A payload of 1 MiB is sealed as 4 segments of 256 KiB, each under its own tag: a byte
// flipped in the third, or the segments moved within the payload, fail as a flip in a
// one-segment payload does.
TEST(SecureMitm, AFlipInALaterSegmentOfALargePayloadIsNeverDelivered) {
  ASSERT_EQ(secure::segment_count(1 << 20), 4u);
  auto out = run_through_relay(true, Tamper::kFlipPayload, true, 1 << 20);
  EXPECT_EQ(out.delivered.size(), static_cast<std::size_t>(kTampered));
  expect_authentication_close(out, "2 was due");
  EXPECT_TRUE(std::all_of(out.slots[kTampered].begin(), out.slots[kTampered].end(),
                          [](std::byte b) { return b == std::byte{0}; }));
}

TEST(SecureMitm, SegmentsMovedWithinALargePayloadAreNeverDelivered) {
  auto out = run_through_relay(true, Tamper::kSwapPayloadHalves, true, 1 << 20);
  EXPECT_EQ(out.delivered.size(), static_cast<std::size_t>(kTampered));
  expect_authentication_close(out, "2 was due");
  EXPECT_TRUE(std::all_of(out.slots[kTampered].begin(), out.slots[kTampered].end(),
                          [](std::byte b) { return b == std::byte{0}; }));
}

TEST(SecureMitm, ReplayedFrameIsDroppedAndNeverDeliveredTwice) {
  auto out = run_through_relay(true, Tamper::kReplay, /*closes=*/false);
  EXPECT_EQ(out.delivered.size(), static_cast<std::size_t>(kSent));
  EXPECT_EQ(out.placed, kSent) << "the replay is never handed to the receiver";
  EXPECT_EQ(out.dropped, 1u) << "counted (psrt_secure_dropped_messages_total)";
}

// Issue 30: a forged message carrying the connection's route (an attacker without the key)
// used to close the real connection. It is dropped; every real message arrives, exactly.
TEST(SecureMitm, AnInjectedForgedHeaderIsDroppedAndTheConnectionGoesOn) {
  auto out = run_through_relay(true, Tamper::kInjectForgedHeader, /*closes=*/false);
  EXPECT_EQ(out.delivered.size(), static_cast<std::size_t>(kSent));
  EXPECT_EQ(out.placed, kSent) << "the forgery is never handed to the receiver";
  EXPECT_EQ(out.dropped, 1u) << "counted (psrt_secure_dropped_messages_total)";
}

// A forged payload behind a copy of the real sealed header is dropped without consuming the
// sequence number: the real message that follows is delivered, into the same placement.
TEST(SecureMitm, AnInjectedForgedPayloadDoesNotDesynchroniseTheReceiver) {
  auto out = run_through_relay(true, Tamper::kInjectForgedPayload, /*closes=*/false);
  EXPECT_EQ(out.delivered.size(), static_cast<std::size_t>(kSent));
  EXPECT_EQ(out.placed, kSent) << "the real message reuses the forgery's placement";
  EXPECT_EQ(out.dropped, 1u) << "counted (psrt_secure_dropped_messages_total)";
}

TEST(SecureMitm, DroppedFrameIsNoticedAtTheNextMessage) {
  auto out = run_through_relay(true, Tamper::kDrop);
  EXPECT_EQ(out.delivered.size(), static_cast<std::size_t>(kTampered));
  expect_authentication_close(out, "was due");
}

// The control: without the secure mode the same relay gets its altered bytes delivered.
TEST(SecureMitm, PlainModeDeliversWhatTheRelayAltered) {
  auto out = run_through_relay(false, Tamper::kFlipPayload);
  ASSERT_EQ(out.delivered.size(), static_cast<std::size_t>(kSent));
  EXPECT_FALSE(out.delivered[kTampered].payload ==
               pattern(kPayloadBytes, static_cast<std::uint32_t>(kTampered)));
}

TEST(SecureMitm, AlteredHandshakeFailsTheConnect) {
  // Frame 0 is the client's HELLO (its nonce), frame 1 its CONFIRM (the HMAC).
  for (int frame : {0, 1}) {
    auto server_rx = std::make_shared<RecordingReceiver>();
    auto server = create_transport("tcp", server_rx, secure_options("the-real-job-secret-0001"));
    Relay relay(server->listen("127.0.0.1:0"), Tamper::kFlipHeader, frame);
    auto client_rx = std::make_shared<RecordingReceiver>();
    auto client = create_transport("tcp", client_rx, secure_options("the-real-job-secret-0001"));
    std::shared_ptr<Connection> conn;
    try {
      conn = client->connect(relay.address());
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kAuthentication) << e.what();
      EXPECT_NE(std::string(e.what()).find("job secret"), std::string::npos) << e.what();
    }
    // An altered HELLO gives the two ends different keys: neither CONFIRM verifies. An altered
    // CONFIRM of the client fails only at the server: the client, which verified the server's,
    // may have connected and sees the connection closed at once.
    if (frame == 0) {
      EXPECT_FALSE(conn) << "an altered HELLO must not connect";
    }
    if (conn) {
      EXPECT_TRUE(client_rx->wait_closed(1, 5s));
    }
    std::this_thread::sleep_for(50ms);
    EXPECT_TRUE(server_rx->connected().empty()) << "frame " << frame;
    client->shutdown();
    server->shutdown();
  }
}

TEST(SecureMitm, FrameFromAnotherConnectionIsRefused) {
  // Two clients of one server, each through a relay; B's relay sends A's third message (same
  // sequence number, same job secret, another connection) in place of B's own.
  auto server_rx = std::make_shared<RecordingReceiver>();
  auto server = create_transport("tcp", server_rx, secure_options("the-real-job-secret-0001"));
  const std::string address = server->listen("127.0.0.1:0");
  CapturedFrame captured;
  const int at = kHandshakeFrames + kTampered;
  Relay relay_a(address, Tamper::kCapture, at, &captured);
  Relay relay_b(address, Tamper::kSplice, at, &captured);
  auto rx_a = std::make_shared<RecordingReceiver>();
  auto rx_b = std::make_shared<RecordingReceiver>();
  auto client_a = create_transport("tcp", rx_a, secure_options("the-real-job-secret-0001"));
  auto client_b = create_transport("tcp", rx_b, secure_options("the-real-job-secret-0001"));
  auto conn_a = client_a->connect(relay_a.address());
  auto conn_b = client_b->connect(relay_b.address());
  std::vector<std::byte> payload = pattern(kPayloadBytes, 1);
  ConstBuffer b{payload.data(), payload.size()};
  for (int i = 0; i < kSent; ++i) {
    conn_a->send(bytes_of("A " + header_of(i)), {&b, 1}, [](const Status&) {});
    conn_b->send(bytes_of("B " + header_of(i)), {&b, 1}, [](const Status&) {});
  }
  ASSERT_TRUE(server_rx->wait_closed(1, 10s));
  ASSERT_TRUE(server_rx->wait_messages(kSent + kTampered, 10s));
  std::this_thread::sleep_for(100ms);
  auto closed = server_rx->closed();
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].why.code(), ErrorCode::kAuthentication) << closed[0].why.message();
  // B's spliced frame fails authentication and is dropped; B's next frame finds it missing.
  EXPECT_NE(closed[0].why.message().find("2 was due"), std::string::npos)
      << closed[0].why.message();
  int from_a = 0, from_b = 0;
  for (const auto& m : server_rx->messages()) {
    if (m.header.starts_with("A ")) {
      EXPECT_EQ(m.header, "A " + header_of(from_a++));
    }
    if (m.header.starts_with("B ")) {
      EXPECT_EQ(m.header, "B " + header_of(from_b++));
    }
  }
  EXPECT_EQ(from_a, kSent) << "the connection the frame was taken from is untouched";
  EXPECT_EQ(from_b, kTampered) << "nothing from the spliced frame on";
  client_a->shutdown();
  client_b->shutdown();
  server->shutdown();
}

TEST(SecureHandshake, SilentPeerIsClosedAtTheDeadline) {
  auto server_rx = std::make_shared<RecordingReceiver>();
  Options o = secure_options("the-real-job-secret-0001");
  o.connect_timeout = 500ms;
  auto server = create_transport("tcp", server_rx, o);
  Fd raw = connect_tcp(server->listen("127.0.0.1:0"), 2s);
  auto start = std::chrono::steady_clock::now();
  bool closed = false;
  while (!closed && std::chrono::steady_clock::now() - start < 5s) {
    pollfd p{raw.get(), POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      char buf[256];
      ssize_t n = ::recv(raw.get(), buf, sizeof buf, MSG_DONTWAIT);  // our HELLO, then EOF
      closed = n == 0 || (n < 0 && errno != EAGAIN);
    }
  }
  EXPECT_TRUE(closed) << "a peer that never answers the HELLO is dropped";
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EXPECT_TRUE(server_rx->connected().empty());
}

// The backend's progress thread can run a whole handshake and then the connection's close before
// the thread in connect() claims it (seen under load: connect() then said "closed before its
// secure handshake began" for a connection that had been established). Driven here by hand, in
// that order, through the context's backend callbacks with a stand-in for the backend's
// connection.
class HandDrivenConnection : public Connection {
 public:
  void send(std::span<const std::byte> header, std::span<const ConstBuffer>,
            SendDone done) override {
    sent.emplace_back(header.begin(), header.end());
    done(Status{});
  }
  void close() override { open = false; }
  const std::string& peer() const override { return peer_; }
  std::uint64_t id() const override { return 7; }
  bool is_open() const override { return open; }

  std::vector<std::vector<std::byte>> sent;
  bool open = true;

 private:
  std::string peer_ = "127.0.0.1:1";
};

std::vector<std::byte> handshake_bytes(secure::HandshakeType type,
                                       std::span<const std::byte, 32> body) {
  secure::HandshakeMessage m;
  m.type = type;
  std::memcpy(m.body.data(), body.data(), body.size());
  std::vector<std::byte> bytes(secure::kHandshakeBytes);
  secure::encode_handshake(m, bytes.data());
  return bytes;
}

TEST(SecureConnect, AConnectionClosedRightAfterItsHandshakeIsStillClaimed) {
  const std::string secret = "the-real-job-secret-0001";
  auto upper = std::make_shared<RecordingReceiver>();
  auto ctx = std::make_shared<secure::SecureContext>(upper, secure_options(secret));
  ctx->start();
  ctx->begin_connect();
  auto inner = std::make_shared<HandDrivenConnection>();
  ctx->on_connected(inner);
  ASSERT_EQ(inner->sent.size(), 1u);
  secure::HandshakeMessage hello;
  ASSERT_EQ(secure::decode_handshake(inner->sent[0], hello), "");
  ASSERT_EQ(hello.type, secure::HandshakeType::kHello);
  // The peer's HELLO and a CONFIRM that proves the secret: the connection is established.
  const secure::Nonce theirs = secure::random_nonce();
  ctx->on_message(*inner, handshake_bytes(secure::HandshakeType::kHello, theirs), Placement{});
  const secure::SessionKeys peer = secure::derive_session(secret, theirs, hello.body);
  ctx->on_message(*inner, handshake_bytes(secure::HandshakeType::kConfirm, peer.my_confirm),
                  Placement{});
  ASSERT_EQ(upper->connected().size(), 1u);
  // Closed before connect() claims it.
  ctx->on_closed(*inner, Status(ErrorCode::kConnectionClosed, "the peer closed"));
  auto claimed = ctx->claim(inner->id());
  ASSERT_TRUE(claimed) << "connect() must find the connection it made";
  EXPECT_TRUE(claimed->wait_established(std::chrono::steady_clock::now()).ok())
      << "it was established: connect() returns it and its receiver has seen it close";
  EXPECT_TRUE(upper->wait_closed(1, 1s));
  ctx->end_connect();
  ctx->shutdown(/*release_upper=*/true);
}

}  // namespace
}  // namespace psrt::transport::testing
