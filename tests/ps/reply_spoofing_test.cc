// Replies from a peer that was not asked (issue 30, item 5): a process holding the job secret
// authenticates to the scheduler, never registers, and answers the scheduler's MEMBERSHIP
// request to a server with an ERROR of that request's id. The request is the server's to answer:
// the forged reply is ignored, the change completes with the server's ack and the job goes on.
// The scheduler runs in this process; the server, the worker and the attacker are raw endpoints
// over TCP on 127.0.0.1, so that the test holds the MEMBERSHIP request open while it attacks.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>

#include "ps/scheduler.h"
#include "ps/session/endpoint.h"
#include "ps/session/requests.h"
#include "tests/integration/raw_worker.h"
#include "transport/factory.h"

namespace psrt::ps {
namespace {

using namespace std::chrono_literals;

constexpr const char* kSecret = "reply-spoofing-test-secret-0123456789abcdef";

// A server made by hand: registers, and hands the first MEMBERSHIP request to the test instead of
// acknowledging it.
class HeldServer : public test::RequestsHandler {
 public:
  void on_message(Peer& peer, const Header& h, std::span<const std::byte> payload,
                  const transport::Placement& p) override {
    if (h.type == MsgType::kMembership) {
      std::lock_guard lock(mu_);
      if (!membership_set_) {
        membership_set_ = true;
        membership_.set_value(h.request_id);
      }
      return;
    }
    test::RequestsHandler::on_message(peer, h, payload, p);
  }
  std::future<std::uint64_t> membership() { return membership_.get_future(); }

 private:
  std::mutex mu_;
  bool membership_set_ = false;
  std::promise<std::uint64_t> membership_;
};

TEST(ReplySpoofing, AnErrorFromAPeerNotAskedNeitherFailsNorStopsTheJob) {
  SchedulerConfig sc;
  sc.secret = kSecret;
  sc.num_servers = 1;
  sc.num_workers = 1;
  sc.worker_loss = SchedulerConfig::WorkerLoss::kContinue;
  Scheduler scheduler(sc);

  HeldServer server_handler;
  auto membership = server_handler.membership();
  auto server_ep = std::make_shared<Endpoint>(kSecret, Role::kServer, Limits{});
  server_ep->set_handler(&server_handler);
  auto server_transport = transport::create_transport("tcp", server_ep);
  auto server =
      server_ep->connect(*server_transport, scheduler.address(), 0, Role::kScheduler, 0, 10s);
  Header reg;
  reg.type = MsgType::kRegister;
  reg.set_role(Role::kServer);
  reg.set_rank(0);
  const std::string address = "127.0.0.1:9";  // never dialled: the worker here is raw
  server_handler.requests.call(*server, reg, encode_lines({&address, 1}), "REGISTER", 10s);

  test::RequestsHandler worker_handler;
  auto worker =
      test::connect_raw_worker("tcp", kSecret, worker_handler, scheduler.address(), kAnyRank);
  auto registered = std::async(std::launch::async, [&] {
    return test::register_raw_worker(worker, worker_handler.requests);
  });
  // The rendezvous sent MEMBERSHIP to the server; it is unanswered while the attacker acts.
  ASSERT_EQ(membership.wait_for(10s), std::future_status::ready);
  const std::uint64_t id = membership.get();

  test::RequestsHandler attacker_handler;
  auto attacker =
      test::connect_raw_worker("tcp", kSecret, attacker_handler, scheduler.address(), kAnyRank);
  Header forged;
  forged.type = MsgType::kError;
  forged.request_id = id;
  forged.set_error_code(ErrorCode::kInternal);
  attacker.scheduler->send_bytes(forged, {std::byte{'x'}});
  // One round trip on the same connection: the forged ERROR was handled before its answer.
  Header locate;
  locate.type = MsgType::kLocate;
  locate.key = 1;
  EXPECT_THROW(attacker_handler.requests.call(*attacker.scheduler, locate, {}, "LOCATE", 10s),
               Error);

  Header ack;
  ack.type = MsgType::kMembershipAck;
  ack.request_id = id;
  server->send(ack);
  ASSERT_EQ(registered.wait_for(20s), std::future_status::ready);
  EXPECT_NO_THROW(registered.get()) << "the worker's registration completes";
  const Status still = scheduler.wait(200ms);
  EXPECT_EQ(still.code(), ErrorCode::kTimeout) << "the job stopped: " << still.message();

  attacker.transport->shutdown();
  worker.transport->shutdown();
  server_transport->shutdown();
}

}  // namespace
}  // namespace psrt::ps
