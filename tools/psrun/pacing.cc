#include "tools/psrun/pacing.h"

#include <cstdlib>

#include "base/log.h"
#include "transport/byte_streams.h"

namespace psrt::psrun {

bool pace_across_hosts(Args& a, const std::string& transport,
                       const std::optional<launch::HostAssignment>& placement, bool window_set) {
  if (!placement || launch::hosts_of(*placement).size() < 2) return false;
  if (!transport::moves_as_byte_streams(transport)) return false;
  const bool cut = a.balanced_cut && !a.partition_given;
  if (cut) a.partition_bytes = kAcrossHostsSliceBytes;
  if (!window_set) a.send_window = kAcrossHostsSliceBytes;
  if (!cut && window_set) return false;
  PSRT_LOG_INFO(
      "the job spans {} hosts over TCP byte streams: {}{}{} (docs/performance.md; give "
      "--partition-bytes or PSRT_SEND_WINDOW to choose otherwise)",
      launch::hosts_of(*placement).size(), cut ? "balanced slices of at most 131072 B" : "",
      cut && !window_set ? " and " : "", window_set ? "" : "PSRT_SEND_WINDOW=131072");
  return true;
}

bool send_window_set(const std::vector<std::string>& env_specs) {
  if (std::getenv("PSRT_SEND_WINDOW") != nullptr) return true;
  for (const auto& spec : env_specs)
    if (spec == "PSRT_SEND_WINDOW" || spec.rfind("PSRT_SEND_WINDOW=", 0) == 0) return true;
  return false;
}

}  // namespace psrt::psrun
