// The transport conformance suite: written once, run against every backend this build has.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <random>
#include <thread>

#include "harness.h"
#include "transport/factory.h"
#include "transport/socket.h"
#include "transport/wire.h"

extern char** environ;

namespace psrt::transport::testing {
namespace {

class TransportConformance : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Transport> make(std::shared_ptr<Receiver> rx, Options options = {}) {
    return create_for_test(GetParam(), std::move(rx), std::move(options));
  }

  // A server transport listening on loopback and a client connected to it.
  void start_pair(Options server_options = {}, Options client_options = {}) {
    server_rx = std::make_shared<RecordingReceiver>();
    client_rx = std::make_shared<RecordingReceiver>();
    server = make(server_rx, std::move(server_options));
    address = server->listen("127.0.0.1:0");
    client = make(client_rx, std::move(client_options));
    conn = client->connect(address);
    ASSERT_TRUE(server_rx->wait_connected(1));
  }

  void send_and_wait(Connection& c, const std::string& header,
                     std::span<const ConstBuffer> payload = {}) {
    SendWaiter w;
    c.send(bytes_of(header), payload, w.callback());
    ASSERT_TRUE(w.wait(1));
    ASSERT_TRUE(w.statuses()[0].ok()) << w.statuses()[0].message();
  }

  std::shared_ptr<RecordingReceiver> server_rx, client_rx;
  std::unique_ptr<Transport> server, client;
  std::shared_ptr<Connection> conn;
  std::string address;
};

TEST_P(TransportConformance, RoundTripEchoesHeaderAndPayload) {
  start_pair();
  server_rx->echo = true;
  auto payload = pattern(1000, 1);
  ConstBuffer b{payload.data(), payload.size()};
  send_and_wait(*conn, "hello", {&b, 1});
  ASSERT_TRUE(client_rx->wait_messages(1));
  auto got = client_rx->messages()[0];
  EXPECT_EQ(got.header, "hello");
  EXPECT_EQ(got.payload, payload);
  EXPECT_EQ(got.conn_id, conn->id());
}

TEST_P(TransportConformance, PayloadsFromZeroTo64MiBArriveIntact) {
  start_pair();
  const std::vector<std::size_t> sizes = {0, 1, 7, 4096, 65539, 1 << 20, (1 << 20) + 13, 64u << 20};
  std::vector<std::vector<std::byte>> payloads;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    payloads.push_back(pattern(sizes[i], 100 + i));
  SendWaiter w;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    ConstBuffer b{payloads[i].data(), payloads[i].size()};
    conn->send(bytes_of("size-" + std::to_string(sizes[i])),
               std::span<const ConstBuffer>(&b, sizes[i] ? 1 : 0), w.callback());
  }
  ASSERT_TRUE(w.wait(sizes.size(), 60s));
  for (const auto& st : w.statuses())
    EXPECT_TRUE(st.ok()) << st.message();
  ASSERT_TRUE(server_rx->wait_messages(sizes.size(), 60s));
  auto msgs = server_rx->messages();
  ASSERT_EQ(msgs.size(), sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(msgs[i].header, "size-" + std::to_string(sizes[i])) << "messages arrive in order";
    EXPECT_EQ(msgs[i].payload.size(), sizes[i]);
    EXPECT_TRUE(msgs[i].payload == payloads[i]) << "payload of " << sizes[i] << " bytes differs";
  }
}

TEST_P(TransportConformance, HeaderOnlyMessagesSkipPlacement) {
  start_pair();
  std::atomic<int> placed{0};
  server_rx->set_placer([&](Connection&, std::span<const std::byte>, std::size_t) -> Placement {
    ++placed;
    return {};
  });
  SendWaiter w;
  for (int i = 0; i < 100; ++i)
    conn->send(bytes_of("h" + std::to_string(i)), {}, w.callback());
  ASSERT_TRUE(server_rx->wait_messages(100));
  auto msgs = server_rx->messages();
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(msgs[i].header, "h" + std::to_string(i));
    EXPECT_TRUE(msgs[i].payload.empty());
  }
  EXPECT_EQ(placed.load(), 0);
  // An empty header is a valid message too.
  send_and_wait(*conn, "");
  ASSERT_TRUE(server_rx->wait_messages(101));
  EXPECT_EQ(server_rx->messages()[100].header, "");
}

