#include "tools/psrun/observe.h"

#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>

#include "base/log.h"
#include "runtime/env_contract.h"
#include "tools/psrun/job_report.h"
#include "tools/psrun/timeline_file.h"

namespace psrt::psrun {

void add_observe_flags(CLI::App& app, ObserveFlags& flags) {
  app.add_option("--metrics-port", flags.metrics_port,
                 "serve the job's live metrics for Prometheus on this port of the scheduler's "
                 "host (GET /metrics; 0 = any free port; default PSRT_METRICS_PORT, else off)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--metrics-bind", flags.metrics_bind,
                 "address the metrics endpoint listens on (default: the scheduler's; 0.0.0.0 = "
                 "every interface)");
  app.add_option("--link-gbps", flags.link_gbps,
                 "the link's rate per direction in Gbit/s: metrics show the fraction in use "
                 "(psrt_link_utilization_ratio)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--report", flags.report,
               "when the job ends, print where the time went per worker and server and rank "
               "the stragglers");
  app.add_option("--json", flags.json, "write that end-of-job report as JSON to this file");
  app.add_option("--timeline", flags.timeline,
                 "write every push, pull, wait, receive, update and reply per key and slice of "
                 "every process to this file as one Chrome trace / Perfetto JSON when the job "
                 "ends (perf/plot_timeline draws a round)");
}

void finish_observe_flags(ObserveFlags& flags) {
  if (flags.metrics_port < 0) flags.metrics_port = runtime::metrics_port_from_env();
}

std::optional<Observation> start_observation(const ObserveFlags& flags,
                                             const std::string& scheduler_host) {
  if (!flags.collecting() && flags.timeline.empty()) return std::nullopt;
  Observation o;
  if (!flags.timeline.empty()) {
    // Fail now rather than after the job: the file must be writable.
    std::ofstream probe(flags.timeline, std::ios::app);
    if (!probe)
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("--timeline {}: cannot write there", flags.timeline));
    o.timeline = std::make_shared<ps::JobTimeline>();
  }
  if (!flags.collecting()) return o;
  o.metrics = std::make_shared<ps::JobMetrics>(flags.link_gbps);
  if (flags.metrics_port >= 0) {
    const std::string host = flags.metrics_bind.empty() ? scheduler_host : flags.metrics_bind;
    o.http = std::make_unique<runtime::MetricsHttp>(host, flags.metrics_port, o.metrics);
    PSRT_LOG_INFO("live metrics for Prometheus at http://{}:{}/metrics", host, o.http->port());
  }
  return o;
}

std::optional<Observation> observe_hosted_scheduler(ps::Scheduler& scheduler) {
  ObserveFlags flags;
  finish_observe_flags(flags);
  if (flags.metrics_port < 0) return std::nullopt;
  auto o = start_observation(flags, "0.0.0.0");
  if (o) scheduler.set_observers(o->metrics, o->timeline);
  return o;
}

void finish_observation(const ObserveFlags& flags, const Observation& o) {
  if (o.timeline) {
    try {
      write_timeline(*o.timeline, flags.timeline);
      PSRT_LOG_INFO("timeline written to {}", flags.timeline);
    } catch (const Error& e) {
      std::cerr << "psrun: " << e.what() << "\n";
    }
  }
  if (!o.metrics) return;
  const JobReport report = make_report(*o.metrics);
  if (flags.report || flags.metrics_port >= 0) std::cerr << format_report(report);
  if (flags.json.empty()) return;
  std::ofstream out(flags.json);
  out << report_json(report) << "\n";
  if (!out)
    std::cerr << fmt::format("psrun: could not write the report to {} (--json)\n", flags.json);
}

}  // namespace psrt::psrun
