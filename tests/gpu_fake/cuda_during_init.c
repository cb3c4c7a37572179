/* cuda_during_init: a PMPI tool, preloaded after the shim, whose MPI_Init and MPI_Init_thread load
 * the (fake) CUDA driver before they start the MPI, as the MPI's own start-up does on a GPU node
 * (Debian's MPICH through hwloc's OpenCL plugin). The shim must not take that driver for the
 * program's: its small MPI_Iallreduces stay the MPI's own. FAKE_CUDA_DRIVER is the driver's path. */
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>

static void loadDriver(void) {
  if (dlopen(FAKE_CUDA_DRIVER, RTLD_NOW | RTLD_GLOBAL) == NULL) {
    fprintf(stderr, "cuda_during_init: cannot load %s: %s\n", FAKE_CUDA_DRIVER, dlerror());
  }
}

int MPI_Init(int* argc, char*** argv) {
  loadDriver();
  return PMPI_Init(argc, argv);
}

int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  loadDriver();
  return PMPI_Init_thread(argc, argv, required, provided);
}
