// The state a cuda server (psrun --server-device cuda[:i]) keeps besides its slices: the device,
// a compute stream the fused update runs on, a copy stream that moves staged gradients into
// device receive slots as they arrive, and which path the transport allows.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

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
        ipc(device),
        reply_thread([this] { run_replies(); }) {}
  ~Gpu() {
    {
      std::lock_guard lock(mu);
      stopping = true;
    }
    cv.notify_all();
    reply_thread.join();
  }
  // Runs `job` on the reply thread (in order).
  void post(std::function<void()> job) {
    {
      std::lock_guard lock(mu);
      jobs.push_back(std::move(job));
    }
    cv.notify_one();
  }

  const int index;
  const std::string name;
  device::Stream compute;       // updates, then the weights' copy into the host mirror
  device::Stream copies;        // staged gradients: pinned landing buffer -> device receive slot
  device::Stream replies;       // CUDA IPC pulls: the weights -> the worker's output
  device::IpcImporter ipc;      // workers' buffers shared with CUDA IPC
  bool transport_cuda = false;  // the transport sends from and receives into device memory

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> jobs;
  bool stopping = false;
  std::thread reply_thread;  // last: started once everything above exists

 private:
  void run_replies() {
    // This thread only ever works on this device: set it once, never restored.
    device::DeviceGuard::set_for_thread(index);
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [this] { return stopping || !jobs.empty(); });
        if (jobs.empty()) return;
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      job();
    }
  }
};

}  // namespace psrt::ps
