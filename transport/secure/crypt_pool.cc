#include "transport/secure/crypt_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

namespace psrt::transport::secure {

// One run(): its indices are taken one at a time by whichever thread comes first. A pool thread
// that starts after every index was taken returns without touching `fn`, which may be gone.
struct CryptPool::Run {
  Run(std::size_t count, const std::function<void(std::size_t)>& f) : n(count), fn(&f) {}

  void work() {
    for (std::size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      try {
        (*fn)(i);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!failure) failure = std::current_exception();
      }
      std::lock_guard lock(mu);
      if (++done == n) cv.notify_all();
    }
  }

  void wait() {
    std::unique_lock lock(mu);
    cv.wait(lock, [this] { return done == n; });
    if (failure) std::rethrow_exception(failure);
  }

  const std::size_t n;
  const std::function<void(std::size_t)>* fn;
  std::atomic<std::size_t> next{0};
  std::mutex mu;
  std::condition_variable cv;
  std::size_t done = 0;        // guarded by mu
  std::exception_ptr failure;  // guarded by mu
};

CryptPool::CryptPool(int threads) : threads_(std::max(0, threads)) {
  if (threads_ > 0)
    queue_ = std::make_unique<WorkQueue<std::shared_ptr<Run>>>(
        threads_, [](std::shared_ptr<Run>& r) { r->work(); });
}

CryptPool::~CryptPool() = default;

int CryptPool::threads_for(std::size_t most) {
  const auto cores = static_cast<std::size_t>(std::max(1u, std::thread::hardware_concurrency()));
  return static_cast<int>(std::min(cores, std::max<std::size_t>(most, 1)) - 1);
}

void CryptPool::run_shared(std::size_t n, const std::function<void(std::size_t)>& fn) {
  auto r = std::make_shared<Run>(n, fn);
  const std::size_t helpers = std::min<std::size_t>(n - 1, static_cast<std::size_t>(threads_));
  for (std::size_t h = 0; h < helpers; ++h)
    queue_->push(r);
  r->work();
  r->wait();
}

}  // namespace psrt::transport::secure
