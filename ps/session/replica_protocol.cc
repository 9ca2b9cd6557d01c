#include "ps/session/replica_protocol.h"

#include <fmt/core.h>

#include <set>

#include "transport/wire.h"

namespace psrt::ps {
inline namespace session {
using wire::load;
using wire::store;

std::vector<std::byte> encode_counts(std::span<const ReplicaCount> counts) {
  std::vector<std::byte> out(counts.size() * kReplicaCountBytes);
  std::byte* p = out.data();
  for (const auto& c : counts) {
    store<std::uint32_t>(p, c.rank);
    store<std::uint64_t>(p + 4, c.applied);
    store<std::uint64_t>(p + 12, c.pushes);
    p += kReplicaCountBytes;
  }
  return out;
}

Status decode_counts(std::span<const std::byte> bytes, std::vector<ReplicaCount>& out) {
  if (bytes.size() % kReplicaCountBytes != 0)
    return protocol_error(fmt::format("replica counters of {} bytes are not whole {}-byte records",
                                      bytes.size(), kReplicaCountBytes));
  out.clear();
  std::set<std::uint32_t> seen;
  const std::byte* p = bytes.data();
  for (std::size_t i = 0; i < bytes.size() / kReplicaCountBytes; ++i) {
    ReplicaCount c;
    c.rank = load<std::uint32_t>(p);
    c.applied = load<std::uint64_t>(p + 4);
    c.pushes = load<std::uint64_t>(p + 12);
    p += kReplicaCountBytes;
    if (c.rank >= kMaxRanks || !seen.insert(c.rank).second)
      return protocol_error(
          fmt::format("replica counters name rank {} twice or out of range", c.rank));
    out.push_back(c);
  }
  return Status();
}

}  // namespace session
}  // namespace psrt::ps
