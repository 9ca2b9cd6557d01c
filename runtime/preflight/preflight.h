// psrun --preflight on this host: probe (ib_probe.h, ucx_probe.h, host_probe.h), judge
// (verdict.h), print the table (report.h).
#pragma once

#include <ostream>
#include <string>

#include "runtime/preflight/facts.h"

namespace psrt::preflight {

struct PreflightOptions {
  std::string host;  // this host's name, for the table
  // The scheduler's address: preflight listens there on `scheduler_port` (0 = any free port)
  // and connects to it, which checks that the port is free and reachable. Empty: not checked.
  std::string scheduler_address;
  int scheduler_port = 0;
  // Only connect to scheduler_address:scheduler_port (psrun listens there: a host of an ssh job
  // checking that it reaches psrun's scheduler port).
  bool reach_only = false;
  std::vector<std::string> affinity;  // GPU-NIC lines for the table (placement's)
};

// Every probe of this host; never throws.
HostFacts probe_host(const PreflightOptions& options);

// Probes, judges against `job`, prints the table on `out`; returns 0 when no check fails, else 1.
int run_preflight(const Requirements& job, const PreflightOptions& options, std::ostream& out);

}  // namespace psrt::preflight
