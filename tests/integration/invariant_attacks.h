#pragma once
#include <string>
namespace psrt::test {
// Runs one protocol-invariant case ("dtype", "init", "rank", "oom") as worker rank 0 of a
// 3-worker tcp job whose ranks 1 and 2 run the honest exact rounds; prints "OK <check>" for each
// check met and exits 1 on the first unmet one.
void run_invariant_attack(const std::string& which);
}  // namespace psrt::test
