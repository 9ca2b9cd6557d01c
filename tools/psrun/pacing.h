// psrun's pacing of a job whose servers and workers span hosts over TCP byte streams (tcp, or ucx
// with UCX_TLS=tcp: transport/byte_streams.h): the balanced cut in 128 KiB slices and a 128 KiB
// send window (PSRT_SEND_WINDOW) instead of 256 KiB. A step ends about one group of S slices
// after its last push, so smaller slices shorten that tail: at 100 Mbit/s, N = S = 4, a step
// took 0.74–0.76 s against 0.85 s (docs/performance.md#slow-links-128-kib). On one host the
// doubled message count costs more than it gains (psbench pushpull --keys 40 1.3–1.5× slower),
// so a local job keeps 256 KiB. Decided once, at start: a restart keeps the cut it began with.
#pragma once

#include <optional>
#include <string>

#include "runtime/launch/host_assignment.h"
#include "tools/psrun/options.h"

namespace psrt::psrun {

inline constexpr std::size_t kAcrossHostsSliceBytes = std::size_t{128} << 10;

// Sets a.partition_bytes and a.send_window to kAcrossHostsSliceBytes when `placement` (an ssh
// job's) spans more than one host, the transport moves as byte streams, the cut is balanced with
// no --partition-bytes given, and the window is not set (`window_set`: PSRT_SEND_WINDOW in
// psrun's environment or --env). Returns whether it did, logging what and how to override.
bool pace_across_hosts(Args& a, const std::string& transport,
                       const std::optional<launch::HostAssignment>& placement, bool window_set);

// Whether PSRT_SEND_WINDOW is in psrun's environment or named by an --env spec.
bool send_window_set(const std::vector<std::string>& env_specs);

}  // namespace psrt::psrun
