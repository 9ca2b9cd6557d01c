// Preflight's judgement: from one host's facts and what the job asks, a line per check that
// passes, warns or fails, naming what would fail and what to do. Pure functions.
#pragma once

#include <string>
#include <vector>

#include "runtime/preflight/facts.h"

namespace psrt::preflight {

enum class Level { kPass, kWarn, kFail };

struct Check {
  Level level = Level::kPass;
  std::string what;  // "UCX_TLS=rc needs an RDMA device ... and this host has none"
  std::string fix;   // "run on a host with an InfiniBand or RoCE NIC, or ..."; "" for a pass
};

// The transports UCX_TLS names that need an RDMA device (rc, rc_x, dc, ud, ib, ...) or a GPU
// (cuda_copy, cuda_ipc, gdr_copy). An exclusion list ("^ud") or an unset UCX_TLS names none.
bool tls_needs_rdma(const std::string& ucx_tls);
bool tls_needs_cuda(const std::string& ucx_tls);

std::vector<Check> judge(const HostFacts& facts, const Requirements& job);

// No check fails (warnings pass).
bool passes(const std::vector<Check>& checks);

}  // namespace psrt::preflight
