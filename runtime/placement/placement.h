// Where each process of a job on one host runs: its cores (on one NUMA node), its GPU and the NIC
// UCX should use. A pure function of the topology (topology.h) and the job.
//
//   workers near their GPU (the GPU by local rank, CUDA_VISIBLE_DEVICES respected); servers on
//   the NUMA nodes with the fewest workers, on the cores at the far end of a node from the
//   workers'; each process's NIC the one nearest its GPU (else one on its NUMA node).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/placement/topology.h"

namespace psrt::placement {

// psrun --bind / PSRT_BIND: none = no binding; numa = every core of the process's NUMA node;
// core = cores of its own on that node. The default (auto) is core when the host has a core for
// every process, else numa.
enum class Bind { kAuto, kNone, kNuma, kCore };

// "none" | "numa" | "core" | "auto"; nullopt for anything else.
std::optional<Bind> parse_bind(std::string_view text);
std::string to_string(Bind b);

struct Request {
  int workers = 1;  // local ranks 0..workers-1
  int servers = 1;
  Bind bind = Bind::kAuto;
  // CUDA_VISIBLE_DEVICES as the job's processes see it; nullopt = unset (every GPU).
  std::optional<std::string> cuda_visible_devices;
};

struct Place {
  std::string role;  // "server" | "worker"
  int rank = 0;
  std::vector<int> cpus;   // the hardware threads it is bound to; empty = not bound
  int numa = -1;           // OS index of its NUMA node; -1 = none (not bound)
  std::optional<int> gpu;  // its CUDA device in its own numbering (cuda:N), workers only
  std::string gpu_name;    // hwloc's name of that GPU ("cuda3"), "" when unknown
  std::string nic;         // the RDMA NIC nearest it ("mlx5_1"), "" = none
};

struct Plan {
  Bind bind = Bind::kNone;    // what kAuto became
  std::vector<Place> places;  // servers 0..S-1, then workers 0..N-1
};

Plan place(const Topology& topo, const Request& request);

// The variables psrun sets for a placed process: PSRT_GPU for a worker with a GPU, and for an ucx
// job UCX_NET_DEVICES=<its NIC>:1 unless the user set UCX_NET_DEVICES (`user_net_devices`) or
// UCX_TLS names only transports that do not use an RDMA NIC (tcp, sm, ...: a NIC there would
// leave them no device).
std::vector<std::pair<std::string, std::string>> process_env(
    const Place& place, std::string_view transport, const std::optional<std::string>& ucx_tls,
    bool user_net_devices);

// "0-3,16-19".
std::string cpu_list(const std::vector<int>& cpus);

// The placement table psrun prints at start: host, role, rank, cores, NUMA node, GPU, NIC.
std::string format_plan(const std::string& host, const Plan& plan);

// "cuda0 (NUMA 0) - mlx5_1 (NUMA 0), same PCIe switch" lines for psrun --preflight.
std::vector<std::string> gpu_nic_affinity(const Topology& topo);

}  // namespace psrt::placement
