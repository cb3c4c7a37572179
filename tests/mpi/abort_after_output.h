/*
 * abortAfterOutput: MPI_Abort for a test whose expected output comes just before the abort.
 * MPICH's launcher (Hydra) ends the job as soon as a rank aborts and may drop what is still in
 * the rank's stdout and stderr pipes (seen once in CI: the lines printed and flushed before
 * MPI_Abort were missing), so the rank flushes and gives the launcher half a second to forward
 * them first.
 */
#ifndef GFSHIM_TESTS_MPI_ABORT_AFTER_OUTPUT_H
#define GFSHIM_TESTS_MPI_ABORT_AFTER_OUTPUT_H

#include <mpi.h>
#include <stdio.h>
#include <time.h>

static inline void abortAfterOutput(MPI_Comm comm, int code) {
  fflush(stdout);
  fflush(stderr);
  const struct timespec forwarding = {0, 500 * 1000 * 1000};
  nanosleep(&forwarding, NULL);
  MPI_Abort(comm, code);
}

#endif
