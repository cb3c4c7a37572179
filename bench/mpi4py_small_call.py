"""One 8-byte MPI_Iallreduce + Wait from mpi4py (which asks for MPI_THREAD_MULTIPLE): the median of
2000 calls, twice (two halves of one run, to see the spread). Whether the shim takes part depends
on LD_PRELOAD alone, so run it with and without:

    mpirun -np 2 --bind-to none -x LD_PRELOAD=$PWD/build/libgfshim.so /usr/bin/python3 bench/mpi4py_small_call.py
    mpirun -np 2 --bind-to none /usr/bin/python3 bench/mpi4py_small_call.py
"""
from mpi4py import MPI
import numpy as np, time
comm = MPI.COMM_WORLD
a = np.ones(2, dtype=np.float32); b = np.empty_like(a)
for half in ("first", "second"):
    times = []
    for i in range(2000):
        t = time.perf_counter()
        r = comm.Iallreduce(a, b); r.Wait()
        times.append(time.perf_counter() - t)
    times.sort()
    if comm.rank == 0:
        print(half, "half: 8 B Iallreduce+Wait median us:", round(times[len(times) // 2] * 1e6, 2))
