#include "ps/timeline.h"

#include <algorithm>
#include <atomic>
#include <future>
#include <limits>
#include <memory>
#include <mutex>

#include "base/exception_status.h"
#include "base/log.h"
#include "ps/session/endpoint.h"
#include "ps/session/requests.h"
#include "transport/wire.h"

namespace psrt::ps {
namespace {

std::atomic<bool> g_on{false};

// A process keeps at most this many events (40 MB); later ones are counted, not kept.
constexpr std::size_t kMaxEvents = std::size_t{1} << 20;
// Events per TIMELINE message: well below kMaxControlBytes.
constexpr std::size_t kEventsPerMessage = 16'384;

struct Recorder {
  std::mutex mu;
  std::vector<TimelineEvent> events;  // guarded by mu
  std::uint64_t dropped = 0;          // guarded by mu
  // The scheduler's clock minus this one's, and half the round trip that measured it.
  std::atomic<std::int64_t> offset_ns{0};
  std::atomic<std::int64_t> uncertainty_ns{-1};  // -1: not measured
};

Recorder& recorder() {
  static Recorder r;
  return r;
}

std::int64_t steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string_view to_string(TimelineKind k) noexcept {
  switch (k) {
    case TimelineKind::kSend:
      return "send";
    case TimelineKind::kReply:
      return "reply";
    case TimelineKind::kWait:
      return "wait";
    case TimelineKind::kReceive:
      return "receive";
    case TimelineKind::kUpdate:
      return "update";
    case TimelineKind::kServe:
      return "serve";
    case TimelineKind::kCount:
      break;
  }
  return "?";
}

bool timeline_on() noexcept {
  return g_on.load(std::memory_order_relaxed);
}

void enable_timeline(bool on) noexcept {
  g_on.store(on, std::memory_order_relaxed);
}

std::int64_t timeline_now() noexcept {
  return timeline_on() ? steady_ns() : 0;
}

std::int64_t scheduler_clock_ns() noexcept {
  return steady_ns();
}

void timeline_record(TimelineKind kind, std::uint64_t key, std::uint32_t slice, std::int64_t begin,
                     std::uint64_t arg) noexcept {
  if (begin == 0 || !timeline_on()) return;
  const std::int64_t end = steady_ns();
  Recorder& r = recorder();
  std::lock_guard lock(r.mu);
  if (r.events.size() >= kMaxEvents) {
    ++r.dropped;
    return;
  }
  try {
    r.events.push_back({kind, slice, key, begin, std::max<std::int64_t>(0, end - begin), arg});
  } catch (...) {  // no memory: the event is dropped, the operation goes on
    ++r.dropped;
  }
}

void sync_clock(Requests& requests, Peer& scheduler, std::chrono::milliseconds timeout) {
  if (!timeline_on()) return;
  std::int64_t best_rtt = std::numeric_limits<std::int64_t>::max(), best_offset = 0;
  for (int i = 0; i < 8; ++i) {
    Header h;
    h.type = MsgType::kClock;
    const std::int64_t t0 = steady_ns();
    const Reply reply = requests.call(scheduler, h, {}, "CLOCK", timeout);
    const std::int64_t t1 = steady_ns();
    const auto theirs = static_cast<std::int64_t>(reply.header.round);
    if (t1 - t0 < best_rtt) {
      best_rtt = t1 - t0;
      best_offset = theirs - (t0 + (t1 - t0) / 2);
    }
  }
  recorder().offset_ns.store(best_offset);
  recorder().uncertainty_ns.store(best_rtt / 2);
}

void flush_timeline(Peer& scheduler, std::chrono::milliseconds wait) {
  if (!timeline_on()) return;
  Recorder& r = recorder();
  std::vector<TimelineEvent> events;
  std::uint64_t dropped = 0;
  {
    std::lock_guard lock(r.mu);
    events.swap(r.events);
    dropped = r.dropped;
  }
  if (dropped > 0)
    PSRT_LOG_WARN("the timeline kept the first {} events of this process and dropped {}",
                  kMaxEvents, dropped);
  const std::int64_t offset = r.offset_ns.load();
  for (auto& e : events)
    e.begin_ns += offset;
  try {
    std::future<void> last;
    for (std::size_t at = 0; at < events.size(); at += kEventsPerMessage) {
      const std::size_t n = std::min(kEventsPerMessage, events.size() - at);
      Header h;
      h.type = MsgType::kTimeline;
      h.count = n;
      // round: how well this process's clock is known (ns; kAnyRank-sized when never measured).
      const std::int64_t u = r.uncertainty_ns.load();
      h.round = u < 0 ? std::numeric_limits<std::uint32_t>::max() : static_cast<std::uint64_t>(u);
      auto sent = std::make_shared<std::promise<void>>();
      last = sent->get_future();
      scheduler.send_bytes(h, encode_timeline({events.data() + at, n}),
                           [sent](const Status&) { sent->set_value(); });
    }
    if (last.valid()) last.wait_for(wait);
  } catch (...) {
    PSRT_LOG_WARN("{}", current_exception_status("timeline not sent").message());
  }
}

}  // namespace psrt::ps
