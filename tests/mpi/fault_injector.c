/*
 * fault_injector: makes one PMPI call fail, to test how the shim reports MPI errors that happen
 * inside its engine. Preloaded after the shim (LD_PRELOAD=libgfshim.so:libfault_injector.so), its
 * PMPI_Isend and PMPI_Irecv are the ones the shim's engine calls; the application's own MPI_*
 * calls never reach them. Environment:
 *
 *   FAULT_INJECT_CALL  PMPI_Isend or PMPI_Irecv      (which function fails; default PMPI_Isend)
 *   FAULT_INJECT_NTH   1-based call number that fails (default 1; later calls work again)
 *   FAULT_INJECT_RANK  MPI_COMM_WORLD rank that fails, or -1 for every rank (default 0)
 *
 * The failing call returns MPI_ERR_OTHER without calling the real function, and prints one line.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*IsendFn)(const void*, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request*);
typedef int (*IrecvFn)(void*, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request*);

static long gCalls[2];

static int envInt(const char* name, int fallback) {
  const char* value = getenv(name);
  return value != NULL && *value != '\0' ? atoi(value) : fallback;
}

/* Whether call number ++gCalls[which] of `name` is the one to fail. */
static int shouldFail(int which, const char* name) {
  const char* target = getenv("FAULT_INJECT_CALL");
  if (target == NULL || *target == '\0') target = "PMPI_Isend";
  if (strcmp(target, name) != 0) return 0;
  if (++gCalls[which] != envInt("FAULT_INJECT_NTH", 1)) return 0;
  const int failingRank = envInt("FAULT_INJECT_RANK", 0);
  int rank = -1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (failingRank != -1 && failingRank != rank) return 0;
  printf("fault_injector: rank %d: %s call %ld returns MPI_ERR_OTHER\n", rank, name, gCalls[which]);
  fflush(stdout);
  return 1;
}

int PMPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
               MPI_Request* request) {
  static IsendFn real;
  if (real == NULL) real = (IsendFn)dlsym(RTLD_NEXT, "PMPI_Isend");
  if (shouldFail(0, "PMPI_Isend")) return MPI_ERR_OTHER;
  return real(buf, count, type, dest, tag, comm, request);
}

int PMPI_Irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
               MPI_Request* request) {
  static IrecvFn real;
  if (real == NULL) real = (IrecvFn)dlsym(RTLD_NEXT, "PMPI_Irecv");
  if (shouldFail(1, "PMPI_Irecv")) return MPI_ERR_OTHER;
  return real(buf, count, type, source, tag, comm, request);
}
