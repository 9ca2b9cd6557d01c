// The address a server (or psrun's scheduler) listens on and advertises to the job's other
// hosts: PSRT_HOST when set, else the address chosen by PSRT_INTERFACE (an interface name or a
// CIDR), else the address of the interface whose route reaches the scheduler
// (base/interfaces.h). A scheduler on 127.0.0.1 thus keeps a single-host job on loopback, and
// a scheduler on another host is never given 127.0.0.1.
#pragma once

#include <string>

namespace psrt::runtime {

// The host part to listen on, for a process whose scheduler is at `scheduler_address`
// ("host:port"). Throws psrt::Error naming PSRT_INTERFACE / the scheduler when nothing fits.
std::string listen_host_from_env(const std::string& scheduler_address);

}  // namespace psrt::runtime
