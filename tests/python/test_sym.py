"""Arrays on symmetric memory (hoop.empty, hoop.zeros): run as N ranks under hooprun.

    test_sym.py colls   all-reduce (every op, in and out of place), reduce-scatter, all-gather and
                        broadcast on such arrays, float32, float64, int32 and int64, against a
                        numpy reference built on every rank from every rank's data; each call
                        must take the zero-copy engine (its schedule trace names the peers'
                        buffers), and a rank with an ordinary output must fall back, still right.
                        With torch: a tensor from hoop.empty(comm, n, torch.float32).
    test_sym.py life    when memory goes: an array let go on one rank only stays; on every rank,
                        it is freed at the next collective point (and not while a view lives);
                        a thousand allocate-and-drop rounds hold no more than two mappings; a
                        nonblocking call keeps its array; arguments that differ fail every rank
                        and leave the Comm usable; destroy() under a live array leaves it
                        readable, and the memory goes with the array.
"""
import ctypes
import gc
import os
import sys

import numpy as np

import hoop

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import hooptest  # noqa: E402 - the tests' shared checks, in tests/common

MODE = sys.argv[1]
comm = hoop.init("env://", timeout=60)
R, P = comm.rank, comm.size
T = hooptest.Rank(R)
fail, check = T.fail, T.expect
N = 80 * 1024  # elements per rank: above the sizes where the planner picks point to point


def sym_maps():
    """Mappings of symmetric memory in this process (the memfd is named hoop-sym)."""
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if "hoop-sym" in line)


# The schedule trace: the zero-copy engine's steps name every rank's input or output.
_lines = []
_TRACE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)(
    lambda ctx, line: _lines.append(line.decode(errors="replace")))
_set_trace = hoop._library.load().hoop_comm_set_trace
_set_trace.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
_set_trace.restype = ctypes.c_int


def zero_copy(since):
    return sum(1 for line in _lines[since:]
               if "from every rank's input" in line or "into every rank's output" in line
               or "from where it lies" in line)


def data(rank, dtype, n, salt):
    if salt == "prod":  # small factors: every product exact in every dtype and order
        return ((np.arange(n, dtype=np.int64) * 7 + rank * 13) % 4 + 1).astype(dtype)
    return ((np.arange(n, dtype=np.int64) * 7 + rank * 13 + salt) % 97 + 1).astype(dtype)


def reference(dtype, n, op):
    every = [data(q, dtype, n, "prod" if op == "prod" else 3) for q in range(P)]
    if op == "sum":
        return sum(every[1:], every[0].copy())
    if op == "prod":
        out = every[0].copy()
        for a in every[1:]:
            out = out * a
        return out
    return (np.minimum if op == "min" else np.maximum).reduce(every)