TEST_P(TransportConformance, MixedSizesArriveInSendOrder) {
  // Large payloads (UCX: rendezvous, fetched after their header) interleaved with small and
  // header-only messages: on_message still sees them in the order they were sent. The parameter
  // server relies on it: a PULL sent after a PUSH must not overtake it.
  start_pair();
  const std::size_t sizes[] = {1 << 20, 16, 0, 3 << 20, 0, 100, 2 << 20, 8, 0};
  std::vector<std::vector<std::byte>> payloads;
  for (std::size_t i = 0; i < std::size(sizes); ++i)
    payloads.push_back(pattern(sizes[i], static_cast<int>(i)));
  SendWaiter w;
  constexpr int kRounds = 20;
  for (int r = 0; r < kRounds; ++r)
    for (std::size_t i = 0; i < std::size(sizes); ++i) {
      ConstBuffer b{payloads[i].data(), payloads[i].size()};
      conn->send(bytes_of("m" + std::to_string(r) + "." + std::to_string(i)),
                 sizes[i] ? std::span<const ConstBuffer>(&b, 1) : std::span<const ConstBuffer>(),
                 w.callback());
    }
  const std::size_t total = kRounds * std::size(sizes);
  ASSERT_TRUE(server_rx->wait_messages(total));
  auto msgs = server_rx->messages();
  for (int r = 0; r < kRounds; ++r)
    for (std::size_t i = 0; i < std::size(sizes); ++i) {
      const auto& m = msgs[r * std::size(sizes) + i];
      ASSERT_EQ(m.header, "m" + std::to_string(r) + "." + std::to_string(i));
      ASSERT_EQ(m.payload, payloads[i]);
    }
  ASSERT_TRUE(w.wait(total));
}

TEST_P(TransportConformance, ScatterGatherPayloadArrivesContiguous) {
  start_pair();
  auto a = pattern(3, 1), b = pattern(70000, 2), c = pattern(5, 3);
  ConstBuffer parts[] = {{a.data(), a.size()}, {b.data(), b.size()}, {c.data(), c.size()}};
  send_and_wait(*conn, "sg", parts);
  ASSERT_TRUE(server_rx->wait_messages(1));
  std::vector<std::byte> expect = a;
  expect.insert(expect.end(), b.begin(), b.end());
  expect.insert(expect.end(), c.begin(), c.end());
  EXPECT_EQ(server_rx->messages()[0].payload, expect);
}

TEST_P(TransportConformance, PayloadLandsInTheBufferTheReceiverChose) {
  start_pair();
  // One big slab; each message goes to the offset its header names.
  std::vector<std::byte> slab(8u << 20);
  server_rx->set_placer([&](Connection&, std::span<const std::byte> header, std::size_t size) {
    std::size_t offset = std::stoul(string_of(header));
    return Placement{{slab.data() + offset, size}, offset};
  });
  const std::vector<std::pair<std::size_t, std::size_t>> cases = {
      {0, 100}, {4096, 1 << 20}, {(2u << 20) + 17, 3u << 20}};
  std::vector<std::vector<std::byte>> payloads;
  for (auto [offset, size] : cases) {
    payloads.push_back(pattern(size, static_cast<std::uint32_t>(offset)));
    ConstBuffer b{payloads.back().data(), size};
    send_and_wait(*conn, std::to_string(offset), {&b, 1});
  }
  ASSERT_TRUE(server_rx->wait_messages(cases.size()));
  auto msgs = server_rx->messages();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    auto [offset, size] = cases[i];
    EXPECT_EQ(msgs[i].dest, slab.data() + offset) << "on_message reports the placed address";
    EXPECT_EQ(msgs[i].cookie, offset);
    EXPECT_EQ(0, std::memcmp(slab.data() + offset, payloads[i].data(), size))
        << "bytes are in the receiver's buffer at offset " << offset;
  }
}

