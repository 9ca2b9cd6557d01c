// psbench transport: bandwidth and latency of one transport between two processes, in the
// manner of ucx_perftest (tag_bw: a window of outstanding sends; tag_lat: half the round trip of
// a ping-pong), so that the two can be compared in one run.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace psrt::bench {

struct TransportBenchConfig {
  std::string transport = "tcp";
  std::string mode = "bw";  // bw | lat
  std::vector<std::size_t> sizes{4 << 20};
  int iters = 1000;
  int warmup = -1;  // -1: iters / 10, at least 10
  int window = 16;
  std::string listen;   // run as the passive side on this address (takes up to max(sizes))
  std::string connect;  // run as the active side against a peer started elsewhere
  bool secure = false;  // the secure mode (both sides; the secret from PSRT_SECRET or fresh)
};

// Prints one JSON object per size on stdout. Returns the process exit code.
int run_transport_bench(const TransportBenchConfig& config);

// The passive side: echoes pings, counts data, acknowledges batches, exits on BYE. Takes
// payloads of up to `max_size` bytes.
int run_transport_peer(const std::string& transport, const std::string& listen_address,
                       std::size_t max_size, bool secure);

}  // namespace psrt::bench
