"""One rank of `srun python3 launched.py`: hoop.init() with no hoop rendezvous variables, rank and
size checked against Slurm's own, then all-reduce and all-gather results against a numpy
reference. Prints "rank R: N checks passed, F failed"; exit status 0 when F == 0."""
import os
import sys

import numpy as np

import hoop

for v in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "HOOP_JOB_ID"):
    if v in os.environ:
        sys.exit("launched.py: %s is set" % v)
rank, size = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("rank %d: FAIL %s" % (rank, what), flush=True)


comm = hoop.init()
check(comm.rank == rank and comm.size == size,
      "hoop says rank %d of %d, Slurm %d of %d" % (comm.rank, comm.size, rank, size))
for n in (0, 1, 7, 1031):
    x = (np.arange(n, dtype=np.int64) % 97) * 5 + (rank + 1) * 3
    got = comm.allreduce(x)
    want = sum((np.arange(n, dtype=np.int64) % 97) * 5 + (r + 1) * 3 for r in range(size))
    check(np.array_equal(got, want), "int64 sum of %d" % n)
mine = np.array([rank, rank * rank], dtype=np.int32)
allg = np.empty(2 * size, dtype=np.int32)
comm.allgather(mine, allg)
check(np.array_equal(allg, np.array([[r, r * r] for r in range(size)]).ravel()), "all-gather")
comm.destroy()
print("rank %d: %d checks passed, %d failed" % (rank, passed, failed), flush=True)
sys.exit(0 if failed == 0 and passed > 0 else 1)
