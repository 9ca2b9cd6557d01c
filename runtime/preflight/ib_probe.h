// The RDMA devices and ports of this host through libibverbs (ibv_get_device_list,
// ibv_query_port), and the link rate a perf run compares against.
#pragma once

#include <optional>
#include <string_view>

#include "runtime/preflight/facts.h"

namespace psrt::preflight {

// Every port of every RDMA device here; an empty list (with the reason in `error` when listing
// failed) on a host without one. Never throws.
IbFacts probe_ib();

// The rate in Gb/s of the port UCX uses: the first ACTIVE port that `net_devices` (UCX_NET_DEVICES,
// "mlx5_0:1,mlx5_1:1"; "" or "all" = any) names, else the fastest ACTIVE port; nullopt when no
// port qualifies or its rate codes are unknown. Pure.
std::optional<double> link_gbps(const IbFacts& ib, std::string_view net_devices);

// link_gbps(probe_ib(), $UCX_NET_DEVICES): this host's link rate for psbench suite --link-gbps.
std::optional<double> local_link_gbps();

}  // namespace psrt::preflight
