// psrun's placement of a job's processes (--bind, PSRT_BIND). A local job: reads this host's
// topology, plans where each process runs (runtime/placement/), prints the table and puts it
// into the job: CPUs to bind to, PSRT_GPU for each worker, UCX_NET_DEVICES for an ucx job unless
// the user set it. An ssh job: each process gets PSRT_PLACE and its host's remote side does the
// same with that host's topology (runtime/placement/env_place.h), saying its row.
#pragma once

#include <string>

#include "runtime/launch/launcher.h"
#include "tools/psrun/options.h"

namespace psrt::psrun {

// Throws psrt::Error(kInvalidArgument) when --bind is given with --launcher mpi or slurm, or
// PSRT_BIND holds an unknown mode.
void check_bind(const Args& a);

// Fills `job` (servers in job.services, workers in job.workers, in rank order) for a local or
// ssh job; nothing for mpi and slurm.
void place_job(const Args& a, const std::string& transport, launch::JobSpec& job);

}  // namespace psrt::psrun
