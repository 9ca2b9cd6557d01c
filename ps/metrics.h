// Live metrics of one process (psrun --metrics-port; docs/monitoring.md): what a worker or a
// server counts on its hot path, reported to the scheduler on the heartbeat cadence as METRICS
// records (ps/session/protocol.h), where ps/job_metrics.h keeps the latest report of every process.
//
// Off by default. Every hook first reads one relaxed atomic flag (metrics_on()), so a process
// without metrics pays a load and a branch per operation and nothing else; with metrics on, a
// hook adds to relaxed atomics (no lock). A process is one role of one job, so the recorder is
// one per process (process_metrics()); enable_metrics() turns it on before the role starts.
//
// Thread-safe: every function may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "ps/session/protocol.h"
#include "transport/transport.h"

namespace psrt::ps {

enum class MetricKind : std::uint8_t { kCounter, kGauge, kHistogram };

// Bucket bounds (upper, inclusive) of the histograms; +Inf is implied after the last.
inline constexpr std::array<double, 12> kSecondsBuckets = {0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03,
                                                           0.1,    0.3,    1,     3,     10,   30};
inline constexpr std::array<double, 12> kRoundsBuckets = {0, 1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128};

// The catalogue: X(enumerator, name, kind, buckets (histograms), per_worker, help). Names follow
// Prometheus' conventions: psrt_ prefix, unit suffix, _total on counters. `per_worker`: the
// series carries a `worker` label (the rank it is about), as the lag of each worker behind a
// round's first arrival does.
#define PSRT_METRICS(X)                                                                          \
  X(kWorkerPushedBytes, "psrt_worker_pushed_bytes_total", kCounter, nullptr, false,              \
    "gradient bytes this worker pushed (PUSH, PUSH_PULL)")                                       \
  X(kWorkerPushes, "psrt_worker_pushes_total", kCounter, nullptr, false,                         \
    "push and push_pull operations issued")                                                      \
  X(kWorkerPulledBytes, "psrt_worker_pulled_bytes_total", kCounter, nullptr, false,              \
    "weight bytes this worker pulled (PULL, PUSH_PULL replies)")                                 \
  X(kWorkerPulls, "psrt_worker_pulls_total", kCounter, nullptr, false,                           \
    "pull and push_pull operations completed")                                                   \
  X(kWorkerSteps, "psrt_worker_steps_total", kCounter, nullptr, false,                           \
    "rounds: pushes of the first key this worker pushed")                                        \
  X(kWorkerRoundSeconds, "psrt_worker_push_pull_seconds", kHistogram, &kSecondsBuckets, false,   \
    "push_pull latency, from the call to its last slice's reply")                                \
  X(kWorkerWaitSeconds, "psrt_worker_wait_seconds_total", kCounter, nullptr, false,              \
    "time callers blocked in Handle::wait (a forward waiting on a pull)")                        \
  X(kWorkerSendSeconds, "psrt_worker_send_seconds_total", kCounter, nullptr, false,              \
    "time callers spent issuing push/pull operations")                                           \
  X(kWorkerUptimeSeconds, "psrt_worker_uptime_seconds", kGauge, nullptr, false,                  \
    "seconds since the worker joined")                                                           \
  X(kServerReceivedBytes, "psrt_server_received_bytes_total", kCounter, nullptr, false,          \
    "gradient bytes received")                                                                   \
  X(kServerSentBytes, "psrt_server_sent_bytes_total", kCounter, nullptr, false,                  \
    "weight bytes sent in pull replies")                                                         \
  X(kServerReceiveSeconds, "psrt_server_receive_seconds_total", kCounter, nullptr, false,        \
    "time gradients spent arriving, placement to last byte, summed over pushes")                 \
  X(kServerReplySeconds, "psrt_server_reply_seconds_total", kCounter, nullptr, false,            \
    "time pull replies spent sending, summed over replies")                                      \
  X(kServerUpdates, "psrt_server_updates_total", kCounter, nullptr, false,                       \
    "slice updates applied")                                                                     \
  X(kServerUpdateSeconds, "psrt_server_update_seconds", kHistogram, &kSecondsBuckets, false,     \
    "time of one slice update (aggregate + optimizer)")                                          \
  X(kServerQueuedGradients, "psrt_server_queued_gradients", kGauge, nullptr, false,              \
    "gradients received and waiting for their update")                                           \
  X(kServerUpdatesRunning, "psrt_server_updates_running", kGauge, nullptr, false,                \
    "slices being updated now")                                                                  \
  X(kServerSliceBytes, "psrt_server_slice_bytes", kGauge, nullptr, false,                        \
    "bytes of weights held (slices placed on this server)")                                      \
  X(kServerBufferBytes, "psrt_server_buffer_bytes", kGauge, nullptr, false,                      \
    "bytes of gradient receive buffers allocated")                                               \
  X(kServerStalenessRounds, "psrt_server_staleness_rounds", kHistogram, &kRoundsBuckets, false,  \
    "rounds an applied gradient's worker is ahead of the slice's slowest worker")                \
  X(kServerReplicationSeconds, "psrt_server_replication_seconds", kHistogram, &kSecondsBuckets,  \
    false, "replication lag: a slice version sent to the backup until it acknowledged the copy") \
  X(kServerUptimeSeconds, "psrt_server_uptime_seconds", kGauge, nullptr, false,                  \
    "seconds since the server started")                                                          \
  X(kSyncLagSeconds, "psrt_sync_lag_seconds_total", kCounter, nullptr, true,                     \
    "per worker: seconds its gradient arrived after the round's first, summed over updates")     \
  X(kSyncLagSamples, "psrt_sync_lag_samples_total", kCounter, nullptr, true,                     \
    "per worker: updates that measured its lag (divide the seconds by it)")                      \
  X(kSecureDroppedMessages, "psrt_secure_dropped_messages_total", kCounter, nullptr, false,      \
    "--secure: messages dropped as forged (failed authentication) or replayed")

enum class Metric : std::uint16_t {
#define PSRT_METRIC_ENUM(e, name, kind, buckets, per_worker, help) e,
  PSRT_METRICS(PSRT_METRIC_ENUM)
#undef PSRT_METRIC_ENUM
      kCount
};

struct MetricInfo {
  std::string_view name;
  MetricKind kind;
  const std::array<double, 12>* buckets;  // histograms only
  bool per_worker;
  std::string_view help;
};
const MetricInfo& info(Metric m) noexcept;
inline constexpr std::size_t kMetricCount = static_cast<std::size_t>(Metric::kCount);
inline constexpr std::size_t kBuckets = kSecondsBuckets.size() + 1;  // + the +Inf bucket

// One value of a report (METRICS record, kMetricRecordBytes): u16 metric, u16 part, u32 worker
// (the rank a per_worker series is about, else kAnyRank), f64 value. part 0: a counter's or a
// gauge's value, a histogram's sum; part 1 + i: the count of histogram bucket i (not
// cumulative; the last is +Inf).
struct MetricRecord {
  Metric metric = Metric::kWorkerPushedBytes;
  std::uint16_t part = 0;
  std::uint32_t worker = kAnyRank;
  double value = 0;
};
std::vector<std::byte> encode_metrics(std::span<const MetricRecord> records);
// Checks every metric id, part and worker rank, and that values are finite and >= 0 (gauges
// included: every one counts something); kProtocol naming the bad record otherwise.
Status decode_metrics(std::span<const std::byte> bytes, std::vector<MetricRecord>& out);

// Whether this process records metrics (one relaxed load).
bool metrics_on() noexcept;
void enable_metrics(bool on) noexcept;

// The process's recorder. add/set/observe do nothing unless metrics_on().
class ProcessMetrics {
 public:
  void add(Metric m, double v) noexcept;
  void set(Metric m, double v) noexcept;
  void observe(Metric m, double v) noexcept;  // a histogram sample
  // A per_worker counter of `worker`'s (ranks below kMaxTrackedWorkers; others are dropped).
  void add_for(Metric m, std::uint32_t worker, double v) noexcept;
  // Pushes of the first key seen count as steps (psrt_worker_steps_total).
  void count_step(std::uint64_t key) noexcept;
  // Every non-zero value as records, uptime included.
  std::vector<MetricRecord> snapshot() const;
  std::chrono::steady_clock::time_point started() const { return started_; }

