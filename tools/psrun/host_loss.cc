#include "tools/psrun/host_loss.h"

#include <iostream>
#include <set>

#include "base/log.h"
#include "psrt/error.h"
#include "runtime/env_contract.h"
#include "runtime/launch/ssh_reach.h"

namespace psrt::psrun {

bool move_off_lost_hosts(const std::vector<std::string>& ssh_args, int min_workers,
                         launch::HostAssignment& assignment) {
  const auto lost = launch::unreachable_hosts(launch::hosts_of(assignment), ssh_args,
                                              runtime::env_ms("PSRT_PEER_TIMEOUT_MS"));
  if (lost.empty()) return true;
  std::set<std::string> names;
  for (const auto& [host, why] : lost) {
    std::cerr << "psrun: host " << host << " does not answer ssh (" << why << "): the restart "
              << (min_workers > 0 ? "goes on without its workers (--min-workers); its servers, "
                                    "if any, move to the other hosts"
                                  : "moves its processes to the other hosts")
              << "\n";
    names.insert(host);
  }
  const std::size_t before = assignment.workers.size();
  try {
    assignment = min_workers > 0 ? launch::drop_lost_workers(assignment, names, min_workers)
                                 : launch::move_off_hosts(assignment, names);
  } catch (const Error& e) {
    std::cerr << "psrun: " << e.what() << "; not restarting"
              << (min_workers > 0 ? " (bring the hosts back, or give more hosts with -H, and "
                                    "run the job again on the same --checkpoint-dir: it "
                                    "resumes from the latest complete checkpoint)"
                                  : "")
              << "\n";
    return false;
  }
  if (assignment.workers.size() != before)
    std::cerr << "psrun: the restart runs " << assignment.workers.size() << " workers, not "
              << before << " (--min-workers " << min_workers
              << "): the data is cut in as many parts\n";
  PSRT_LOG_INFO("placement for the restart:\n{}", launch::describe_assignment(assignment));
  return true;
}

}  // namespace psrt::psrun
