#include "tools/psrun/pacing.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "base/log.h"
#include "transport/byte_streams.h"

namespace psrt::psrun {

bool pace_across_hosts(Args& a, const std::string& transport,
                       const std::optional<launch::HostAssignment>& placement, bool window_set) {
  const std::size_t hosts = placement ? launch::hosts_of(*placement).size() : 0;
  if (hosts < 2 || !transport::moves_as_byte_streams(transport)) return false;
  std::vector<std::string> set;
  if (a.balanced_cut && !a.partition_given) {
    a.partition_bytes = kAcrossHostsSliceBytes;
    set.push_back(fmt::format("balanced slices of at most {} B", kAcrossHostsSliceBytes));
  }
  if (!window_set) {
    a.send_window = kAcrossHostsSliceBytes;
    set.push_back(fmt::format("PSRT_SEND_WINDOW={}", kAcrossHostsSliceBytes));
  }
  if (set.empty()) return false;
  PSRT_LOG_INFO(
      "the job spans {} hosts over TCP byte streams: {} (docs/performance.md; give "
      "--partition-bytes or PSRT_SEND_WINDOW to choose otherwise)",
      hosts, fmt::join(set, " and "));
  return true;
}

bool send_window_set(const std::vector<std::string>& env_specs) {
  if (std::getenv("PSRT_SEND_WINDOW") != nullptr) return true;
  for (const auto& spec : env_specs)
    if (spec == "PSRT_SEND_WINDOW" || spec.rfind("PSRT_SEND_WINDOW=", 0) == 0) return true;
  return false;
}

}  // namespace psrt::psrun
