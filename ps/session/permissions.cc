#include "ps/session/permissions.h"

namespace psrt::ps {
inline namespace session {
namespace {

// The route bit of sender → receiver; 0 for a pair no message may take (same roles).
std::uint8_t route_of(Role receiver, Role sender) noexcept {
  switch (receiver) {
    case Role::kScheduler:
      return sender == Role::kServer   ? kServerToScheduler
             : sender == Role::kWorker ? kWorkerToScheduler
                                       : 0;
    case Role::kServer:
      return sender == Role::kScheduler ? kSchedulerToServer
             : sender == Role::kWorker  ? kWorkerToServer
             : sender == Role::kServer  ? kServerToServer
                                        : 0;
    case Role::kWorker:
      return sender == Role::kScheduler ? kSchedulerToWorker
             : sender == Role::kServer  ? kServerToWorker
                                        : 0;
  }
  return 0;
}

}  // namespace

bool may_send(Role receiver, Role sender, MsgType t) noexcept {
  if (!is_message_type(static_cast<std::uint8_t>(t))) return false;
  const std::uint8_t route = route_of(receiver, sender);
  return route != 0 && (info(t).routes & route) != 0;
}

}  // namespace session
}  // namespace psrt::ps
