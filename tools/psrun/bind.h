// psrun's placement of a local job (--bind, PSRT_BIND): reads this host's topology, plans where
// each process runs (runtime/placement/), prints the table and puts it into the job: CPUs to bind
// to, PSRT_GPU for each worker, UCX_NET_DEVICES for an ucx job unless the user set it.
#pragma once

#include <string>

#include "runtime/launch/launcher.h"
#include "tools/psrun/options.h"

namespace psrt::psrun {

// Throws psrt::Error(kInvalidArgument) when --bind or PSRT_BIND is set for a launcher other than
// local (or PSRT_BIND holds an unknown mode).
void check_bind(const Args& a);

// For a local job: plans, prints the table (log), and fills `job` (servers in job.services,
// workers in job.workers, in rank order). Other launchers: nothing.
void place_local_job(const Args& a, const std::string& transport, runtime::JobSpec& job);

}  // namespace psrt::psrun