TEST_P(TransportConformance, SixteenPeersWithManyOutstandingMessages) {
  auto server_rx = std::make_shared<RecordingReceiver>();
  server_rx->echo = true;
  server_rx->keep_payloads = false;
  auto server = make(server_rx);
  std::string addr = server->listen("127.0.0.1:0");
  constexpr int kPeers = 16, kMessages = 64;
  struct Peer {
    std::shared_ptr<RecordingReceiver> rx = std::make_shared<RecordingReceiver>();
    std::unique_ptr<Transport> t;
    std::shared_ptr<Connection> conn;
    std::vector<std::vector<std::byte>> payloads;
  };
  std::vector<Peer> peers(kPeers);
  for (int p = 0; p < kPeers; ++p) {
    peers[p].t = make(peers[p].rx);
    peers[p].conn = peers[p].t->connect(addr);
  }
  SendWaiter w;
  for (int m = 0; m < kMessages; ++m) {
    for (int p = 0; p < kPeers; ++p) {
      peers[p].payloads.push_back(pattern(1000 + 977 * m, p * 1000 + m));
      ConstBuffer b{peers[p].payloads.back().data(), peers[p].payloads.back().size()};
      peers[p].conn->send(bytes_of(std::to_string(p) + "/" + std::to_string(m)), {&b, 1},
                          w.callback());
    }
  }
  ASSERT_TRUE(w.wait(kPeers * kMessages, 60s));
  for (const auto& st : w.statuses())
    ASSERT_TRUE(st.ok()) << st.message();
  for (int p = 0; p < kPeers; ++p) {
    ASSERT_TRUE(peers[p].rx->wait_messages(kMessages, 60s)) << "peer " << p;
    auto msgs = peers[p].rx->messages();
    for (int m = 0; m < kMessages; ++m) {
      EXPECT_EQ(msgs[m].header, std::to_string(p) + "/" + std::to_string(m));
      EXPECT_TRUE(msgs[m].payload == peers[p].payloads[m]) << "peer " << p << " message " << m;
    }
  }
  EXPECT_EQ(server_rx->message_count(), static_cast<std::size_t>(kPeers * kMessages));
}

TEST_P(TransportConformance, SendsFromManyThreadsKeepPerThreadOrder) {
  start_pair();
  server_rx->keep_payloads = true;
  constexpr int kThreads = 4, kPerThread = 500;
  SendWaiter w;
  std::vector<std::vector<std::byte>> payloads(kThreads);
  for (int t = 0; t < kThreads; ++t)
    payloads[t] = pattern(512 + 4096 * t, t);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ConstBuffer b{payloads[t].data(), payloads[t].size()};
      for (int i = 0; i < kPerThread; ++i) {
        conn->send(bytes_of(std::to_string(t) + ":" + std::to_string(i)), {&b, 1}, w.callback());
      }
    });
  }
  for (auto& th : threads)
    th.join();
  ASSERT_TRUE(w.wait(kThreads * kPerThread, 60s));
  ASSERT_TRUE(server_rx->wait_messages(kThreads * kPerThread, 60s));
  std::vector<int> next(kThreads, 0);
  for (const auto& m : server_rx->messages()) {
    int t = std::stoi(m.header.substr(0, m.header.find(':')));
    int i = std::stoi(m.header.substr(m.header.find(':') + 1));
    ASSERT_EQ(i, next[t]) << "thread " << t << " messages out of order";
    ++next[t];
    ASSERT_TRUE(m.payload == payloads[t]);
  }
  for (int t = 0; t < kThreads; ++t)
    EXPECT_EQ(next[t], kPerThread);
}

// ---- failures -------------------------------------------------------------------------------

