// The scheduler's side of live metrics and the timeline (psrun --metrics-port, --timeline):
// METRICS and TIMELINE reports of the job's registered workers and servers go to the JobMetrics
// and JobTimeline psrun gave it, with the scheduler's own counts of members and membership
// events; CLOCK is answered with the scheduler's clock.
#include <fmt/core.h>

#include "base/log.h"
#include "ps/job_metrics.h"
#include "ps/job_timeline.h"
#include "ps/scheduler.h"
#include "transport/socket.h"

namespace psrt::ps {

using transport::host_of;

void Scheduler::set_observers(std::shared_ptr<JobMetrics> metrics,
                              std::shared_ptr<JobTimeline> timeline) {
  std::lock_guard lock(mu_);
  metrics_ = std::move(metrics);
  timeline_ = std::move(timeline);
  note_metrics_locked(nullptr);
}

void Scheduler::on_timeline(ps::Peer& peer, const Header& h, std::span<const std::byte> payload) {
  std::shared_ptr<JobTimeline> timeline;
  {
    std::lock_guard lock(mu_);
    if (!timeline_ || !registered_locked(peer)) return;
    timeline = timeline_;
  }
  std::vector<TimelineEvent> events;
  if (Status s = decode_timeline(payload, events); !s.ok())
    return peer.send_error(0, s.code(), fmt::format("TIMELINE refused: {}", s.message()), true);
  timeline->add(peer.role(), peer.rank(), host_of(peer.address()), h.round, std::move(events));
}

void Scheduler::on_clock(ps::Peer& peer, const Header& h) {
  Header r;
  r.type = MsgType::kClockReply;
  r.request_id = h.request_id;
  r.round = static_cast<std::uint64_t>(scheduler_clock_ns());
  peer.send(r);
}

void Scheduler::on_metrics(ps::Peer& peer, std::span<const std::byte> payload) {
  std::shared_ptr<JobMetrics> metrics;
  {
    std::lock_guard lock(mu_);
    // Only the job's own processes report, each for the rank registered on its connection.
    if (!metrics_ || !registered_locked(peer)) return;
    metrics = metrics_;
  }
  std::vector<MetricRecord> records;
  if (Status s = decode_metrics(payload, records); !s.ok())
    return peer.send_error(0, s.code(), fmt::format("METRICS refused: {}", s.message()), true);
  metrics->report(peer.role(), peer.rank(), host_of(peer.address()), std::move(records));
}

void Scheduler::note_own_counters_locked() {
  if (metrics_ && transport_)
    metrics_->set_scheduler_dropped(host_of(address_), transport_->dropped_messages());
}

void Scheduler::note_metrics_locked(const char* event) {
  if (!metrics_) return;
  if (event) metrics_->event(event);
  metrics_->set_live(workers_.size(), live_servers_.size());
}

}  // namespace psrt::ps
