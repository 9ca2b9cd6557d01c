// What a UCX listener admits before anything is authenticated (hello.h): bootstrap sockets
// waiting for their HELLO are capped per remote host and in total, and without a job secret
// (where a HELLO cannot be checked) the endpoints created from HELLOs are rate-limited per remote
// host. The counters say what happened, for the logs and the tests.
//
// Loop thread only, except the process-wide counters (hello_stats()), which any thread may read.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace psrt::transport::ucx {

class HelloAdmission {
 public:
  using Clock = std::chrono::steady_clock;

  // Sockets accepted whose HELLO has not been taken yet.
  static constexpr std::size_t kMaxPendingPerHost = 128;
  static constexpr std::size_t kMaxPending = 512;
  // Without a secret: endpoints created from HELLOs of one remote host, as a token bucket
  // (a burst of kEndpointBurst, then kEndpointsPerSecond).
  static constexpr double kEndpointBurst = 128;
  static constexpr double kEndpointsPerSecond = 64;

  // Why a socket from `peer` ("host:port") may not wait for its HELLO now; "" when it may, and
  // then it counts as pending until release().
  std::string admit(const std::string& peer);
  void release(const std::string& peer);
  // Without a secret: why no endpoint may be created from one more HELLO of `peer` now; "" when
  // one may (it is counted).
  std::string admit_endpoint(const std::string& peer, Clock::time_point now = Clock::now());

  std::size_t pending() const { return pending_; }

 private:
  struct Bucket {
    double tokens = kEndpointBurst;
    Clock::time_point at{};
  };
  std::unordered_map<std::string, std::size_t> pending_by_host_;
  std::size_t pending_ = 0;
  std::unordered_map<std::string, Bucket> buckets_;
};

// Process-wide counts of the UCX bootstrap: endpoints created (either end) and bootstrap
// sockets refused (over a cap, a bad or unproven HELLO, too slow). For tests and diagnostics.
struct HelloStats {
  std::uint64_t endpoints_created = 0;
  std::uint64_t hellos_refused = 0;
};
HelloStats hello_stats() noexcept;
void count_endpoint_created() noexcept;
void count_hello_refused() noexcept;

}  // namespace psrt::transport::ucx