class ChildPeer {
 public:
  ChildPeer(const std::string& backend, const std::string& mode, const std::string& address) {
    int fds[2];
    EXPECT_EQ(0, ::pipe(fds));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    std::string path = PSRT_TEST_PEER_PATH;
    std::vector<std::string> args = {path, backend, mode, address};
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    EXPECT_EQ(0, ::posix_spawn(&pid_, path.c_str(), &fa, nullptr, argv.data(), environ));
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    out_ = fds[0];
  }
  ~ChildPeer() {
    kill();
    ::close(out_);
  }
  bool wait_connected() {
    pollfd p{out_, POLLIN, 0};
    if (::poll(&p, 1, 20000) <= 0) return false;
    char buf[64];
    return ::read(out_, buf, sizeof buf) > 0;
  }
  void kill() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
};

constexpr auto kPeerTimeout = std::chrono::milliseconds(10'000);

TEST_P(TransportConformance, KilledSenderIsReportedWithinTheBound) {
  auto rx = std::make_shared<RecordingReceiver>();
  rx->keep_payloads = false;
  std::atomic<int> placements{0};
  std::vector<std::byte> slab(64u << 20);
  rx->set_placer([&](Connection&, std::span<const std::byte>, std::size_t size) {
    ++placements;
    return Placement{{slab.data(), size}};
  });
  Options options;
  options.peer_timeout = kPeerTimeout;
  auto t = make(rx, options);
  std::string addr = t->listen("127.0.0.1:0");
  ChildPeer child(GetParam(), "source", addr);
  ASSERT_TRUE(child.wait_connected());
  ASSERT_TRUE(rx->wait_messages(1, 30s)) << "the child streams 64 MiB messages";
  // Kill while a transfer is under way: wait until the next message has been placed.
  int before = placements.load();
  auto until = std::chrono::steady_clock::now() + 10s;
  while (placements.load() == before && std::chrono::steady_clock::now() < until) {
    std::this_thread::yield();
  }
  auto killed_at = std::chrono::steady_clock::now();
  child.kill();
  ASSERT_TRUE(rx->wait_closed(1, kPeerTimeout + 5s)) << "the dead peer was never reported";
  auto closed = rx->closed()[0];
  EXPECT_LE(closed.at - killed_at, kPeerTimeout);
  EXPECT_FALSE(closed.why.ok());
  EXPECT_TRUE(closed.why.code() == ErrorCode::kConnectionClosed ||
              closed.why.code() == ErrorCode::kPeerFailed)
      << closed.why.message();
  // The survivor still serves others.
  auto rx2 = std::make_shared<RecordingReceiver>();
  auto other = make(rx2);
  auto c2 = other->connect(addr);
  SendWaiter w;
  std::size_t before_count = rx->message_count();
  c2->send(bytes_of("still here"), {}, w.callback());
  ASSERT_TRUE(w.wait(1));
  ASSERT_TRUE(rx->wait_messages(before_count + 1));
}

TEST_P(TransportConformance, KilledReceiverFailsPendingSendsWithinTheBound) {
  auto rx = std::make_shared<RecordingReceiver>();
  Options options;
  options.peer_timeout = kPeerTimeout;
  auto t = make(rx, options);
  std::string addr = t->listen("127.0.0.1:0");
  ChildPeer child(GetParam(), "stall", addr);
  ASSERT_TRUE(child.wait_connected());
  ASSERT_TRUE(rx->wait_connected(1));
  auto c = rx->connected()[0];
  std::vector<std::byte> payload(64u << 20, std::byte{3});
  ConstBuffer b{payload.data(), payload.size()};
  SendWaiter w;
  for (int i = 0; i < 8; ++i)
    c->send(bytes_of("more"), {&b, 1}, w.callback());
  std::this_thread::sleep_for(200ms);  // the child sits in place() from the first message on
  auto killed_at = std::chrono::steady_clock::now();
  child.kill();
  ASSERT_TRUE(w.wait(8, kPeerTimeout + 5s)) << "sends to a dead peer must complete";
  EXPECT_LE(std::chrono::steady_clock::now() - killed_at, kPeerTimeout);
  ASSERT_TRUE(rx->wait_closed(1, kPeerTimeout));
  auto sts = w.statuses();
  EXPECT_FALSE(sts.back().ok()) << "the last send cannot have been delivered to a dead process";
}

// Opens a raw TCP connection to a listener and writes `bytes` to it.
Fd raw_connect(const std::string& address) {
  Fd fd = connect_tcp(address, std::chrono::seconds(5));
  return fd;
}

// True when the server closed `fd` (EOF or reset) within `timeout`.
bool closed_by_peer(int fd, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      char buf[4096];
      ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN)) return true;
    }
  }
  return false;
}

