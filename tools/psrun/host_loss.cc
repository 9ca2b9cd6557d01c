#include "tools/psrun/host_loss.h"

#include <iostream>
#include <set>

#include "base/log.h"
#include "psrt/error.h"
#include "runtime/env_contract.h"
#include "runtime/launch/ssh_reach.h"

namespace psrt::psrun {

bool move_off_lost_hosts(const std::vector<std::string>& ssh_args,
                         launch::HostAssignment& assignment) {
  const auto lost = launch::unreachable_hosts(launch::hosts_of(assignment), ssh_args,
                                              runtime::env_ms("PSRT_PEER_TIMEOUT_MS"));
  if (lost.empty()) return true;
  std::set<std::string> names;
  for (const auto& [host, why] : lost) {
    std::cerr << "psrun: host " << host << " does not answer ssh (" << why
              << "): the restart moves its processes to the other hosts\n";
    names.insert(host);
  }
  try {
    assignment = launch::move_off_hosts(assignment, names);
  } catch (const Error& e) {
    std::cerr << "psrun: " << e.what() << "; not restarting\n";
    return false;
  }
  PSRT_LOG_INFO("placement for the restart:\n{}", launch::describe_assignment(assignment));
  return true;
}

}  // namespace psrt::psrun
