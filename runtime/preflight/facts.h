// What preflight learns about one host (psrun --preflight): the RDMA ports, UCX, CUDA, the
// locked-memory limit and whether the scheduler's port is reachable. Plain data, filled by the
// probes (ib_probe.h, ucx_probe.h, host_probe.h) and judged by verdict.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace psrt::preflight {

// One port of an RDMA device, as ibv_query_port reports it.
struct IbPort {
  std::string device;      // "mlx5_0"
  int port = 1;            // 1-based
  std::string state;       // "ACTIVE", "DOWN", ... (ibv_port_state_str)
  std::string link_layer;  // "InfiniBand" | "Ethernet" (RoCE) | "unknown"
  int width_code = 0;      // ibv_port_attr::active_width
  int speed_code = 0;      // ibv_port_attr::active_speed
  bool active() const { return state == "ACTIVE"; }
};

struct IbFacts {
  std::vector<IbPort> ports;
  int devices = 0;    // RDMA devices ibv_get_device_list listed
  std::string error;  // why listing or querying failed; empty when it worked
};

struct UcxFacts {
  bool built = false;                   // this psrt was built with UCX
  std::string version;                  // "1.13.1"
  std::string tls;                      // UCX_TLS as set, "" = unset (UCX's default: all)
  std::vector<std::string> transports;  // transports UCX found usable here ("tcp", "rc_verbs")
  bool cuda_memory = false;             // UCX can move CUDA memory (its memory types include cuda)
  std::string error;                    // why UCX could not start; empty when it did
};

struct CudaFacts {
  std::vector<std::string> devices;  // names, by index (CUDA_VISIBLE_DEVICES numbering)
  int driver_version = 0;            // cudaDriverGetVersion: 12040 = 12.4; 0 = none
  std::string why;                   // why there is no device, when there is none
};

struct MemlockFacts {
  std::optional<std::uint64_t> soft;  // bytes; nullopt = unlimited
  std::optional<std::uint64_t> hard;
};

struct ReachFacts {
  bool checked = false;
  std::string address;  // host:port of the scheduler
  std::string error;    // empty = reachable
};

struct HostFacts {
  std::string host;
  IbFacts ib;
  UcxFacts ucx;
  CudaFacts cuda;
  MemlockFacts memlock;
  ReachFacts scheduler;
  std::vector<std::string> affinity;  // "GPU 0 -> mlx5_0 (NUMA 0)" lines, from hwloc
};

// What the job asks of a host.
struct Requirements {
  std::string transport;           // "tcp" | "ucx"
  std::string ucx_tls;             // UCX_TLS of the job, "" = unset
  std::optional<int> cuda_device;  // a CUDA device the job computes on (--server-device cuda:N)
  std::string ucx_net_devices;     // UCX_NET_DEVICES of the job, "" = unset
};

}  // namespace psrt::preflight