void write_raw(int fd, const void* data, std::size_t size) {
  write_all(fd, data, size, std::chrono::steady_clock::now() + std::chrono::seconds(5));
}

TEST_P(TransportConformance, GarbageBytesDropOnlyThatConnection) {
  start_pair();
  std::mt19937 rng(42);
  std::vector<unsigned char> junk(4096);
  for (auto& c : junk)
    c = static_cast<unsigned char>(rng());
  Fd raw = raw_connect(address);
  write_raw(raw.get(), junk.data(), junk.size());
  EXPECT_TRUE(closed_by_peer(raw.get(), 5s)) << "the server must drop a connection sending junk";
  // The well-behaved connection is untouched.
  auto payload = pattern(100000, 9);
  ConstBuffer b{payload.data(), payload.size()};
  send_and_wait(*conn, "after junk", {&b, 1});
  ASSERT_TRUE(server_rx->wait_messages(1));
  EXPECT_EQ(server_rx->messages()[0].payload, payload);
  EXPECT_TRUE(conn->is_open());
}

TEST_P(TransportConformance, TruncatedFrameDropsOnlyThatConnection) {
  start_pair();
  {
    // A well-formed beginning (a real psrt peer's first bytes) cut off in the middle.
    auto rx = std::make_shared<RecordingReceiver>();
    auto t = make(rx);
    // Capture what a genuine peer sends first by connecting it to a plain socket we accept on,
    // which passes on what the real listener says first (ucx: its challenge) on `raw`.
    Fd raw = raw_connect(address);
    std::vector<char> greeting(4096);
    pollfd g{raw.get(), POLLIN, 0};
    const ssize_t greeted = ::poll(&g, 1, 200) > 0
                                ? ::recv(raw.get(), greeting.data(), greeting.size(), MSG_DONTWAIT)
                                : 0;
    greeting.resize(static_cast<std::size_t>(std::max<ssize_t>(greeted, 0)));
    std::string bound;
    Fd lst = listen_tcp("127.0.0.1:0", bound);
    std::thread connector([&] {
      try {
        auto c = t->connect(bound);
        c->send(bytes_of("frame"), {}, [](const Status&) {});
        std::this_thread::sleep_for(200ms);
      } catch (const Error&) {
        // Our fake listener never answers a UCX handshake: expected.
      }
    });
    pollfd p{lst.get(), POLLIN, 0};
    ASSERT_GT(::poll(&p, 1, 5000), 0);
    std::string peer;
    Fd accepted = accept_tcp(lst.get(), peer);
    ASSERT_TRUE(accepted);
    if (!greeting.empty()) write_raw(accepted.get(), greeting.data(), greeting.size());
    std::vector<char> first;
    auto until = std::chrono::steady_clock::now() + 2s;
    while (first.size() < 20 && std::chrono::steady_clock::now() < until) {
      char buf[4096];
      ssize_t n = ::recv(accepted.get(), buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) first.insert(first.end(), buf, buf + n);
    }
    accepted.reset();
    connector.join();
    ASSERT_GE(first.size(), 20u);
    write_raw(raw.get(), first.data(), first.size() / 2);
    raw.reset();  // truncated: the rest never comes
  }
  auto payload = pattern(3000, 5);
  ConstBuffer b{payload.data(), payload.size()};
  send_and_wait(*conn, "after truncation", {&b, 1});
  ASSERT_TRUE(server_rx->wait_messages(1));
  EXPECT_EQ(server_rx->messages()[0].payload, payload);
}

