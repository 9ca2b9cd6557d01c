// A server process: reads its configuration from the env contract, listens, registers with the
// scheduler, serves until SHUTDOWN (or SIGINT/SIGTERM, or losing the scheduler). psrun starts
// it as `psrun --internal-server`.
#pragma once

#include <cstddef>

#include "ps/server.h"
#include "ps/session/endpoint.h"
#include "runtime/env_contract.h"

namespace psrt::runtime {

// The ServerConfig the PSRT_* environment describes. Throws psrt::Error naming a bad variable.
ps::ServerConfig server_config_from_env();

// Admission limits of an accepting process (scheduler, server) from PSRT_HANDSHAKE_TIMEOUT_MS
// and PSRT_MAX_UNAUTHENTICATED[_PER_HOST]; both caps are raised to `job_processes` + 16 so that
// a job whose processes all connect at once from one host is never refused. `job`: as for
// env_string (runtime/env_contract.h).
ps::Admission admission_from_env(std::size_t job_processes, const JobEnv& job = {});

// Runs one server until the job ends; returns the process exit status (0 = normal end).
int run_server_from_env();

}  // namespace psrt::runtime
