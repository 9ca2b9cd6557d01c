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

  const int index;
  const std::string name;
  device::Stream compute;       // updates, then the weights' copy into the host mirror
  device::Stream copies;        // staged gradients: pinned landing buffer -> device receive slot
  device::Stream replies;       // CUDA IPC pulls: the weights -> the worker's output
  device::IpcImporter ipc;      // workers' buffers shared with CUDA IPC
  bool transport_cuda = false;  // the transport sends from and receives into device memory

  // Runs the jobs of post(), in order; this thread only ever works on this device (set once,
  // never restored). Last: started once everything above exists.
  WorkQueue<std::function<void()>> reply_thread{
      1, [](std::function<void()>& job) { job(); },
      [device = index] { device::DeviceGuard::set_for_thread(device); }};
};

}  // namespace psrt::ps
