// The endpoint between the transport and a role's handler (ps/session/endpoint.h): one cookie
// space from place() to on_message(). A data message's cookie is the endpoint's, handed to the
// handler's place() and back to its on_message(); a byte payload's cookie comes from the same
// counter, so no two messages in flight share one; a message without a payload has none.
#include "ps/session/endpoint.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/factory.h"

namespace psrt::ps {
namespace {

using namespace std::chrono_literals;

constexpr const char* kSecret = "endpoint-test-secret-0123456789abcdef0123";

struct Delivered {
  MsgType type;
  std::uint64_t cookie;  // placement.cookie as on_message() got it
  std::string payload;   // a byte payload, or a data payload's bytes
};

// A server-role handler that records what place() and on_message() see.
class Recorder final : public Handler {
 public:
  MutableBuffer place(Peer&, const Header& h, std::size_t size, std::uint64_t cookie) override {
    std::lock_guard lock(mu_);
    placed[cookie] = h.type;
    auto& buf = buffers_[cookie];
    buf.resize(size);
    return {buf.data(), size};
  }
  void on_message(Peer&, const Header& h, std::span<const std::byte> payload,
                  const transport::Placement& p) override {
    std::lock_guard lock(mu_);
    std::string bytes(reinterpret_cast<const char*>(payload.data()), payload.size());
    if (auto it = buffers_.find(p.cookie); it != buffers_.end() && carries_data(h.type)) {
      bytes.assign(reinterpret_cast<const char*>(it->second.data()), it->second.size());
      buffers_.erase(it);
    }
    delivered.push_back({h.type, p.cookie, std::move(bytes)});
    cv_.notify_all();
  }
  bool wait_for(std::size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 10s, [&] { return delivered.size() >= n; });
  }

  std::map<std::uint64_t, MsgType> placed;  // by the cookie place() was given
  std::vector<Delivered> delivered;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::uint64_t, std::vector<std::byte>> buffers_;
};

class Quiet final : public Handler {
 public:
  MutableBuffer place(Peer&, const Header&, std::size_t, std::uint64_t) override {
    throw Error(ErrorCode::kProtocol, "no data expected");
  }
  void on_message(Peer&, const Header&, std::span<const std::byte>,
                  const transport::Placement&) override {}
};

Header init(std::uint64_t key) {
  Header h;
  h.type = MsgType::kInit;
  h.dtype = WireType::kF32;
  h.key = key;
  h.count = 2;
  h.total = 2;
  return h;
}

TEST(Endpoint, OneCookieSpaceFromPlaceToDelivery) {
  Recorder server;
  auto acceptor = std::make_shared<Endpoint>(kSecret, Role::kServer, Limits{});
  acceptor->set_handler(&server);
  auto st = transport::create_transport("tcp", acceptor);
  const auto address = st->listen("127.0.0.1:0");

  Quiet worker;
  auto client = std::make_shared<Endpoint>(kSecret, Role::kWorker, Limits{});
  client->set_handler(&worker);
  auto wt = transport::create_transport("tcp", client);
  auto peer = client->connect(*wt, address, 0, Role::kServer, 0, 10s);

  const std::vector<float> a = {1.f, 2.f}, b = {3.f, 4.f};
  ConstBuffer pa{a.data(), sizeof(float) * a.size()}, pb{b.data(), sizeof(float) * b.size()};
  peer->send(init(7), {&pa, 1});  // data: placed by the handler
  Header info;
  info.type = MsgType::kDeviceInfo;
  const std::string probe = "probe";
  auto pbytes = as_bytes(probe);
  peer->send_bytes(info, {pbytes.begin(), pbytes.end()});  // bytes: placed by the endpoint
  peer->send(init(8), {&pb, 1});                           // data again
  Header pull = init(7);
  pull.type = MsgType::kPull;
  peer->send(pull);  // no payload: no placement
  ASSERT_TRUE(server.wait_for(4));

  ASSERT_EQ(server.delivered.size(), 4u);
  const auto& d = server.delivered;
  EXPECT_EQ(d[0].type, MsgType::kInit);
  EXPECT_EQ(d[1].type, MsgType::kDeviceInfo);
  EXPECT_EQ(d[2].type, MsgType::kInit);
  EXPECT_EQ(d[3].type, MsgType::kPull);
  // Each data message comes back with the cookie its place() was given, and its payload there.
  ASSERT_EQ(server.placed.size(), 2u);
  ASSERT_TRUE(server.placed.count(d[0].cookie));
  ASSERT_TRUE(server.placed.count(d[2].cookie));
  EXPECT_NE(d[0].cookie, d[2].cookie);
  EXPECT_EQ(d[0].payload, std::string(reinterpret_cast<const char*>(a.data()), pa.size));
  EXPECT_EQ(d[2].payload, std::string(reinterpret_cast<const char*>(b.data()), pb.size));
  // The byte payload's cookie is from the same space: not 0, and none of the data messages'.
  EXPECT_NE(d[1].cookie, 0u);
  EXPECT_FALSE(server.placed.count(d[1].cookie));
  EXPECT_EQ(d[1].payload, probe);
  // Cookies are handed out in arrival order from one counter.
  EXPECT_LT(d[0].cookie, d[1].cookie);
  EXPECT_LT(d[1].cookie, d[2].cookie);
  EXPECT_EQ(d[3].cookie, 0u);
  wt->shutdown();
  st->shutdown();
}

}  // namespace
}  // namespace psrt::ps
