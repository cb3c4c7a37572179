#include "gpu/gpu_plugin.h"

#include <dlfcn.h>

#include <map>
#include <mutex>

namespace gfshim {
namespace {

struct Loaded {
  const GpuPluginApi* api = nullptr;
  std::string why;
};

std::string pluginPath() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&GpuPlugin::load), &info) == 0 || info.dli_fname == nullptr) {
    return "libgfshim_cuda.so";
  }
  const std::string self = info.dli_fname;
  const size_t slash = self.rfind('/');
  return (slash == std::string::npos ? std::string() : self.substr(0, slash + 1)) +
         "libgfshim_cuda.so";
}

const Loaded& loaded() {
  static Loaded result;
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string path = pluginPath();
    void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* error = dlerror();
      result.why = "no GPU plugin (" + path + "): " + (error ? error : "?");
      return;
    }
    using Entry = const GpuPluginApi* (*)();
    const auto entry = reinterpret_cast<Entry>(dlsym(library, "gfshim_gpu_plugin_api"));
    const GpuPluginApi* api = entry != nullptr ? entry() : nullptr;
    if (api == nullptr || api->abiVersion != kGpuPluginAbiVersion) {
      result.why = path + " is from another build of libgfshim (plugin interface version)";
      return;
    }
    result.api = api;
  });
  return result;
}

}  // namespace

const GpuPluginApi* GpuPlugin::load(std::string* why) {
  const Loaded& plugin = loaded();
  if (plugin.api == nullptr && why != nullptr) *why = plugin.why;
  return plugin.api;
}

bool GpuPlugin::usableOn(int device, std::string* why) {
  const GpuPluginApi* api = load(why);
  if (api == nullptr) return false;
  static std::mutex guard;
  static std::map<int, std::pair<bool, std::string>> probed;
  std::lock_guard<std::mutex> lock(guard);
  auto found = probed.find(device);
  if (found == probed.end()) {
    char text[256] = {};
    const bool usable = api->probe(device, text, sizeof(text));
    found = probed.emplace(device, std::make_pair(usable, std::string(text))).first;
  }
  if (!found->second.first && why != nullptr) *why = found->second.second;
  return found->second.first;
}

}  // namespace gfshim
