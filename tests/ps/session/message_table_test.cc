// The message table (PSRT_PS_MESSAGES in ps/session/protocol.h) and what is derived from it, pinned
// to the values the wire and the permission rules had before the table existed: a changed row shows
// up here, not as a peer of another build refusing a message.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ps/session/permissions.h"
#include "ps/session/protocol.h"

namespace psrt::ps {
namespace {

using M = MsgType;

TEST(MessageTable, WireValuesAndNamesAreFixed) {
  const std::vector<std::pair<M, std::string_view>> expected = {
      {M::kHello, "HELLO"},
      {M::kChallenge, "CHALLENGE"},
      {M::kAuth, "AUTH"},
      {M::kWelcome, "WELCOME"},
      {M::kError, "ERROR"},
      {M::kRegister, "REGISTER"},
      {M::kRegisterReply, "REGISTER_REPLY"},
      {M::kUnregister, "UNREGISTER"},
      {M::kUnregisterReply, "UNREGISTER_REPLY"},
      {M::kLocate, "LOCATE"},
      {M::kLocateReply, "LOCATE_REPLY"},
      {M::kBarrier, "BARRIER"},
      {M::kBarrierReply, "BARRIER_REPLY"},
      {M::kHeartbeat, "HEARTBEAT"},
      {M::kMembership, "MEMBERSHIP"},
      {M::kMembershipAck, "MEMBERSHIP_ACK"},
      {M::kShutdown, "SHUTDOWN"},
      {M::kInit, "INIT"},
      {M::kInitReply, "INIT_REPLY"},
      {M::kSetOptimizer, "SET_OPTIMIZER"},
      {M::kSetOptimizerReply, "SET_OPTIMIZER_REPLY"},
      {M::kPush, "PUSH"},
      {M::kPushAck, "PUSH_ACK"},
      {M::kPull, "PULL"},
      {M::kPushPull, "PUSH_PULL"},
      {M::kPullReply, "PULL_REPLY"},
      {M::kDeviceInfo, "DEVICE_INFO"},
      {M::kDeviceInfoReply, "DEVICE_INFO_REPLY"},
      {M::kPushIpc, "PUSH_IPC"},
      {M::kPushPullIpc, "PUSH_PULL_IPC"},
      {M::kPullIpc, "PULL_IPC"},
      {M::kPullIpcReply, "PULL_IPC_REPLY"},
      {M::kReplicate, "REPLICATE"},
      {M::kReplicateCommit, "REPLICATE_COMMIT"},
      {M::kReplicateAck, "REPLICATE_ACK"},
      {M::kReplicaSet, "REPLICA_SET"},
      {M::kReplicaSetAck, "REPLICA_SET_ACK"},
      {M::kRoute, "ROUTE"},
      {M::kVersion, "VERSION"},
      {M::kVersionReply, "VERSION_REPLY"},
  };
  ASSERT_EQ(expected.size(), 40u);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(static_cast<int>(expected[i].first), static_cast<int>(i) + 1);
    EXPECT_EQ(to_string(expected[i].first), expected[i].second);
  }
  // Live metrics and the timeline: the range 60-69.
  EXPECT_EQ(static_cast<int>(M::kMetrics), 60);
  EXPECT_EQ(to_string(M::kMetrics), "METRICS");
  EXPECT_EQ(static_cast<int>(M::kTimeline), 61);
  EXPECT_EQ(to_string(M::kTimeline), "TIMELINE");
  EXPECT_EQ(static_cast<int>(M::kClock), 62);
  EXPECT_EQ(to_string(M::kClock), "CLOCK");
  EXPECT_EQ(static_cast<int>(M::kClockReply), 63);
  EXPECT_EQ(to_string(M::kClockReply), "CLOCK_REPLY");
  // Placement (issue 30): the range 70-74.
  EXPECT_EQ(static_cast<int>(M::kPlacement), 70);
  EXPECT_EQ(to_string(M::kPlacement), "PLACEMENT");
  EXPECT_EQ(static_cast<int>(M::kPlacementReply), 71);
  EXPECT_EQ(to_string(M::kPlacementReply), "PLACEMENT_REPLY");
  // The optimizer state: the range 85-89.
  EXPECT_EQ(static_cast<int>(M::kOptimizerState), 85);
  EXPECT_EQ(to_string(M::kOptimizerState), "OPTIMIZER_STATE");
  EXPECT_EQ(static_cast<int>(M::kOptimizerStateReply), 86);
  EXPECT_EQ(to_string(M::kOptimizerStateReply), "OPTIMIZER_STATE_REPLY");
  EXPECT_EQ(static_cast<int>(M::kSetOptimizerState), 87);
  EXPECT_EQ(to_string(M::kSetOptimizerState), "SET_OPTIMIZER_STATE");
  EXPECT_EQ(static_cast<int>(M::kSetOptimizerStateReply), 88);
  EXPECT_EQ(to_string(M::kSetOptimizerStateReply), "SET_OPTIMIZER_STATE_REPLY");
  ASSERT_EQ(static_cast<int>(M::kLast), 88);
  for (int t = 41; t < 60; ++t)
    EXPECT_EQ(to_string(static_cast<M>(t)), "?") << t;
  for (int t = 64; t < 70; ++t)
    EXPECT_EQ(to_string(static_cast<M>(t)), "?") << t;
  for (int t = 72; t < 85; ++t)
    EXPECT_EQ(to_string(static_cast<M>(t)), "?") << t;
  EXPECT_EQ(to_string(static_cast<M>(0)), "?");
  EXPECT_EQ(to_string(static_cast<M>(89)), "?");
  EXPECT_EQ(to_string(static_cast<M>(255)), "?");
}

TEST(MessageTable, DataAndHandshakeMessages) {
  std::set<M> data, handshake;
  for (int t = 1; t <= static_cast<int>(M::kLast); ++t) {
    if (!is_message_type(static_cast<std::uint8_t>(t))) continue;
    if (carries_data(static_cast<M>(t))) data.insert(static_cast<M>(t));
    if (is_handshake(static_cast<M>(t))) handshake.insert(static_cast<M>(t));
  }
  EXPECT_EQ(data, (std::set<M>{M::kInit, M::kPush, M::kPushPull, M::kPullReply, M::kReplicate,
                               M::kOptimizerStateReply, M::kSetOptimizerState}));
  EXPECT_EQ(handshake, (std::set<M>{M::kHello, M::kChallenge, M::kAuth, M::kWelcome}));
}

// The whole may_send matrix, as ps/session/permissions.h documents it.
TEST(MessageTable, PermissionsMatrix) {
  const Role roles[] = {Role::kScheduler, Role::kServer, Role::kWorker};
  auto allowed = [](Role receiver, Role sender) -> std::set<M> {
    using R = Role;
    if (receiver == R::kScheduler && sender == R::kServer)
      return {M::kRegister, M::kHeartbeat, M::kMembershipAck, M::kReplicaSetAck, M::kPlacement,
              M::kMetrics,  M::kTimeline,  M::kClock,         M::kError};
    if (receiver == R::kScheduler && sender == R::kWorker)
      return {M::kRegister, M::kUnregister, M::kLocate, M::kBarrier, M::kHeartbeat,
              M::kMetrics,  M::kTimeline,   M::kClock,  M::kError};
    if (receiver == R::kServer && sender == R::kScheduler)
      return {M::kRegisterReply,  M::kMembership, M::kShutdown, M::kReplicaSet,
              M::kPlacementReply, M::kClockReply, M::kError};
    if (receiver == R::kServer && sender == R::kServer)
      return {M::kReplicate, M::kReplicateCommit, M::kReplicateAck, M::kError};
    if (receiver == R::kServer && sender == R::kWorker)
      return {M::kInit,           M::kSetOptimizer,      M::kPush,        M::kPull,    M::kPushPull,
              M::kDeviceInfo,     M::kPushIpc,           M::kPushPullIpc, M::kPullIpc, M::kVersion,
              M::kOptimizerState, M::kSetOptimizerState, M::kError};
    if (receiver == R::kWorker && sender == R::kScheduler)
      return {M::kRegisterReply, M::kUnregisterReply, M::kLocateReply, M::kBarrierReply,
              M::kShutdown,      M::kRoute,           M::kClockReply,  M::kError};
    if (receiver == R::kWorker && sender == R::kServer)
      return {M::kInitReply,    M::kSetOptimizerReply,   M::kPushAck,
              M::kPullReply,    M::kDeviceInfoReply,     M::kPullIpcReply,
              M::kVersionReply, M::kOptimizerStateReply, M::kSetOptimizerStateReply,
              M::kError};
    return {};
  };
  for (Role receiver : roles)
    for (Role sender : roles) {
      const std::set<M> want = allowed(receiver, sender);
      for (int t = 0; t <= 255; ++t) {
        const auto type = static_cast<M>(t);
        EXPECT_EQ(may_send(receiver, sender, type), want.count(type) == 1)
            << to_string(sender) << " -> " << to_string(receiver) << " type " << t;
      }
    }
}

}  // namespace
}  // namespace psrt::ps
