// Facts about the host this process runs on.
#pragma once

#include <string>

namespace psrt {

// /proc/sys/kernel/random/boot_id: equal in two processes exactly when they run on the same
// booted kernel (containers of one machine share it). Empty when unreadable. CUDA IPC decides
// by it (and then probes): GPU memory can be shared across network namespaces of one machine.
std::string local_boot_id();

// What the transports take as "one host": the boot id (32 hex digits, dashes dropped) followed by
// the inode of this process's network namespace (/proc/self/ns/net, 8 hex digits), 40 characters.
// Two processes with equal ids share a kernel AND a network stack; processes in different network
// namespaces (containers, or the namespace hosts of the multi-host tests) share the kernel, the
// filesystem and /dev/shm but talk over a network, so they count as different hosts: UCX then
// uses its peer-failure mode and no shared-memory shortcut between them. Empty when either part
// is unreadable (every peer then counts as remote).
std::string local_host_id();

}  // namespace psrt