TEST_P(TransportConformance, OversizedPayloadClosesThatConnection) {
  Options small;
  small.max_payload_bytes = 1 << 20;
  start_pair(small);
  auto rx2 = std::make_shared<RecordingReceiver>();
  auto other = make(rx2);
  auto c2 = other->connect(address);
  ASSERT_TRUE(server_rx->wait_connected(2));
  std::vector<std::byte> big(2u << 20, std::byte{1});
  ConstBuffer b{big.data(), big.size()};
  conn->send(bytes_of("too big"), {&b, 1}, [](const Status&) {});
  ASSERT_TRUE(server_rx->wait_closed(1, 10s));
  auto closed = server_rx->closed()[0];
  EXPECT_EQ(closed.why.code(), ErrorCode::kProtocol) << closed.why.message();
  EXPECT_NE(closed.why.message().find("exceeds"), std::string::npos) << closed.why.message();
  EXPECT_EQ(server_rx->message_count(), 0u);
  ASSERT_TRUE(client_rx->wait_closed(1, 10s)) << "the sender learns its connection was closed";
  // The other connection keeps working.
  auto ok = pattern(1 << 20, 2);
  ConstBuffer ob{ok.data(), ok.size()};
  send_and_wait(*c2, "fits", {&ob, 1});
  ASSERT_TRUE(server_rx->wait_messages(1));
  EXPECT_EQ(server_rx->messages()[0].payload, ok);
}

TEST_P(TransportConformance, ReceiverRefusalClosesThatConnectionWithItsReason) {
  start_pair();
  server_rx->set_placer([](Connection&, std::span<const std::byte>, std::size_t) -> Placement {
    throw Error(ErrorCode::kInvalidArgument, "no slot for this key");
  });
  std::vector<std::byte> p(100);
  ConstBuffer b{p.data(), p.size()};
  SendWaiter sent;  // `p` must outlive the send (TSan saw UCX still packing it)
  conn->send(bytes_of("x"), {&b, 1}, sent.callback());
  ASSERT_TRUE(server_rx->wait_closed(1, 10s));
  ASSERT_TRUE(sent.wait(1, 10s));
  EXPECT_NE(server_rx->closed()[0].why.message().find("no slot for this key"), std::string::npos);
}

TEST_P(TransportConformance, DeviceMemoryWithoutSupportIsAClearError) {
  start_pair();
  if (client->supports(MemoryType::kCuda)) GTEST_SKIP() << "this backend takes CUDA memory";
  int fake = 0;
  ConstBuffer b{&fake, sizeof fake, MemoryType::kCuda};
  SendWaiter w;
  conn->send(bytes_of("gpu"), {&b, 1}, w.callback());
  ASSERT_TRUE(w.wait(1));
  auto st = w.statuses()[0];
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_NE(st.message().find("CUDA"), std::string::npos) << st.message();
  EXPECT_TRUE(conn->is_open()) << "a refused send does not close the connection";
  EXPECT_THROW(client->register_memory({&fake, sizeof fake, MemoryType::kCuda}), Error);
  send_and_wait(*conn, "host still works");
}

