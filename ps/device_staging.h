// Path (c) of docs/ARCHITECTURE.md, "The three GPU paths", on the worker: device memory that the
// transport cannot carry goes through pinned host buffers. A push copies each slice device ->
// pinned on a psrt stream and sends it as soon as that slice's copy is done (later slices keep
// copying meanwhile); a pull's reply lands in a pinned buffer and is copied into the caller's
// device memory before the operation completes.
//
//   auto pinned = staging.take(bytes);
//   staging.copy_then(pinned->data(), device_ptr, bytes, [=](const Status& s) { send(pinned); });
//   ...  // once the transport is done with it:
//   staging.give(std::move(pinned));
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "base/work_queue.h"
#include "device/memory.h"
#include "psrt/error.h"

namespace psrt::ps {

class DeviceStaging {
 public:
  // Creates the copy stream on CUDA device `device`; throws psrt::Error(kUnsupported) naming the
  // cause when it is not usable.
  explicit DeviceStaging(int device);
  // Waits for the queued copies and runs their callbacks (bounded by the copies themselves).
  ~DeviceStaging();
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;

  // A pinned buffer of at least `bytes`, from the pool or freshly allocated. Thread-safe.
  std::shared_ptr<device::PinnedMemory> take(std::size_t bytes);
  // Returns a buffer to the pool (kept up to a bound, freed beyond it). Thread-safe.
  void give(std::shared_ptr<device::PinnedMemory> buffer);

  // Queues a copy of `bytes` from `src` to `dst` (either side device or pinned host) on the
  // staging stream, after the work queued so far on the device's legacy default stream (so a
  // gradient LibTorch is still computing there is copied once written, and a pull does not
  // overwrite a parameter that queued work still reads), and runs `then` on the staging thread once
  // it finished, with the copy's status. Copies and callbacks run in the order they were queued.
  // Throws psrt::Error when the copy cannot be queued (then `then` never runs). Thread-safe.
  void copy_then(void* dst, const void* src, std::size_t bytes,
                 std::function<void(const Status&)> then);

 private:
  struct Pending {
    device::Event done;
    std::function<void(const Status&)> then;
  };
  void run(Pending& p);

  device::Stream stream_;
  std::mutex pool_mu_;
  std::multimap<std::size_t, std::shared_ptr<device::PinnedMemory>> pool_;  // by size
  std::size_t pooled_bytes_ = 0;

  // Held while a copy is queued on the stream and its Pending pushed, so that the thread below
  // waits for the copies in stream order.
  std::mutex enqueue_mu_;
  WorkQueue<Pending> thread_{1, [this](Pending& p) { run(p); }};  // last: uses the above
};

}  // namespace psrt::ps
