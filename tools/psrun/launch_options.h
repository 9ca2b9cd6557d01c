// psrun's launch-backend flags (--launcher, -H/--hostfile, --mpirun-args, --srun-args, --dry-run)
// and the backend they select.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "runtime/launch/launcher.h"

namespace psrt::tools {

struct LaunchFlags {
  std::string launcher = "local";
  std::string hosts;     // -H host1:4,host2:4 (mpi: passed to mpirun)
  std::string hostfile;  // --hostfile F ("host slots=N" lines; mpi: passed to mpirun)
  std::string mpirun_args;
  std::string srun_args;
  bool dry_run = false;
};

void add_launch_flags(CLI::App& app, LaunchFlags& flags);

// The backend the flags name. Throws psrt::Error naming a flag that does not fit the backend.
std::unique_ptr<runtime::LaunchBackend> make_backend(const LaunchFlags& flags);

}  // namespace psrt::tools
