// Facts about the host this process runs on.
#pragma once

#include <string>

namespace psrt {

// /proc/sys/kernel/random/boot_id: equal in two processes exactly when they run on the same
// booted kernel, i.e. the same host (containers of one host share it). Empty when unreadable.
std::string local_boot_id();

}  // namespace psrt
