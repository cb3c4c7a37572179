// NCCL loaded at run time: the plugin dlopens libnccl.so.2 (RTLD_NOW | RTLD_LOCAL) the first time
// it is probed, instead of linking it, so a machine without NCCL gets a clear reason from probe()
// rather than a failed dlopen of the whole plugin (src/gpu/gpu_plugin_api.h).
//
// nccl.h is included for its types only; every function is called through this table. The table
// is resolved once per process (thread-safe) and never unloaded: NCCL keeps threads and CUDA
// state alive until exit. Cost: one dlopen and a dozen dlsym at the first probe, nothing after.
#pragma once

#include <nccl.h>

#include <string>

namespace gfshim::cuda {

// The oldest NCCL the plugin accepts: nonblocking communicators (ncclCommInitRankConfig with
// blocking = 0, ncclCommFinalize) appeared in 2.14 (NCCL_VERSION(2, 14, 0)); ncclBfloat16 in 2.10.
constexpr int kMinNcclVersionCode = 21400;

struct NcclLibrary {
  decltype(&::ncclGetVersion) getVersion = nullptr;
  decltype(&::ncclGetUniqueId) getUniqueId = nullptr;
  decltype(&::ncclCommInitRankConfig) commInitRankConfig = nullptr;
  decltype(&::ncclCommFinalize) commFinalize = nullptr;
  decltype(&::ncclCommDestroy) commDestroy = nullptr;
  decltype(&::ncclCommAbort) commAbort = nullptr;
  decltype(&::ncclCommGetAsyncError) commGetAsyncError = nullptr;
  decltype(&::ncclGetErrorString) getErrorString = nullptr;
  decltype(&::ncclAllReduce) allReduce = nullptr;
  decltype(&::ncclReduceScatter) reduceScatter = nullptr;
  decltype(&::ncclAllGather) allGather = nullptr;
  int versionCode = 0;  // what ncclGetVersion reported

  // The error string NCCL gives for `result` ("ncclResult N" if the table is not loaded).
  std::string errorString(ncclResult_t result) const;
};

// The process's NCCL table, loaded on the first call; nullptr with *why set when libnccl.so.2
// cannot be opened, lacks a symbol, or is older than kMinNcclVersionCode. Later calls return
// the same table, or the same reason.
const NcclLibrary* loadNccl(std::string* why);

}  // namespace gfshim::cuda
