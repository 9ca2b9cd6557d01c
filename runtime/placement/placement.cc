#include "runtime/placement/placement.h"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <sstream>

#include "runtime/preflight/verdict.h"

namespace psrt::placement {
namespace {

// The physical GPU (index into topo.gpus) a worker's numbering index `visible` maps to, under
// CUDA_VISIBLE_DEVICES; nullopt when it is not a plain index of a GPU hwloc sees (a UUID).
struct VisibleGpus {
  int count = 0;                         // GPUs the process sees
  std::vector<std::optional<int>> phys;  // per visible index: the topology's GPU
};

VisibleGpus visible_gpus(const Topology& topo, const std::optional<std::string>& cvd) {
  VisibleGpus v;
  const int g = static_cast<int>(topo.gpus.size());
  if (!cvd) {
    v.count = g;
    for (int i = 0; i < g; ++i)
      v.phys.emplace_back(i);
    return v;
  }
  std::stringstream in(*cvd);
  for (std::string item; std::getline(in, item, ',');) {
    item.erase(0, item.find_first_not_of(' '));
    if (item.empty()) continue;
    int idx = -1;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), idx);
    if (ec == std::errc() && end == item.data() + item.size() && idx < 0) break;  // CUDA stops
    if (ec == std::errc() && end == item.data() + item.size() && idx < g)
      v.phys.emplace_back(idx);
    else
      v.phys.emplace_back(std::nullopt);
  }
  v.count = static_cast<int>(v.phys.size());
  return v;
}

std::vector<int> threads_of(const NumaNode& node, std::size_t first, std::size_t n) {
  std::vector<int> out;
  for (std::size_t c = first; c < first + n && c < node.cores.size(); ++c)
    out.insert(out.end(), node.cores[c].begin(), node.cores[c].end());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int> all_threads(const NumaNode& node) {
  return threads_of(node, 0, node.cores.size());
}

// The NIC nearest `gpu`; ties go to the NIC fewer processes use so far, then to the first name.
std::string nic_near_gpu(const Topology& topo, const PciDevice& gpu, std::vector<int>& load) {
  int best = -1;
  for (std::size_t i = 0; i < topo.nics.size(); ++i) {
    if (best < 0) {
      best = static_cast<int>(i);
      continue;
    }
    const auto& b = topo.nics[static_cast<std::size_t>(best)];
    const int ni = nearness(gpu, topo.nics[i]), nb = nearness(gpu, b);
    if (ni > nb || (ni == nb && load[i] < load[static_cast<std::size_t>(best)]))
      best = static_cast<int>(i);
  }
  if (best < 0) return "";
  ++load[static_cast<std::size_t>(best)];
  return topo.nics[static_cast<std::size_t>(best)].name;
}

std::string nic_on_numa(const Topology& topo, int numa, std::vector<int>& load) {
  int best = -1;
  for (std::size_t i = 0; i < topo.nics.size(); ++i) {
    if (topo.nics[i].numa != numa) continue;
    if (best < 0 || load[i] < load[static_cast<std::size_t>(best)]) best = static_cast<int>(i);
  }
  if (best < 0) return "";
  ++load[static_cast<std::size_t>(best)];
  return topo.nics[static_cast<std::size_t>(best)].name;
}

// A process while it is being placed: its place so far, its NUMA node (index into topo.numa)
// and its GPU (index into topo.gpus) when known.
struct Draft {
  Place place;
  std::size_t node = 0;
  std::optional<int> phys;
};

// Workers in rank order: GPU by rank among the visible ones, NUMA node that GPU's (without a
// GPU: round-robin).
std::vector<Draft> workers_near_gpus(const Topology& topo, const Request& req) {
  const VisibleGpus vis = visible_gpus(topo, req.cuda_visible_devices);
  const std::size_t nodes = topo.numa.size();
  std::vector<Draft> out(static_cast<std::size_t>(req.workers));
  for (std::size_t r = 0; r < out.size(); ++r) {
    Draft& d = out[r];
    d.place.role = "worker";
    d.place.rank = static_cast<int>(r);
    if (vis.count > 0) {
      d.place.gpu = static_cast<int>(r) % vis.count;
      d.phys = vis.phys[static_cast<std::size_t>(*d.place.gpu)];
      if (d.phys) d.place.gpu_name = topo.gpus[static_cast<std::size_t>(*d.phys)].name;
    }
    d.node = nodes ? r % nodes : 0;
    if (d.phys) {
      const int numa = topo.gpus[static_cast<std::size_t>(*d.phys)].numa;
      for (std::size_t k = 0; k < nodes; ++k)
        if (topo.numa[k].os_index == numa) d.node = k;
    }
  }
  return out;
}

// Servers, each on the node with the fewest processes so far (the first such).
void add_servers(const Topology& topo, int servers, std::vector<Draft>& drafts) {
  std::vector<int> on(topo.numa.size(), 0);
  for (const auto& d : drafts)
    if (!on.empty()) ++on[d.node];
  for (int s = 0; s < servers; ++s) {
    Draft d;
    d.place.role = "server";
    d.place.rank = s;
    for (std::size_t k = 1; k < on.size(); ++k)
      if (on[k] < on[d.node]) d.node = k;
    if (!on.empty()) ++on[d.node];
    drafts.push_back(std::move(d));
  }
}

// The cores of node `k` for its processes: workers take blocks from the first core up and
// servers from the last down; with kNuma, or fewer cores than processes, each gets them all.
void bind_node(const NumaNode& node, std::size_t k, Bind bind, std::vector<Draft>& drafts) {
  std::size_t procs = 0;
  for (const auto& d : drafts)
    procs += d.node == k;
  const bool own_cores = bind == Bind::kCore && procs > 0 && node.cores.size() >= procs;
  const std::size_t per = own_cores ? node.cores.size() / procs : 0;
  std::size_t extra = own_cores ? node.cores.size() % procs : 0;
  std::size_t first = 0, end = node.cores.size();
  for (auto& d : drafts) {
    if (d.node != k) continue;
    d.place.numa = node.os_index;
    if (!own_cores) {
      d.place.cpus = all_threads(node);
    } else if (d.place.role == "worker") {
      const std::size_t n = per + (extra > 0 ? 1 : 0);
      if (extra > 0) --extra;
      d.place.cpus = threads_of(node, first, n);
      first += n;
    } else {
      end -= per;
      d.place.cpus = threads_of(node, end, per);
    }
  }
}

// A worker's NIC is the one nearest its GPU, else one on its node; a server's one on its node.
void choose_nics(const Topology& topo, std::vector<Draft>& drafts) {
  std::vector<int> load(topo.nics.size(), 0);
  for (auto& d : drafts) {
    if (d.phys)
      d.place.nic = nic_near_gpu(topo, topo.gpus[static_cast<std::size_t>(*d.phys)], load);
    else if (!topo.numa.empty())
      d.place.nic = nic_on_numa(topo, topo.numa[d.node].os_index, load);
  }
}

}  // namespace

