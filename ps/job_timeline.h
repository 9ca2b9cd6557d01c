// The job's timeline at the scheduler (psrun --timeline FILE): every process's TIMELINE events
// (ps/timeline.h), already on the scheduler's clock, with how well each process's clock is
// known. psrun writes them as one Chrome trace at the end (tools/psrun/timeline_file.h).
//
// Thread-safe: one mutex (a leaf).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ps/timeline.h"

namespace psrt::ps {

class JobTimeline {
 public:
  struct Process {
    std::string host;
    std::uint64_t uncertainty_ns = 0;  // half the best CLOCK round trip
    std::vector<TimelineEvent> events;
  };
  void add(Role role, std::uint32_t rank, const std::string& host, std::uint64_t uncertainty_ns,
           std::vector<TimelineEvent> events);
  // Every process's events so far, by (role, rank).
  std::map<std::pair<Role, std::uint32_t>, Process> processes() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<Role, std::uint32_t>, Process> processes_;  // guarded by mu_
};

}  // namespace psrt::ps
