// CUDA IPC (path b of docs/ARCHITECTURE.md, "The three GPU paths"): a worker and a CUDA server
// on one host share device memory directly. The worker describes a buffer as (handle of its
// whole allocation, offset of the buffer in it) plus an interprocess event recorded after the
// work that wrote it; the server opens the handle once (opening costs milliseconds; the importer
// caches it), waits for the event on its own stream and reads or writes the bytes in place.
//
// Why the allocation and not the pointer: cudaIpcGetMemHandle describes a whole cudaMalloc
// allocation, and caching allocators (LibTorch's, pools) hand out pieces of large ones, so the
// piece's offset travels with the handle. Cached entries are keyed by the handle's bytes, not by
// address, because a pool may free an allocation and get a new one at the same address.
//
//   worker:  device::IpcExporter ex(0);  IpcRecord r = ex.describe(grad_ptr, bytes);
//   server:  device::IpcImporter im(0);  auto at = im.open(r, bytes);  // at.data, at.event
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>

namespace psrt::device {

inline constexpr std::size_t kIpcHandleBytes = 64;  // cudaIpcMemHandle_t / cudaIpcEventHandle_t

// What travels on the wire (ps/session/protocol_device.h encodes it).
struct IpcRecord {
  std::array<std::byte, kIpcHandleBytes> memory{};  // the allocation's cudaIpcMemHandle_t
  std::uint64_t offset = 0;                         // of the buffer in the allocation
  std::uint64_t allocation_bytes = 0;               // the allocation's size, as the owner sees it
  std::array<std::byte, kIpcHandleBytes> event{};   // cudaIpcEventHandle_t, recorded after writes
};

// The exporting side, for buffers on one device. Thread-safe.
class IpcExporter {
 public:
  // Creates the interprocess event on `device`; throws psrt::Error(kUnsupported) naming the
  // cause when the device is not usable.
  explicit IpcExporter(int device);
  ~IpcExporter();
  IpcExporter(const IpcExporter&) = delete;
  IpcExporter& operator=(const IpcExporter&) = delete;

  // Describes `bytes` at `p` (device memory of this exporter's device) and records an event on
  // the legacy default stream, so the importer's reads come after the work queued there so far
  // (LibTorch's default stream). Events come from a ring of kEvents, so a record's event stays
  // as it was for the next kEvents - 1 calls (the importer waits at most that much longer). Throws
  // psrt::Error: kInvalidArgument when `p` is not device memory of this device or the range leaves
  // its allocation; kSystem for a failing call.
  IpcRecord describe(const void* p, std::size_t bytes);
  // A record of a small buffer this exporter owns for its lifetime: an importer that can open it
  // can open this process's buffers (same host, same IPC namespace, peer access).
  IpcRecord probe();

 private:
  static constexpr std::size_t kEvents = 64;
  int device_;
  std::array<void*, kEvents> events_{};  // cudaEvent_t, interprocess
  std::array<std::array<std::byte, kIpcHandleBytes>, kEvents> event_handles_{};
  std::size_t next_event_ = 0;
  void* probe_ = nullptr;  // cudaMalloc'd, kProbeBytes
  std::mutex mu_;
};

// The importing side, on one device: opened allocations and events, cached by handle; beyond
// `max_open` the least recently used leaves the cache (and is closed once no Opened holds it).
// Thread-safe.
class IpcImporter {
 public:
  explicit IpcImporter(int device, std::size_t max_open = 1024);
  ~IpcImporter();
  IpcImporter(const IpcImporter&) = delete;
  IpcImporter& operator=(const IpcImporter&) = delete;

  struct Opened {
    void* data = nullptr;   // the buffer in this process's address space
    void* event = nullptr;  // cudaEvent_t to wait on before reading it
    // Keeps the mapping open while held: the cache may drop it (LRU) while an update still
    // reads it; it is closed when the last holder lets go.
    std::shared_ptr<void> hold;
  };
  // Opens (or finds) the record's allocation and event. Throws psrt::Error: kInvalidArgument
  // when [offset, offset + bytes) is not inside the allocation (checked against the claimed size
  // before opening and against the mapping's real size after);
  // kUnsupported/kSystem naming cudaIpcOpenMemHandle's failure (e.g. the exporter is on another
  // host or in another container).
  Opened open(const IpcRecord& r, std::size_t bytes);

 private:
  using Key = std::array<std::byte, kIpcHandleBytes>;
  struct Mapping;  // an opened handle; closes it when destroyed
  struct Allocation {
    std::shared_ptr<Mapping> mapping;
    std::list<Key>::iterator lru;
  };
  int device_;
  std::size_t max_open_;
  std::mutex mu_;
  std::map<Key, Allocation> allocations_;
  std::list<Key> lru_;  // most recent first
  std::map<Key, void*> events_;
};

}  // namespace psrt::device
