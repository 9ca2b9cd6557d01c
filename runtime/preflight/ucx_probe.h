// UCX on this host: its version (ucp_get_version_string), the transports it finds usable under
// the job's UCX_TLS (ucp_context_print_info's resources) and whether it can move CUDA memory
// (ucp_context_query's memory types).
#pragma once

#include "runtime/preflight/facts.h"

namespace psrt::preflight {

// Starts and ends one UCP context. Never throws: what failed goes into `error`. In a build
// without UCX, `built` is false and nothing else is set.
UcxFacts probe_ucx();

}  // namespace psrt::preflight
