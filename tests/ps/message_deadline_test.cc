// A message once begun must arrive whole within Admission::message_deadline (issue 30): an
// authenticated peer that leaves a REGISTER half-sent (1 MiB placed for it) has its connection
// closed, and what was placed is released. Over real TCP on 127.0.0.1; a relay holds the rest of
// the message, as a hostile peer that stops sending would.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "ps/session/endpoint.h"
#include "tests/integration/raw_worker.h"
#include "tests/integration/relay.h"
#include "transport/factory.h"
#include "transport/tcp/frame.h"

namespace psrt::ps {
namespace {

using namespace std::chrono_literals;

constexpr const char* kSecret = "message-deadline-test-secret-0123456789abcdef";

// The accepting side: counts the messages it got and notes its peer's connection closing.
class Acceptor : public Handler {
 public:
  MutableBuffer place(Peer&, const Header&, std::size_t, std::uint64_t) override {
    throw Error(ErrorCode::kProtocol, "no data messages here");
  }
  void on_message(Peer&, const Header&, std::span<const std::byte>,
                  const transport::Placement&) override {
    std::lock_guard lock(mu_);
    ++messages_;
  }
  void on_peer_closed(Peer&, const Status&) override {
    std::lock_guard lock(mu_);
    closed_ = true;
    cv_.notify_all();
  }
  bool wait_closed(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return closed_; });
  }
  int messages() {
    std::lock_guard lock(mu_);
    return messages_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int messages_ = 0;
  bool closed_ = false;
};

TEST(MessageDeadline, AHalfSentRegisterClosesItsConnectionAtTheDeadline) {
  Admission admission;
  admission.message_deadline = 500ms;
  Acceptor acceptor;
  auto acceptor_ep = std::make_shared<Endpoint>(kSecret, Role::kScheduler, Limits{}, admission);
  acceptor_ep->set_handler(&acceptor);
  auto acceptor_t = transport::create_transport("tcp", acceptor_ep);
  test::Relay relay(acceptor_t->listen("127.0.0.1:0"));
  test::RequestsHandler client;
  auto client_ep = std::make_shared<Endpoint>(kSecret, Role::kWorker, Limits{});
  client_ep->set_handler(&client);
  auto client_t = transport::create_transport("tcp", client_ep);
  auto peer = client_ep->connect(*client_t, relay.address(), kAnyRank, Role::kScheduler, 0, 10s);
  // A whole message within the deadline is taken as ever.
  constexpr std::size_t kPayload = std::size_t{1} << 20;
  Header h;
  h.type = MsgType::kHeartbeat;
  peer->send(h);
  // The REGISTER: its frame prefix, header and half its 1 MiB payload reach the acceptor.
  relay.hold_after(transport::tcp::kFramePrefixBytes + kHeaderBytes + kPayload / 2);
  h.type = MsgType::kRegister;
  h.set_role(Role::kWorker);
  h.set_rank(kAnyRank);
  peer->send_bytes(h, std::vector<std::byte>(kPayload, std::byte{'a'}));
  ASSERT_TRUE(relay.wait_held(10s)) << "the relay did not pass the first half";
  const auto held = std::chrono::steady_clock::now();
  const bool closed = acceptor.wait_closed(10s);
  const auto after = std::chrono::steady_clock::now() - held;
  EXPECT_TRUE(closed) << "a REGISTER left half-sent kept its connection (and 1 MiB) for 10 s";
  EXPECT_LT(after, 5s) << "closed, but long after the 500 ms deadline";
  EXPECT_EQ(acceptor.messages(), 1) << "the heartbeat only: the REGISTER never arrived whole";
  relay.release();
  client_t->shutdown();
  acceptor_t->shutdown();
}

}  // namespace
}  // namespace psrt::ps
