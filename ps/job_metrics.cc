#include "ps/job_metrics.h"

#include <algorithm>
#include <limits>

namespace psrt::ps {
namespace {

std::vector<std::pair<std::string, std::string>> labels_of(Role role, std::uint32_t rank,
                                                           const std::string& host) {
  return {{"role", std::string(to_string(role))}, {"rank", std::to_string(rank)}, {"host", host}};
}

// The traffic a process's link carries in and out, from its counters.
std::pair<double, double> traffic(Role role, const std::vector<MetricRecord>& records) {
  double in = 0, out = 0;
  for (const auto& r : records) {
    if (r.part != 0) continue;
    if (role == Role::kWorker) {
      if (r.metric == Metric::kWorkerPulledBytes) in = r.value;
      if (r.metric == Metric::kWorkerPushedBytes) out = r.value;
    } else {
      if (r.metric == Metric::kServerReceivedBytes) in = r.value;
      if (r.metric == Metric::kServerSentBytes) out = r.value;
    }
  }
  return {in, out};
}

}  // namespace

JobMetrics::JobMetrics(std::optional<double> link_gbps) : link_gbps_(link_gbps) {}

void JobMetrics::report(Role role, std::uint32_t rank, const std::string& host,
                        std::vector<MetricRecord> records) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mu_);
  Held& h = held_[{role, rank}];
  h.host = host;
  h.records = std::move(records);
  h.at = now;
  if (!link_gbps_ || *link_gbps_ <= 0) return;
  const auto [in, out] = traffic(role, h.records);
  if (h.counted_at != std::chrono::steady_clock::time_point{}) {
    const double dt = std::chrono::duration<double>(now - h.counted_at).count();
    const double link_bytes_per_s = *link_gbps_ * 1e9 / 8;
    if (dt > 0)
      h.link_ratio = std::max(std::max(in - h.in_bytes, 0.0), std::max(out - h.out_bytes, 0.0)) /
                     dt / link_bytes_per_s;
  }
  h.in_bytes = in;
  h.out_bytes = out;
  h.counted_at = now;
}

void JobMetrics::event(const std::string& what) {
  std::lock_guard lock(mu_);
  events_[what] += 1;
}

void JobMetrics::set_live(std::size_t workers, std::size_t servers) {
  std::lock_guard lock(mu_);
  live_workers_ = workers;
  live_servers_ = servers;
}

void JobMetrics::set_scheduler_dropped(const std::string& host, std::uint64_t dropped) {
  std::lock_guard lock(mu_);
  scheduler_host_ = host;
  scheduler_dropped_ = dropped;
}

void JobMetrics::add_process_families(std::vector<Family>& out) const {
  std::vector<Family> by_metric(kMetricCount);
  for (std::size_t i = 0; i < kMetricCount; ++i) {
    const MetricInfo& m = info(static_cast<Metric>(i));
    by_metric[i].name = std::string(m.name);
    by_metric[i].help = std::string(m.help);
    by_metric[i].kind = m.kind;
  }
  Family up{"psrt_process_up",
            "1 for every worker and server that reported metrics",
            MetricKind::kGauge,
            {}};
  Family age{"psrt_process_report_age_seconds",
             "seconds since the process's last report",
             MetricKind::kGauge,
             {}};
  Family link{"psrt_link_utilization_ratio",
              "the busier direction's bytes/s over the last report interval, as a fraction of "
              "psrun --link-gbps",
              MetricKind::kGauge,
              {}};
  const auto now = std::chrono::steady_clock::now();
  for (const auto& [id, h] : held_) {
    const auto labels = labels_of(id.first, id.second, h.host);
    up.series.push_back({labels, 1, {}, 0});
    age.series.push_back({labels, std::chrono::duration<double>(now - h.at).count(), {}, 0});
    if (link_gbps_) link.series.push_back({labels, h.link_ratio, {}, 0});
    // Histograms: their records come bucket by bucket, then the sum (part 0).
    std::map<Metric, Series> histograms;
    for (const auto& r : h.records) {
      const MetricInfo& m = info(r.metric);
      Family& f = by_metric[static_cast<std::size_t>(r.metric)];
      if (m.kind != MetricKind::kHistogram) {
        Series s{labels, r.value, {}, 0};
        if (m.per_worker) s.labels.emplace_back("worker", std::to_string(r.worker));
        f.series.push_back(std::move(s));
        continue;
      }
      Series& s = histograms[r.metric];
      if (s.buckets.empty()) {
        s.labels = labels;
        for (double b : *m.buckets)
          s.buckets.emplace_back(b, 0);
        s.buckets.emplace_back(std::numeric_limits<double>::infinity(), 0);
      }
      if (r.part == 0)
        s.value = r.value;
      else
        s.buckets[r.part - 1].second = static_cast<std::uint64_t>(r.value);
    }
    for (auto& [metric, s] : histograms) {
      std::uint64_t cumulative = 0;
      for (auto& b : s.buckets) {
        cumulative += b.second;
        b.second = cumulative;
      }
      s.count = cumulative;
      by_metric[static_cast<std::size_t>(metric)].series.push_back(std::move(s));
    }
  }
  if (scheduler_dropped_ > 0)
    by_metric[static_cast<std::size_t>(Metric::kSecureDroppedMessages)].series.push_back(
        {labels_of(Role::kScheduler, 0, scheduler_host_),
         static_cast<double>(scheduler_dropped_),
         {},
         0});
  out.push_back(std::move(up));
  out.push_back(std::move(age));
  if (link_gbps_) out.push_back(std::move(link));
  for (auto& f : by_metric)
    if (!f.series.empty()) out.push_back(std::move(f));
}

std::vector<JobMetrics::Family> JobMetrics::families() const {
  std::lock_guard lock(mu_);
  std::vector<Family> out;
  out.push_back({"psrt_job_workers",
                 "live workers",
                 MetricKind::kGauge,
                 {{{}, static_cast<double>(live_workers_), {}, 0}}});
  out.push_back({"psrt_job_servers",
                 "live servers",
                 MetricKind::kGauge,
                 {{{}, static_cast<double>(live_servers_), {}, 0}}});
  Family events{"psrt_job_membership_events_total",
                "membership and failure events: worker_joined, worker_left, worker_lost, "
                "server_lost",
                MetricKind::kCounter,
                {}};
  for (const auto& [what, n] : events_)
    events.series.push_back({{{"event", what}}, n, {}, 0});
  if (!events.series.empty()) out.push_back(std::move(events));
  // Rounds of the job: the furthest worker's steps (rate() of it is rounds per second).
  double rounds = 0;
  for (const auto& [id, h] : held_)
    for (const auto& r : h.records)
      if (r.metric == Metric::kWorkerSteps) rounds = std::max(rounds, r.value);
  out.push_back({"psrt_job_rounds_total",
                 "rounds: the most steps any worker made",
                 MetricKind::kCounter,
                 {{{}, rounds, {}, 0}}});
  add_process_families(out);
  return out;
}

std::vector<JobMetrics::Process> JobMetrics::processes() const {
  std::lock_guard lock(mu_);
  std::vector<Process> out;
  for (const auto& [id, h] : held_) {
    Process p{id.first, id.second, h.host, {}, {}};
    for (const auto& r : h.records) {
      if (r.part != 0) continue;
      if (info(r.metric).per_worker)
        p.per_worker[{r.metric, r.worker}] = r.value;
      else
        p.values[r.metric] = r.value;
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace psrt::ps
