// The host-level facts of preflight: the locked-memory limit, the CUDA devices and driver
// (through device/), and a bounded TCP connect to the scheduler's port.
#pragma once

#include <chrono>
#include <string>

#include "runtime/preflight/facts.h"

namespace psrt::preflight {

// getrlimit(RLIMIT_MEMLOCK).
MemlockFacts probe_memlock();

// The CUDA devices this process sees (CUDA_VISIBLE_DEVICES applies), the driver's version, and
// why there is no device when there is none.
CudaFacts probe_cuda();

// Connects to host:port over TCP within `timeout`; "" when that worked, else why not
// ("connect 10.0.0.1:7450: Connection refused", "... no answer within 2000 ms").
std::string tcp_reach(const std::string& host, int port, std::chrono::milliseconds timeout);

// A listening TCP socket on address:port (port 0 = any free one), where a job's scheduler would
// listen; closed when destroyed.
class Listener {
 public:
  Listener(const std::string& address, int port);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  int port() const { return port_; }                   // the bound port; 0 when listening failed
  const std::string& error() const { return error_; }  // why listening failed; "" if it works

 private:
  int fd_ = -1;
  int port_ = 0;
  std::string error_;
};

}  // namespace psrt::preflight
