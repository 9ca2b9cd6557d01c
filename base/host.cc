#include "base/host.h"

#include <fstream>

namespace psrt {

std::string local_boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return id;
}

}  // namespace psrt