def run_colls():
    _set_trace(comm._h, ctypes.cast(_TRACE, ctypes.c_void_p), None)
    for dtype in ("float32", "float64", "int32", "int64"):
        for op in ("sum", "prod", "min", "max"):
            salt = "prod" if op == "prod" else 3
            for inplace in (True, False):
                x = hoop.empty(comm, N, dtype)
                x[...] = data(R, dtype, N, salt)
                at = len(_lines)
                if inplace:
                    comm.allreduce(x, op=op)
                    got = x
                else:
                    got = hoop.zeros(comm, (N // 8, 8), dtype)
                    comm.allreduce(x, got.reshape(-1), op=op)
                    check(np.array_equal(x, data(R, dtype, N, salt)),
                          "allreduce out of place changed its input")
                what = "allreduce %s %s %s" % (dtype, op, "in place" if inplace else "apart")
                check(np.array_equal(got.reshape(-1), reference(dtype, N, op)),
                      "%s: wrong result" % what)
                check(zero_copy(at) > 0, "%s did not take the zero-copy engine" % what)
        # reduce-scatter: rank q's block of the sum
        x = hoop.empty(comm, N * P, dtype)
        x[...] = np.concatenate([data(R, dtype, N, 5 + b) for b in range(P)])
        out = hoop.empty(comm, N, dtype)
        at = len(_lines)
        comm.reduce_scatter(x, out)
        want = sum(data(q, dtype, N, 5 + R) for q in range(P))
        check(np.array_equal(out, want), "reduce_scatter %s: wrong result" % dtype)
        check(zero_copy(at) > 0, "reduce_scatter %s did not take the zero-copy engine" % dtype)
        # all-gather into a symmetric array, then broadcast from the last rank
        mine = hoop.empty(comm, N, dtype)
        mine[...] = data(R, dtype, N, 9)
        at = len(_lines)
        comm.allgather(mine, x)
        check(np.array_equal(x, np.concatenate([data(q, dtype, N, 9) for q in range(P)])),
              "allgather %s: wrong result" % dtype)
        check(zero_copy(at) > 0, "allgather %s did not take the zero-copy engine" % dtype)
        at = len(_lines)
        comm.broadcast(mine, root=P - 1)
        check(np.array_equal(mine, data(P - 1, dtype, N, 9)), "broadcast %s: wrong" % dtype)
        # The root has nothing to copy; the others' step shows the engine, agreed by every rank.
        check(zero_copy(at) > 0 or R == P - 1,
              "broadcast %s did not take the zero-copy engine" % dtype)
        del x, out, mine
    # Rank 0's output is ordinary memory: every rank falls back, with the same result.
    x = hoop.empty(comm, N, "float64")
    x[...] = data(R, "float64", N, 3)
    o = hoop.empty(comm, N, "float64")
    out = np.zeros(N) if R == 0 else o
    at = len(_lines)
    comm.allreduce(x, out)
    check(np.array_equal(out, reference("float64", N, "sum")), "mixed allreduce: wrong result")
    check(zero_copy(at) == 0, "mixed allreduce took the zero-copy engine")
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        t = hoop.empty(comm, N, torch.float32)
        check(isinstance(t, torch.Tensor) and t.dtype == torch.float32, "not a float32 tensor")
        t.copy_(torch.from_numpy(data(R, "float32", N, 3)))
        at = len(_lines)
        comm.allreduce(t)
        check(np.array_equal(t.numpy(), reference("float32", N, "sum")), "tensor: wrong sum")
        check(zero_copy(at) > 0, "the tensor's allreduce did not take the zero-copy engine")
        b = hoop.zeros(comm, N, torch.bfloat16)
        check(b.dtype == torch.bfloat16 and not b.any(), "bfloat16 zeros")
    _set_trace(comm._h, None, None)


def run_life():
    base = sym_maps()
    a = hoop.zeros(comm, N, "float64")
    check(sym_maps() == base + 1, "one allocation, one mapping")
    if R == 0:
        del a
        gc.collect()
    check(comm.reclaim() == 0, "freed while rank 1 still holds it")
    check(sym_maps() == base + 1, "unmapped while a rank holds it")
    if R != 0:
        del a
        gc.collect()
    check(comm.reclaim() == 1, "not freed once every rank let go")
    check(sym_maps() == base, "still mapped after the free")
    # A view keeps the memory, and a collective on it is still right.
    a = hoop.empty(comm, N, "int64")
    a[...] = R + 1
    v = a[N // 2:]
    del a
    gc.collect()
    check(comm.reclaim() == 0, "freed under a live view")
    comm.allreduce(v)
    check((v == P * (P + 1) // 2).all(), "allreduce on a view: wrong sum")
    del v
    gc.collect()
    # Allocate-and-drop: each hoop.empty frees the ones let go everywhere first.
    for i in range(1000):
        x = hoop.empty(comm, 4096 + i % 3, "uint8")
        x[...] = R
        del x
        check(sym_maps() - base <= 2, "round %d: %d mappings held" % (i, sym_maps() - base))
    # A nonblocking call keeps its array: dropped by every rank at once, the call completes
    # right and the memory goes only after it.
    y = hoop.empty(comm, N, "float32")
    y[...] = R + 1
    req = comm.iallreduce(y)
    del y
    gc.collect()
    got = req.wait()
    check((got == P * (P + 1) / 2).all(), "iallreduce on a dropped array: wrong sum")
    del got, req
    gc.collect()
    comm.reclaim()
    check(sym_maps() == base, "%d mappings left" % (sym_maps() - base))
    # Arguments that differ: an error on every rank, and the Comm goes on.
    for shape, dtype in (((N + (R == P - 1),), "float32"), ((N,), "float32" if R else object),
                         ((0 if R == 1 else N,), "float32")):
        try:
            hoop.empty(comm, shape, dtype)
            fail("hoop.empty(%r, %r) with the ranks' sizes differing did not fail" % (shape,
                                                                                    dtype))
        except hoop.InvalidArgumentError as e:
            check("size" in str(e) or "dtype" in str(e), "unclear sentence: %s" % e)
    z = np.full(8, R + 1.0)
    comm.allreduce(z)
    check((z == P * (P + 1) / 2).all(), "the Comm is not usable after a refused allocation")
    # destroy() under a live array: it stays readable and writable; the memory goes with it.
    w = hoop.zeros(comm, N, "float64")
    w[...] = R + 0.5
    view = w[::2]
    comm.barrier()
    comm.destroy()
    try:
        comm.allreduce(np.zeros(4))
        fail("a call after destroy() did not fail")
    except hoop.InvalidArgumentError:
        pass
    w[1] = 3.0
    check(w[1] == 3.0 and (view == R + 0.5).all(), "the array changed under destroy()")
    check(sym_maps() == base + 1, "the memory went under a live array")
    del w
    gc.collect()
    check(sym_maps() == base + 1, "the memory went under a live view")
    del view
    gc.collect()
    check(sym_maps() == base, "the memory stayed after the last array went")


if MODE == "colls":
    run_colls()
else:
    run_life()
print("rank %d: %s: %d checks passed" % (R, MODE, T.checks))
sys.stdout.flush()
