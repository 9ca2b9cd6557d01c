#include "transport/secure/segments.h"

#include <algorithm>

namespace psrt::transport::secure {

std::size_t segment_count(std::size_t payload_bytes) {
  if (payload_bytes == 0) return 0;
  return std::clamp<std::size_t>(payload_bytes / kMinSegmentBytes, 1, kMaxSegments);
}

Segment segment_of(std::size_t payload_bytes, std::size_t index) {
  const std::size_t n = segment_count(payload_bytes);
  const std::size_t even = (payload_bytes + n - 1) / n;
  const std::size_t step = (even + kSegmentAlignment - 1) / kSegmentAlignment * kSegmentAlignment;
  const std::size_t offset = std::min(payload_bytes, index * step);
  const std::size_t end = index + 1 == n ? payload_bytes : std::min(payload_bytes, offset + step);
  return {offset, end - offset};
}

}  // namespace psrt::transport::secure
