#!/usr/bin/env python3
"""mpi4py + numpy conformance test for MPI_Allreduce / MPI_Iallreduce.

Run:  mpirun -np N /usr/bin/python3 tests/python/test_mpi4py.py

Uses mpi4py's buffer-based ``Comm.Allreduce`` and ``Comm.Iallreduce`` (these
call MPI_Allreduce / MPI_Iallreduce, which an LD_PRELOADed shim such as
libgfshim intercepts; the lowercase pickle-based ``allreduce`` does not) on
numpy buffers:

  * dtypes float32, float64, int32, int64; ops SUM, MAX, MIN
  * sizes 0, 1, 7, p+1, 1000, 1<<20; in place (MPI.IN_PLACE) and not
  * Allreduce, Iallreduce(...).Wait(), and many Iallreduce outstanding at
    once completed with MPI.Request.Waitall
  * on COMM_WORLD and on a split communicator (odd/even ranks, rank order
    reversed inside each half)

Data are integer valued, so the expected result is computed exactly in numpy
and compared bit for bit; every rank's result is also compared with rank 0's
(broadcast with Comm.Bcast).  Receive buffers are pre-filled with 0xA5 bytes
(never zeros) and send buffers are checked to be unmodified.

Prints one line per failure, then on rank 0 a final line "N passed, N failed"
(a check fails if it failed on any rank); exit status 1 on failure.
"""
import sys
import traceback

import numpy as np
from mpi4py import MPI

DTYPES = [np.float32, np.float64, np.int32, np.int64]
OPS = [("SUM", MPI.SUM), ("MAX", MPI.MAX), ("MIN", MPI.MIN)]
BIG = 1 << 20
POISON = 0xA5
GUARD = 16  # poisoned elements after every receive buffer
# bit-pattern views for exact comparison
UINT_OF = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


class Checker:
    """Records one pass/fail flag per check, in the same order on every rank."""

    def __init__(self, world):
        self.world = world
        self.flags = []
        self.lines = 0

    def record(self, name, problems):
        self.flags.append(bool(problems))
        for p in problems:
            self.lines += 1
            if self.lines <= 40:
                print("FAIL[rank %d] %s: %s" % (self.world.Get_rank(), name, p), flush=True)
            elif self.lines == 41:
                print("FAIL[rank %d] ... further failure lines suppressed" % self.world.Get_rank(),
                      flush=True)


def gen(n, rank, salt, opname):
    """int64 data for one rank: small values for SUM (exact in float32 too),
    wider ones with many ties for MAX/MIN."""
    i = np.arange(n, dtype=np.int64)
    if opname == "SUM":
        return (i * 7 + rank * 13 + salt) % 17 - 8
    return (i * 2654435761 + rank * 40503 + salt * 97) % 20001 - 10000


_expected_cache = {}  # only for n == BIG, where computing it is costly


def expected(n, size, salt, opname):
    """Exact int64 reduction over all ranks of the communicator."""
    key = (n, size, salt, opname)
    if key in _expected_cache:
        return _expected_cache[key]
    acc = gen(n, 0, salt, opname)
    for r in range(1, size):
        d = gen(n, r, salt, opname)
        if opname == "SUM":
            acc = acc + d
        elif opname == "MAX":
            acc = np.maximum(acc, d)
        else:
            acc = np.minimum(acc, d)
    if n == BIG:
        _expected_cache[key] = acc
    return acc


def poisoned(n, dtype):
    a = np.empty(n, dtype=dtype)
    a.view(np.uint8)[:] = POISON
    return a


def bits(a):
    return a.view(UINT_OF[a.dtype.itemsize])


def first_diff(a, b):
    d = np.nonzero(bits(a) != bits(b))[0]
    return int(d[0]) if d.size else -1


class Case:
    """One (comm, dtype, op, n, inplace, api) check with its buffers.  The
    buffers live in this object until the check is finished: the MPI standard
    requires that the send buffer is not modified (and the receive buffer not
    accessed) until a non-blocking operation has completed, so they must stay
    alive (and untouched) until Wait/Waitall returns."""

    def __init__(self, cname, comm, dtype, opname, op, n, inplace, api, salt):
        self.cname, self.comm, self.dtype = cname, comm, np.dtype(dtype)
        self.opname, self.op, self.n, self.inplace, self.api = opname, op, n, inplace, api
        self.salt = salt
        rank = comm.Get_rank()
        self.input = gen(n, rank, salt, opname).astype(self.dtype)
        # the receive buffer is the head of a larger poisoned array, so that
        # writes past its end are caught
        self.backing = poisoned(n + GUARD, self.dtype)
        self.recv = self.backing[:n]
        if inplace:
            self.send = None
            self.recv[:] = self.input
        else:
            self.send = self.input.copy()
        self.req = None
        self.problems = []

    @property
    def name(self):
        return "comm=%s dtype=%s op=%s n=%d inplace=%s api=%s" % (
            self.cname, self.dtype.name, self.opname, self.n, self.inplace, self.api)

    def start(self):
        sbuf = MPI.IN_PLACE if self.inplace else self.send
        try:
            if self.api == "Allreduce":
                self.comm.Allreduce(sbuf, self.recv, self.op)
            else:
                self.req = self.comm.Iallreduce(sbuf, self.recv, self.op)
        except MPI.Exception as e:
            self.problems.append("raised MPI error %s" % e.Get_error_string())
            self.req = None

    def check(self):
        """Local checks plus the cross-rank Bcast (collective: every rank of
        the communicator calls this for the same cases in the same order)."""
        exp = expected(self.n, self.comm.Get_size(), self.salt, self.opname).astype(self.dtype)
        if self.send is not None and not np.array_equal(bits(self.send), bits(self.input)):
            self.problems.append("send buffer modified at index %d" % first_diff(self.send, self.input))
        if first_diff(self.backing[self.n:], poisoned(GUARD, self.dtype)) >= 0:
            self.problems.append("wrote past the end of the receive buffer")
        j = first_diff(self.recv, exp)
        if j >= 0:
            self.problems.append("wrong result at index %d: got %r expected %r" %
                                 (j, self.recv[j], exp[j]))
        # identical bits on every rank: compare with rank 0's result
        if self.comm.Get_rank() == 0:
            ref = self.recv.copy()
        else:
            ref = poisoned(self.n, self.dtype)
        self.comm.Bcast(ref, root=0)
        j = first_diff(self.recv, ref)
        if j >= 0:
            self.problems.append("result differs from rank 0's at index %d" % j)