  static constexpr std::uint32_t kMaxTrackedWorkers = 1024;

 private:
  struct Cell {
    std::atomic<double> value{0};
    std::array<std::atomic<std::uint64_t>, kBuckets> buckets{};
  };
  std::array<Cell, kMetricCount> cells_{};
  std::array<std::array<std::atomic<double>, kMaxTrackedWorkers>, 2> per_worker_{};
  std::atomic<std::uint64_t> first_key_{0};
  std::atomic<bool> has_first_key_{false};
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};
ProcessMetrics& process_metrics();

// Seconds since `start` on the steady clock, for the hooks' timings.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline namespace session {
class Peer;  // ps/session/endpoint.h
}  // namespace session
// Sends this process's snapshot to the scheduler as METRICS, when metrics are on (the worker's
// and the server's heartbeat call it). A send that fails is logged and dropped.
// `self`: this process's role (worker or server), which names its uptime gauge; `transport`: its
// transport, whose dropped_messages() is psrt_secure_dropped_messages_total.
// `flush`: wait (at most that long) until the report left this process, for the last one before
// the connection closes.
void report_metrics(Peer& scheduler, Role self, const transport::Transport& transport,
                    std::chrono::milliseconds flush = std::chrono::milliseconds(0));
// What a process reports besides its hooks' counts: its uptime and its transport's drops.
void note_process_counters(Role self, const transport::Transport& transport);

}  // namespace psrt::ps