TEST_P(TransportConformance, RegistrationCacheAnswersByAddressRange) {
  start_pair();
  std::vector<std::byte> region(1 << 20);
  client->register_memory({region.data(), region.size()});
  EXPECT_TRUE(client->is_registered(region.data(), region.size()));
  EXPECT_TRUE(client->is_registered(region.data() + 4096, 1000));
  EXPECT_FALSE(client->is_registered(region.data() + 4096, region.size()));
  EXPECT_FALSE(client->is_registered(region.data() - 1, 10));
  client->register_memory({region.data() + 10, 100});  // already covered: no-op
  try {
    client->register_memory({region.data() + region.size() - 10, 4096});
    ADD_FAILURE() << "a partial overlap must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  // Registered buffers send and receive like any other.
  auto data = pattern(region.size(), 77);
  std::memcpy(region.data(), data.data(), data.size());
  ConstBuffer b{region.data(), region.size()};
  send_and_wait(*conn, "registered", {&b, 1});
  ASSERT_TRUE(server_rx->wait_messages(1));
  EXPECT_EQ(server_rx->messages()[0].payload, data);
  client->unregister_memory(region.data());
  EXPECT_FALSE(client->is_registered(region.data(), 1));
}

TEST_P(TransportConformance, ConnectErrorsNameTheAddressAndCause) {
  auto rx = std::make_shared<RecordingReceiver>();
  Options o;
  o.connect_timeout = 2s;
  auto t = make(rx, o);
  // A port that was just free: nobody listens there.
  std::string bound;
  { Fd l = listen_tcp("127.0.0.1:0", bound); }
  try {
    t->connect(bound);
    ADD_FAILURE() << "connect to a closed port must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(bound), std::string::npos) << e.what();
  }
  try {
    t->connect("no-port-here");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("HOST:PORT"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t->listen("127.0.0.1:99999"), Error);
}

TEST_P(TransportConformance, CloseIsSeenByBothSidesAndLaterSendsFail) {
  start_pair();
  conn->close();
  ASSERT_TRUE(client_rx->wait_closed(1, 5s));
  ASSERT_TRUE(server_rx->wait_closed(1, 5s)) << "the peer learns of the close";
  EXPECT_FALSE(conn->is_open());
  SendWaiter w;
  conn->send(bytes_of("late"), {}, w.callback());
  ASSERT_TRUE(w.wait(1));
  EXPECT_EQ(w.statuses()[0].code(), ErrorCode::kConnectionClosed);
  conn->close();  // idempotent
  EXPECT_EQ(client_rx->closed().size(), 1u);
}

TEST_P(TransportConformance, ShutdownIsBoundedAndCompletesEverything) {
  start_pair();
  std::vector<std::byte> big(16u << 20);
  ConstBuffer b{big.data(), big.size()};
  SendWaiter w;
  for (int i = 0; i < 4; ++i)
    conn->send(bytes_of("big"), {&b, 1}, w.callback());
  auto start = std::chrono::steady_clock::now();
  client->shutdown();
  EXPECT_LE(std::chrono::steady_clock::now() - start, 5s);
  ASSERT_TRUE(w.wait(4, 1s)) << "every send completes by the time shutdown returns";
  SendWaiter after;
  conn->send(bytes_of("after shutdown"), {}, after.callback());
  ASSERT_TRUE(after.wait(1, 1s));
  EXPECT_FALSE(after.statuses()[0].ok());
  client->shutdown();  // idempotent
  ASSERT_TRUE(server_rx->wait_closed(1, 10s));
}

// A sender that shuts down while its payloads are on the way, then reuses their memory: each
// message reaches the receiver whole or not at all, never with bytes written after its send
// completed.
TEST_P(TransportConformance, ShutdownMidSendNeverDeliversATornPayload) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    start_pair();
    constexpr int kSends = 16;
    std::vector<std::vector<std::byte>> sent;
    for (int i = 0; i < kSends; ++i)
      sent.push_back(pattern(1u << 20, static_cast<std::uint32_t>(i)));
    std::vector<std::vector<std::byte>> buffers = sent;
    SendWaiter w;
    for (int i = 0; i < kSends; ++i) {
      ConstBuffer b{buffers[i].data(), buffers[i].size()};
      conn->send(bytes_of("m" + std::to_string(i)), {&b, 1}, w.callback());
    }
    client->shutdown();
    ASSERT_TRUE(w.wait(kSends, 1s));
    for (auto& b : buffers)
      std::fill(b.begin(), b.end(), std::byte{0xEE});  // the caller owns them again
    server_rx->wait_closed(1, 10s);
    for (const auto& m : server_rx->messages()) {
      const int i = std::stoi(m.header.substr(1));
      EXPECT_TRUE(m.payload == sent[i])
          << "message " << i << " delivered torn (attempt " << attempt << ")";
    }
    server->shutdown();
  }
}

