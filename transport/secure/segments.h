// How the secure mode cuts a payload into segments that are sealed and opened in parallel
// (crypt_pool.h). Each segment is its own AES-256-GCM message under the connection's key, with
// the nonce (payload domain, segment index, sequence number) and its own tag; the sealed header
// carries every segment's tag (handshake.h). The cut is a function of the payload's length
// alone, so both ends agree on it without saying it.
#pragma once

#include <cstddef>

namespace psrt::transport::secure {

// At most this many segments per payload (each adds a tag to the sealed header).
inline constexpr std::size_t kMaxSegments = 4;
// A payload below twice this is one segment: smaller pieces cost more to hand to another
// thread than they save.
inline constexpr std::size_t kMinSegmentBytes = std::size_t{128} << 10;
// Segments start at multiples of this (whole cache lines for the cipher).
inline constexpr std::size_t kSegmentAlignment = 64;

struct Segment {
  std::size_t offset = 0;
  std::size_t size = 0;
};

// 0 for an empty payload, else 1..kMaxSegments.
std::size_t segment_count(std::size_t payload_bytes);

// Segment `index` (< segment_count(payload_bytes)) of a payload: the segments are disjoint, in
// order, and cover the payload exactly; all but the last have the same aligned size.
Segment segment_of(std::size_t payload_bytes, std::size_t index);

}  // namespace psrt::transport::secure
