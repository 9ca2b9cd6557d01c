#include "tools/psrun/launch_options.h"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>

#include "base/interfaces.h"
#include "psrt/error.h"
#include "runtime/engine_env.h"
#include "runtime/env_contract.h"

namespace psrt::psrun {

void add_engine_flags(CLI::App& app, EngineFlags& f) {
  app.add_option("--mpirun-args", f.mpirun_args,
                 "--launcher mpi: more mpirun options, split on spaces (e.g. \"--mca "
                 "oob_tcp_if_include 10.9.0.0/24\")");
  app.add_option("--srun-args", f.srun_args,
                 "--launcher slurm: more srun options, split on spaces");
}

void check_engine_flags(const std::string& launcher, const SshFlags& h, const EngineFlags& f) {
  if (!h.server_hosts.empty() || !h.ssh_args.empty())
    throw Error(ErrorCode::kInvalidArgument,
                "--server-hosts and --ssh-args need --launcher ssh (mpirun and srun place the "
                "ranks themselves: servers are ranks 0..S-1)");
  if (launcher != "mpi" && (!h.hosts.empty() || !h.hostfile.empty() || !f.mpirun_args.empty()))
    throw Error(ErrorCode::kInvalidArgument,
                "-H/--hostfile/--mpirun-args need --launcher mpi or ssh (Slurm places the ranks "
                "on the allocation's nodes)");
  if (launcher != "slurm" && !f.srun_args.empty())
    throw Error(ErrorCode::kInvalidArgument, "--srun-args needs --launcher slurm");
}

std::optional<launch::HostAssignment> engine_hosts(const std::string& launcher, const SshFlags& h) {
  launch::HostAssignment p;
  try {
    if (launcher == "mpi" && !h.hosts.empty())
      for (const auto& hs : launch::parse_host_list(h.hosts))
        p.workers.push_back(hs.host);
    if (launcher == "mpi" && !h.hostfile.empty())
      for (const auto& hs : launch::read_hostfile(h.hostfile))
        p.workers.push_back(hs.host);
    const char* nodes = std::getenv("SLURM_JOB_NODELIST");
    if (launcher == "slurm" && nodes && *nodes) p.workers = runtime::slurm_hostnames(nodes);
  } catch (const Error&) {
    return std::nullopt;  // the engine reports bad hosts itself
  }
  // Only hosts this one has a route to (a name mpirun resolves differently is its business).
  std::erase_if(p.workers, [](const std::string& host) {
    try {
      route_to(host);
      return false;
    } catch (const Error&) {
      return true;
    }
  });
  if (p.workers.empty()) return std::nullopt;
  return p;
}

launch::LaunchOptions launch_options(const std::string& launcher, const SshFlags& h,
                                     const EngineFlags& f, const std::string& self) {
  launch::LaunchOptions o;
  o.dry_run = h.dry_run;
  if (launcher == "ssh") {
    o.ssh_args = split_ssh_args(h.ssh_args);
    o.self = self;
    o.keepalive_timeout = runtime::env_ms("PSRT_PEER_TIMEOUT_MS");
    std::error_code ec;
    o.cwd = std::filesystem::current_path(ec).string();  // empty when it is gone
  }
  if (launcher == "mpi") {
    o.hosts = h.hosts;
    o.hostfile = h.hostfile;
    o.extra_args = split_ssh_args(f.mpirun_args);
  }
  if (launcher == "slurm") o.extra_args = split_ssh_args(f.srun_args);
  return o;
}

}  // namespace psrt::psrun
