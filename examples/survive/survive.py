"""survive.py: the pattern of examples/survive/survive.c in Python (Comm.shrink).

    RANK=r WORLD_SIZE=n python3 survive.py [--steps N] [--victim R] [--kill-at K] [URL]

Each step all-reduces one number per rank and checks it against the members it knows of; rank R
(default 1) SIGKILLs itself at step K (default 5 of 10). The survivors' call raises;
they shrink, and learn who is left and the lowest step any of them is in (one whose all-reduce
completed, the dead rank having sent its part, is a step ahead); they go on from there. Start the ranks without hooprun (it ends
a job at its first death).
"""
import argparse
import array
import os
import signal
import sys

import hoop

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=10)
ap.add_argument("--victim", type=int, default=1)
ap.add_argument("--kill-at", type=int, default=5)
ap.add_argument("url", nargs="?")
args = ap.parse_args()
url, steps, victim, kill_at = args.url, args.steps, args.victim, args.kill_at

comm = hoop.init(url)
old_rank = comm.rank
members = list(range(comm.size))
left_behind = []  # old Comms, destroyed at the end: they tell a stopped rank it was left out
k = 0
while k < steps:
    if k == kill_at and old_rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    x = array.array("d", [(old_rank + 1) * k])
    try:
        comm.allreduce(x)
    except (hoop.PeerLostError, hoop.AbortedError, hoop.TimeoutError) as e:
        print("survive: rank %d: step %d failed (%s); shrinking" % (old_rank, k, e), file=sys.stderr)
        left_behind.append(comm)
        comm = comm.shrink()
        got = array.array("i", [0] * (2 * comm.size))
        comm.allgather(array.array("i", [old_rank, k]), got)
        members, k = list(got[0::2]), min(got[1::2])
        if comm.rank == 0:
            print("survive: step %d goes on with %d ranks" % (k, comm.size))
        continue
    want = sum((m + 1) * k for m in members)
    if x[0] != want:
        sys.exit("survive: rank %d: step %d: sum %g, want %g" % (old_rank, k, x[0], want))
    k += 1
if comm.rank == 0:
    print("survive: %d steps checked, %d ranks at the end" % (steps, comm.size))
for c in left_behind + [comm]:
    c.destroy()
