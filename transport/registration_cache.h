// Registered memory regions keyed by address range. Backends keep one per transport: UCX stores
// its ucp_mem_h per region, TCP stores nothing but answers the same queries. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <vector>

#include "psrt/error.h"

namespace psrt::transport {

template <typename Handle>
class RegistrationCache {
 public:
  // Returns the handle of the region that contains all of [data, data+size), if any.
  std::optional<Handle> find(const void* data, std::size_t size) const {
    auto start = reinterpret_cast<std::uintptr_t>(data);
    std::shared_lock lock(mutex_);
    auto it = regions_.upper_bound(start);
    if (it == regions_.begin()) return std::nullopt;
    --it;
    if (start + size > it->second.end) return std::nullopt;
    return it->second.handle;
  }

  bool covers(const void* data, std::size_t size) const { return find(data, size).has_value(); }

  // Before registering [data, data+size): false when one region already covers it (nothing to
  // do); throws psrt::Error(kInvalidArgument) when it overlaps a region only in part.
  bool needs_registration(const void* data, std::size_t size) const {
    if (covers(data, size)) return false;
    if (overlaps(data, size)) {
      throw Error(ErrorCode::kInvalidArgument,
                  "memory region overlaps a registered region without being inside it; "
                  "unregister that one first");
    }
    return true;
  }

  // Adds [data, data+size) after needs_registration() said so: regions never overlap.
  void insert(const void* data, std::size_t size, Handle handle) {
    auto start = reinterpret_cast<std::uintptr_t>(data);
    std::unique_lock lock(mutex_);
    regions_[start] = Region{start + size, std::move(handle)};
  }

  // Whether [data, data+size) overlaps any region.
  bool overlaps(const void* data, std::size_t size) const {
    auto start = reinterpret_cast<std::uintptr_t>(data);
    auto end = start + size;
    std::shared_lock lock(mutex_);
    auto it = regions_.lower_bound(end);
    if (it == regions_.begin()) return false;
    --it;
    return it->second.end > start;
  }

  // Removes the region that starts at `base`; returns its handle.
  std::optional<Handle> erase(const void* base) {
    std::unique_lock lock(mutex_);
    auto it = regions_.find(reinterpret_cast<std::uintptr_t>(base));
    if (it == regions_.end()) return std::nullopt;
    Handle h = std::move(it->second.handle);
    regions_.erase(it);
    return h;
  }

  std::vector<Handle> clear() {
    std::unique_lock lock(mutex_);
    std::vector<Handle> all;
    for (auto& [start, r] : regions_)
      all.push_back(std::move(r.handle));
    regions_.clear();
    return all;
  }

  std::size_t size() const {
    std::shared_lock lock(mutex_);
    return regions_.size();
  }

 private:
  struct Region {
    std::uintptr_t end;
    Handle handle;
  };
  mutable std::shared_mutex mutex_;
  std::map<std::uintptr_t, Region> regions_;
};

}  // namespace psrt::transport
