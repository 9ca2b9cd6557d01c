#include "psrun/launch_options.h"

#include <sstream>

#include "psrt/error.h"
#include "runtime/launch/engine_launcher.h"

namespace psrt::tools {
namespace {

// Splits extra engine arguments on whitespace (no quoting: pass one option per word).
std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;)
    out.push_back(w);
  return out;
}

}  // namespace

void add_launch_flags(CLI::App& app, LaunchFlags& f) {
  app.add_option("--launcher", f.launcher,
                 "local | mpi (OpenMPI's mpirun starts servers and workers) | slurm (srun, "
                 "inside an allocation)")
      ->check(CLI::IsMember({"local", "mpi", "slurm"}))
      ->capture_default_str();
  app.add_option("-H,--hosts", f.hosts, "mpi: hosts and slots, host1:4,host2:4 (mpirun -H)");
  app.add_option("--hostfile", f.hostfile, "mpi: file of `host slots=N` lines (mpirun --hostfile)")
      ->check(CLI::ExistingFile);
  app.add_option("--mpirun-args", f.mpirun_args,
                 "mpi: more mpirun options, split on spaces (e.g. \"--mca plm_rsh_args -p2222\")");
  app.add_option("--srun-args", f.srun_args, "slurm: more srun options, split on spaces");
  app.add_flag("--dry-run", f.dry_run,
               "mpi, slurm: print the command that would start the job's processes, start none");
}

std::unique_ptr<runtime::LaunchBackend> make_backend(const LaunchFlags& f) {
  const bool host_flags = !f.hosts.empty() || !f.hostfile.empty();
  if (f.launcher != "mpi" && (host_flags || !f.mpirun_args.empty()))
    throw Error(ErrorCode::kInvalidArgument,
                "-H/--hostfile/--mpirun-args need --launcher mpi (Slurm places ranks on the "
                "allocation's nodes itself)");
  if (f.launcher != "slurm" && !f.srun_args.empty())
    throw Error(ErrorCode::kInvalidArgument, "--srun-args needs --launcher slurm");
  if (f.launcher == "local" && f.dry_run)
    throw Error(ErrorCode::kInvalidArgument, "--dry-run needs --launcher mpi or slurm");
  runtime::EngineLaunchOptions o;
  o.dry_run = f.dry_run;
  if (f.launcher == "mpi") {
    if (!f.hosts.empty()) o.host_args = {"-H", f.hosts};
    if (!f.hostfile.empty()) o.host_args.insert(o.host_args.end(), {"--hostfile", f.hostfile});
    o.extra_args = words(f.mpirun_args);
    return runtime::make_mpi_launcher(std::move(o));
  }
  if (f.launcher == "slurm") {
    o.extra_args = words(f.srun_args);
    return runtime::make_slurm_launcher(std::move(o));
  }
  return runtime::make_launch_backend(f.launcher);
}

}  // namespace psrt::tools
