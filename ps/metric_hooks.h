// The hooks the worker and the server call on their hot paths, for the live metrics
// (ps/metrics.h) and the timeline (ps/timeline.h): with both off each is a relaxed load or two
// and a branch (a default time point, nothing recorded).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>

#include "ps/consistency.h"
#include "ps/metrics.h"
#include "ps/timeline.h"

namespace psrt::ps {

using MetricsClock = std::chrono::steady_clock;

// Now, when metrics or the timeline are on; the epoch (which the hooks below ignore) when off.
inline MetricsClock::time_point metrics_now() {
  return metrics_on() || timeline_on() ? MetricsClock::now() : MetricsClock::time_point{};
}

// --- worker ---

// An operation's metrics, from its call to its last reply.
struct OpMetrics {
  MetricsClock::time_point started{};  // the epoch: not recorded
  double pulled_bytes = 0;
  bool push_pull = false;
  std::uint64_t key = 0;
};
// At the call: what the operation will count when it completes (`out_bytes`: the weights it
// pulls).
OpMetrics start_op(MsgType type, std::uint64_t key, std::size_t out_bytes);
// Once every slice went to the transport: bytes and operations pushed, steps, time spent issuing.
void issued_op(const OpMetrics& op, MsgType type, std::uint64_t key, std::size_t pushed_bytes);
// When the last slice's reply is in (`ok`: without an error).
void finished_op(const OpMetrics& op, bool ok);

// Counts the time a caller blocks in Handle::wait (psrt_worker_wait_seconds_total) on `key`
// (a timeline wait event).
class WaitTimer {
 public:
  explicit WaitTimer(std::uint64_t key)
      : started_(metrics_now()), begin_(timeline_now()), key_(key) {}
  ~WaitTimer();
  WaitTimer(const WaitTimer&) = delete;
  WaitTimer& operator=(const WaitTimer&) = delete;

 private:
  MetricsClock::time_point started_;
  std::int64_t begin_;
  std::uint64_t key_;
};

// --- server ---

// A gradient of `bytes` for slice `slice` of `key`, placed at `placed`, has fully arrived;
// returns its arrival time.
MetricsClock::time_point gradient_arrived(MetricsClock::time_point placed, std::size_t bytes,
                                          std::uint64_t key, std::uint32_t slice);
// A receive buffer (or a slice's weights) of `bytes` was allocated.
void buffer_allocated(std::size_t bytes);
void slice_stored(std::size_t bytes);
// An update took the gradients of `ranks`, which arrived at `arrived` (same order; epochs when
// metrics were off), with the workers' clocks `clocks` and the slice's slowest clock `slowest`.
// Sync: each worker's lag behind the round's first arrival; async/ssp: staleness.
void update_taken(Mode mode, std::span<const std::uint32_t> ranks,
                  std::span<const MetricsClock::time_point> arrived,
                  std::span<const std::uint64_t> clocks, std::uint64_t slowest);
// An update of slice `slice` of `key` that started at `started` made `version` (written or
// skipped).
void update_done(MetricsClock::time_point started, std::uint64_t key, std::uint32_t slice,
                 std::uint64_t version);
// A slice version whose replication to the backup started at `started` is acknowledged (or
// given up).
void replicated(MetricsClock::time_point started);
// A pull reply of `bytes` of version `version` that started sending at `started` completed.
void reply_sent(MetricsClock::time_point started, std::size_t bytes, std::uint64_t key,
                std::uint32_t slice, std::uint64_t version);

}  // namespace psrt::ps
