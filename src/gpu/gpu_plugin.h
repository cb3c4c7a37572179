// libgfshim_cuda.so, the GPU plugin (src/gpu/gpu_plugin_api.h), found beside the library this code
// is linked into and loaded at the first call that could use NCCL. A build without CUDA, a
// machine without the plugin, NCCL or a device: load() explains why, once, and the GPU buffers
// are staged instead.
#pragma once

#include <string>

#include "gpu/gpu_plugin_api.h"

namespace gfshim {

class GpuPlugin {
 public:
  // The plugin's API, or nullptr with *why (the same answer for the life of the process).
  static const GpuPluginApi* load(std::string* why);
  // Whether NCCL can run on `device` in this process (probed once per device, then remembered).
  static bool usableOn(int device, std::string* why);
};

}  // namespace gfshim
