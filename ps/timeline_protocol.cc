// TIMELINE records on the wire (ps/timeline.h): encode and the checked decode, apart from the
// recorder so that the protocol fuzzer links them alone.
#include <fmt/core.h>

#include "ps/session/protocol.h"
#include "ps/timeline.h"
#include "transport/wire.h"

namespace psrt::ps {
using wire::load;
using wire::store;

std::vector<std::byte> encode_timeline(std::span<const TimelineEvent> events) {
  std::vector<std::byte> out(events.size() * kTimelineRecordBytes);
  std::byte* p = out.data();
  for (const auto& e : events) {
    store<std::uint32_t>(p, static_cast<std::uint32_t>(e.kind));
    store<std::uint32_t>(p + 4, e.slice);
    store<std::uint64_t>(p + 8, e.key);
    store<std::uint64_t>(p + 16, static_cast<std::uint64_t>(e.begin_ns));
    store<std::uint64_t>(p + 24, static_cast<std::uint64_t>(e.dur_ns));
    store<std::uint64_t>(p + 32, e.arg);
    p += kTimelineRecordBytes;
  }
  return out;
}

Status decode_timeline(std::span<const std::byte> bytes, std::vector<TimelineEvent>& out) {
  if (bytes.size() % kTimelineRecordBytes != 0)
    return protocol_error(fmt::format("timeline of {} bytes is not whole {}-byte records",
                                      bytes.size(), kTimelineRecordBytes));
  out.clear();
  for (std::size_t at = 0; at < bytes.size(); at += kTimelineRecordBytes) {
    const std::byte* p = bytes.data() + at;
    const auto kind = load<std::uint32_t>(p);
    if (kind >= static_cast<std::uint32_t>(TimelineKind::kCount))
      return protocol_error(
          fmt::format("timeline record {}: unknown kind {}", at / kTimelineRecordBytes, kind));
    TimelineEvent e;
    e.kind = static_cast<TimelineKind>(kind);
    e.slice = load<std::uint32_t>(p + 4);
    e.key = load<std::uint64_t>(p + 8);
    e.begin_ns = static_cast<std::int64_t>(load<std::uint64_t>(p + 16));
    e.dur_ns = static_cast<std::int64_t>(load<std::uint64_t>(p + 24));
    e.arg = load<std::uint64_t>(p + 32);
    if (e.dur_ns < 0)
      return protocol_error(
          fmt::format("timeline record {}: duration {} ns", at / kTimelineRecordBytes, e.dur_ns));
    out.push_back(e);
  }
  return {};
}

}  // namespace psrt::ps
