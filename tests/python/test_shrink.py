"""Comm.shrink from Python: 4 ranks, started here as processes of this script (hooprun would end
the job at the first death), over a file:// rendezvous. Rank VICTIM SIGKILLs itself after a
first all-reduce; the others' next all-reduce raises, they shrink, and the new Comm's all-reduce
is checked against the sum over the surviving old ranks, computed here. Then every survivor
excludes new rank 0 (Comm.shrink(exclude=[0])): that rank gets None, the others a Comm without it.
Only the standard library (array.array buffers), so that it runs without numpy.

usage: test_shrink.py TRANSPORT VICTIM       (the parent)
"""
import array
import os
import signal
import subprocess
import sys
import tempfile

import hoop

N = 4
COUNT = 1000


def value(r, i, k):
    """Old rank r's element i in round k: distinct per rank."""
    return (i * 2654435761 ^ ((r + 1) * 40503 + k * 977)) & 0xFFFFFFFF


def rank_main(rank, victim, rdv):
    comm = hoop.init("file://" + rdv, rank, N, timeout=10)
    buf = array.array("I", [value(rank, i, 0) for i in range(COUNT)])
    comm.allreduce(buf)
    want = [sum(value(r, i, 0) for r in range(N)) & 0xFFFFFFFF for i in range(COUNT)]
    assert list(buf) == want, "rank %d: the first all-reduce is wrong" % rank
    if rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    buf = array.array("I", [value(rank, i, 1) for i in range(COUNT)])
    try:
        comm.allreduce(buf)
    except (hoop.PeerLostError, hoop.AbortedError, hoop.TimeoutError) as e:
        print("rank %d: the all-reduce failed as expected: %s" % (rank, type(e).__name__))
    else:
        raise AssertionError("rank %d: an all-reduce without rank %d succeeded" % (rank, victim))
    survivors = [r for r in range(N) if r != victim]
    nc = comm.shrink()
    assert nc.size == N - 1 and nc.rank == survivors.index(rank), \
        "rank %d: new rank %d of %d" % (rank, nc.rank, nc.size)
    buf = array.array("I", [value(rank, i, 2) for i in range(COUNT)])
    nc.allreduce(buf)
    want = [sum(value(r, i, 2) for r in survivors) & 0xFFFFFFFF for i in range(COUNT)]
    bad = sum(1 for a, b in zip(buf, want) if a != b)
    assert bad == 0, "rank %d: %d elements differ from the survivors' sum" % (rank, bad)
    # The exclude form on the healthy shrunk Comm: the first survivor leaves.
    nc2 = nc.shrink(exclude=[0])
    if nc.rank == 0:
        assert nc2 is None, "the excluded rank got a communicator"
    else:
        rest = survivors[1:]
        assert nc2.size == len(rest) and nc2.rank == rest.index(rank)
        buf = array.array("I", [value(rank, i, 3) for i in range(COUNT)])
        nc2.allreduce(buf)
        want = [sum(value(r, i, 3) for r in rest) & 0xFFFFFFFF for i in range(COUNT)]
        assert list(buf) == want, "rank %d: the second shrink's all-reduce is wrong" % rank
        nc2.destroy()
    nc.destroy()
    comm.destroy()
    print("rank %d: ok" % rank)


def main():
    if len(sys.argv) == 5:
        rank_main(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
        return 0
    transport, victim = sys.argv[1], int(sys.argv[2])
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, HOOP_TRANSPORT=transport)
        procs = [subprocess.Popen([sys.executable, __file__, "rank", str(r), str(victim),
                                   os.path.join(d, "rdv")], env=env) for r in range(N)]
        failed = 0
        for r, p in enumerate(procs):
            try:
                rc = p.wait(timeout=90)
            except subprocess.TimeoutExpired:
                for q in procs:
                    if q.poll() is None:
                        q.kill()
                print("FAIL: rank %d did not finish" % r)
                return 1
            want = -signal.SIGKILL if r == victim else 0
            if rc != want:
                print("FAIL: rank %d ended with %d, expected %d" % (r, rc, want))
                failed = 1
        return failed


if __name__ == "__main__":
    sys.exit(main())
