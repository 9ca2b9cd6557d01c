#include "ps/metrics.h"

#include <bit>
#include <future>
#include <memory>

#include "base/exception_status.h"
#include "base/log.h"
#include "ps/session/endpoint.h"

namespace psrt::ps {
namespace {

std::atomic<bool> g_on{false};

std::size_t index_of(Metric m) {
  return static_cast<std::size_t>(m);
}

// The per_worker metrics' slot in ProcessMetrics::per_worker_.
int worker_slot(Metric m) {
  return m == Metric::kSyncLagSeconds ? 0 : m == Metric::kSyncLagSamples ? 1 : -1;
}

}  // namespace

bool metrics_on() noexcept {
  return g_on.load(std::memory_order_relaxed);
}

void enable_metrics(bool on) noexcept {
  (void)process_metrics();  // its uptime counts from here
  g_on.store(on, std::memory_order_relaxed);
}

void ProcessMetrics::add(Metric m, double v) noexcept {
  if (!metrics_on()) return;
  cells_[index_of(m)].value.fetch_add(v, std::memory_order_relaxed);
}

void ProcessMetrics::set(Metric m, double v) noexcept {
  if (!metrics_on()) return;
  cells_[index_of(m)].value.store(v, std::memory_order_relaxed);
}

void ProcessMetrics::observe(Metric m, double v) noexcept {
  if (!metrics_on()) return;
  const auto* bounds = info(m).buckets;
  if (!bounds) return;
  std::size_t b = 0;
  while (b < bounds->size() && v > (*bounds)[b])
    ++b;
  Cell& c = cells_[index_of(m)];
  c.value.fetch_add(v, std::memory_order_relaxed);
  c.buckets[b].fetch_add(1, std::memory_order_relaxed);
}

void ProcessMetrics::add_for(Metric m, std::uint32_t worker, double v) noexcept {
  const int slot = worker_slot(m);
  if (!metrics_on() || slot < 0 || worker >= kMaxTrackedWorkers) return;
  per_worker_[static_cast<std::size_t>(slot)][worker].fetch_add(v, std::memory_order_relaxed);
}

void ProcessMetrics::count_step(std::uint64_t key) noexcept {
  if (!metrics_on()) return;
  if (!has_first_key_.load(std::memory_order_acquire)) {
    bool expected = false;
    if (has_first_key_.compare_exchange_strong(expected, true, std::memory_order_acq_rel))
      first_key_.store(key, std::memory_order_release);
    else
      return;  // another thread is naming the first key: this push is not of it or not counted
  }
  if (first_key_.load(std::memory_order_acquire) == key) add(Metric::kWorkerSteps, 1);
}

std::vector<MetricRecord> ProcessMetrics::snapshot() const {
  std::vector<MetricRecord> out;
  for (std::size_t i = 0; i < kMetricCount; ++i) {
    const auto m = static_cast<Metric>(i);
    const MetricInfo& mi = info(m);
    if (mi.per_worker) {
      const auto& row = per_worker_[static_cast<std::size_t>(worker_slot(m))];
      for (std::uint32_t w = 0; w < kMaxTrackedWorkers; ++w)
        if (const double v = row[w].load(std::memory_order_relaxed); v > 0)
          out.push_back({m, 0, w, v});
      continue;
    }
    const double v = cells_[i].value.load(std::memory_order_relaxed);
    if (mi.kind != MetricKind::kHistogram) {
      if (v > 0) out.push_back({m, 0, kAnyRank, v});
      continue;
    }
    bool any = false;
    for (std::size_t b = 0; b < kBuckets; ++b)
      if (const auto n = cells_[i].buckets[b].load(std::memory_order_relaxed); n > 0) {
        out.push_back({m, static_cast<std::uint16_t>(b + 1), kAnyRank, static_cast<double>(n)});
        any = true;
      }
    if (any) out.push_back({m, 0, kAnyRank, v});
  }
  return out;
}

ProcessMetrics& process_metrics() {
  static ProcessMetrics metrics;
  return metrics;
}

void note_process_counters(Role self, const transport::Transport& transport) {
  ProcessMetrics& pm = process_metrics();
  const double uptime = seconds_since(pm.started());
  pm.set(self == Role::kWorker ? Metric::kWorkerUptimeSeconds : Metric::kServerUptimeSeconds,
         uptime);
  pm.set(Metric::kSecureDroppedMessages, static_cast<double>(transport.dropped_messages()));
}

void report_metrics(Peer& scheduler, Role self, const transport::Transport& transport,
                    std::chrono::milliseconds flush) {
  if (!metrics_on()) return;
  try {
    note_process_counters(self, transport);
    ProcessMetrics& pm = process_metrics();
    const auto records = pm.snapshot();
    Header h;
    h.type = MsgType::kMetrics;
    h.count = records.size();
    if (flush.count() == 0) return scheduler.send_bytes(h, encode_metrics(records));
    auto sent = std::make_shared<std::promise<void>>();
    auto done = sent->get_future();
    scheduler.send_bytes(h, encode_metrics(records), [sent](const Status&) { sent->set_value(); });
    done.wait_for(flush);
  } catch (...) {
    PSRT_LOG_WARN("{}", current_exception_status("metrics report not sent").message());
  }
}

}  // namespace psrt::ps
