#include "runtime/placement/env_place.h"

#include <fmt/core.h>

#include <cstdlib>
#include <sstream>

#include "psrt/error.h"
#include "runtime/placement/placement.h"
#include "runtime/placement/topology.h"

namespace psrt::placement {
namespace {

std::optional<std::string> lookup(const std::vector<std::string>& env, const std::string& name) {
  for (std::size_t i = env.size(); i-- > 0;) {  // the last one set wins
    const std::string& kv = env[i];
    if (kv.size() > name.size() && kv.compare(0, name.size(), name) == 0 && kv[name.size()] == '=')
      return kv.substr(name.size() + 1);
  }
  if (const char* v = std::getenv(name.c_str())) return std::string(v);
  return std::nullopt;
}

}  // namespace

std::string place_spec(const std::string& role, int local, int workers, int servers) {
  return fmt::format("{},{},{},{}", role, local, workers, servers);
}

std::optional<EnvPlace> place_from_env(const std::vector<std::string>& env) {
  const auto spec = lookup(env, "PSRT_PLACE");
  if (!spec || spec->empty()) return std::nullopt;
  std::istringstream in(*spec);
  std::string role;
  int local = -1, workers = -1, servers = -1;
  char c1 = 0, c2 = 0;
  std::getline(in, role, ',');
  if (!(in >> local >> c1 >> workers >> c2 >> servers) || c1 != ',' || c2 != ',' ||
      (role != "worker" && role != "server") || local < 0 || workers < 0 || servers < 0 ||
      local >= (role == "worker" ? workers : servers))
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("PSRT_PLACE={}: expected ROLE,LOCAL,WORKERS,SERVERS (psrun sets it)", *spec));
  Request req;
  req.workers = workers;
  req.servers = servers;
  if (const auto bind = lookup(env, "PSRT_BIND"); bind && !bind->empty()) {
    const auto b = parse_bind(*bind);
    if (!b)
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("PSRT_BIND={}: use none, numa or core", *bind));
    req.bind = *b;
  }
  req.cuda_visible_devices = lookup(env, "CUDA_VISIBLE_DEVICES");
  const Plan plan = place(read_topology(), req);
  EnvPlace out;
  for (const auto& p : plan.places) {
    if (p.role != role || p.rank != local) continue;
    out.cpus = p.cpus;
    for (auto& [k, v] :
         process_env(p, lookup(env, "PSRT_TRANSPORT").value_or(""), lookup(env, "UCX_TLS"),
                     lookup(env, "UCX_NET_DEVICES").has_value()))
      out.env.push_back(k.append("=").append(v));
    out.row = fmt::format(
        "{} {} here (bind {}): cores {}, NUMA {}, GPU {}, NIC {}", role, local,
        to_string(plan.bind), p.cpus.empty() ? "-" : cpu_list(p.cpus),
        p.numa < 0 ? "-" : std::to_string(p.numa),
        p.gpu ? fmt::format("cuda:{}", *p.gpu) + (p.gpu_name.empty() ? "" : "=" + p.gpu_name) : "-",
        p.nic.empty() ? "-" : p.nic);
  }
  return out;
}

}  // namespace psrt::placement
