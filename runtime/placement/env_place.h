// Placement of a process psrun starts on another host (--launcher ssh): psrun passes each one
// PSRT_PLACE=ROLE,LOCAL,WORKERS,SERVERS (its role, its index among the job's processes of that
// role on that host, and how many workers and servers the job runs there); the remote side
// (runtime/launch/remote_side.h) plans with that host's own topology and binds the process.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace psrt::placement {

// "worker,1,4,1".
std::string place_spec(const std::string& role, int local, int workers, int servers);

struct EnvPlace {
  std::vector<int> cpus;         // to bind to; empty = unbound
  std::vector<std::string> env;  // "NAME=VALUE" to add (PSRT_GPU, UCX_NET_DEVICES)
  std::string row;               // "worker 1 here: cores 4-7, NUMA 0, GPU cuda:1=cuda1, NIC mlx5_0"
};

// From a process's environment ("NAME=VALUE" strings, falling back to this process's own for
// PSRT_BIND, CUDA_VISIBLE_DEVICES, UCX_TLS, UCX_NET_DEVICES): its place on this host; nullopt
// without PSRT_PLACE. Throws psrt::Error naming the cause for a malformed PSRT_PLACE or
// PSRT_BIND, or when hwloc fails.
std::optional<EnvPlace> place_from_env(const std::vector<std::string>& env);

}  // namespace psrt::placement
