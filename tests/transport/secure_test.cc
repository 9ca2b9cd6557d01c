// The secure mode (transport/secure) under attack: a peer with another secret, a peer that does
// not run in secure mode, a silent peer, and a man in the middle on 127.0.0.1 that flips,
// replays or drops frames of a tcp connection. Every case asserts what the receiving side
// delivers (nothing altered) and that it closes the connection naming the cause.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "harness.h"
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

class SecureMode : public ::testing::TestWithParam<std::string> {};

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
  EXPECT_GE(count_of(log, "secret"), 2) << log;
  EXPECT_TRUE(server_rx->connected().empty()) << "the listener's receiver never sees the peer";
  EXPECT_EQ(server_rx->message_count(), 0u);
}

TEST_P(SecureMode, PlainPeerIsRefusedBySecureListener) {
  auto server_rx = std::make_shared<RecordingReceiver>();
  auto server = create_transport(GetParam(), server_rx, secure_options("the-real-job-secret-0001"));
  const std::string address = server->listen("127.0.0.1:0");
  auto client_rx = std::make_shared<RecordingReceiver>();
  auto client = create_transport(GetParam(), client_rx);  // not in secure mode
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
  auto server_rx = std::make_shared<RecordingReceiver>();
  auto server = create_transport(GetParam(), server_rx, secure_options("the-real-job-secret-0001"));
  auto client_rx = std::make_shared<RecordingReceiver>();
  auto client = create_transport(GetParam(), client_rx, secure_options("the-real-job-secret-0001"));
  auto conn = client->connect(server->listen("127.0.0.1:0"));
  std::string too_long(217, 'h'), fits(216, 'h');
  SendWaiter w;
  conn->send(bytes_of(too_long), {}, w.callback());
  conn->send(bytes_of(fits), {}, w.callback());
  ASSERT_TRUE(w.wait(2));
  EXPECT_EQ(w.statuses()[0].code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(w.statuses()[0].message().find("216-byte limit"), std::string::npos)
      << w.statuses()[0].message();
  EXPECT_TRUE(w.statuses()[1].ok()) << w.statuses()[1].message();
  ASSERT_TRUE(server_rx->wait_messages(1));
  EXPECT_EQ(server_rx->messages()[0].header, fits);
}

// Sends from the caller's thread and from the progress thread (each completion sends one more)
// interleave: the secure receiver, which checks every sequence number, sees them in order.
// Regression: the ucx backend issued a send made on its progress thread at once, ahead of sends
// from other threads still waiting in the loop's queue.
TEST_P(SecureMode, SendsFromCallerAndProgressThreadStayInSequence) {
  auto server_rx = std::make_shared<RecordingReceiver>();
  server_rx->keep_payloads = false;
  auto server = create_transport(GetParam(), server_rx, secure_options("the-real-job-secret-0001"));
  auto client_rx = std::make_shared<RecordingReceiver>();
  auto client = create_transport(GetParam(), client_rx, secure_options("the-real-job-secret-0001"));
  auto conn = client->connect(server->listen("127.0.0.1:0"));
  constexpr int kMessages = 5000;
  std::vector<std::byte> payload(1024, std::byte{5});
  ConstBuffer b{payload.data(), payload.size()};
  Connection* c = conn.get();
  std::atomic<int> done{0};
  for (int i = 0; i < kMessages; ++i) {
    c->send(bytes_of("from the caller"), {&b, 1}, [c, &b, &done](const Status&) {
      c->send(bytes_of("from the loop"), {&b, 1}, [&done](const Status&) { ++done; });
    });
  }
  auto until = std::chrono::steady_clock::now() + 20s;
  while (server_rx->message_count() < 2 * kMessages && server_rx->closed().empty() &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(server_rx->closed().empty()) << server_rx->closed()[0].why.message();
  EXPECT_EQ(server_rx->message_count(), 2u * kMessages);
  while (done.load() < kMessages && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(done.load(), kMessages);
}

INSTANTIATE_TEST_SUITE_P(Backends, SecureMode, ::testing::ValuesIn(available_backends()),
                         [](const auto& info) { return info.param; });

// ---- a man in the middle on a tcp connection ------------------------------------------------

enum class Tamper { kFlipHeader, kFlipPayload, kReplay, kDrop };

// Accepts one client, connects it to `target` and forwards both ways; the client->server frame
// number `at` (tcp frames: 24-byte prefix, header, payload) is altered as `tamper` says.
class Relay {
 public:
  Relay(std::string target, Tamper tamper, int at)
      : target_(std::move(target)), tamper_(tamper), at_(at) {
    listener_ = listen_tcp("127.0.0.1:0", address_);
    thread_ = std::thread([this] { run(); });
  }
  ~Relay() {
    stop_ = true;
    thread_.join();
  }
  const std::string& address() const { return address_; }

 private:
  static void send_all(int fd, const std::byte* p, std::size_t n) {
    write_all(fd, p, n, std::chrono::steady_clock::now() + 5s);
  }

  void forward_frames(int to) {
    constexpr std::size_t kPrefix = 24;
    while (cbuf_.size() >= kPrefix) {
      const auto header_len = wire::load<std::uint16_t>(cbuf_.data() + 6);
      const auto payload_len = wire::load<std::uint64_t>(cbuf_.data() + 8);
      const std::size_t total = kPrefix + header_len + payload_len;
      if (cbuf_.size() < total) return;
      std::vector<std::byte> frame(cbuf_.begin(), cbuf_.begin() + total);
      cbuf_.erase(cbuf_.begin(), cbuf_.begin() + total);
      const int index = frames_++;
      if (index == at_) {
        if (tamper_ == Tamper::kFlipHeader) frame[kPrefix + header_len - 17] ^= std::byte{0x01};
        if (tamper_ == Tamper::kFlipPayload)
          frame[kPrefix + header_len + payload_len / 2] ^= std::byte{0x80};
        if (tamper_ == Tamper::kDrop) continue;
        if (tamper_ == Tamper::kReplay) send_all(to, frame.data(), frame.size());
      }
      send_all(to, frame.data(), frame.size());
    }
  }

  void run() {
    Fd client, server;
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!stop_ && !client && std::chrono::steady_clock::now() < deadline) {
      pollfd p{listener_.get(), POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) {
        std::string peer;
        client = accept_tcp(listener_.get(), peer);
      }
    }
    if (!client) return;
    server = connect_tcp(target_, 5s);
    std::vector<std::byte> buf(1 << 16);
    while (!stop_) {
      pollfd p[2] = {{client.get(), POLLIN, 0}, {server.get(), POLLIN, 0}};
      if (::poll(p, 2, 50) <= 0) continue;
      if (p[0].revents) {
        ssize_t n = ::recv(client.get(), buf.data(), buf.size(), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return;
        if (n > 0) {
          cbuf_.insert(cbuf_.end(), buf.begin(), buf.begin() + n);
          try {
            forward_frames(server.get());
          } catch (const Error&) {
            return;  // the server closed its side
          }
        }
      }
      if (p[1].revents) {
        ssize_t n = ::recv(server.get(), buf.data(), buf.size(), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return;  // closes both
        if (n > 0) {
          try {
            send_all(client.get(), buf.data(), static_cast<std::size_t>(n));
          } catch (const Error&) {
            return;
          }
        }
      }
    }
  }

  std::string target_;
  Tamper tamper_;
  int at_;
  Fd listener_;
  std::string address_;
  std::vector<std::byte> cbuf_;
  int frames_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

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
  bool client_closed = false;
};

// Sends kSent messages with payloads through a relay that applies `tamper` to message
// kTampered, and returns what the server's receiver saw.
Outcome run_through_relay(bool secure, Tamper tamper) {
  Options o = secure ? secure_options("the-real-job-secret-0001") : Options{};
  auto server_rx = std::make_shared<RecordingReceiver>();
  Outcome out;
  out.slots.assign(kSent + 2, std::vector<std::byte>(kPayloadBytes));
  std::atomic<int> next_slot{0};
  server_rx->placer = [&](Connection&, std::span<const std::byte>, std::size_t size) {
    auto& slot = out.slots.at(static_cast<std::size_t>(next_slot++));
    return Placement{{slot.data(), size}};
  };
  auto server = create_transport("tcp", server_rx, o);
  Relay relay(server->listen("127.0.0.1:0"), tamper, (secure ? kHandshakeFrames : 0) + kTampered);
  auto client_rx = std::make_shared<RecordingReceiver>();
  auto client = create_transport("tcp", client_rx, o);
  auto conn = client->connect(relay.address());
  std::vector<std::vector<std::byte>> payloads;
  for (int i = 0; i < kSent; ++i)
    payloads.push_back(pattern(kPayloadBytes, static_cast<std::uint32_t>(i)));
  for (int i = 0; i < kSent; ++i) {
    ConstBuffer b{payloads[i].data(), payloads[i].size()};
    conn->send(bytes_of(header_of(i)), {&b, 1}, [](const Status&) {});
  }
  if (secure) {
    EXPECT_TRUE(server_rx->wait_closed(1, 10s)) << "the receiving side must close";
    out.client_closed = client_rx->wait_closed(1, 10s);
  } else {
    server_rx->wait_messages(kSent, 3s);
  }
  out.delivered = server_rx->messages();
  out.closed = server_rx->closed();
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

TEST(SecureMitm, FlippedHeaderByteClosesBeforeAnyPlacement) {
  auto out = run_through_relay(true, Tamper::kFlipHeader);
  EXPECT_EQ(out.delivered.size(), static_cast<std::size_t>(kTampered));
  expect_authentication_close(out, "failed authentication");
  // The header is checked before the receiver is asked where the payload goes.
  EXPECT_TRUE(std::all_of(out.slots[kTampered].begin(), out.slots[kTampered].end(),
                          [](std::byte b) { return b == std::byte{0}; }));
}

TEST(SecureMitm, FlippedPayloadByteIsNeverDeliveredAndScrubbed) {
  auto out = run_through_relay(true, Tamper::kFlipPayload);
  EXPECT_EQ(out.delivered.size(), static_cast<std::size_t>(kTampered));
  expect_authentication_close(out, "payload of message 2");
  // The unauthenticated bytes do not stay where the receiver placed them.
  EXPECT_TRUE(std::all_of(out.slots[kTampered].begin(), out.slots[kTampered].end(),
                          [](std::byte b) { return b == std::byte{0}; }));
}

TEST(SecureMitm, ReplayedFrameIsRefused) {
  auto out = run_through_relay(true, Tamper::kReplay);
  EXPECT_EQ(out.delivered.size(), static_cast<std::size_t>(kTampered + 1));
  expect_authentication_close(out, "out of sequence");
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

}  // namespace
}  // namespace psrt::transport::testing
