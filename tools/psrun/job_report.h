// The end-of-job report (psrun --report, --json): where the time went per worker (computing,
// waiting on pulls, issuing pushes) and per server (receiving, updating, replying), from the
// last metrics each process reported, and the workers ranked by their lag behind each sync
// round's first arrival (stragglers first).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ps/job_metrics.h"

namespace psrt::psrun {

struct WorkerTime {
  std::uint32_t rank = 0;
  std::string host;
  double wall = 0, compute = 0, wait = 0, send = 0;  // seconds; compute = wall - wait - send
  double steps = 0, pushed_bytes = 0, pulled_bytes = 0;
  double lag = 0;  // mean seconds behind a round's first arrival (sync), over lag_samples
  double lag_samples = 0;
};
struct ServerTime {
  std::uint32_t rank = 0;
  std::string host;
  double wall = 0, receive = 0, update = 0, reply = 0, updates = 0;
  double received_bytes = 0, sent_bytes = 0;
};
struct JobReport {
  std::vector<WorkerTime> workers;        // by rank
  std::vector<ServerTime> servers;        // by rank
  std::vector<std::uint32_t> stragglers;  // worker ranks, the most lagging first
};

JobReport make_report(const ps::JobMetrics& metrics);
std::string format_report(const JobReport& r);
std::string report_json(const JobReport& r);

}  // namespace psrt::psrun
