// A worker's send window to one server (PSRT_SEND_WINDOW): at most `limit` gradient bytes
// outstanding (sent, and not yet acknowledged as received by the server); further sends wait and
// leave in priority order, lowest first (the worker's: the key it used first, then the slice),
// so that the first layers' weights come back first when the links are the bottleneck. N
// workers pushing to one server then put at most N * limit bytes on its link at once instead of
// everything they have, which a shaped link's queue drops (incast: docs/performance.md).
//
// Exact: outstanding() never exceeds the limit, except a single send larger than the limit,
// which leaves alone once nothing else is outstanding; every submitted send starts once the
// sends before it are released; a queued send never passes one of lower priority value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string_view>
#include <utility>

namespace psrt::ps {

// PSRT_SEND_WINDOW's default over tcp: one 256 KiB slice of the balanced cut per server.
inline constexpr std::size_t kTcpSendWindow = std::size_t{256} << 10;
// The window of a worker: `configured` bytes (0 = none), or by transport when negative:
// kTcpSendWindow where messages travel as TCP byte streams (`byte_streams`, from
// transport/byte_streams.h: tcp, or ucx with UCX_TLS=tcp), none over UCX's RDMA and shared
// memory, whose slices stay large: a window there only serialises them.
std::size_t send_window_for(std::int64_t configured, bool byte_streams);

class SendWindow {
 public:
  // Starts one send. Runs on the thread that submitted or released, outside the window's lock,
  // one at a time and in the window's order; it may call release() (a send that fails at once).
  // Must not throw: a send that cannot start releases its bytes itself.
  using Start = std::function<void()>;

  explicit SendWindow(std::size_t limit) : limit_(limit) {}
  SendWindow(const SendWindow&) = delete;
  SendWindow& operator=(const SendWindow&) = delete;

  // Queues a send of `bytes` (lower `priority` leaves first; equal ones in submission order),
  // then starts every queued send that fits.
  void submit(std::uint64_t priority, std::size_t bytes, Start start);
  // A started send of `bytes` was received (or failed): starts what fits now.
  void release(std::size_t bytes);

  std::size_t limit() const { return limit_; }
  std::size_t outstanding() const;
  std::size_t queued() const;

 private:
  struct Item {
    std::size_t bytes;
    Start start;
  };
  // Starts queued sends while the first fits. One thread drains at a time (draining_), so the
  // starts keep the queue's order; the others only queue or release and leave.
  void drain(std::unique_lock<std::mutex>& lock);

  const std::size_t limit_;
  mutable std::mutex mu_;
  std::map<std::pair<std::uint64_t, std::uint64_t>, Item> queue_;  // by (priority, sequence)
  std::uint64_t sequence_ = 0;
  std::size_t outstanding_ = 0;
  bool draining_ = false;
};

}  // namespace psrt::ps
