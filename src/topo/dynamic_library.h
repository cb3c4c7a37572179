// A shared library opened at run time. hwloc and UCX are optional at run time as well as at
// build time: the shim must load on a machine that has neither, so it never links them and
// opens them with dlopen on first use instead (a library the MPI already loaded is simply
// shared). Handles are never closed: UCX starts threads and registers global state, and a probe
// runs at most once per process.
#pragma once

#include <dlfcn.h>

#include <string>

#include "common/status.h"

namespace gfshim {

class DynamicLibrary {
 public:
  static Status open(const char* soname, DynamicLibrary* library) {
    library->handle_ = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (library->handle_ == nullptr) {
      const char* why = dlerror();
      return Status::error(StatusCode::kUnsupported,
                           std::string("cannot load ") + soname + ": " + (why ? why : "?"));
    }
    library->name_ = soname;
    return Status::ok();
  }

  // Binds `symbol` to a function pointer of the type the header declares, e.g.
  // bind("hwloc_topology_load", &load) with `decltype(&hwloc_topology_load) load`.
  template <typename Function>
  Status bind(const char* symbol, Function* function) const {
    *function = reinterpret_cast<Function>(dlsym(handle_, symbol));
    if (*function == nullptr) {
      return Status::error(StatusCode::kUnsupported, name_ + " lacks " + symbol);
    }
    return Status::ok();
  }

 private:
  void* handle_ = nullptr;
  std::string name_;
};

}  // namespace gfshim
