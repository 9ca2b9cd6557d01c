// A host's topology for placement, read through hwloc: NUMA nodes with their cores (and each
// core's hardware threads), and the GPUs and RDMA NICs with the NUMA node and PCI path each sits
// on. Plain data, so that placement.h is a pure function of it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace psrt::placement {

struct NumaNode {
  int os_index = 0;
  std::vector<std::vector<int>> cores;  // each core: the OS indexes of its hardware threads
};

// A GPU or NIC on the PCI bus.
struct PciDevice {
  std::string name;                 // "cuda0" / "0000:03:00.0" for a GPU, "mlx5_0" for a NIC
  std::string busid;                // "0000:03:00.0"
  int numa = -1;                    // OS index of its NUMA node; -1 = unknown
  std::vector<std::uint64_t> path;  // hwloc ids of its ancestors, from the machine down
};

struct Topology {
  std::vector<NumaNode> numa;
  std::vector<PciDevice> gpus;  // in CUDA's order (cudaN, else PCI bus order)
  std::vector<PciDevice> nics;  // RDMA devices (hwloc's OpenFabrics OS devices), by name
  int cores() const;
};

// hwloc's topology of this machine (only the cores this process may run on), or of the XML file
// `xml_file` names (hwloc_topology_set_xml: a saved or synthetic one; HWLOC_XMLFILE also works
// when `xml_file` is empty). Throws psrt::Error(kSystem) naming the cause when hwloc fails.
Topology read_topology(const std::string& xml_file = "");

// How near two PCI devices are: the number of ancestors they share (more = nearer; same PCIe
// switch > same host bridge > same package).
int nearness(const PciDevice& a, const PciDevice& b);

}  // namespace psrt::placement
