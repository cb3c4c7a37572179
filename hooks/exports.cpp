// The exported MPI symbols: one-line forwards, nothing else. This file deliberately does not
// include mpi.h (see hook_api.h): it declares the PMPI entry points it forwards to with raw
// handle types, which is ABI-compatible with both Open MPI and MPICH on x86-64 and aarch64
// (handles travel in 64-bit registers; the callee reads the width it expects).
#include "hooks/hook_api.h"

using gfshim::hooks::AllreduceVariant;
using gfshim::hooks::RawAllreduceArgs;
using gfshim::hooks::RawHandle;

extern "C" {
int PMPI_Allreduce(const void*, void*, int, RawHandle, RawHandle, RawHandle);
int PMPI_Iallreduce(const void*, void*, int, RawHandle, RawHandle, RawHandle, void*);
int PMPI_Init(int*, char***);
int PMPI_Init_thread(int*, char***, int, int*);
int PMPI_Finalize(void);
}

#define GFSHIM_EXPORT extern "C" __attribute__((visibility("default")))

GFSHIM_EXPORT int MPI_Init(int* argc, char*** argv) {
  return gfshim::hooks::foreignMpi() ? PMPI_Init(argc, argv) : gfshim::hooks::initHook(argc, argv);
}

GFSHIM_EXPORT int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  return gfshim::hooks::foreignMpi()
             ? PMPI_Init_thread(argc, argv, required, provided)
             : gfshim::hooks::initThreadHook(argc, argv, required, provided);
}

GFSHIM_EXPORT int MPI_Finalize(void) {
  return gfshim::hooks::foreignMpi() ? PMPI_Finalize() : gfshim::hooks::finalizeHook();
}

GFSHIM_EXPORT int MPI_Allreduce(const void* send, void* recv, int count, RawHandle dtype,
                                RawHandle op, RawHandle comm) {
  if (gfshim::hooks::foreignMpi()) return PMPI_Allreduce(send, recv, count, dtype, op, comm);
  return gfshim::hooks::allreduceHook(
      {send, recv, count, dtype, op, comm, nullptr, AllreduceVariant::kBlocking});
}

GFSHIM_EXPORT int MPI_Iallreduce(const void* send, void* recv, int count, RawHandle dtype,
                                 RawHandle op, RawHandle comm, void* request) {
  if (gfshim::hooks::foreignMpi())
    return PMPI_Iallreduce(send, recv, count, dtype, op, comm, request);
  return gfshim::hooks::allreduceHook(
      {send, recv, count, dtype, op, comm, request, AllreduceVariant::kNonblocking});
}

#ifdef GFSHIM_HAVE_BIGCOUNT
extern "C" {
int PMPI_Allreduce_c(const void*, void*, long long, RawHandle, RawHandle, RawHandle);
int PMPI_Iallreduce_c(const void*, void*, long long, RawHandle, RawHandle, RawHandle, void*);
}

GFSHIM_EXPORT int MPI_Allreduce_c(const void* send, void* recv, long long count, RawHandle dtype,
                                  RawHandle op, RawHandle comm) {
  if (gfshim::hooks::foreignMpi()) return PMPI_Allreduce_c(send, recv, count, dtype, op, comm);
  return gfshim::hooks::allreduceHook(
      {send, recv, count, dtype, op, comm, nullptr, AllreduceVariant::kBlockingBigCount});
}

GFSHIM_EXPORT int MPI_Iallreduce_c(const void* send, void* recv, long long count, RawHandle dtype,
                                   RawHandle op, RawHandle comm, void* request) {
  if (gfshim::hooks::foreignMpi()) {
    return PMPI_Iallreduce_c(send, recv, count, dtype, op, comm, request);
  }
  return gfshim::hooks::allreduceHook(
      {send, recv, count, dtype, op, comm, request, AllreduceVariant::kNonblockingBigCount});
}
#endif
