// The wire codec whose C++ type comes from device/: CUDA IPC records (PUSH_IPC, PUSH_PULL_IPC,
// PULL_IPC and the DEVICE_INFO probe). Split from ps/session/protocol.h so that the wire-format
// header names no type of a lower layer (ps/session/protocol.h describes the layout:
// kIpcRecordBytes).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "device/ipc.h"
#include "ps/session/protocol.h"
#include "psrt/error.h"

namespace psrt::ps {
inline namespace session {

static_assert(device::kIpcHandleBytes == kIpcHandleWireBytes,
              "the CUDA IPC handle size is part of the wire format (ps/session/protocol.h)");

std::vector<std::byte> encode_ipc(std::span<const device::IpcRecord> records);
// Exactly `count` records; offsets must lie inside their allocation.
Status decode_ipc(std::span<const std::byte> bytes, std::size_t count,
                  std::vector<device::IpcRecord>& out);

}  // namespace session
}  // namespace psrt::ps
