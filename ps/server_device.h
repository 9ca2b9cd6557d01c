// The state a cuda server (psrun --server-device cuda[:i]) keeps besides its slices: the device,
// a compute stream the fused update runs on, a copy stream that moves staged gradients into
// device receive slots as they arrive, and which path the transport allows.
#pragma once

#include <functional>
#include <string>

#include "base/work_queue.h"
#include "device/cuda_device.h"
#include "device/ipc.h"
#include "device/memory.h"
#include "ps/server.h"

namespace psrt::ps {

struct Server::Gpu {
  explicit Gpu(int device)
      : index(device),
        name(device::cuda_device_name(device)),
        compute(device),
        copies(device),
        replies(device),
        ipc(device) {}
  ~Gpu() { reply_thread.stop(); }
  // Runs `job` on the reply thread (in order).
  void post(std::function<void()> job) { reply_thread.push(std::move(job)); }

  // Threads: the streams are CUDA's (enqueueing is thread-safe); which thread uses each is noted.
  const int index;
  const std::string name;
  device::Stream compute;   // pool threads: updates, then the weights' copy into the host mirror
  device::Stream copies;    // progress thread: staged gradients (pinned landing buffer -> device
                            // receive slot) and INIT's upload
  device::Stream replies;   // reply thread: CUDA IPC pulls (the weights -> the worker's output)
  device::IpcImporter ipc;  // thread-safe; progress thread: workers' buffers shared via CUDA IPC
  // The transport sends from and receives into device memory. Written by set_transport() before
  // the transport delivers anything, constant after.
  bool transport_cuda = false;

  // Runs the jobs of post(), in order; this thread only ever works on this device (set once,
  // never restored). Last: started once everything above exists.
  WorkQueue<std::function<void()>> reply_thread{
      1, [](std::function<void()>& job) { job(); },
      [device = index] { device::DeviceGuard::set_for_thread(device); }};
};

}  // namespace psrt::ps
