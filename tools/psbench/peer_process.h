// A child process psbench starts on this host as the other end of a measurement: it runs
// /proc/self/exe with the given arguments, and the child announces the address it listens on
// as its first line on stdout ("LISTENING host:port").
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace psrt::bench {

class PeerProcess {
 public:
  // Starts the child and waits (up to `timeout`) for its LISTENING line. Throws psrt::Error.
  PeerProcess(const std::vector<std::string>& args, std::chrono::milliseconds timeout);
  ~PeerProcess();  // waits briefly for the child to exit, then kills it
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  // Waits up to `timeout` for the child to exit; returns true if it did.
  bool wait_exit(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string address_;
};

// What the child prints once it listens.
void announce_listening(const std::string& address);

}  // namespace psrt::bench
