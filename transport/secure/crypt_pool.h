// The threads that seal and open a payload's segments (segments.h) in parallel with the thread
// that asked: the sending thread for a seal, the backend's progress thread for an open. One pool
// per secure transport, of min(cores, kMaxSegments) - 1 threads; the asking thread always takes
// part, so a run finishes even while every pool thread is busy with another connection's.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "base/work_queue.h"

namespace psrt::transport::secure {

class CryptPool {
 public:
  // `threads` < 1: no pool threads; every run is done by the asking thread alone.
  explicit CryptPool(int threads);
  ~CryptPool();
  CryptPool(const CryptPool&) = delete;
  CryptPool& operator=(const CryptPool&) = delete;

  // Runs fn(0) .. fn(n - 1), each once, on this thread and the pool's, and returns when all
  // have returned. If any throws, the first exception is rethrown here after all have run.
  // One index (every message below 256 KiB) runs here directly, with nothing allocated.
  template <class Fn>
  void run(std::size_t n, Fn&& fn) {
    if (n == 1) return fn(std::size_t{0});
    if (n > 1) run_shared(n, std::ref(fn));
  }

  // The pool threads for this machine: min(hardware threads, `most`) - 1.
  static int threads_for(std::size_t most);

 private:
  void run_shared(std::size_t n, const std::function<void(std::size_t)>& fn);
  struct Run;
  int threads_;
  std::unique_ptr<WorkQueue<std::shared_ptr<Run>>> queue_;
};

}  // namespace psrt::transport::secure
