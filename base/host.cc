#include "base/host.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>

namespace psrt {

std::string local_boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return id;
}

std::string local_host_id() {
  std::string id;
  for (char c : local_boot_id())
    if (c != '-') id += c;
  struct stat st {};
  if (id.empty() || ::stat("/proc/self/ns/net", &st) != 0) return {};
  char ns[9];
  std::snprintf(ns, sizeof ns, "%08x", static_cast<unsigned>(st.st_ino));
  return id + ns;
}

}  // namespace psrt
