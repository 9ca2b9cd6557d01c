#include "ps/metric_hooks.h"

#include <algorithm>

namespace psrt::ps {
namespace {

bool recorded(MetricsClock::time_point t) {
  return t != MetricsClock::time_point{};
}

// A timeline event that began at `t` (a metrics_now() reading) and ends now.
void record_span(TimelineKind kind, MetricsClock::time_point t, std::uint64_t key,
                 std::uint32_t slice, std::uint64_t arg) {
  if (!timeline_on() || !recorded(t)) return;
  timeline_record(
      kind, key, slice,
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count(), arg);
}

}  // namespace

OpMetrics start_op(MsgType type, std::uint64_t key, std::size_t out_bytes) {
  OpMetrics op;
  op.key = key;
  if (!metrics_on() || type == MsgType::kInit) return op;
  op.started = MetricsClock::now();
  op.pulled_bytes = static_cast<double>(out_bytes);
  op.push_pull = type == MsgType::kPushPull;
  return op;
}

void issued_op(const OpMetrics& op, MsgType type, std::uint64_t key, std::size_t pushed_bytes) {
  if (!metrics_on() || !recorded(op.started)) return;
  ProcessMetrics& m = process_metrics();
  if (type == MsgType::kPush || type == MsgType::kPushPull) {
    m.add(Metric::kWorkerPushedBytes, static_cast<double>(pushed_bytes));
    m.add(Metric::kWorkerPushes, 1);
    m.count_step(key);
  }
  m.add(Metric::kWorkerSendSeconds, seconds_since(op.started));
}

void finished_op(const OpMetrics& op, bool ok) {
  if (!metrics_on() || !recorded(op.started) || !ok) return;
  ProcessMetrics& m = process_metrics();
  if (op.pulled_bytes > 0) {
    m.add(Metric::kWorkerPulledBytes, op.pulled_bytes);
    m.add(Metric::kWorkerPulls, 1);
  }
  if (op.push_pull) m.observe(Metric::kWorkerRoundSeconds, seconds_since(op.started));
}

WaitTimer::~WaitTimer() {
  timeline_record(TimelineKind::kWait, key_, 0, begin_, 0);
  if (metrics_on() && recorded(started_))
    process_metrics().add(Metric::kWorkerWaitSeconds, seconds_since(started_));
}

MetricsClock::time_point gradient_arrived(MetricsClock::time_point placed, std::size_t bytes,
                                          std::uint64_t key, std::uint32_t slice) {
  record_span(TimelineKind::kReceive, placed, key, slice, bytes);
  if (!metrics_on()) return {};
  const auto now = MetricsClock::now();
  ProcessMetrics& m = process_metrics();
  m.add(Metric::kServerReceivedBytes, static_cast<double>(bytes));
  m.add(Metric::kServerQueuedGradients, 1);
  if (recorded(placed))
    m.add(Metric::kServerReceiveSeconds, std::chrono::duration<double>(now - placed).count());
  return now;
}

void buffer_allocated(std::size_t bytes) {
  process_metrics().add(Metric::kServerBufferBytes, static_cast<double>(bytes));
}

void slice_stored(std::size_t bytes) {
  process_metrics().add(Metric::kServerSliceBytes, static_cast<double>(bytes));
}

void update_taken(Mode mode, std::span<const std::uint32_t> ranks,
                  std::span<const MetricsClock::time_point> arrived,
                  std::span<const std::uint64_t> clocks, std::uint64_t slowest) {
  if (!metrics_on()) return;
  ProcessMetrics& m = process_metrics();
  m.add(Metric::kServerQueuedGradients, -static_cast<double>(ranks.size()));
  m.add(Metric::kServerUpdatesRunning, 1);
  if (mode != Mode::kSync) {
    for (const auto c : clocks)
      m.observe(Metric::kServerStalenessRounds, static_cast<double>(c - std::min(c, slowest)));
    return;
  }
  MetricsClock::time_point first = MetricsClock::time_point::max();
  for (const auto& t : arrived)
    if (recorded(t)) first = std::min(first, t);
  if (first == MetricsClock::time_point::max()) return;
  for (std::size_t i = 0; i < ranks.size() && i < arrived.size(); ++i) {
    if (!recorded(arrived[i])) continue;
    m.add_for(Metric::kSyncLagSeconds, ranks[i],
              std::chrono::duration<double>(arrived[i] - first).count());
    m.add_for(Metric::kSyncLagSamples, ranks[i], 1);
  }
}

void update_done(MetricsClock::time_point started, std::uint64_t key, std::uint32_t slice,
                 std::uint64_t version) {
  record_span(TimelineKind::kUpdate, started, key, slice, version);
  if (!metrics_on() || !recorded(started)) return;
  ProcessMetrics& m = process_metrics();
  m.add(Metric::kServerUpdatesRunning, -1);
  m.add(Metric::kServerUpdates, 1);
  m.observe(Metric::kServerUpdateSeconds, seconds_since(started));
}

void replicated(MetricsClock::time_point started) {
  if (!metrics_on() || !recorded(started)) return;
  process_metrics().observe(Metric::kServerReplicationSeconds, seconds_since(started));
}

void reply_sent(MetricsClock::time_point started, std::size_t bytes, std::uint64_t key,
                std::uint32_t slice, std::uint64_t version) {
  record_span(TimelineKind::kServe, started, key, slice, version);
  if (!metrics_on() || !recorded(started)) return;
  ProcessMetrics& m = process_metrics();
  m.add(Metric::kServerSentBytes, static_cast<double>(bytes));
  m.add(Metric::kServerReplySeconds, seconds_since(started));
}

}  // namespace psrt::ps
