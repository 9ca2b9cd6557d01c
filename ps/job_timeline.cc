#include "ps/job_timeline.h"

namespace psrt::ps {

void JobTimeline::add(Role role, std::uint32_t rank, const std::string& host,
                      std::uint64_t uncertainty_ns, std::vector<TimelineEvent> events) {
  std::lock_guard lock(mu_);
  Process& p = processes_[{role, rank}];
  p.host = host;
  p.uncertainty_ns = uncertainty_ns;
  p.events.insert(p.events.end(), events.begin(), events.end());
}

std::map<std::pair<Role, std::uint32_t>, JobTimeline::Process> JobTimeline::processes() const {
  std::lock_guard lock(mu_);
  return processes_;
}

}  // namespace psrt::ps
