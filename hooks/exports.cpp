// The exported MPI symbols: one-line forwards, nothing else. This file deliberately does not
// include mpi.h (see hook_api.h): the calls that carry handles are forwarded here, untouched, when
// the running MPI is the other flavour, to the next MPI_* definitions (next_mpi.h) declared with
// raw handle types, which is ABI-compatible with both Open MPI and MPICH on x86-64 and aarch64
// (handles travel in 64-bit registers; the callee reads the width it expects). The calls without
// handles (MPI_Init*, MPI_Finalize, MPI_Query_thread, MPI_Wait*, MPI_Test*: ints and untyped
// pointers) always go to their hooks, which forward them themselves.
#include "hooks/hook_api.h"
#include "hooks/next_mpi.h"

using gfshim::hooks::AllreduceVariant;
using gfshim::hooks::RawAllreduceArgs;
using gfshim::hooks::RawHandle;

extern "C" {
int PMPI_Allreduce(const void*, void*, int, RawHandle, RawHandle, RawHandle);
int PMPI_Iallreduce(const void*, void*, int, RawHandle, RawHandle, RawHandle, void*);
int PMPI_Comm_dup(RawHandle, void*);
int PMPI_Comm_split(RawHandle, int, int, void*);
int PMPI_Comm_split_type(RawHandle, int, int, RawHandle, void*);
int PMPI_Comm_create(RawHandle, RawHandle, void*);
int PMPI_Comm_create_group(RawHandle, RawHandle, int, void*);
}

#define GFSHIM_EXPORT extern "C" __attribute__((visibility("default")))

// Where the other flavour's calls go: the next definition of the same MPI_* symbol (a PMPI tool
// preloaded after the shim, else the MPI itself), see next_mpi.h.
namespace {
GFSHIM_NEXT_MPI(Allreduce);
GFSHIM_NEXT_MPI(Iallreduce);
GFSHIM_NEXT_MPI(Comm_dup);
GFSHIM_NEXT_MPI(Comm_split);
GFSHIM_NEXT_MPI(Comm_split_type);
GFSHIM_NEXT_MPI(Comm_create);
GFSHIM_NEXT_MPI(Comm_create_group);
}  // namespace

GFSHIM_EXPORT int MPI_Init(int* argc, char*** argv) {
  return gfshim::hooks::initHook(argc, argv);
}

GFSHIM_EXPORT int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  return gfshim::hooks::initThreadHook(argc, argv, required, provided);
}

GFSHIM_EXPORT int MPI_Finalize(void) {
  return gfshim::hooks::finalizeHook();
}

GFSHIM_EXPORT int MPI_Query_thread(int* provided) {
  return gfshim::hooks::queryThreadHook(provided);
}

GFSHIM_EXPORT int MPI_Allreduce(const void* send, void* recv, int count, RawHandle dtype,
                                RawHandle op, RawHandle comm) {
  if (gfshim::hooks::foreignMpi()) return nextAllreduce(send, recv, count, dtype, op, comm);
  return gfshim::hooks::allreduceHook(
      {send, recv, count, dtype, op, comm, nullptr, AllreduceVariant::kBlocking});
}

GFSHIM_EXPORT int MPI_Iallreduce(const void* send, void* recv, int count, RawHandle dtype,
                                 RawHandle op, RawHandle comm, void* request) {
  if (gfshim::hooks::foreignMpi())
    return nextIallreduce(send, recv, count, dtype, op, comm, request);
  return gfshim::hooks::allreduceHook(
      {send, recv, count, dtype, op, comm, request, AllreduceVariant::kNonblocking});
}

GFSHIM_EXPORT int MPI_Comm_dup(RawHandle comm, void* newcomm) {
  const int rc = nextComm_dup(comm, newcomm);
  return gfshim::hooks::foreignMpi() ? rc : gfshim::hooks::commCreatedHook(rc, newcomm);
}

