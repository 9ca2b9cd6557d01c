// Preflight's table for one host: the facts, then one line per check, then the verdict.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/preflight/facts.h"
#include "runtime/preflight/verdict.h"

namespace psrt::preflight {

// "8 MiB", "1.5 GiB", "512 B".
std::string format_bytes(std::uint64_t bytes);

// The table psrun --preflight prints for a host.
std::string format_report(const HostFacts& facts, const std::vector<Check>& checks);

}  // namespace psrt::preflight
