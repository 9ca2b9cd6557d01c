// The job's metrics at the scheduler (psrun --metrics-port): the latest METRICS report of every
// worker and server (ps/metrics.h), the scheduler's own counts (live members, membership and
// failure events), and the families an exposition renders from them (runtime/metrics_http.h),
// each series labelled with the process's role, rank and host.
//
// Thread-safe: one mutex (a leaf: the scheduler calls in holding its own mu_).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ps/metrics.h"

namespace psrt::ps {

class JobMetrics {
 public:
  // `link_gbps`: the link rate per direction in Gbit/s (psrun --link-gbps); with it every
  // process gets psrt_link_utilization_ratio.
  explicit JobMetrics(std::optional<double> link_gbps = std::nullopt);

  // A report of process (role, rank) on `host`: replaces its previous one.
  void report(Role role, std::uint32_t rank, const std::string& host,
              std::vector<MetricRecord> records);
  // Counts a membership or failure event ("worker_joined", "worker_left", "worker_lost",
  // "server_lost").
  void event(const std::string& what);
  void set_live(std::size_t workers, std::size_t servers);
  // The scheduler's own transport's dropped messages (psrt_secure_dropped_messages_total with
  // role "scheduler"), the scheduler on `host`.
  void set_scheduler_dropped(const std::string& host, std::uint64_t dropped);

  // One series of a family, ready to render.
  struct Series {
    std::vector<std::pair<std::string, std::string>> labels;
    double value = 0;  // counter, gauge; a histogram's sum
    // Histograms: (upper bound, cumulative count), the last bound +Inf; and the count.
    std::vector<std::pair<double, std::uint64_t>> buckets;
    std::uint64_t count = 0;
  };
  struct Family {
    std::string name, help;
    MetricKind kind = MetricKind::kGauge;
    std::vector<Series> series;
  };
  std::vector<Family> families() const;

  // One process's latest values (part 0 of every record; per_worker records by worker).
  struct Process {
    Role role = Role::kWorker;
    std::uint32_t rank = 0;
    std::string host;
    std::map<Metric, double> values;
    std::map<std::pair<Metric, std::uint32_t>, double> per_worker;
    double value(Metric m) const {
      auto it = values.find(m);
      return it == values.end() ? 0.0 : it->second;
    }
  };
  std::vector<Process> processes() const;

 private:
  struct Held {
    std::string host;
    std::vector<MetricRecord> records;
    std::chrono::steady_clock::time_point at{};
    // Link use: the traffic counters of the previous report, and the ratio they gave.
    double in_bytes = 0, out_bytes = 0;
    std::chrono::steady_clock::time_point counted_at{};
    double link_ratio = 0;
  };
  void add_process_families(std::vector<Family>& out) const;  // under mu_

  const std::optional<double> link_gbps_;
  mutable std::mutex mu_;
  std::map<std::pair<Role, std::uint32_t>, Held> held_;  // guarded by mu_
  std::map<std::string, double> events_;                 // guarded by mu_
  std::string scheduler_host_;                           // guarded by mu_
  std::uint64_t scheduler_dropped_ = 0;                  // guarded by mu_
  std::size_t live_workers_ = 0, live_servers_ = 0;      // guarded by mu_
};

}  // namespace psrt::ps
