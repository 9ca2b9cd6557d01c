// The job's Prometheus endpoint (psrun --metrics-port, PSRT_METRICS_PORT): an HTTP server on the
// scheduler's host answering GET /metrics with ps::JobMetrics in the Prometheus text exposition
// format (prometheus-cpp's exposer and serializer; docs/monitoring.md).
#pragma once

#include <memory>
#include <string>

#include "ps/job_metrics.h"

namespace psrt::runtime {

class MetricsHttp {
 public:
  // Listens on `bind_host`:`port` (port 0: any free one) before the job starts. Throws
  // psrt::Error kInvalidArgument naming the port and what to do when it cannot listen there (in
  // use, not allowed), or when this build has no prometheus-cpp.
  MetricsHttp(const std::string& bind_host, int port, std::shared_ptr<ps::JobMetrics> metrics);
  // Stops serving; a scrape in progress finishes first (it takes no lock the job holds).
  ~MetricsHttp();
  MetricsHttp(const MetricsHttp&) = delete;
  MetricsHttp& operator=(const MetricsHttp&) = delete;

  int port() const { return port_; }
  // The exposition text itself (what GET /metrics answers), for tests and the end-of-job report.
  static std::string render(const ps::JobMetrics& metrics);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

// PSRT_METRICS_PORT, or -1 when unset; kInvalidArgument when it is not a port number.
int metrics_port_from_env();

}  // namespace psrt::runtime
