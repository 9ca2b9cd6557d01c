#include "tools/psrun/preflight_hosts.h"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "device/cuda_device.h"
#include "psrt/error.h"
#include "runtime/placement/placement.h"
#include "runtime/placement/topology.h"
#include "runtime/preflight/host_probe.h"
#include "runtime/preflight/preflight.h"

namespace psrt::psrun {
namespace {

preflight::Requirements requirements(const Args& a, const std::string& transport) {
  preflight::Requirements job;
  job.transport = transport;
  if (const char* tls = std::getenv("UCX_TLS")) job.ucx_tls = tls;
  if (const char* nd = std::getenv("UCX_NET_DEVICES")) job.ucx_net_devices = nd;
  const auto device = device::parse_device(a.server_device);
  if (device.is_cuda()) job.cuda_device = device.index;
  return job;
}

int this_host(const Args& a, const std::string& transport, const InterfaceAddress& where) {
  preflight::PreflightOptions o;
  char name[256] = {};
  o.host = !a.preflight_host.empty()                    ? a.preflight_host
           : ::gethostname(name, sizeof(name) - 1) == 0 ? name
                                                        : "?";
  o.scheduler_address = a.preflight_reach.empty() ? where.address : a.preflight_reach;
  o.scheduler_port = a.port;
  o.reach_only = !a.preflight_reach.empty();
  try {
    o.affinity = placement::gpu_nic_affinity(placement::read_topology());
  } catch (const Error& e) {
    o.affinity = {std::string("unknown: ") + e.what()};
  }
  if (a.launcher == "mpi" || a.launcher == "slurm")
    std::cout << "preflight: checks this host only; run psrun --preflight on every host of the "
                 "job (srun or mpirun run it there)\n";
  return preflight::run_preflight(requirements(a, transport), o, std::cout);
}

}  // namespace

int run_preflight(const Args& a, const std::string& transport, const InterfaceAddress& where,
                  const std::optional<launch::HostAssignment>& placement,
                  const launch::LaunchOptions& ssh, const std::string& self_exe) {
  if (!placement) return this_host(a, transport, where);
  // Every host of the ssh job, one after the other, each connecting to the port psrun holds
  // where its scheduler would listen.
  const preflight::Listener listener(where.address, a.port);
  if (!listener.error().empty()) {
    std::cout << fmt::format("preflight: the scheduler's port {} on this host: {}\n",
                             join_host_port(where.address, a.port), listener.error());
    return 1;
  }
  std::vector<std::string> hosts;
  for (const auto* list : {&placement->servers, &placement->workers})
    for (const auto& h : *list)
      if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  std::vector<std::string> failed;
  for (const auto& host : hosts) {
    launch::ProcessSpec p;
    p.label = "preflight";
    p.host = host;
    p.argv = {self_exe,
              "--preflight",
              "--preflight-host",
              host,
              "--preflight-reach",
              where.address,
              "--port",
              std::to_string(listener.port()),
              "--transport",
              transport,
              "--server-device",
              a.server_device};
    p.prefix_output = false;  // the table names its host
    launch::JobSpec job;
    job.workers.push_back(std::move(p));
    std::cout.flush();
    if (launch::make_launch_backend("ssh", ssh)->run(job) != 0) failed.push_back(host);
  }
  if (failed.empty()) {
    std::cout << fmt::format("preflight: every host passes ({})\n", hosts.size());
    return 0;
  }
  std::string names;
  for (const auto& h : failed)
    names += (names.empty() ? "" : ", ") + h;
  std::cout << fmt::format("preflight: {} of {} hosts fail: {}\n", failed.size(), hosts.size(),
                           names);
  return 1;
}

}  // namespace psrt::psrun
