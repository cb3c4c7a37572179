/*
 * counting_tool: a minimal PMPI tool of the kind users stack with libgfshim.so. It defines
 * MPI_Init, MPI_Init_thread, MPI_Allreduce, MPI_Iallreduce and MPI_Finalize, counts the calls it
 * sees, forwards each to PMPI_*, and at MPI_Finalize prints one line per rank:
 *
 *   counting_tool: rank R: init 1 allreduce N iallreduce M finalize 1
 *
 * Built as a shared library and preloaded (LD_PRELOAD=libgfshim.so:libcounting_tool.so).
 */
#include <mpi.h>
#include <stdio.h>

static long gInit, gAllreduce, gIallreduce;

int MPI_Init(int* argc, char*** argv) {
  gInit++;
  return PMPI_Init(argc, argv);
}

int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  gInit++;
  return PMPI_Init_thread(argc, argv, required, provided);
}

int MPI_Allreduce(const void* send, void* recv, int count, MPI_Datatype dtype, MPI_Op op,
                  MPI_Comm comm) {
  gAllreduce++;
  return PMPI_Allreduce(send, recv, count, dtype, op, comm);
}

int MPI_Iallreduce(const void* send, void* recv, int count, MPI_Datatype dtype, MPI_Op op,
                   MPI_Comm comm, MPI_Request* request) {
  gIallreduce++;
  return PMPI_Iallreduce(send, recv, count, dtype, op, comm, request);
}

int MPI_Finalize(void) {
  int rank = -1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  printf("counting_tool: rank %d: init %ld allreduce %ld iallreduce %ld finalize 1\n", rank, gInit,
         gAllreduce, gIallreduce);
  fflush(stdout);
  return PMPI_Finalize();
}
