#include "ps/session/protocol_device.h"

#include <fmt/core.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "transport/wire.h"

namespace psrt::ps {
inline namespace session {
namespace {

using wire::load;
using wire::store;

Status bad(std::string message) {
  return protocol_error(std::move(message));
}

}  // namespace

std::vector<std::byte> encode_ipc(std::span<const device::IpcRecord> records) {
  std::vector<std::byte> out(records.size() * kIpcRecordBytes);
  std::byte* p = out.data();
  for (const auto& r : records) {
    std::memcpy(p, r.memory.data(), device::kIpcHandleBytes);
    store<std::uint64_t>(p + 64, r.offset);
    store<std::uint64_t>(p + 72, r.allocation_bytes);
    std::memcpy(p + 80, r.event.data(), device::kIpcHandleBytes);
    p += kIpcRecordBytes;
  }
  return out;
}

Status decode_ipc(std::span<const std::byte> bytes, std::size_t count,
                  std::vector<device::IpcRecord>& out) {
  if (bytes.size() != count * kIpcRecordBytes)
    return bad(fmt::format("{} bytes of CUDA IPC records, expected {} records of {} bytes",
                           bytes.size(), count, kIpcRecordBytes));
  std::vector<device::IpcRecord> records(count);
  const std::byte* p = bytes.data();
  for (auto& r : records) {
    std::memcpy(r.memory.data(), p, device::kIpcHandleBytes);
    r.offset = load<std::uint64_t>(p + 64);
    r.allocation_bytes = load<std::uint64_t>(p + 72);
    std::memcpy(r.event.data(), p + 80, device::kIpcHandleBytes);
    if (r.offset >= r.allocation_bytes)
      return bad(fmt::format("CUDA IPC record at offset {} of an allocation of {} bytes", r.offset,
                             r.allocation_bytes));
    p += kIpcRecordBytes;
  }
  out = std::move(records);
  return {};
}

}  // namespace session
}  // namespace psrt::ps