std::optional<Bind> parse_bind(std::string_view text) {
  if (text == "auto") return Bind::kAuto;
  if (text == "none") return Bind::kNone;
  if (text == "numa") return Bind::kNuma;
  if (text == "core") return Bind::kCore;
  return std::nullopt;
}

std::string to_string(Bind b) {
  switch (b) {
    case Bind::kAuto:
      return "auto";
    case Bind::kNone:
      return "none";
    case Bind::kNuma:
      return "numa";
    default:
      return "core";
  }
}

Plan place(const Topology& topo, const Request& req) {
  Plan plan;
  plan.bind = req.bind;
  if (plan.bind == Bind::kAuto)
    plan.bind = topo.cores() >= req.workers + req.servers ? Bind::kCore : Bind::kNuma;
  if (topo.numa.empty()) plan.bind = Bind::kNone;
  std::vector<Draft> drafts = workers_near_gpus(topo, req);
  add_servers(topo, req.servers, drafts);
  if (plan.bind != Bind::kNone)
    for (std::size_t k = 0; k < topo.numa.size(); ++k)
      bind_node(topo.numa[k], k, plan.bind, drafts);
  choose_nics(topo, drafts);
  // Servers first, then workers, each in rank order.
  std::stable_partition(drafts.begin(), drafts.end(),
                        [](const Draft& d) { return d.place.role == "server"; });
  for (auto& d : drafts)
    plan.places.push_back(std::move(d.place));
  return plan;
}

std::vector<std::pair<std::string, std::string>> process_env(
    const Place& place, std::string_view transport, const std::optional<std::string>& ucx_tls,
    bool user_net_devices) {
  std::vector<std::pair<std::string, std::string>> env;
  if (place.gpu) env.emplace_back("PSRT_GPU", std::to_string(*place.gpu));
  const bool rdma_tls = !ucx_tls || ucx_tls->empty() || ucx_tls->front() == '^' ||
                        preflight::tls_needs_rdma(*ucx_tls);
  if (transport == "ucx" && !user_net_devices && rdma_tls && !place.nic.empty())
    env.emplace_back("UCX_NET_DEVICES", place.nic + ":1");
  return env;
}

std::string cpu_list(const std::vector<int>& cpus) {
  std::vector<int> c = cpus;
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  std::string out;
  for (std::size_t i = 0; i < c.size();) {
    std::size_t j = i;
    while (j + 1 < c.size() && c[j + 1] == c[j] + 1)
      ++j;
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", c[i]) : fmt::format("{}-{}", c[i], c[j]);
    i = j + 1;
  }
  return out;
}

std::string format_plan(const std::string& host, const Plan& plan) {
  std::string out = fmt::format("placement (bind {}):\n", to_string(plan.bind));
  out += fmt::format("  {:<12} {:<7} {:>4}  {:<16} {:<5} {:<12} {}\n", "host", "role", "rank",
                     "cores", "NUMA", "GPU", "NIC");
  for (const auto& p : plan.places) {
    const std::string gpu =
        p.gpu ? fmt::format("cuda:{}", *p.gpu) + (p.gpu_name.empty() ? "" : "=" + p.gpu_name) : "-";
    out += fmt::format("  {:<12} {:<7} {:>4}  {:<16} {:<5} {:<12} {}\n", host, p.role, p.rank,
                       p.cpus.empty() ? "-" : cpu_list(p.cpus),
                       p.numa < 0 ? "-" : std::to_string(p.numa), gpu, p.nic.empty() ? "-" : p.nic);
  }
  return out;
}

std::vector<std::string> gpu_nic_affinity(const Topology& topo) {
  std::vector<std::string> out;
  for (const auto& g : topo.gpus) {
    std::vector<int> load(topo.nics.size(), 0);
    const std::string nic = nic_near_gpu(topo, g, load);
    if (nic.empty()) {
      out.push_back(fmt::format("{} (NUMA {}): no RDMA NIC", g.name, g.numa));
      continue;
    }
    const auto& n = *std::find_if(topo.nics.begin(), topo.nics.end(),
                                  [&](const PciDevice& d) { return d.name == nic; });
    out.push_back(fmt::format("{} (NUMA {}) nearest {} (NUMA {}){}", g.name, g.numa, nic, n.numa,
                              g.numa == n.numa ? "" : ": across NUMA nodes"));
  }
  return out;
}

}  // namespace psrt::placement
