// A server process: reads its configuration from the env contract, listens, registers with the
// scheduler, serves until SHUTDOWN (or SIGINT/SIGTERM, or losing the scheduler). psrun starts
// it as `psrun --internal-server`.
#pragma once

#include "ps/server.h"

namespace psrt::runtime {

// The ServerConfig the PSRT_* environment describes. Throws psrt::Error naming a bad variable.
ps::ServerConfig server_config_from_env();

// Runs one server until the job ends; returns the process exit status (0 = normal end).
int run_server_from_env();

}  // namespace psrt::runtime
