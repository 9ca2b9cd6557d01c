#include "runtime/launch/factory.h"

#include <string>

#include "psrt/error.h"
#include "runtime/launch/engine_launcher.h"
#include "runtime/launch/local_launcher.h"

namespace psrt::launch {

SshOptions ssh_options_of(const LaunchOptions& o) {
  SshOptions ssh;
  ssh.ssh_args = o.ssh_args;
  ssh.remote_psrun = o.self;
  ssh.keepalive_timeout = o.keepalive_timeout;
  ssh.cwd = o.cwd;
  return ssh;
}

std::unique_ptr<LaunchBackend> make_launch_backend(std::string_view name, const LaunchOptions& o) {
  if (name == "local") return std::make_unique<LocalLauncher>();
  if (name == "ssh") return std::make_unique<SshLauncher>(ssh_options_of(o));
  EngineLaunchOptions engine;
  engine.dry_run = o.dry_run;
  engine.extra_args = o.extra_args;
  if (name == "mpi") {
    if (!o.hosts.empty()) engine.host_args = {"-H", o.hosts};
    if (!o.hostfile.empty())
      engine.host_args.insert(engine.host_args.end(), {"--hostfile", o.hostfile});
    return make_mpi_launcher(std::move(engine));
  }
  if (name == "slurm") return make_slurm_launcher(std::move(engine));
  throw Error(ErrorCode::kInvalidArgument, "unknown launch backend '" + std::string(name) +
                                               "'; known backends: local, ssh, mpi, slurm");
}

}  // namespace psrt::launch