GFSHIM_EXPORT int MPI_Comm_split(RawHandle comm, int color, int key, void* newcomm) {
  const int rc = nextComm_split(comm, color, key, newcomm);
  return gfshim::hooks::foreignMpi() ? rc : gfshim::hooks::commCreatedHook(rc, newcomm);
}

GFSHIM_EXPORT int MPI_Comm_split_type(RawHandle comm, int type, int key, RawHandle info,
                                      void* newcomm) {
  const int rc = nextComm_split_type(comm, type, key, info, newcomm);
  return gfshim::hooks::foreignMpi() ? rc : gfshim::hooks::commCreatedHook(rc, newcomm);
}

GFSHIM_EXPORT int MPI_Comm_create(RawHandle comm, RawHandle group, void* newcomm) {
  const int rc = nextComm_create(comm, group, newcomm);
  return gfshim::hooks::foreignMpi() ? rc : gfshim::hooks::commCreatedHook(rc, newcomm);
}

GFSHIM_EXPORT int MPI_Comm_create_group(RawHandle comm, RawHandle group, int tag, void* newcomm) {
  const int rc = nextComm_create_group(comm, group, tag, newcomm);
  return gfshim::hooks::foreignMpi() ? rc : gfshim::hooks::commCreatedHook(rc, newcomm);
}

GFSHIM_EXPORT int MPI_Wait(void* request, void* status) {
  return gfshim::hooks::waitHook(request, status);
}

GFSHIM_EXPORT int MPI_Waitall(int count, void* requests, void* statuses) {
  return gfshim::hooks::waitallHook(count, requests, statuses);
}

GFSHIM_EXPORT int MPI_Waitany(int count, void* requests, int* index, void* status) {
  return gfshim::hooks::waitanyHook(count, requests, index, status);
}

GFSHIM_EXPORT int MPI_Waitsome(int count, void* requests, int* outcount, int* indices,
                               void* statuses) {
  return gfshim::hooks::waitsomeHook(count, requests, outcount, indices, statuses);
}

GFSHIM_EXPORT int MPI_Test(void* request, int* flag, void* status) {
  return gfshim::hooks::testHook(request, flag, status);
}

GFSHIM_EXPORT int MPI_Testall(int count, void* requests, int* flag, void* statuses) {
  return gfshim::hooks::testallHook(count, requests, flag, statuses);
}

GFSHIM_EXPORT int MPI_Testany(int count, void* requests, int* index, int* flag, void* status) {
  return gfshim::hooks::testanyHook(count, requests, index, flag, status);
}

GFSHIM_EXPORT int MPI_Testsome(int count, void* requests, int* outcount, int* indices,
                               void* statuses) {
  return gfshim::hooks::testsomeHook(count, requests, outcount, indices, statuses);
}

#ifdef GFSHIM_HAVE_BIGCOUNT
extern "C" {
int PMPI_Allreduce_c(const void*, void*, long long, RawHandle, RawHandle, RawHandle);
int PMPI_Iallreduce_c(const void*, void*, long long, RawHandle, RawHandle, RawHandle, void*);
}

namespace {
GFSHIM_NEXT_MPI(Allreduce_c);
GFSHIM_NEXT_MPI(Iallreduce_c);
}  // namespace

GFSHIM_EXPORT int MPI_Allreduce_c(const void* send, void* recv, long long count, RawHandle dtype,
                                  RawHandle op, RawHandle comm) {
  if (gfshim::hooks::foreignMpi()) return nextAllreduce_c(send, recv, count, dtype, op, comm);
  return gfshim::hooks::allreduceHook(
      {send, recv, count, dtype, op, comm, nullptr, AllreduceVariant::kBlockingBigCount});
}

GFSHIM_EXPORT int MPI_Iallreduce_c(const void* send, void* recv, long long count, RawHandle dtype,
                                   RawHandle op, RawHandle comm, void* request) {
  if (gfshim::hooks::foreignMpi()) {
    return nextIallreduce_c(send, recv, count, dtype, op, comm, request);
  }
  return gfshim::hooks::allreduceHook(
      {send, recv, count, dtype, op, comm, request, AllreduceVariant::kNonblockingBigCount});
}
#endif
