#include "ps/manifest_writer.h"

#include <fmt/core.h>

#include "base/exception_status.h"
#include "ps/checkpoint.h"

namespace psrt::ps {

ManifestWriter::ManifestWriter(std::string dir, ShardMap placed,
                               std::function<void(const Status&)> failed)
    : dir_(std::move(dir)),
      failed_(std::move(failed)),
      map_(std::move(placed)),
      thread_([this] { run(); }) {}

ManifestWriter::~ManifestWriter() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ManifestWriter::add(std::uint64_t key, std::uint64_t total, std::vector<SliceRecord> slices) {
  {
    std::lock_guard lock(mu_);
    map_.restore(key, total, std::move(slices));
    ++added_;
  }
  cv_.notify_all();
}

void ManifestWriter::after_written(std::function<void()> then) {
  {
    std::lock_guard lock(mu_);
    if (written_ < added_) {
      if (!broken_) waiting_.emplace_back(added_, std::move(then));
      return;
    }
  }
  then();
}

void ManifestWriter::flush() {
  std::unique_lock lock(mu_);
  const std::uint64_t target = added_;
  cv_.wait(lock, [&] { return written_ >= target || broken_; });
}

std::uint64_t ManifestWriter::writes() const {
  std::lock_guard lock(mu_);
  return writes_;
}

void ManifestWriter::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || (written_ < added_ && !broken_); });
    if (written_ >= added_ || broken_) return;  // stopped with nothing (more) to write
    // One write for every key added so far; those added while it runs go in the next.
    const std::uint64_t target = added_;
    const std::string text = encode_manifest(map_);
    lock.unlock();
    Status result;
    try {
      write_manifest_text(dir_, text);
    } catch (...) {
      result = current_exception_status("cannot write the checkpoint MANIFEST");
    }
    std::vector<std::function<void()>> ready;
    lock.lock();
    if (!result.ok()) {
      broken_ = true;
      waiting_.clear();
      cv_.notify_all();
      lock.unlock();
      if (failed_) failed_(result);
      lock.lock();
      continue;
    }
    written_ = target;
    ++writes_;
    std::erase_if(waiting_, [&](auto& w) {
      if (w.first > written_) return false;
      ready.push_back(std::move(w.second));
      return true;
    });
    cv_.notify_all();
    lock.unlock();
    for (auto& then : ready)
      then();
    lock.lock();
  }
}

}  // namespace psrt::ps
