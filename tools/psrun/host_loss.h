// psrun --launcher ssh with --max-restarts: before a restart, the job's hosts that ssh can no
// longer reach (a host powered off, its link down) are found (runtime/launch/ssh_reach.h), and
// their servers and workers are moved to the hosts that remain (runtime/launch/host_assignment.h),
// so that the job restarts with as many servers and workers as before. With --min-workers M the
// workers of the lost hosts are dropped instead, when M or more remain: the job restarts with
// fewer workers (ranks 0..W'-1, in the order of the ones that remain), the same servers.
#pragma once

#include <string>
#include <vector>

#include "runtime/launch/host_assignment.h"

namespace psrt::psrun {

// Moves the processes of the hosts ssh (with `ssh_args`) cannot reach within
// PSRT_PEER_TIMEOUT_MS to the others, saying so on stderr; with `min_workers` > 0 drops their
// workers instead (launch::drop_lost_workers). False, having said why, when no host is left or
// fewer than `min_workers` workers.
bool move_off_lost_hosts(const std::vector<std::string>& ssh_args, int min_workers,
                         launch::HostAssignment& assignment);

}  // namespace psrt::psrun
