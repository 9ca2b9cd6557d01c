#include "runtime/placement/topology.h"

#include <fmt/core.h>
#include <hwloc.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include "psrt/error.h"

// hwloc's PCI component (libpciaccess) leaves about 1 KiB allocated per topology load, which
// LeakSanitizer would report at the exit of every psrun of a sanitizer build.
#if defined(__SANITIZE_ADDRESS__)
#define PSRT_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PSRT_LSAN 1
#endif
#endif
#ifdef PSRT_LSAN
#include <sanitizer/lsan_interface.h>
#endif

namespace psrt::placement {
namespace {

// hwloc_topology_load with LeakSanitizer ignoring what it allocates (see above).
int load_topology(hwloc_topology_t t) {
#ifdef PSRT_LSAN
  __lsan_disable();
  const int rc = hwloc_topology_load(t);
  __lsan_enable();
  return rc;
#else
  return hwloc_topology_load(t);
#endif
}

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using TopologyPtr = std::unique_ptr<hwloc_topology, TopologyDeleter>;

int numa_of(hwloc_topology_t t, hwloc_obj_t obj) {
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, obj);
  if (!anc || !anc->nodeset || hwloc_bitmap_iszero(anc->nodeset)) return -1;
  return hwloc_bitmap_first(anc->nodeset);
}

std::vector<std::uint64_t> path_of(hwloc_obj_t obj) {
  std::vector<std::uint64_t> path;
  for (hwloc_obj_t o = obj->parent; o; o = o->parent)
    path.push_back(o->gp_index);
  std::reverse(path.begin(), path.end());
  return path;
}

std::string busid_of(hwloc_obj_t pci) {
  const auto& p = pci->attr->pcidev;
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", p.domain, p.bus, p.dev, p.func);
}

PciDevice device_of(hwloc_topology_t t, hwloc_obj_t pci, std::string name) {
  return {std::move(name), busid_of(pci), numa_of(t, pci), path_of(pci)};
}

// The cores of this machine's NUMA nodes, each core's threads limited to `allowed` (none
// limits for an XML topology).
void read_cores(hwloc_topology_t t, const cpu_set_t* allowed, Topology& out) {
  const int nodes = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < nodes; ++i)
    out.numa.push_back(
        {static_cast<int>(
             hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i))->os_index),
         {}});
  hwloc_obj_type_t unit =
      hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
  const int n = hwloc_get_nbobjs_by_type(t, unit);
  for (int i = 0; i < n; ++i) {
    hwloc_obj_t core = hwloc_get_obj_by_type(t, unit, static_cast<unsigned>(i));
    std::vector<int> threads;
    unsigned pu;
    hwloc_bitmap_foreach_begin(pu, core->cpuset) {
      if (!allowed || CPU_ISSET(pu, allowed)) threads.push_back(static_cast<int>(pu));
    }
    hwloc_bitmap_foreach_end();
    if (threads.empty()) continue;
    const int node = core->nodeset ? hwloc_bitmap_first(core->nodeset) : -1;
    auto it = std::find_if(out.numa.begin(), out.numa.end(),
                           [&](const NumaNode& x) { return x.os_index == node; });
    if (it == out.numa.end()) it = out.numa.begin();
    if (it == out.numa.end()) it = out.numa.insert(out.numa.end(), NumaNode{0, {}});
    it->cores.push_back(std::move(threads));
  }
  std::erase_if(out.numa, [](const NumaNode& x) { return x.cores.empty(); });
}

bool is_nvidia_gpu(hwloc_obj_t pci) {
  return pci->attr->pcidev.vendor_id == 0x10de && (pci->attr->pcidev.class_id >> 8) == 0x03;
}

void read_gpus(hwloc_topology_t t, Topology& out) {
  struct Found {
    int cuda;  // N of an OS device "cudaN"/"nvidiaN", else -1
    PciDevice dev;
  };
  std::vector<Found> found;
  for (hwloc_obj_t pci = hwloc_get_next_pcidev(t, nullptr); pci;
       pci = hwloc_get_next_pcidev(t, pci)) {
    if (!is_nvidia_gpu(pci)) continue;
    int cuda = -1;
    std::string name = busid_of(pci);
    for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
      if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name) continue;
      int idx = -1;
      if (std::sscanf(c->name, "cuda%d", &idx) == 1 ||
          std::sscanf(c->name, "nvidia%d", &idx) == 1) {
        cuda = idx;
        name = c->name;
        break;
      }
    }
    found.push_back({cuda, device_of(t, pci, name)});
  }
  // With cudaN devices, their order; else PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID).
  std::stable_sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    if (a.cuda != b.cuda) return a.cuda < b.cuda;
    return a.dev.busid < b.dev.busid;
  });
  for (auto& f : found)
    out.gpus.push_back(std::move(f.dev));
}

void read_nics(hwloc_topology_t t, Topology& out) {
  for (hwloc_obj_t os = hwloc_get_next_osdev(t, nullptr); os; os = hwloc_get_next_osdev(t, os)) {
    if (os->attr->osdev.type != HWLOC_OBJ_OSDEV_OPENFABRICS || !os->name) continue;
    hwloc_obj_t pci = os->parent;
    if (!pci || pci->type != HWLOC_OBJ_PCI_DEVICE) continue;
    out.nics.push_back(device_of(t, pci, os->name));
  }
  std::sort(out.nics.begin(), out.nics.end(),
            [](const PciDevice& a, const PciDevice& b) { return a.name < b.name; });
}

}  // namespace

int Topology::cores() const {
  int n = 0;
  for (const auto& node : numa)
    n += static_cast<int>(node.cores.size());
  return n;
}

Topology read_topology(const std::string& xml_file) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) throw Error(ErrorCode::kSystem, "hwloc_topology_init failed");
  TopologyPtr t(raw);
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (!xml_file.empty() && hwloc_topology_set_xml(raw, xml_file.c_str()) != 0)
    throw Error(ErrorCode::kSystem, fmt::format("hwloc cannot read the topology file {}: {}",
                                                xml_file, std::strerror(errno)));
  if (load_topology(raw) != 0)
    throw Error(ErrorCode::kSystem,
                fmt::format("hwloc cannot read this host's topology: {}", std::strerror(errno)));
  Topology out;
  cpu_set_t allowed;
  const bool this_system = xml_file.empty() && hwloc_topology_is_thissystem(raw);
  const bool limited = this_system && ::sched_getaffinity(0, sizeof(allowed), &allowed) == 0;
  read_cores(raw, limited ? &allowed : nullptr, out);
  read_gpus(raw, out);
  read_nics(raw, out);
  return out;
}

int nearness(const PciDevice& a, const PciDevice& b) {
  std::size_t n = 0;
  while (n < a.path.size() && n < b.path.size() && a.path[n] == b.path[n])
    ++n;
  return static_cast<int>(n);
}

}  // namespace psrt::placement
