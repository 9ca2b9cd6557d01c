// Who may send what: the messages each role accepts from each other role, once the peer has
// authenticated (ps/session/endpoint.h checks it before any handler sees a message). The one table
// is the `routes` column of PSRT_PS_MESSAGES (ps/session/protocol.h). A message outside it is
// refused with an ERROR naming both roles, and the connection is closed. The sender's role is the
// one its HELLO claimed, covered by the handshake's MAC, or, for a connection this process opened,
// the role the acceptor proved in WELCOME. What the table says (tests/ps/session/protocol_test.cc
// pins it):
//
//   receiver   sender      may send
//   scheduler  server      REGISTER, HEARTBEAT, MEMBERSHIP_ACK, REPLICA_SET_ACK, PLACEMENT,
//                          METRICS, TIMELINE, CLOCK, ERROR
//   scheduler  worker      REGISTER, UNREGISTER, LOCATE, BARRIER, HEARTBEAT, METRICS, TIMELINE,
//                          CLOCK, ERROR
//   server     scheduler   REGISTER_REPLY, MEMBERSHIP, SHUTDOWN, REPLICA_SET, PLACEMENT_REPLY,
//                          CLOCK_REPLY, ERROR
//   server     worker      INIT, SET_OPTIMIZER, PUSH, PULL, PUSH_PULL, DEVICE_INFO,
//                          PUSH_IPC, PUSH_PULL_IPC, PULL_IPC, ERROR
//   worker     scheduler   REGISTER_REPLY, UNREGISTER_REPLY, LOCATE_REPLY, BARRIER_REPLY,
//                          SHUTDOWN, CLOCK_REPLY, ERROR
//   worker     server      INIT_REPLY, SET_OPTIMIZER_REPLY, PUSH_ACK, PULL_REPLY,
//                          DEVICE_INFO_REPLY, PULL_IPC_REPLY, ERROR
// Nothing else: servers do not talk to servers, workers not to workers, and only the scheduler
// sends SHUTDOWN and MEMBERSHIP. Which rank a message acts for is never read from it: the
// scheduler acts for the rank registered on the connection, a server for the rank the worker
// proved in its handshake (ps/session/auth.h).
#pragma once

#include "ps/session/protocol.h"

namespace psrt::ps {
inline namespace session {

// Whether a process of role `receiver` accepts `type` from an authenticated peer of role
// `sender`. Handshake messages are not in the table (the endpoint runs the handshake itself).
bool may_send(Role receiver, Role sender, MsgType type) noexcept;

}  // namespace session
}  // namespace psrt::ps