// transport.h, "Threads": while the transport runs, a completion runs on the progress thread and
// never inside the send() that caused it: not a send that fails at once on a closed connection,
// not a send made from a callback (ps::Scheduler holds a plain mutex across sends whose
// completions lock it). Once shut down, a send completes with an error on the caller before
// send() returns.
TEST_P(TransportConformance, CompletionsNeverRunInsideTheirSend) {
  start_pair();
  struct Seen {
    bool inside_send;
    bool on_progress_thread;
    bool ok;
    ErrorCode code;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Seen> seen;
  static thread_local bool inside_send = false;
  auto record = [&](const Status& st) {
    std::lock_guard lock(mu);
    seen.push_back({inside_send, client->on_progress_thread(), st.ok(), st.code()});
    cv.notify_all();
  };
  auto send = [&](SendDone done) {
    inside_send = true;
    conn->send(bytes_of("m"), {}, std::move(done));
    inside_send = false;
  };
  auto wait_seen = [&](std::size_t n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, 5s, [&] { return seen.size() >= n; });
  };
  // From this thread, then from inside a completion (a progress-thread callback).
  send(record);
  ASSERT_TRUE(wait_seen(1));
  send([&](const Status& st) {
    record(st);
    send(record);
  });
  ASSERT_TRUE(wait_seen(3));
  // Sends that fail at once: the connection is closed.
  conn->close();
  ASSERT_TRUE(client_rx->wait_closed(1, 5s));
  send(record);
  ASSERT_TRUE(wait_seen(4));
  send([&](const Status& st) {
    record(st);
    send(record);
  });
  ASSERT_TRUE(wait_seen(6));
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(seen.size(), 6u);
    for (std::size_t i = 0; i < seen.size(); ++i) {
      EXPECT_FALSE(seen[i].inside_send) << "completion " << i << " ran inside its send()";
      EXPECT_TRUE(seen[i].on_progress_thread) << "completion " << i << " off the progress thread";
      EXPECT_EQ(seen[i].ok, i < 3) << "completion " << i;
    }
    for (std::size_t i = 3; i < seen.size(); ++i)
      EXPECT_EQ(seen[i].code, ErrorCode::kConnectionClosed) << "completion " << i;
  }
  // Shut down: no progress thread is left, the completion runs here before send() returns.
  client->shutdown();
  bool ran = false;
  Status late;
  std::thread::id where;
  conn->send(bytes_of("late"), {}, [&](const Status& st) {
    ran = true;
    late = st;
    where = std::this_thread::get_id();
  });
  EXPECT_TRUE(ran) << "a send after shutdown() completes before send() returns";
  EXPECT_EQ(where, std::this_thread::get_id());
  EXPECT_FALSE(late.ok());
}

TEST_P(TransportConformance, IdleTransportDoesNotBurnACore) {
  start_pair();
  send_and_wait(*conn, "settle");  // endpoints fully wired up
  ASSERT_TRUE(server_rx->wait_messages(1, 2s));
  std::this_thread::sleep_for(200ms);  // past the spin window
  rusage before{}, after{};
  ::getrusage(RUSAGE_SELF, &before);
  std::this_thread::sleep_for(1s);
  ::getrusage(RUSAGE_SELF, &after);
  auto cpu_us = [](const rusage& r) {
    return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1'000'000LL + r.ru_utime.tv_usec +
           r.ru_stime.tv_usec;
  };
  // Two progress threads (client and server) idle for 1 s: far below one core.
  EXPECT_LT(cpu_us(after) - cpu_us(before), 100'000);
  auto sent = std::chrono::steady_clock::now();
  send_and_wait(*conn, "wakes up");
  ASSERT_TRUE(server_rx->wait_messages(2, 2s));
  EXPECT_LT(std::chrono::steady_clock::now() - sent, 500ms) << "a sleeping loop wakes for work";
}

INSTANTIATE_TEST_SUITE_P(Backends, TransportConformance, ::testing::ValuesIn(test_backends()),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '+', '_');
                           return name;
                         });

}  // namespace
}  // namespace psrt::transport::testing
