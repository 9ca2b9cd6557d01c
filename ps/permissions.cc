#include "ps/permissions.h"

#include <initializer_list>

namespace psrt::ps {
namespace {

bool one_of(MsgType t, std::initializer_list<MsgType> allowed) {
  for (MsgType a : allowed)
    if (a == t) return true;
  return false;
}

}  // namespace

bool may_send(Role receiver, Role sender, MsgType t) noexcept {
  using M = MsgType;
  switch (receiver) {
    case Role::kScheduler:
      if (sender == Role::kServer)
        return one_of(t, {M::kRegister, M::kHeartbeat, M::kMembershipAck, M::kError});
      if (sender == Role::kWorker)
        return one_of(
            t, {M::kRegister, M::kUnregister, M::kLocate, M::kBarrier, M::kHeartbeat, M::kError});
      return false;
    case Role::kServer:
      if (sender == Role::kScheduler)
        return one_of(t, {M::kRegisterReply, M::kMembership, M::kShutdown, M::kError});
      if (sender == Role::kWorker)
        return one_of(t, {M::kInit, M::kSetOptimizer, M::kPush, M::kPull, M::kPushPull,
                          M::kDeviceInfo, M::kPushIpc, M::kPushPullIpc, M::kPullIpc, M::kError});
      return false;
    case Role::kWorker:
      if (sender == Role::kScheduler)
        return one_of(t, {M::kRegisterReply, M::kUnregisterReply, M::kLocateReply, M::kBarrierReply,
                          M::kShutdown, M::kError});
      if (sender == Role::kServer)
        return one_of(t, {M::kInitReply, M::kSetOptimizerReply, M::kPushAck, M::kPullReply,
                          M::kDeviceInfoReply, M::kPullIpcReply, M::kError});
      return false;
  }
  return false;
}

}  // namespace psrt::ps
