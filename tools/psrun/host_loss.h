// psrun --launcher ssh with --max-restarts: before a restart, the job's hosts that ssh can no
// longer reach (a host powered off, its link down) are found (runtime/launch/ssh_reach.h), and
// their servers and workers are moved to the hosts that remain (runtime/launch/host_assignment.h),
// so that the job restarts with as many servers and workers as before (which a job checkpoint
// needs: one part per worker rank).
#pragma once

#include <string>
#include <vector>

#include "runtime/launch/host_assignment.h"

namespace psrt::psrun {

// Moves the processes of the hosts ssh (with `ssh_args`) cannot reach within
// PSRT_PEER_TIMEOUT_MS to the others, saying so on stderr. False, having said why, when no host
// is left.
bool move_off_lost_hosts(const std::vector<std::string>& ssh_args,
                         launch::HostAssignment& assignment);

}  // namespace psrt::psrun
