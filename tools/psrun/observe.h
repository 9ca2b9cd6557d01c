// psrun's view into a running job (docs/monitoring.md): --metrics-port (PSRT_METRICS_PORT) serves
// the job's live metrics to Prometheus, --link-gbps sets the link rate they measure use against,
// --report / --json print and write where the time went when the job ends, --timeline FILE
// writes every process's events per key and slice as one Chrome trace.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "ps/job_metrics.h"
#include "ps/job_timeline.h"
#include "ps/scheduler.h"
#include "runtime/metrics_http.h"

namespace CLI {  // NOLINT(readability-identifier-naming): CLI11 names it
class App;
}

namespace psrt::psrun {

struct ObserveFlags {
  int metrics_port = -1;     // -1: none (PSRT_METRICS_PORT when unset)
  std::string metrics_bind;  // empty: the scheduler's address
  std::optional<double> link_gbps;
  bool report = false;   // print the end-of-job report
  std::string json;      // write it as JSON here
  std::string timeline;  // --timeline FILE
  // Whether the processes report metrics at all.
  bool collecting() const { return metrics_port >= 0 || report || !json.empty(); }
};

void add_observe_flags(CLI::App& app, ObserveFlags& flags);
// After parsing: PSRT_METRICS_PORT when --metrics-port was not given.
void finish_observe_flags(ObserveFlags& flags);

// What psrun holds while the job runs: the job's metrics, and the endpoint serving them.
struct Observation {
  std::shared_ptr<ps::JobMetrics> metrics;    // null when no metrics are collected
  std::shared_ptr<ps::JobTimeline> timeline;  // null without --timeline
  std::unique_ptr<runtime::MetricsHttp> http;
};
// Starts serving before any process starts (a port that cannot be had is an error then);
// nullopt when nothing is collected. `env` gets what the processes need (PSRT_METRICS, ...).
// `scheduler_host`: where --metrics-bind defaults to.
std::optional<Observation> start_observation(const ObserveFlags& flags,
                                             const std::string& scheduler_host);
// The engine-started forms (psrun --role-from-env): the rank that hosts the scheduler serves its
// metrics on every interface at PSRT_METRICS_PORT; nullopt when that is unset.
std::optional<Observation> observe_hosted_scheduler(ps::Scheduler& scheduler);
// At the end of the job: the report on stderr (with --report or --metrics-port) and in --json.
void finish_observation(const ObserveFlags& flags, const Observation& o);

}  // namespace psrt::psrun
