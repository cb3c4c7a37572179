// The dlopen table of NCCL (see nccl_library.h).
#include "nccl_library.h"

#include <dlfcn.h>

#include <cstdio>
#include <mutex>

namespace gfshim::cuda {
namespace {

struct LoadedNccl {
  NcclLibrary library;
  bool ok = false;
  std::string why;
};

template <typename Function>
bool resolve(void* handle, const char* name, Function* function, std::string* why) {
  dlerror();  // clear a stale error
  void* symbol = dlsym(handle, name);
  if (symbol == nullptr) {
    const char* error = dlerror();
    *why = std::string("libnccl.so.2 lacks ") + name + ": " + (error != nullptr ? error : "null");
    return false;
  }
  *function = reinterpret_cast<Function>(symbol);
  return true;
}

void loadOnce(LoadedNccl* loaded) {
  void* handle = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    loaded->why = std::string("libnccl.so.2 not found: ") + (error != nullptr ? error : "unknown");
    return;
  }
  NcclLibrary& nccl = loaded->library;
  std::string* why = &loaded->why;
  const bool resolved = resolve(handle, "ncclGetVersion", &nccl.getVersion, why) &&
                        resolve(handle, "ncclGetUniqueId", &nccl.getUniqueId, why) &&
                        resolve(handle, "ncclCommInitRankConfig", &nccl.commInitRankConfig, why) &&
                        resolve(handle, "ncclCommFinalize", &nccl.commFinalize, why) &&
                        resolve(handle, "ncclCommDestroy", &nccl.commDestroy, why) &&
                        resolve(handle, "ncclCommAbort", &nccl.commAbort, why) &&
                        resolve(handle, "ncclCommGetAsyncError", &nccl.commGetAsyncError, why) &&
                        resolve(handle, "ncclGetErrorString", &nccl.getErrorString, why) &&
                        resolve(handle, "ncclAllReduce", &nccl.allReduce, why) &&
                        resolve(handle, "ncclReduceScatter", &nccl.reduceScatter, why) &&
                        resolve(handle, "ncclAllGather", &nccl.allGather, why);
  if (!resolved) return;  // the handle stays open: harmless, and dlclose of NCCL is unsafe
  const ncclResult_t result = nccl.getVersion(&nccl.versionCode);
  if (result != ncclSuccess) {
    loaded->why = "ncclGetVersion: " + nccl.errorString(result);
    return;
  }
  if (nccl.versionCode < kMinNcclVersionCode) {
    char message[128];
    std::snprintf(message, sizeof message, "libnccl.so.2 is version code %d, older than %d (2.14)",
                  nccl.versionCode, kMinNcclVersionCode);
    loaded->why = message;
    return;
  }
  loaded->why.clear();
  loaded->ok = true;
}

}  // namespace

std::string NcclLibrary::errorString(ncclResult_t result) const {
  const char* text = getErrorString != nullptr ? getErrorString(result) : nullptr;
  if (text != nullptr) return text;
  return "ncclResult " + std::to_string(static_cast<int>(result));
}

const NcclLibrary* loadNccl(std::string* why) {
  static LoadedNccl loaded;
  static std::once_flag once;
  std::call_once(once, loadOnce, &loaded);
  if (!loaded.ok) {
    if (why != nullptr) *why = loaded.why;
    return nullptr;
  }
  return &loaded.library;
}

}  // namespace gfshim::cuda
