#include "topo/hardware_probe.h"

#ifdef GFSHIM_HAVE_HWLOC

#include <hwloc.h>

#include <cstdio>
#include <string>

#include "topo/dynamic_library.h"

namespace gfshim {
namespace {

struct HwlocApi {
  decltype(&hwloc_topology_init) topologyInit;
  decltype(&hwloc_topology_set_io_types_filter) setIoTypesFilter;
  decltype(&hwloc_topology_load) topologyLoad;
  decltype(&hwloc_topology_destroy) topologyDestroy;
  decltype(&hwloc_get_type_depth) typeDepth;
  decltype(&hwloc_get_nbobjs_by_depth) objectCount;
  decltype(&hwloc_get_obj_by_depth) objectAt;
  decltype(&hwloc_bitmap_first) bitmapFirst;
};

Status loadApi(HwlocApi* api) {
  DynamicLibrary library;
  GFSHIM_RETURN_IF_ERROR(DynamicLibrary::open("libhwloc.so.15", &library));
  GFSHIM_RETURN_IF_ERROR(library.bind("hwloc_topology_init", &api->topologyInit));
  GFSHIM_RETURN_IF_ERROR(
      library.bind("hwloc_topology_set_io_types_filter", &api->setIoTypesFilter));
  GFSHIM_RETURN_IF_ERROR(library.bind("hwloc_topology_load", &api->topologyLoad));
  GFSHIM_RETURN_IF_ERROR(library.bind("hwloc_topology_destroy", &api->topologyDestroy));
  GFSHIM_RETURN_IF_ERROR(library.bind("hwloc_get_type_depth", &api->typeDepth));
  GFSHIM_RETURN_IF_ERROR(library.bind("hwloc_get_nbobjs_by_depth", &api->objectCount));
  GFSHIM_RETURN_IF_ERROR(library.bind("hwloc_get_obj_by_depth", &api->objectAt));
  return library.bind("hwloc_bitmap_first", &api->bitmapFirst);
}

int countOf(const HwlocApi& api, hwloc_topology_t topology, hwloc_obj_type_t type) {
  const int depth = api.typeDepth(topology, type);
  if (depth == HWLOC_TYPE_DEPTH_UNKNOWN || depth == HWLOC_TYPE_DEPTH_MULTIPLE) return 0;
  return static_cast<int>(api.objectCount(topology, depth));
}

// I/O objects have no node set; their first ancestor with one is where they are attached.
int nearestNumaNode(const HwlocApi& api, hwloc_obj_t object) {
  while (object != nullptr && object->nodeset == nullptr) object = object->parent;
  return object == nullptr ? -1 : api.bitmapFirst(object->nodeset);
}

std::string pciBusId(hwloc_obj_t pci) {
  char text[32];
  std::snprintf(text, sizeof text, "%04x:%02x:%02x.%01x", pci->attr->pcidev.domain,
                pci->attr->pcidev.bus, pci->attr->pcidev.dev, pci->attr->pcidev.func);
  return text;
}

void collectGpus(const HwlocApi& api, hwloc_topology_t topology, NodeHardware* hardware) {
  const int depth = HWLOC_TYPE_DEPTH_PCI_DEVICE;
  const unsigned count = api.objectCount(topology, depth);
  for (unsigned i = 0; i < count; ++i) {
    hwloc_obj_t pci = api.objectAt(topology, depth, i);
    const unsigned pciClass = pci->attr->pcidev.class_id;
    if (pciClass != 0x0300 && pciClass != 0x0302) continue;  // VGA / 3D controller
    const hwloc_obj_t osDevice = pci->io_first_child;
    hardware->gpus.push_back({osDevice != nullptr && osDevice->name ? osDevice->name : "pci",
                              pciBusId(pci), nearestNumaNode(api, pci)});
  }
}

// One entry per PCI network card; an InfiniBand card shows both an OpenFabrics device
// (mlx5_0), which is kept, and a network interface (ib0).
void collectNics(const HwlocApi& api, hwloc_topology_t topology, NodeHardware* hardware) {
  const int depth = HWLOC_TYPE_DEPTH_OS_DEVICE;
  const unsigned count = api.objectCount(topology, depth);
  for (unsigned i = 0; i < count; ++i) {
    hwloc_obj_t device = api.objectAt(topology, depth, i);
    const hwloc_obj_osdev_type_t type = device->attr->osdev.type;
    if (type != HWLOC_OBJ_OSDEV_NETWORK && type != HWLOC_OBJ_OSDEV_OPENFABRICS) continue;
    hwloc_obj_t pci = device->parent;
    if (pci == nullptr || pci->type != HWLOC_OBJ_PCI_DEVICE) continue;  // virtual interface
    const std::string bus = pciBusId(pci);
    PciDevice* existing = nullptr;
    for (PciDevice& nic : hardware->nics) existing = nic.pciBus == bus ? &nic : existing;
    if (existing != nullptr) {
      if (type == HWLOC_OBJ_OSDEV_OPENFABRICS) existing->name = device->name;
      continue;
    }
    hardware->nics.push_back({device->name ? device->name : "?", bus, nearestNumaNode(api, pci)});
  }
}

}  // namespace

Status probeHwloc(NodeHardware* hardware) {
  static HwlocApi api;
  static const Status loaded = loadApi(&api);
  GFSHIM_RETURN_IF_ERROR(loaded);
  hwloc_topology_t topology = nullptr;
  if (api.topologyInit(&topology) != 0) {
    return Status::error(StatusCode::kUnsupported, "hwloc_topology_init failed");
  }
  api.setIoTypesFilter(topology, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (api.topologyLoad(topology) != 0) {
    api.topologyDestroy(topology);
    return Status::error(StatusCode::kUnsupported, "hwloc_topology_load failed");
  }
  NodeHardware found;
  found.packages = countOf(api, topology, HWLOC_OBJ_PACKAGE);
  found.numaNodes = countOf(api, topology, HWLOC_OBJ_NUMANODE);
  found.cores = countOf(api, topology, HWLOC_OBJ_CORE);
  found.pus = countOf(api, topology, HWLOC_OBJ_PU);
  collectGpus(api, topology, &found);
  collectNics(api, topology, &found);
  api.topologyDestroy(topology);
  *hardware = found;
  return Status::ok();
}

}  // namespace gfshim

#else  // !GFSHIM_HAVE_HWLOC

namespace gfshim {

Status probeHwloc(NodeHardware*) {
  return Status::error(StatusCode::kUnsupported, "this build has no hwloc support (libhwloc-dev)");
}

}  // namespace gfshim

#endif
