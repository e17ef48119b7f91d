"""Buffers of a nonblocking call outlive the call, whatever Python collects: run as 2 ranks under
hooprun.

    test_lifetime.py collect   rank 0 posts iallreduce on an 80 MB array nothing else references,
                               drops the request and the Comm, runs the collector and fills a
                               fresh 80 MB array: that array must keep what it was given, and
                               rank 1's all-reduce must give the exact sum or raise, never
                               another sum. Several rounds, as the collector's timing varies.
    test_lifetime.py p2p       the same with an irecv and an isend of 80 MB: rank 1 sends to
                               rank 0 after rank 0 has dropped its receive.
    test_lifetime.py keep      rank 0 drops the Comm but keeps the request: the request keeps the
                               Comm alive, and wait() gives the exact sum on both ranks; once the
                               request goes too, the Comm is destroyed.
    test_lifetime.py exit      rank 0's script ends with an 80 MB iallreduce in flight: it exits
                               with status 0, and rank 1 gets the exact sum or AbortedError
                               (rank 0 aborted the call before its interpreter freed anything).

Every rank builds every rank's data from (rank, round), so each checks against a numpy reference.
The rounds are paced on a second communicator that the victims are split from.
"""
import gc
import os
import sys
import time
import weakref

import numpy as np

import hoop

MODE = sys.argv[1]
N = 10 * 1000 * 1000  # float64 elements: 80 MB, freed to the kernel and mapped again
ROUNDS = {"collect": 6, "p2p": 6, "keep": 2, "exit": 1}[MODE]

ctl = hoop.init("env://", timeout=60)
R, P = ctl.rank, ctl.size


def fail(msg):
    sys.stderr.write("rank %d: FAIL: %s\n" % (R, msg))
    sys.stderr.flush()
    os._exit(1)


def data(rank, rnd):
    return (np.arange(N, dtype=np.float64) % 251) * (rank + 1) + rnd


def check_sum(got, rnd, what):
    want = data(0, rnd) + data(1, rnd)
    if not np.array_equal(got, want):
        bad = np.flatnonzero(got != want)
        fail("%s: HOOP_OK with a wrong sum: %d of %d elements wrong, first %s" % (
            what, bad.size, N, [(int(i), got[i], want[i]) for i in bad[:4]]))


def fill_check(rnd, what):
    """A fresh array, on pages a freed one may have left: it must keep what it was given."""
    y = np.full(N, -7.0 - rnd)
    z = np.full(N, -9.0 - rnd)
    time.sleep(0.3)  # a call still running on freed pages would write here meanwhile
    for a, v in ((y, -7.0 - rnd), (z, -9.0 - rnd)):
        if not (a == v).all():
            fail("%s: a fresh array was overwritten (%d elements changed)" % (
                what, int((a != v).sum())))


if P != 2:
    fail("run as 2 ranks")

for rnd in range(ROUNDS):
    comm = ctl.split(0)
    comm.set_timeout(30)
    ctl.barrier()  # a split returns on one rank before the others have connected
    what = "%s round %d" % (MODE, rnd)
    if MODE in ("collect", "exit"):
        if R == 0:
            req = comm.iallreduce(data(0, rnd))
            if MODE == "exit":
                ctl.barrier()  # rank 1 joins now: data moves as the interpreter finalizes
                print("rank 0: the script ends with an 80 MB iallreduce in flight", flush=True)
                sys.exit(0)
            ref = weakref.ref(comm)
            del req, comm
            gc.collect()
            if ref() is not None:
                fail("%s: the Comm survived the collector" % what)
            fill_check(rnd, what)
        else:
            if MODE == "exit":
                ctl.barrier()
            t0 = time.time()
            try:
                check_sum(comm.allreduce(data(1, rnd)), rnd, what)
                outcome = "the exact sum"
            except hoop.HoopError as e:
                outcome = "%s (%s)" % (type(e).__name__, e)
                # A process that ends with a call in flight aborts it first, so that the call
                # cannot run on as the interpreter frees its buffers: its peer hears why, rather
                # than losing it.
                if MODE == "exit" and not isinstance(e, hoop.AbortedError):
                    fail("%s: %s; rank 0 did not abort its call in flight before it ended" % (
                        what, outcome))
            print("rank 1: %s: %s after %.2f s" % (what, outcome, time.time() - t0), flush=True)
            comm.destroy()
            if MODE == "exit":  # rank 0 is gone
                sys.exit(0)
    elif MODE == "p2p":
        if R == 0:
            reqs = [comm.irecv(np.zeros(N), 1), comm.isend(data(0, rnd), 1)]
            ref = weakref.ref(comm)
            del reqs, comm
            gc.collect()
            if ref() is not None:
                fail("%s: the Comm survived the collector" % what)
            ctl.barrier()  # rank 1 sends now, to a receive that is gone
            fill_check(rnd, what)
        else:
            ctl.barrier()
            outcomes = []
            try:
                comm.send(data(1, rnd), 0)
                outcomes.append("send ok")
            except hoop.HoopError as e:
                outcomes.append("send %s" % type(e).__name__)
            buf = np.zeros(N)
            try:
                comm.recv(buf, 0)
                if not np.array_equal(buf, data(0, rnd)):
                    fail("%s: recv gave HOOP_OK with other data than rank 0 sent" % what)
                outcomes.append("recv exact")
            except hoop.HoopError as e:
                outcomes.append("recv %s" % type(e).__name__)
            print("rank 1: %s: %s" % (what, ", ".join(outcomes)), flush=True)
            comm.destroy()
    else:  # keep
        req = comm.iallreduce(data(R, rnd))
        ref = weakref.ref(comm)
        del comm
        gc.collect()
        if ref() is None:
            fail("%s: the Comm was collected while a request of it was pending" % what)
        fill_check(rnd, what)
        check_sum(req.wait(), rnd, what)
        del req
        gc.collect()
        if ref() is not None:
            fail("%s: the Comm outlived its last request" % what)
    ctl.barrier()

ctl.destroy()
print("rank %d: %s: %d rounds passed" % (R, MODE, ROUNDS), flush=True)
