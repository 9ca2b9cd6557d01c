#include "tools/psrun/bind.h"

#include <fmt/core.h>
#include <unistd.h>

#include <cstdlib>

#include "base/log.h"
#include "psrt/error.h"
#include "runtime/env_contract.h"
#include "runtime/placement/placement.h"
#include "runtime/placement/topology.h"

namespace psrt::psrun {
namespace {

// --bind, else PSRT_BIND, else "" (auto).
std::string bind_text(const Args& a) {
  return a.bind.empty() ? runtime::env_string("PSRT_BIND") : a.bind;
}

std::string host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof(name) - 1) == 0 ? name : "?";
}

}  // namespace

void check_bind(const Args& a) {
  const std::string text = bind_text(a);
  if (!text.empty() && !placement::parse_bind(text))
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("PSRT_BIND={}: use none, numa or core", text));
  if (a.launcher != "local" && !a.bind.empty())
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--bind places the processes of a local job (--launcher local); with "
                            "--launcher {} the engine binds them (mpirun --bind-to, srun "
                            "--cpu-bind), or leave --bind out",
                            a.launcher));
}

void place_local_job(const Args& a, const std::string& transport, runtime::JobSpec& job) {
  if (a.launcher != "local") return;
  const std::string text = bind_text(a);
  placement::Request req;
  req.workers = a.workers;
  req.servers = a.servers;
  req.bind = text.empty() ? placement::Bind::kAuto : *placement::parse_bind(text);
  if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES")) req.cuda_visible_devices = cvd;
  placement::Topology topo;
  try {
    topo = placement::read_topology();
  } catch (const Error& e) {
    PSRT_LOG_WARN("placement: {}; processes run unbound", e.what());
    return;
  }
  const placement::Plan plan = placement::place(topo, req);
  std::string table = placement::format_plan(host_name(), plan);
  table.pop_back();  // the log adds the line end
  PSRT_LOG_INFO("{}", table);
  const bool set_nic = transport == "ucx" && !std::getenv("UCX_NET_DEVICES");
  for (const auto& p : plan.places) {
    const bool server = p.role == "server";
    auto& specs = server ? job.services : job.workers;
    if (static_cast<std::size_t>(p.rank) >= specs.size()) continue;
    runtime::ProcessSpec& spec = specs[static_cast<std::size_t>(p.rank)];
    spec.cpus = p.cpus;
    if (p.gpu) spec.env.emplace_back("PSRT_GPU", std::to_string(*p.gpu));
    if (set_nic && !p.nic.empty()) spec.env.emplace_back("UCX_NET_DEVICES", p.nic + ":1");
  }
}

}  // namespace psrt::psrun
