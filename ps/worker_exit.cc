#include "ps/worker_exit.h"

#include <cstdlib>
#include <mutex>
#include <set>

#include "base/log.h"
#include "ps/worker_impl.h"

namespace psrt::ps {
namespace {

struct Live {
  std::mutex mu;
  std::set<Worker::Impl*> workers;
  bool handler = false;
};

// Never destroyed: the exit handler may run after other static objects are gone.
Live& live() {
  static auto* l = new Live;
  return *l;
}

void leave_all() {
  std::set<Worker::Impl*> left;
  {
    std::lock_guard lock(live().mu);
    left.swap(live().workers);
  }
  for (Worker::Impl* w : left) {
    try {
      w->shutdown();
    } catch (const std::exception& e) {
      PSRT_LOG_WARN("leaving the job at exit: {}", e.what());
    }
  }
}

}  // namespace

void leave_at_exit(Worker::Impl* w) {
  std::lock_guard lock(live().mu);
  live().workers.insert(w);
  if (!live().handler) live().handler = std::atexit(leave_all) == 0;
}

void forget_at_exit(Worker::Impl* w) {
  std::lock_guard lock(live().mu);
  live().workers.erase(w);
}

}  // namespace psrt::ps
