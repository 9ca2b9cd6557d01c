// The state a cuda server (psrun --server-device cuda[:i]) keeps besides its slices: the device,
// a compute stream the fused update runs on, a copy stream that moves staged gradients into
// device receive slots as they arrive, and which path the transport allows.
#pragma once

#include <string>

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

  const int index;
  const std::string name;
  device::Stream compute;  // updates, then the weights' copy into the host mirror
  device::Stream copies;   // staged gradients: pinned landing buffer -> device receive slot
  device::Stream replies;  // CUDA IPC pulls: the weights -> the worker's output
  device::IpcImporter ipc;  // workers' buffers shared with CUDA IPC
  bool transport_cuda = false;  // the transport sends from and receives into device memory
};

}  // namespace psrt::ps
