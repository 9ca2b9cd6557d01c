// Whether ssh still reaches a job's hosts: psrun --launcher ssh with --max-restarts asks before a
// restart, and moves the processes of the hosts it cannot reach to the others
// (host_assignment.h, move_off_hosts).
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace psrt::launch {

// The hosts of `hosts` for which `ssh SSH_ARGS -T -o BatchMode=yes -o ConnectTimeout=S HOST true`
// does not succeed within `limit` (all probed at once; S = limit in seconds, at least 1), with
// why ("ssh exited with status 255", "no answer within 3000 ms").
std::vector<std::pair<std::string, std::string>> unreachable_hosts(
    const std::vector<std::string>& hosts, const std::vector<std::string>& ssh_args,
    std::chrono::milliseconds limit);

}  // namespace psrt::launch
