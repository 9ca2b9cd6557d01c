// The test worker programs' way to fail (ps_worker, elastic_worker, gpu_worker): "FAIL msg" on
// stderr, which the tests look for, and exit 1 at once without unwinding (a worker thread may
// still hold the job's connections).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace psrt::test {

[[noreturn]] inline void fail(const std::string& msg) {
  std::fprintf(stderr, "FAIL %s\n", msg.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace psrt::test
