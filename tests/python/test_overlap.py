"""Send and receive buffers that partly overlap, from Python: numpy views of one array, run as
every rank under hooprun.

For each collective with two buffers, the send view starts k elements after or before the receive
view in the same array (k from one element to all but one), a partial overlap that is none of the
in-place forms. Every rank computes the expected result with numpy from every rank's input and
checks recvbuf, and that the rest of the array (the input outside recvbuf) is unchanged. Blocking
and nonblocking calls, under the default algorithm choice and forced ones.

usage (under hooprun): test_overlap.py [TRANSPORT]
"""
import os
import sys

import numpy as np

import hoop

if len(sys.argv) > 1:  # the transport, for hoop.init to read
    os.environ["HOOP_TRANSPORT"] = sys.argv[1]
comm = hoop.init("env://", timeout=60)
R, P = comm.rank, comm.size
checks = 0


def fail(msg):
    sys.stderr.write("rank %d: FAIL: %s\n" % (R, msg))
    sys.exit(1)


def data(rank, n, dt, salt):
    """Rank `rank`'s input: integers within +-7, so that sums and maxima are exact."""
    rng = np.random.default_rng([rank, n, salt])
    return rng.integers(-7, 8, size=n).astype(dt)


def reduced(inputs, op):
    wide = np.array([x.astype(np.float64) for x in inputs])
    return {"sum": wide.sum(0), "max": wide.max(0), "min": wide.min(0)}[op]


def run(fn, nb):
    """Calls fn(nb): blocking, or nonblocking and waited for."""
    r = fn(nb)
    if nb:
        r.wait()


def case(kind, n, k, dt, op, root, salt, nb, what):
    """sendbuf = recvbuf shifted by k elements (negative: before it) inside one array."""
    global checks
    p = P
    ins = {"allreduce": n, "reduce": n, "allgather": n, "gather": n, "scatter": n * p,
           "reduce_scatter": n * p, "alltoall": n * p}[kind]
    outs = {"allreduce": n, "reduce": n, "allgather": n * p, "gather": n * p, "scatter": n,
            "reduce_scatter": n, "alltoall": n * p}[kind]
    uses_out = kind not in ("reduce", "gather") or R == root
    uses_in = kind != "scatter" or R == root
    lo, hi = min(0, k), max(outs, k + ins)
    base = np.full(hi - lo + 6, 99, dtype=dt)
    r0, s0 = 3 - lo, 3 - lo + k
    recv, send = base[r0:r0 + outs], base[s0:s0 + ins]
    mine = data(R, ins, dt, salt)
    send[...] = mine
    # Ranks whose buffer is unused pass a separate one (or none).
    if not uses_out:
        recv = None
    if not uses_in:
        send = None
    before = base.copy()
    every = [data(q, ins, dt, salt) for q in range(p)]
    if kind == "allreduce":
        want = reduced(every, op)
        run(lambda b: (comm.iallreduce if b else comm.allreduce)(send, recv, op=op), nb)
    elif kind == "reduce":
        want = reduced(every, op)
        run(lambda b: (comm.ireduce if b else comm.reduce)(send, recv, op=op, root=root), nb)
    elif kind == "allgather":
        want = np.concatenate(every)
        run(lambda b: (comm.iallgather if b else comm.allgather)(send, recv), nb)
    elif kind == "gather":
        want = np.concatenate(every)
        run(lambda b: (comm.igather if b else comm.gather)(send, recv, root=root), nb)
    elif kind == "scatter":
        want = every[root][R * n:(R + 1) * n]
        run(lambda b: (comm.iscatter if b else comm.scatter)(send, recv, root=root), nb)
    elif kind == "reduce_scatter":
        want = reduced(every, op)[R * n:(R + 1) * n]
        run(lambda b: (comm.ireduce_scatter if b else comm.reduce_scatter)(send, recv, op=op), nb)
    else:
        want = np.concatenate([e[R * n:(R + 1) * n] for e in every])
        run(lambda b: (comm.ialltoall if b else comm.alltoall)(send, recv), nb)
    label = "%s %s n=%d k=%+d %s %s root=%d" % (what, kind, n, k, dt, op, root)
    expected = before.copy()
    if uses_out:
        expected[r0:r0 + outs] = np.asarray(want).astype(dt)
    if not np.array_equal(base, expected):
        bad = np.flatnonzero(base != expected)
        fail("%s: wrong elements (index from recvbuf, got, want) %s" % (
            label, [(int(i) - r0, base[i].item(), expected[i].item()) for i in bad[:6]]))
    checks += 1


def shifts(kind, n, root):
    """Partial overlaps of this rank's buffers, none an in-place form."""
    p = P
    ins = {"scatter": n * p, "reduce_scatter": n * p, "alltoall": n * p}.get(kind, n)
    outs = {"allgather": n * p, "gather": n * p, "alltoall": n * p}.get(kind, n)
    in_place = {0} if kind in ("allreduce", "reduce", "alltoall") else set()
    if kind in ("allgather", "gather"):
        in_place = {R * n}
    if kind == "scatter":
        in_place = {-root * n}
    if kind == "reduce_scatter":
        in_place = {0, -R * n}
    ks = []
    for k in (1, -1, outs - 1, -(ins - 1), outs // 2 + 1, -(ins // 2) - 1):
        if -ins < k < outs and k not in in_place and k not in ks:
            ks.append(k)
    return ks


KINDS = ["allreduce", "reduce", "allgather", "gather", "scatter", "reduce_scatter", "alltoall"]
salt = 0
for algo in ["auto", "ring", "p2p", "shm"]:
    comm.set_algo(algo)
    for kind in KINDS:
        for n, dt, op in [(7, "int32", "sum"), (1031, "float32", "max"), (70001, "int32", "sum"),
                          (5, "int8", "min")]:
            root = (salt + KINDS.index(kind)) % P
            # The same number of calls on every rank: each rank's own shifts, cycled.
            mine = shifts(kind, n, root)
            for j in range(6):
                salt += 1
                uses_both = (kind not in ("reduce", "gather", "scatter")) or R == root
                k = mine[(j + R) % len(mine)] if mine and uses_both else 0
                if k == 0 and uses_both:
                    # Nothing partial to try here (e.g. one element): out of place instead.
                    k = n * P * 2 + 1
                case(kind, n, k, dt, op, root, salt, j % 2 == 1, "algo=%s" % algo)

total = np.zeros(1, np.int64)
comm.allreduce(np.array([checks], np.int64), total)
comm.destroy()
print("rank %d: %d checks passed (%d on all ranks)" % (R, checks, int(total[0])))