def run(world):
    ck = Checker(world)
    p = world.Get_size()
    rank = world.Get_rank()
    split = world.Split(rank % 2, p - rank)  # reversed rank order in each half
    comms = [("world", world), ("split(odd/even,reversed)", split)]
    for _, c in comms:
        c.Set_errhandler(MPI.ERRORS_RETURN)

    for cname, comm in comms:
        cp = comm.Get_size()
        sizes = [0, 1, 7, cp + 1, 1000, BIG]
        # 1. blocking and Iallreduce(...).Wait(), one at a time
        for api_i, api in enumerate(["Allreduce", "Iallreduce"]):
            for dtype in DTYPES:
                for opname, op in OPS:
                    for n in sizes:
                        for inplace in (False, True):
                            salt = 2 * api_i + int(inplace) + (0 if n == BIG else n)
                            c = Case(cname, comm, dtype, opname, op, n, inplace, api, salt)
                            try:
                                c.start()
                                if c.req is not None:
                                    c.req.Wait()
                                    if c.req != MPI.REQUEST_NULL:
                                        c.problems.append("request not REQUEST_NULL after Wait")
                            except Exception as e:  # keep going: same collectives on all ranks
                                c.problems.append("exception %r" % e)
                            c.check()
                            ck.record(c.name, c.problems)

        # 2. many Iallreduce outstanding at once, completed with Waitall
        #    (all small/medium sizes of all dtype/op combos together, then the
        #    big ones per dtype).  The Case objects keep every buffer alive
        #    until Waitall has returned.
        groups = [[n for n in sizes if n != BIG]] + [[BIG]]
        for gi, group in enumerate(groups):
            for dsel in ([DTYPES] if gi == 0 else [[d] for d in DTYPES]):
                batch = []
                for dtype in dsel:
                    for opname, op in OPS:
                        for k, n in enumerate(group):
                            inplace = bool((k + len(batch)) % 2)
                            batch.append(Case(cname, comm, dtype, opname, op, n, inplace,
                                              "Iallreduce+Waitall", 5 + len(batch)))
                for c in batch:
                    c.start()
                reqs = [c.req for c in batch if c.req is not None]
                try:
                    MPI.Request.Waitall(reqs)
                    if any(r != MPI.REQUEST_NULL for r in reqs):
                        for c in batch:
                            c.problems.append("request not REQUEST_NULL after Waitall")
                except Exception as e:
                    for c in batch:
                        c.problems.append("Waitall raised %r" % e)
                for c in batch:
                    c.check()
                    ck.record(c.name, c.problems)
        _expected_cache.clear()
    split.Free()
    return ck


def launcher_size():
    """World size according to the launcher (Open MPI mpirun or MPICH hydra)."""
    import os
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        if var in os.environ:
            try:
                return var, int(os.environ[var])
            except ValueError:
                pass
    return None, None


def main():
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    var, lsize = launcher_size()
    if lsize is not None and lsize != world.Get_size():
        # e.g. Debian's mpi4py (built for Open MPI) started by MPICH's mpiexec:
        # every process is a singleton and the test would pass vacuously
        print("FAIL: launcher says %s=%d but MPI_COMM_WORLD has %d process(es); "
              "mpi4py is linked against a different MPI (%s) than the launcher"
              % (var, lsize, world.Get_size(), MPI.Get_library_version().splitlines()[0]),
              flush=True)
        print("0 passed, 1 failed", flush=True)
        return 1
    try:
        ck = run(world)
    except Exception:
        # a Python error in the test itself: do not leave the others hanging
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        world.Abort(2)
    # Gather every rank's per-check flags (pickle-based gather = MPI_Gather,
    # not the operation under test); a check fails if it failed on any rank.
    allflags = world.gather(ck.flags, root=0)
    failed = 0
    if rank == 0:
        if len(set(len(f) for f in allflags)) != 1:
            print("FAIL internal: ranks ran different numbers of checks", flush=True)
            failed = 1
            passed = 0
        else:
            per_check = [any(fl) for fl in zip(*allflags)]
            failed = sum(per_check)
            passed = len(per_check) - failed
        print("%d passed, %d failed" % (passed, failed), flush=True)
    failed = world.bcast(failed, root=0)
    return 1 if failed else 0


if __name__ == "__main__":
    rc = main()
    MPI.Finalize()
    sys.exit(rc)
