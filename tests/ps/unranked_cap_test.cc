// Authenticated connections with no rank yet (a worker before its REGISTER is answered) are
// capped in total and per remote host (Admission::max_unranked, max_unranked_per_host; issue 30):
// a holder of the secret cannot open them without bound, each pinning a half-sent REGISTER.
// Over real TCP on 127.0.0.1, as that holder would.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ps/session/endpoint.h"
#include "tests/integration/raw_worker.h"
#include "transport/factory.h"

namespace psrt::ps {
namespace {

using namespace std::chrono_literals;

constexpr const char* kSecret = "unranked-cap-test-secret-0123456789abcdef";

class Acceptor : public Handler {
 public:
  MutableBuffer place(Peer&, const Header&, std::size_t, std::uint64_t) override {
    throw Error(ErrorCode::kProtocol, "no data messages here");
  }
  void on_message(Peer&, const Header&, std::span<const std::byte>,
                  const transport::Placement&) override {}
  void on_peer_closed(Peer&, const Status&) override {}
};

// Opens unranked connections to an acceptor with `admission` until one is refused (at most 8);
// returns how many were admitted and why the next was refused.
struct Opened {
  std::size_t admitted = 0;
  Status refused;
};

Opened open_unranked(const Admission& admission) {
  Acceptor acceptor;
  auto acceptor_ep = std::make_shared<Endpoint>(kSecret, Role::kScheduler, Limits{}, admission);
  acceptor_ep->set_handler(&acceptor);
  auto acceptor_t = transport::create_transport("tcp", acceptor_ep);
  const std::string address = acceptor_t->listen("127.0.0.1:0");
  test::RequestsHandler client;
  auto client_ep = std::make_shared<Endpoint>(kSecret, Role::kWorker, Limits{});
  client_ep->set_handler(&client);
  auto client_t = transport::create_transport("tcp", client_ep);
  Opened out;
  std::vector<std::shared_ptr<Peer>> peers;
  for (int i = 0; i < 8 && out.refused.ok(); ++i) {
    try {
      peers.push_back(client_ep->connect(*client_t, address, kAnyRank, Role::kScheduler, 0, 10s));
    } catch (const Error& e) {
      out.refused = Status(e);
    }
  }
  out.admitted = peers.size();
  client_t->shutdown();
  acceptor_t->shutdown();
  return out;
}

TEST(UnrankedCap, OneHostHoldsAtMostMaxUnrankedPerHost) {
  Admission admission;
  admission.max_unranked_per_host = 3;
  const Opened out = open_unranked(admission);
  EXPECT_EQ(out.admitted, 3u);
  EXPECT_EQ(out.refused.code(), ErrorCode::kInvalidArgument) << out.refused.message();
  EXPECT_NE(out.refused.message().find("host 127.0.0.1 already holds 3 authenticated connections "
                                       "with no rank yet"),
            std::string::npos)
      << out.refused.message();
  EXPECT_NE(out.refused.message().find("Admission::max_unranked_per_host"), std::string::npos)
      << out.refused.message();
}

TEST(UnrankedCap, AllHostsTogetherHoldAtMostMaxUnranked) {
  Admission admission;
  admission.max_unranked = 2;
  const Opened out = open_unranked(admission);
  EXPECT_EQ(out.admitted, 2u);
  EXPECT_EQ(out.refused.code(), ErrorCode::kInvalidArgument) << out.refused.message();
  EXPECT_NE(out.refused.message().find("2 authenticated connections with no rank yet are open "
                                       "here, the most allowed (Admission::max_unranked)"),
            std::string::npos)
      << out.refused.message();
}

// The defaults leave room for a job's workers registering at once.
TEST(UnrankedCap, DefaultsAreDocumentedValues) {
  const Admission admission;
  EXPECT_EQ(admission.max_unranked, 1024u);
  EXPECT_EQ(admission.max_unranked_per_host, 128u);
}

}  // namespace
}  // namespace psrt::ps
