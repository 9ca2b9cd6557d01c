// psrun --preflight: this host checked for the job the flags describe, or with --launcher ssh
// every host of the job, each through ssh (runtime/preflight/ on every host).
#pragma once

#include <optional>
#include <string>

#include "base/interfaces.h"
#include "runtime/launch/factory.h"
#include "runtime/launch/host_assignment.h"
#include "tools/psrun/launch_options.h"
#include "tools/psrun/options.h"

namespace psrt::psrun {

// Prints one table per host; returns 0 when every host passes, else 1. `where` is the
// scheduler's interface; `placement` the ssh job's hosts (nullopt: this host only), reached with
// the ssh backend made from `ssh`.
int run_preflight(const Args& a, const std::string& transport, const InterfaceAddress& where,
                  const std::optional<launch::HostAssignment>& placement,
                  const launch::LaunchOptions& ssh, const std::string& self_exe);

}  // namespace psrt::psrun
