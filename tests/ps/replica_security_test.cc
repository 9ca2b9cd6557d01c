// Server replicas under attack (issue 30, item 1): a process holding the job secret, but no
// server registration, poses as a server to that server's backup and sends it forged copies
// (REPLICATE + REPLICATE_COMMIT) that a promotion would serve; and a registered server sends
// copies to a server whose primary it is not. A scheduler with --replicas 2, three servers in a
// ring (0 → 1 → 2 → 0) and a worker run in this process over TCP on 127.0.0.1; the attackers
// speak the wire protocol through their own endpoints.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ps/scheduler.h"
#include "ps/session/replica_protocol.h"
#include "psrt/psrt.h"
#include "replica_server.h"
#include "tests/integration/raw_worker.h"
#include "transport/factory.h"

namespace psrt::ps {
namespace {

using namespace std::chrono_literals;

constexpr const char* kSecret = "replica-security-test-secret-0123456789abcdef";
constexpr std::uint32_t kServers = 3;
constexpr std::size_t kSliceValues = 1024;
constexpr std::size_t kKeyValues = kServers * kSliceValues;  // one slice on every server
constexpr float kForged = 999829.f;

class ReplicaSecurity : public ::testing::Test {
 protected:
  void SetUp() override {
    const SchedulerConfig sc = replica_job_config(kSecret, kServers, 1, kSliceValues);
    scheduler = std::make_unique<Scheduler>(sc);
    servers = replica_servers(sc);
    for (auto& s : servers)
      s->start(scheduler->address());
    WorkerOptions o;
    o.scheduler = scheduler->address();
    o.transport = "tcp";
    o.secret = kSecret;
    o.op_timeout = 30s;
    worker.emplace(Worker::join(o));
    std::vector<float> init(kKeyValues, 1.f), grad(kKeyValues, 0.5f), out(kKeyValues);
    worker->init(0, init);
    for (int round = 0; round < 3; ++round)
      worker->push_pull(0, grad, out).wait();
  }
  void TearDown() override {
    if (worker) worker->shutdown();
    worker.reset();
    servers.clear();
    scheduler.reset();
  }

  // The slice index server `rank` holds of key 0.
  std::optional<std::uint32_t> held_slice(std::uint32_t rank) {
    for (std::uint32_t i = 0; i < kServers; ++i)
      if (servers[rank]->server.held(0, i)) return i;
    return std::nullopt;
  }

  // Sends `to` a forged copy of slice `index` of key 0 (every weight kForged, a version ahead)
  // on `peer`; the status of its REPLICATE_COMMIT.
  static Status forge_copy(Peer& peer, Requests& requests, std::uint32_t index,
                           std::uint64_t version) {
    std::vector<float> forged(kSliceValues, kForged);
    Header h;
    h.type = MsgType::kReplicate;
    h.dtype = WireType::kF32;
    h.key = 0;
    h.offset = index * kSliceValues;
    h.count = kSliceValues;
    h.total = kKeyValues;
    h.set_slice(index);
    h.set_part(0);
    h.round = version;
    ConstBuffer b{forged.data(), forged.size() * sizeof(float)};
    peer.send(h, {&b, 1});
    Header c;
    c.type = MsgType::kReplicateCommit;
    c.key = 0;
    c.set_slice(index);
    c.round = version;
    const std::vector<ReplicaCount> counts = {{0, version, version}};
    c.count = counts.size();
    try {
      requests.call(peer, c, encode_counts(counts), "REPLICATE_COMMIT", 10s);
    } catch (const Error& e) {
      return Status(e);
    }
    return Status();
  }

  // Server 1's copy of server 0's slice equals that slice bit for bit (no forgery landed).
  void expect_genuine_copy_on_server_1() {
    const auto index = held_slice(0);
    ASSERT_TRUE(index) << "server 0 holds a slice of key 0";
    auto held = servers[0]->server.held(0, *index);
    auto copy = servers[1]->server.copy(0, *index);
    ASSERT_TRUE(held);
    ASSERT_TRUE(copy) << "server 1, server 0's backup, has a copy of its slice";
    EXPECT_EQ(copy->version, held->version);
    ASSERT_EQ(copy->weights.size(), held->weights.size());
    EXPECT_EQ(std::memcmp(copy->weights.data(), held->weights.data(),
                          held->weights.size() * sizeof(float)),
              0)
        << "server 1's copy of server 0's slice was replaced (first value " << copy->weights[0]
        << ")";
  }

  std::unique_ptr<Scheduler> scheduler;
  std::vector<std::unique_ptr<ReplicaServer>> servers;
  std::optional<Worker> worker;
};

TEST_F(ReplicaSecurity, HolderOfTheSecretCannotPoseAsAServerToItsBackup) {
  const auto index = held_slice(0);
  ASSERT_TRUE(index);
  const std::uint64_t version = servers[0]->server.held(0, *index)->version;
  // The attacker: the job secret, a server-role endpoint, no registration.
  test::RequestsHandler handler;
  auto endpoint = std::make_shared<Endpoint>(kSecret, Role::kServer, Limits{});
  endpoint->set_handler(&handler);
  auto transport = transport::create_transport("tcp", endpoint);
  for (const std::uint32_t claim : {0u, 2u}) {  // server 1's primary, and another server
    std::shared_ptr<Peer> peer;
    Status refused;
    try {
      peer = endpoint->connect(*transport, servers[1]->address, claim, Role::kServer, 1, 10s);
    } catch (const Error& e) {
      refused = Status(e);
    }
    if (peer) refused = forge_copy(*peer, handler.requests, *index, version + 1);
    EXPECT_EQ(refused.code(), ErrorCode::kAuthentication)
        << "a process claiming to be server " << claim
        << " without its credential: " << refused.message();
    EXPECT_NE(refused.message().find(claim == 0 ? "did not prove the membership credential"
                                                : "is not the server that replicates to this one"),
              std::string::npos)
        << refused.message();
  }
  transport->shutdown();
  expect_genuine_copy_on_server_1();
}

TEST_F(ReplicaSecurity, ARegisteredServerReplicatesOnlyToItsOwnBackup) {
  // Server 2 is registered (it holds its own credential) but replicates to server 0, not 1:
  // server 1 takes copies from server 0 alone.
  const auto index = held_slice(0);
  ASSERT_TRUE(index);
  std::shared_ptr<Peer> peer;
  Status refused;
  try {
    peer = servers[2]->endpoint->connect(*servers[2]->transport, servers[1]->address, 2,
                                         Role::kServer, 1, 10s);
  } catch (const Error& e) {
    refused = Status(e);
  }
  if (peer) refused = Status(ErrorCode::kInternal, "server 1 accepted server 2's connection");
  EXPECT_EQ(refused.code(), ErrorCode::kAuthentication) << refused.message();
  EXPECT_NE(refused.message().find("is not the server that replicates to this one"),
            std::string::npos)
      << refused.message();
  expect_genuine_copy_on_server_1();
}

}  // namespace
}  // namespace psrt::ps
