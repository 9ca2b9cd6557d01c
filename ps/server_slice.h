// A slice as a server holds it (the state ps/server.h receives into and replies from, the update
// stage of ps/update_stage.h updates, and the replica link of ps/replica_link.h copies and
// promotes): its weights and optimizer state, a queue of received gradients per live worker,
// the pulls waiting on it, and one update of it on its way through the stage.
//
// Every field says which mutex guards it or which thread owns it (docs/ARCHITECTURE.md,
// "Threads"). The one access without a lock: an update writes a slice's weights (or its spare
// buffer) and momentum without Slice::mu. It may because UpdateStage::next_locked() marks the
// slice busy only when no pull reply reads the buffer it will write (readers == 0 for `weights`,
// spare_readers == 0 for `spare`), and Server::ready_waiters_locked() starts replies only from
// `weights`, and none while an update writes `weights` in place; UpdateStage::run() asserts this
// on entry.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <variant>
#include <vector>

#include "device/memory.h"
#include "ps/session/endpoint.h"
#include "psrt/key_update.h"

namespace psrt::ps::served {

// One gradient, by where its bytes are: each storage mode holds exactly what it needs.
struct HostGrad {  // cpu server: the payload lands here
  std::unique_ptr<std::byte[]> data;
};
struct DeviceGrad {  // cuda server, CUDA-capable transport: lands in the slot the kernel reads
  device::DeviceMemory dev;
};
struct StagedGrad {             // cuda server, host-only transport (path c):
  device::DeviceMemory dev;     // the receive slot the kernel reads,
  device::PinnedMemory pinned;  // where the payload lands first,
  device::Event copied;         // and the copy pinned -> dev, queued once it landed
};
// CUDA IPC: the gradient stays in the worker's GPU memory and is read there, after
// `remote_event`; a PUSH_IPC is acked only once the update has read it.
struct IpcGrad {
  const void* remote = nullptr;
  void* remote_event = nullptr;
  std::shared_ptr<void> hold;      // keeps the IPC mapping open until the update ran
  std::shared_ptr<Peer> ack_peer;  // PUSH_IPC: acked once read; null for PUSH_PULL_IPC
  std::uint64_t ack_request = 0;
};
struct GradBuf {
  // monostate: not placed yet (a free-list miss on a cuda server, before place_on_device).
  std::variant<std::monostate, HostGrad, DeviceGrad, StagedGrad, IpcGrad> where;
  std::size_t size = 0;
  WireType dtype = WireType::kF32;
  float lr = 0.f;           // this round's learning rate from the PUSH; 0 = the configured one
  std::uint64_t round = 0;  // backup workers: the round it was computed for (else unused)
  // Live metrics (ps/metric_hooks.h): when it was placed and when it had arrived; the epoch
  // when metrics are off.
  std::chrono::steady_clock::time_point placed{}, arrived{};
  // Storage the server owns, kept on the slice's free list for the next push (not IPC).
  bool reusable() const {
    return std::holds_alternative<HostGrad>(where) || std::holds_alternative<DeviceGrad>(where) ||
           std::holds_alternative<StagedGrad>(where);
  }
};
struct WorkerState {  // all fields: guarded by the slice's mu
  std::deque<GradBuf> queued;
  std::uint64_t applied = 0;
  std::uint64_t received = 0;
  // Backup workers: the round its next push is for (one after the version it last pulled),
  // and its pushes dropped as late since its last pull reply (sent with that reply).
  std::uint64_t next_round = 1;
  std::uint64_t dropped = 0;
  // Its pushes admitted and placed whose payload is still arriving: counted with `queued`
  // against ServerConfig::max_queued.
  std::uint32_t arriving = 0;
};
struct PullWaiter {
  std::shared_ptr<Peer> peer;
  std::uint64_t request_id;
  std::uint32_t rank;
  std::uint64_t target;  // the worker's `applied` that must be reached
  void* out = nullptr;   // CUDA IPC: the worker's output, written here instead of sent
  void* out_event = nullptr;
  std::shared_ptr<void> out_hold{};
  // Set by ready_waiters_locked() when the reply may start: the weights it is sent from and
  // their version, taken together under the slice's lock (an update may swap the buffers
  // before the reply is sent).
  ConstBuffer source{};
  std::uint64_t version = 0;
  // The reply's Header::set_round_info, set with source (note_reply_locked).
  std::uint32_t round_workers = 0;
  std::uint64_t late_dropped = 0;
};
struct Slice {
  std::mutex mu;
  // Set before the slice is published in the server's slices, constant after.
  std::uint64_t key = 0, offset = 0, count = 0, total = 0;
  std::uint32_t index = 0;
  KeyUpdate update = KeyUpdate::kOptimizer;  // from the INIT that stored the slice
  // cpu server: the slice. cuda server: the slice is d_weights/d_momentum; `weights` and
  // `momentum` are filled for checkpoints only, and `mirror` (pinned) holds the weights staged
  // pulls are sent from, refreshed after every update.
  // Not guarded by mu: written only by the update that holds `busy` (no reader then), read by
  // pull replies counted in `readers` (no update then). See the header comment.
  std::vector<float> weights, momentum;
  device::DeviceMemory d_weights, d_momentum;
  device::PinnedMemory mirror;
  // The rest: guarded by mu.
  std::uint64_t version = 0;
  std::map<std::uint32_t, WorkerState> workers;  // live ranks
  std::vector<GradBuf> free;
  // Pushes admitted and placed whose payload is still arriving, and their dtype: a push of
  // another dtype is refused while any is, as while any gradient is queued.
  std::uint32_t arriving = 0;
  WireType arriving_dtype = WireType::kF32;
  bool busy = false;                // an update of this slice is queued or running
  std::uint32_t round_workers = 0;  // gradients in the update that made `version` (0: none)
  int readers = 0;                  // pull replies sending from the weights
  // cpu server: the second weights buffer (empty until an update first needs it) and the
  // replies still sending from it (they started from `weights` before a swap). The running
  // update writes `spare` instead of `weights` when into_spare is set. `spare`'s elements are
  // not guarded by mu, as `weights`' are not; the vector object and the counts are.
  std::vector<float> spare;
  int spare_readers = 0;
  bool into_spare = false;
  std::vector<PullWaiter> waiters;
};
struct Update {  // owned by the thread holding it (taken under the slice's mu)
  Slice* slice;
  bool into_spare = false;  // writes the new weights into slice->spare (then swaps)
  std::vector<std::uint32_t> ranks;
  std::vector<GradBuf> grads;
  std::uint64_t slowest;  // min clock over live workers before it, for the trace
  std::vector<std::uint64_t> clocks;
};

// A slice's state, for tests: as a server holds it, or as its copy of another server's slice.
struct SliceView {
  std::uint64_t version = 0;
  std::vector<float> weights, momentum;
};

}  // namespace psrt::ps::served
