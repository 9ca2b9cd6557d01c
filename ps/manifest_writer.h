// The checkpoint MANIFEST, written off the scheduler's progress thread (issue 30). Rewriting and
// fsyncing the whole file for each new key on the progress thread made placing 20 000 keys take
// 45 s instead of 0.2 s. Here a key placed is one cheap add(); a writer thread rewrites the file
// once for every batch of keys added meanwhile, and after_written() runs its callback once
// everything added before it is durable (the scheduler answers a barrier then, so that the keys
// a job placed before it are in the MANIFEST before its rounds go on).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ps/shard_map.h"
#include "psrt/error.h"

namespace psrt::ps {

class ManifestWriter {
 public:
  // `placed`: the placements already in the MANIFEST (restored from it), copied. `failed` runs on
  // the writer thread, once, when a write fails (nothing is written after it).
  ManifestWriter(std::string dir, ShardMap placed, std::function<void(const Status&)> failed);
  // Writes what is pending, then joins the writer thread.
  ~ManifestWriter();
  ManifestWriter(const ManifestWriter&) = delete;
  ManifestWriter& operator=(const ManifestWriter&) = delete;

  // A key the shard map placed: written with the next batch.
  void add(std::uint64_t key, std::uint64_t total, std::vector<SliceRecord> slices);
  // Runs `then` once every key added so far is written: at once (on this thread) when none is
  // pending, else on the writer thread after the write (not after a failed one).
  void after_written(std::function<void()> then);
  // Blocks until every key added so far is written or a write failed.
  void flush();
  std::uint64_t writes() const;  // MANIFEST files written so far (tests)

 private:
  void run();

  const std::string dir_;
  const std::function<void(const Status&)> failed_;
  mutable std::mutex mu_;  // a leaf: nothing is called with it held
  std::condition_variable cv_;
  ShardMap map_;               // the writer's own copy: mu_
  std::uint64_t added_ = 0;    // keys added: mu_
  std::uint64_t written_ = 0;  // of them, written: mu_
  std::uint64_t writes_ = 0;   // mu_
  bool broken_ = false;        // a write failed: mu_
  bool stop_ = false;          // mu_
  std::vector<std::pair<std::uint64_t, std::function<void()>>> waiting_;  // mu_
  // Last: it uses the above.
  std::thread thread_;
};

}  // namespace psrt::ps
