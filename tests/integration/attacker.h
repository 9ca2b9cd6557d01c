#pragma once

#include <string>

namespace psrt::test {
// Runs every bad-input case as worker rank 0 of the job; exits 1 on the first unmet check.
void run_attacks();
// Rank 0 of `ps_worker stale` (async, 2 workers, key 0 of 4 zeros that rank 1 initialises and
// announces with `<sync>.inited`): registers by hand, keeps a connection to the server as rank 0,
// unregisters, rejoins as rank 0 through the public API (a new registration), then pushes through
// the old connection, which must be refused, and checks the weights are still zero. Creates
// `<sync>` (rank 1's stop signal) at the end.
void run_stale_rank(const std::string& sync);
}  // namespace psrt::test
