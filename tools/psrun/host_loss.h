// psrun --launcher ssh with --max-restarts: before a restart, the job's hosts that ssh can no
// longer reach (a host powered off, its link down) are found, and their servers and workers are
// moved to the hosts that remain, so that the job restarts with as many servers and workers as
// before (which a job checkpoint needs: one part per worker rank).
#pragma once

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "tools/psrun/ssh_options.h"

namespace psrt::psrun {

// The hosts of `hosts` for which `ssh SSH_ARGS -T -o BatchMode=yes -o ConnectTimeout=S HOST true`
// does not succeed within `limit` (all probed at once; S = limit in seconds, at least 1), with
// why ("ssh exited with status 255", "no answer within 3000 ms").
std::vector<std::pair<std::string, std::string>> unreachable_hosts(
    const std::vector<std::string>& hosts, const std::vector<std::string>& ssh_args,
    std::chrono::milliseconds limit);

// `p` with every server and worker of a host in `lost` moved to the remaining hosts, round-robin
// (servers over the remaining hosts that ran servers, else over all remaining hosts; workers
// likewise). Throws psrt::Error(kInvalidArgument) when no host remains.
Placement move_off_hosts(const Placement& p, const std::set<std::string>& lost);

}  // namespace psrt::psrun
