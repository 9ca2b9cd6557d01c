#pragma once
namespace psrt::test {
// Runs every bad-input case as worker rank 0 of the job; exits 1 on the first unmet check.
void run_attacks();
}  // namespace psrt::test
