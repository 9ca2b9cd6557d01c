// The job's timeline (psrun --timeline FILE; docs/monitoring.md): every process records what it
// did per key and slice (a worker's sends, replies and waits; a server's receives, updates and
// pull replies) with begin and duration on its steady clock, and at the end sends them to the
// scheduler as TIMELINE records on the scheduler's clock. The offset between the two clocks is
// measured after registration by CLOCK requests (the scheduler answers with its clock; the
// exchange with the shortest round trip wins, and half that round trip is the stated
// uncertainty). psrun merges every process's events into one Chrome trace (ps/job_timeline.h).
//
// Off by default: a hook is one relaxed load and a branch then. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "ps/session/protocol.h"

namespace psrt::ps {

enum class TimelineKind : std::uint8_t {
  kSend = 0,     // worker: a slice's payload handed to the transport until it left (arg: bytes)
  kReply = 1,    // worker: a slice's request until its reply came (arg: the version it carried)
  kWait = 2,     // worker: a caller blocked in Handle::wait on the key (slice: 0)
  kReceive = 3,  // server: a gradient's placement until its last byte (arg: bytes)
  kUpdate = 4,   // server: a slice's update (arg: the version it made)
  kServe = 5,    // server: a pull reply until it was sent (arg: the version it carried)
  kCount
};
std::string_view to_string(TimelineKind k) noexcept;

struct TimelineEvent {
  TimelineKind kind = TimelineKind::kSend;
  std::uint32_t slice = 0;
  std::uint64_t key = 0;
  std::int64_t begin_ns = 0;  // the sender's clock locally; the scheduler's once flushed
  std::int64_t dur_ns = 0;
  std::uint64_t arg = 0;
};
// TIMELINE record (kTimelineRecordBytes): u8 kind, 3 bytes zero, u32 slice, u64 key, i64 begin,
// i64 duration (>= 0), u64 arg.
std::vector<std::byte> encode_timeline(std::span<const TimelineEvent> events);
Status decode_timeline(std::span<const std::byte> bytes, std::vector<TimelineEvent>& out);

bool timeline_on() noexcept;
void enable_timeline(bool on) noexcept;

// This process's steady clock in ns; 0 when the timeline is off (record() ignores it then).
std::int64_t timeline_now() noexcept;
// An event of `kind` that began at `begin` (timeline_now()) and ends now.
void timeline_record(TimelineKind kind, std::uint64_t key, std::uint32_t slice, std::int64_t begin,
                     std::uint64_t arg) noexcept;

inline namespace session {  // ps/session/endpoint.h, ps/session/requests.h
class Peer;
class Requests;
}  // namespace session
// Measures the offset to the scheduler's clock (CLOCK, a few round trips); a no-op when the
// timeline is off. Throws psrt::Error when the scheduler does not answer within `timeout`.
void sync_clock(Requests& requests, Peer& scheduler, std::chrono::milliseconds timeout);
// Sends every event recorded (on the scheduler's clock) and forgets them; waits at most `wait`
// for the last message to leave. A no-op when the timeline is off.
void flush_timeline(Peer& scheduler, std::chrono::milliseconds wait);
// The scheduler's side of CLOCK: its clock in ns (the same clock timeline_now() reads).
std::int64_t scheduler_clock_ns() noexcept;

}  // namespace psrt::ps
