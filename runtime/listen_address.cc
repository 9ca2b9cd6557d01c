#include "runtime/listen_address.h"

#include <fmt/core.h>

#include "base/interfaces.h"
#include "psrt/error.h"
#include "runtime/env_contract.h"
#include "transport/socket.h"

namespace psrt::runtime {

std::string listen_host_from_env(const std::string& scheduler_address) {
  if (std::string host = env_string("PSRT_HOST"); !host.empty()) return host;
  const std::string spec = env_string("PSRT_INTERFACE");
  const std::string scheduler_host = transport::parse_address(scheduler_address).host;
  try {
    return choose_address(spec, scheduler_host).address;
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("cannot choose an address to listen on (PSRT_INTERFACE='{}', "
                                      "scheduler at {}): {}",
                                      spec, scheduler_address, e.what()));
  }
}

}  // namespace psrt::runtime
