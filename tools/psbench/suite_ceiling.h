// The ceiling column of psbench suite: ucx_perftest tag_bw per size between two processes of
// this host (a local job), or between a server host and a worker host of an ssh job, reached
// with the job's own --ssh-args (the remote ends run under `timeout`, so none outlives a failed
// measurement by more than a minute).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace psrt::bench {

struct CeilingPlan {
  bool local = true;
  std::string server_host;  // ssh: where `ucx_perftest -p PORT` listens
  std::string client_host;  // ssh: where the client measures against server_host
  std::vector<std::string> ssh_args;
};

// The plan for psrun's arguments (after the suite's `--`): local for the local launcher; for
// --launcher ssh with -H/--hosts, the first --server-hosts entry (else the first host) and the
// first other host of -H. nullopt, with the reason in `why_not`, when there is no such pair, the
// launcher is mpi/slurm, or ucx_perftest is not on this host's PATH (local).
std::optional<CeilingPlan> plan_ceiling(const std::vector<std::string>& psrun_args,
                                        std::string& why_not);

// ucx_perftest tag_bw at `size`, GB/s; nullopt when it gives no result (the reason on stderr).
// tcp is measured with UCX_TLS=tcp, ucx with this process's UCX_TLS and UCX_NET_DEVICES.
std::optional<double> perftest_gbps(const CeilingPlan& plan, const std::string& transport,
                                    std::size_t size);

}  // namespace psrt::bench
