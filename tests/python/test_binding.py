"""The ctypes binding on numpy arrays, run as every rank under hooprun.

Every rank builds every rank's input from (rank, call number), so each one computes the expected
result with numpy alone and compares all elements. Integer-valued data keep float sums exact, so
the comparison is exact whatever order hoop reduces in.

With HOOP_TEST_DEVICE_MODULE (a CUDA module: the test double, or libhoop-cuda.so on a GPU) and
HOOP_TEST_DEVBUF (tests/cuda's libhoop-test-devbuf.so, which allocates and copies through that
module), the collective and point-to-point checks run on device buffers instead: every numpy
array a check hands the binding is replaced by a twin in device memory, shown through
__cuda_array_interface__, and copied back once the call (or its request) is done, so that the
same checks compare what the device buffers hold. HOOP_TEST_STREAM=1 also orders every call on a
stream of the module (Comm.set_stream): the calls return without waiting for the device, and the
twins are copied back only after that stream has been waited for.
"""
import array
import gc
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

import hoop

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import hooptest  # noqa: E402 - the tests' shared checks, in tests/common

DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "uint32",
          "int64", "uint64"]
OPS = ["sum", "prod", "min", "max", "avg"]
SIZES = [0, 1, 7, 1031]
LARGE = 3 * 131072 + 5  # elements: several 512 KiB chunks and a ragged end

comm = hoop.init("env://", timeout=60)
R, P = comm.rank, comm.size
T = hooptest.Rank(R)
fail, expect, expect_raises = T.fail, T.expect, T.expect_raises
DEVICE = os.environ.get("HOOP_TEST_DEVICE_MODULE")
STREAM = None


# ---- bfloat16 lives in uint16 arrays: conversions for the reference ----

def bf16_to_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(f):
    b = np.asarray(f, np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def storage(dt):
    return np.uint16 if dt == "bfloat16" else np.dtype(dt)


def values(rank, n, dt, op, salt):
    """Integer-valued data of rank `rank`, small enough that no op overflows or rounds."""
    rng = np.random.default_rng([rank, n, DTYPES.index(dt), salt])
    if op == "prod":
        v = rng.choice([1, 2] if dt.startswith("u") else [1, 2, -1], size=n)
    elif dt.startswith("u"):
        v = rng.integers(0, 40, size=n)
    else:
        v = rng.integers(-20, 21, size=n)
    if dt == "bfloat16":
        return f32_to_bf16(v.astype(np.float32))
    return v.astype(dt)


def reference(inputs, dt, op):
    """Element-wise op over the ranks' inputs, in float64 / int64 arithmetic, then stored."""
    wide = [bf16_to_f32(x).astype(np.float64) if dt == "bfloat16" else
            x.astype(np.float64 if dt.startswith("f") else np.int64) for x in inputs]
    if op in ("sum", "avg"):
        out = sum(wide[1:], wide[0].copy())
    elif op == "prod":
        out = wide[0].copy()
        for w in wide[1:]:
            out = out * w
    elif op == "min":
        out = np.minimum.reduce(wide)
    else:
        out = np.maximum.reduce(wide)
    if op == "avg":
        if dt.startswith("f") or dt == "bfloat16":
            # hoop divides the exact sum once, in the element type (half types in float32).
            work = np.float32 if dt in ("float16", "bfloat16", "float32") else np.float64
            out = out.astype(work) / work(len(inputs))
        else:
            out = np.sign(out) * (np.abs(out) // len(inputs))  # truncation toward zero
    if dt == "bfloat16":
        return f32_to_bf16(np.asarray(out, np.float32))
    return np.asarray(out).astype(dt)


def same(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    ok = got.shape == want.shape and got.dtype == want.dtype and np.array_equal(got, want)
    if not ok:
        bad = np.flatnonzero(got.reshape(-1) != want.reshape(-1)) if got.shape == want.shape \
            else []
        fail("%s: %s %s against %s %s; first wrong elements %s" % (
            what, got.dtype, got.shape, want.dtype, want.shape,
            [(int(i), got.reshape(-1)[i], want.reshape(-1)[i]) for i in bad[:4]]))
    expect(True, what)


def kw(dt):
    return {"dtype": "bfloat16"} if dt == "bfloat16" else {}


salt = 0


def next_salt():
    global salt
    salt += 1
    return salt


# ---- device buffers (HOOP_TEST_DEVICE_MODULE) ----

if DEVICE:
    import ctypes
    _db = ctypes.CDLL(os.environ["HOOP_TEST_DEVBUF"])
    _db.devbuf_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    _db.devbuf_alloc.argtypes = [ctypes.c_size_t]
    _db.devbuf_alloc.restype = ctypes.c_void_p
    _db.devbuf_free.argtypes = [ctypes.c_void_p]
    _db.devbuf_copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    _db.devbuf_stream.restype = ctypes.c_void_p
    _db.devbuf_sync.argtypes = [ctypes.c_void_p]
    _err = ctypes.create_string_buffer(512)
    if _db.devbuf_open(DEVICE.encode(), _err, 512) != 0:
        print("rank %d: no CUDA device: %s" % (R, _err.value.decode()))
        sys.exit(77)
    STREAM = _db.devbuf_stream() if os.environ.get("HOOP_TEST_STREAM") == "1" else None
    if STREAM is not None:
        comm.set_stream(STREAM)
        expect(comm.stream == STREAM, "Comm.stream: %r, set %r" % (comm.stream, STREAM))


def _downloaded(twins):
    if STREAM is not None:  # the calls' work is queued there, not done
        _db.devbuf_sync(STREAM)
    for t in twins:
        t.download()


class DeviceArray:
    """A numpy array's twin in device memory, filled from it; download() copies it back."""

    def __init__(self, host):
        self.host = host
        self.work = np.ascontiguousarray(host)
        self.ptr = _db.devbuf_alloc(max(self.work.nbytes, 1))
        if self.work.nbytes:
            _db.devbuf_copy(self.ptr, self.work.ctypes.data, self.work.nbytes)
        self.__cuda_array_interface__ = {"data": (self.ptr, False), "shape": self.work.shape,
                                         "typestr": self.work.dtype.str, "strides": None,
                                         "version": 3}

    def download(self):
        if self.work.nbytes and self.host.flags.writeable:
            _db.devbuf_copy(self.work.ctypes.data, self.ptr, self.work.nbytes)
            if self.work is not self.host:
                self.host[...] = self.work

    def __del__(self):
        _db.devbuf_free(self.ptr)


def _to_host(r, twins):
    if isinstance(r, DeviceArray):
        return r.host
    if isinstance(r, tuple):
        return tuple(_to_host(x, twins) for x in r)
    return r


class DeviceRequest:
    """A request of a call on device twins: done, the twins are copied back."""

    def __init__(self, req, twins):
        self._req, self._twins = req, twins

    @property
    def source(self):
        return self._req.source

    def wait(self):
        try:
            r = self._req.wait()
        finally:
            _downloaded(self._twins)
        return _to_host(r, self._twins)

    def test(self):
        return self._req.test()


class DeviceComm:
    """comm, with every numpy array of a call replaced by its device twin (one twin per array, so
    that a call given one array twice stays in place)."""

    def __init__(self, c):
        self._c = c

    def __getattr__(self, name):
        f = getattr(self._c, name)
        if not callable(f):
            return f

        def call(*args, **kwargs):
            twins = {}

            def up(a):
                if isinstance(a, np.ndarray):
                    if id(a) not in twins:
                        twins[id(a)] = DeviceArray(a)
                    return twins[id(a)]
                return a
            r = f(*[up(a) for a in args], **{k: up(v) for k, v in kwargs.items()})
            if isinstance(r, hoop.Request):
                return DeviceRequest(r, list(twins.values()))
            _downloaded(twins.values())
            return _to_host(r, twins)
        return call


if DEVICE:
    comm = DeviceComm(comm)


# ---- collectives against the reference ----

def check_allreduce():
    for dt in DTYPES:
        for op in OPS:
            for n in SIZES:
                s = next_salt()
                inputs = [values(r, n, dt, op, s) for r in range(P)]
                want = reference(inputs, dt, op)
                mode = s % 4  # blocking / nonblocking, in place / out of place
                x = inputs[R].copy()
                if mode == 0:
                    got = comm.allreduce(x, op=op, **kw(dt))
                    expect(got is x, "allreduce in place returns its buffer")
                elif mode == 1:
                    got = comm.allreduce(x, np.empty_like(x), op=op, **kw(dt))
                    same(x, inputs[R], "allreduce leaves sendbuf alone")
                elif mode == 2:
                    got = comm.iallreduce(x, op=op, **kw(dt)).wait()
                else:
                    req = comm.iallreduce(x, np.empty_like(x), op=op, **kw(dt))
                    while not req.test():
                        pass
                    got = req.wait()
                same(got, want, "allreduce %s %s n=%d mode %d" % (dt, op, n, mode))
    for dt in ("float32", "int8"):
        s = next_salt()
        inputs = [values(r, LARGE, dt, "sum", s) for r in range(P)]
        same(comm.allreduce(inputs[R].copy()), reference(inputs, dt, "sum"),
             "allreduce %s n=%d" % (dt, LARGE))


def check_broadcast():
    for root in range(P):
        for dt in ("float64", "bfloat16", "uint8", "int64"):
            for n in SIZES + ([LARGE] if root == P - 1 and dt == "uint8" else []):
                s = next_salt()
                want = values(root, n, dt, "sum", s)
                x = want.copy() if R == root else np.zeros(n, storage(dt))
                if s % 2:
                    comm.broadcast(x, root, **kw(dt))
                else:
                    comm.ibroadcast(x, root=root, **kw(dt)).wait()
                same(x, want, "broadcast %s n=%d root %d" % (dt, n, root))


def check_reduce():
    for root in range(P):
        for dt, op in (("float32", "sum"), ("int32", "max"), ("float16", "prod"),
                       ("uint64", "avg"), ("bfloat16", "min"), ("int8", "avg")):
            for n in SIZES:
                s = next_salt()
                inputs = [values(r, n, dt, op, s) for r in range(P)]
                x = inputs[R].copy()
                inplace = s % 2 == 0
                out = None if inplace else np.zeros_like(x)
                req = comm.ireduce(x, out, op=op, root=root, **kw(dt)) if s % 3 == 0 else None
                got = req.wait() if req else comm.reduce(x, out, op=op, root=root, **kw(dt))
                what = "reduce %s %s n=%d root %d %s" % (dt, op, n, root,
                                                         "in place" if inplace else "")
                if R == root:
                    same(got, reference(inputs, dt, op), what)
                else:
                    expect(got is None, what + ": non-root gets None")
                    same(x, inputs[R], what + ": non-root sendbuf untouched")


def check_allgather_gather():
    for dt in ("float32", "int8", "bfloat16", "uint32"):
        for n in SIZES:
            s = next_salt()
            inputs = [values(r, n, dt, "sum", s) for r in range(P)]
            want = np.concatenate(inputs)
            out = np.zeros(P * n, storage(dt))
            if s % 2:
                comm.allgather(inputs[R], out, **kw(dt))
            else:  # in place: this rank's block already holds its contribution
                out[R * n:(R + 1) * n] = inputs[R]
                comm.iallgather(None, out, **kw(dt)).wait()
            same(out, want, "allgather %s n=%d %s" % (dt, n, "" if s % 2 else "in place"))
            for root in range(P):
                inplace = (s + root) % 2 == 0
                out = np.zeros(P * n, storage(dt)) if R == root else None
                if R == root and inplace:
                    out[R * n:(R + 1) * n] = inputs[R]
                send = None if (R == root and inplace) else inputs[R]
                got = comm.gather(send, out, root, **kw(dt))
                if R == root:
                    same(got, want, "gather %s n=%d root %d" % (dt, n, root))
                else:
                    expect(got is None, "gather: non-root gets None")


def check_scatter():
    for dt in ("float64", "uint8", "float16"):
        for n in SIZES:
            for root in range(P):
                s = next_salt()
                full = values(root, P * n, dt, "sum", s)
                want = full[R * n:(R + 1) * n]
                inplace = s % 2 == 0
                if R == root and inplace:
                    buf = full.copy()
                    comm.scatter(buf, None, root, **kw(dt))
                    same(buf, full, "scatter in place leaves the root's sendbuf whole")
                    continue
                out = np.zeros(n, storage(dt))
                send = full if R == root else None
                got = comm.iscatter(send, out, root=root, **kw(dt)).wait()
                same(got, want, "scatter %s n=%d root %d" % (dt, n, root))


def check_reduce_scatter():
    for dt in ("float32", "int64", "bfloat16", "uint8"):
        for op in OPS:
            for n in (0, 1, 13):
                s = next_salt()
                inputs = [values(r, P * n, dt, op, s) for r in range(P)]
                want = reference(inputs, dt, op)[R * n:(R + 1) * n]
                x = inputs[R].copy()
                if s % 2:
                    got = comm.reduce_scatter(x, np.zeros(n, storage(dt)), op=op, **kw(dt))
                else:
                    comm.ireduce_scatter(x, op=op, **kw(dt)).wait()
                    got = x[:n]
                same(got, want, "reduce_scatter %s %s n=%d" % (dt, op, n))
    s = next_salt()
    n = LARGE // P + 1
    inputs = [values(r, P * n, "float32", "sum", s) for r in range(P)]
    same(comm.reduce_scatter(inputs[R], np.zeros(n, np.float32)),
         reference(inputs, "float32", "sum")[R * n:(R + 1) * n], "reduce_scatter large")


def check_alltoall():
    for dt in ("int32", "float16", "uint64"):
        for n in SIZES:
            s = next_salt()
            inputs = [values(r, P * n, dt, "sum", s) for r in range(P)]
            want = np.concatenate([inputs[j][R * n:(R + 1) * n] for j in range(P)])
            x = inputs[R].copy()
            if s % 2:
                got = comm.alltoall(x, np.zeros_like(x), **kw(dt))
            else:
                got = comm.ialltoall(x, **kw(dt)).wait()
            same(got, want, "alltoall %s n=%d" % (dt, n))


def check_barrier():
    for _ in range(3):
        comm.barrier()
    # The last rank arrives late; nobody may leave before it arrives.
    t0 = time.time()
    if R == P - 1:
        time.sleep(0.3)
    comm.ibarrier().wait()
    if P > 1:
        expect(time.time() - t0 >= 0.25, "barrier returned before the last rank entered it")


def check_p2p():
    if P == 1:
        return
    for dt in ("float32", "int8", "bfloat16"):
        for n in SIZES:
            s = next_salt()
            right, left = (R + 1) % P, (R - 1) % P
            out = np.zeros(n, storage(dt))
            reqs = [comm.irecv(out, left, **kw(dt)),
                    comm.isend(values(R, n, dt, "sum", s), right, **kw(dt))]
            hoop.wait_all(reqs)
            same(out, values(left, n, dt, "sum", s), "isend/irecv ring %s n=%d" % (dt, n))
    # Blocking pairs 0<->1, 2<->3...: the lower rank sends first.
    s = next_salt()
    peer = R ^ 1
    if peer < P:
        mine, out = values(R, 1031, "int64", "sum", s), np.zeros(1031, np.int64)
        if R < peer:
            comm.send(mine, peer)
            comm.recv(out, peer)
        else:
            comm.recv(out, peer)
            comm.send(mine, peer)
        same(out, values(peer, 1031, "int64", "sum", s), "send/recv pair")
    # From any source: rank 0 takes one message from every other rank, blocking, then one more
    # each, nonblocking; each reports its sender, whose values it must hold. A barrier after each
    # phase keeps a rank's next message (another size) from meeting this phase's receives.
    for dt in ("float64", "uint8"):
        for n in (0, 7, 1031):
            s = next_salt()
            if R != 0:
                comm.send(values(R, n, dt, "sum", s), 0, **kw(dt))
                comm.barrier()
                comm.send(values(R, n, dt, "sum", s + 1), 0, **kw(dt))
                comm.barrier()
                continue
            firsts, seconds = set(), set()
            for k in range(P - 1):
                out, src = comm.recv_any(np.zeros(n, storage(dt)), **kw(dt))
                expect(0 < src < P and src not in firsts, "recv_any: source %r" % (src,))
                firsts.add(src)
                same(out, values(src, n, dt, "sum", s), "recv_any from %d %s n=%d" % (src, dt, n))
            comm.barrier()
            for k in range(P - 1):
                out = np.zeros(n, storage(dt))
                r = comm.irecv_any(out, **kw(dt))
                expect(r.source is None, "irecv_any: a source before completion")
                r.wait()
                expect(0 < r.source < P and r.source not in seconds,
                       "irecv_any: source %r" % (r.source,))
                seconds.add(r.source)
                same(out, values(r.source, n, dt, "sum", s + 1),
                     "irecv_any from %d %s n=%d" % (r.source, dt, n))
            expect(len(firsts) == len(seconds) == P - 1, "recv_any: not every rank matched once")
            comm.barrier()


def check_group():
    """Ordered on a stream, a ring of irecv-then-isend in a group (Comm.group)."""
    if P == 1:
        return
    for dt in ("float32", "int8"):
        for n in SIZES:
            s = next_salt()
            right, left = (R + 1) % P, (R - 1) % P
            out = np.zeros(n, storage(dt))
            with comm.group():
                reqs = [comm.irecv(out, left, **kw(dt)),
                        comm.isend(values(R, n, dt, "sum", s), right, **kw(dt))]
            hoop.wait_all(reqs)
            same(out, values(left, n, dt, "sum", s), "grouped ring %s n=%d" % (dt, n))
    expect_raises(hoop.InvalidArgumentError, comm.group_end, "group_end without a start",
                  "no group")


# ---- buffers ----

def check_buffers():
    s = next_salt()
    base = [np.arange(40, dtype=np.float64).reshape(4, 10) * (r + 1) + s for r in range(P)]
    total = sum(base)
    # Non-contiguous input and output: computed in a copy, copied back.
    x = base[R].copy()
    comm.allreduce(x[:, ::3])
    same(x[:, ::3], total[:, ::3], "allreduce in place on a strided view")
    same(x[:, 1::3], base[R][:, 1::3], "allreduce on a strided view leaves the gaps alone")
    out = np.zeros((10, 4)).T  # Fortran order
    comm.iallreduce(base[R], out).wait()
    same(out, total, "allreduce into a Fortran-ordered array")
    # The buffer protocol and __array_interface__.
    a = array.array("i", [R + 1] * 5)
    comm.allreduce(a, op="max")
    expect(list(a) == [P] * 5, "allreduce on array.array: %s" % list(a))
    b = bytearray([R + 1] * 3)
    comm.allreduce(b)
    expect(list(b) == [P * (P + 1) // 2 % 256] * 3, "allreduce on bytearray: %s" % list(b))

    class Iface:
        def __init__(self, arr):
            self.arr = arr
            self.__array_interface__ = arr.__array_interface__

    y = np.full(6, R + 1, np.int64)
    comm.allreduce(Iface(y))
    same(y, np.full(6, P * (P + 1) // 2, np.int64), "allreduce through __array_interface__")
    ro = np.full(3, R, np.float32)
    ro.flags.writeable = False
    got = comm.allreduce(ro, np.zeros(3, np.float32))  # a read-only input is fine
    same(got, np.full(3, P * (P - 1) / 2, np.float32), "read-only sendbuf")
    expect_raises(hoop.InvalidArgumentError, lambda: comm.allreduce(ro), "read-only in place",
                  "read-only")
    expect_raises(hoop.InvalidArgumentError, lambda: comm.allreduce(b"abc"), "bytes in place",
                  "read-only")
    check_torch_refusals()
    # A buffer nothing else references stays alive until its request completes.
    req = comm.iallreduce(np.full(100000, R + 1.0))
    gc.collect()
    time.sleep(0.01 * R)
    same(req.wait(), np.full(100000, P * (P + 1) / 2), "buffer kept alive by its request")
    # Several requests in flight, waited out of order.
    reqs = [comm.iallreduce(np.full(1000 + i, R + i, np.int32)) for i in range(5)]
    for i in reversed(range(5)):
        same(reqs[i].wait(), np.full(1000 + i, P * i + P * (P - 1) // 2, np.int32),
             "request %d of 5 waited out of order" % i)
    expect(all(r.done for r in reqs), "requests report done")


def check_torch_refusals():
    """torch tensors the binding cannot serve are refused before anything moves (torch would
    refuse a sparse tensor's pointer, and the copy back into an expand()ed one only after the
    call had run); where torch is not installed, nothing to check."""
    try:
        import torch
    except ImportError:
        return
    e = torch.full((1,), R + 1.0).expand(4)
    expect_raises(hoop.InvalidArgumentError, lambda: comm.allreduce(e), "allreduce into an "
                  "expanded tensor", "share memory")
    expect(torch.equal(e, torch.full((4,), R + 1.0)), "the expanded tensor was written: %s" % e)
    got = comm.allreduce(e, torch.zeros(4))  # read, it is an input like any other
    expect(torch.equal(got, torch.full((4,), P * (P + 1) / 2)), "allreduce of an expanded "
           "input: %s" % got)
    sp = torch.sparse_coo_tensor(torch.tensor([[1]]), torch.ones(1), (5,))
    expect_raises(hoop.InvalidArgumentError, lambda: comm.allreduce(sp), "allreduce of a sparse "
                  "tensor", "sparse")
    expect_raises(hoop.InvalidArgumentError, lambda: comm.broadcast(sp), "broadcast of a sparse "
                  "tensor", "sparse")
    x = np.full(3, R + 1.0)
    comm.allreduce(x)
    same(x, np.full(3, P * (P + 1) / 2), "allreduce after the refused tensors")


# ---- errors and communicator management ----

def check_errors():
    e = expect_raises(hoop.InvalidArgumentError, lambda: comm.allreduce(
        np.zeros(3, np.float32), np.zeros(4, np.float32)), "count mismatch", "4")
    expect(isinstance(e, ValueError) and isinstance(e, hoop.HoopError), "error hierarchy")
    expect_raises(hoop.InvalidArgumentError, lambda: comm.allreduce(
        np.zeros(3, np.float32), np.zeros(3, np.float64)), "dtype mismatch", "float64")
    expect_raises(hoop.InvalidArgumentError, lambda: comm.allreduce(np.zeros(3), op="xor"),
                  "bad op", "xor")
    expect_raises(hoop.InvalidArgumentError, lambda: comm.allreduce(np.zeros(3, np.complex64)),
                  "complex dtype", "complex64")
    expect_raises(hoop.InvalidArgumentError, lambda: comm.broadcast(np.zeros(3), root=P),
                  "root out of range", "root")
    expect_raises(hoop.InvalidArgumentError, lambda: comm.send(np.zeros(3), R), "send to self",
                  "peer")
    expect_raises(hoop.InvalidArgumentError, lambda: comm.allgather(
        np.zeros(3), np.zeros(3 * P + 1)), "allgather size", "size")
    expect_raises(hoop.InvalidArgumentError, lambda: comm.allreduce(object()), "not a buffer",
                  "object")
    # Errors the library itself reports carry its sentence.
    e = expect_raises(hoop.InvalidArgumentError, lambda: comm.set_algo("bogus"), "set_algo",
                      "bogus")
    expect("bogus" in comm.last_error, "last_error: %r" % comm.last_error)
    expect_raises(hoop.InvalidArgumentError, lambda: comm.set_timeout(-1), "set_timeout", "-1")
    # Every algorithm gives the same (exact) result.
    for algo in ("ring", "rd", "rabenseifner", "ps", "ps-sharded", "auto"):
        comm.set_algo(algo)
        s = next_salt()
        inputs = [values(r, 1031, "int32", "sum", s) for r in range(P)]
        same(comm.allreduce(inputs[R].copy()), reference(inputs, "int32", "sum"),
             "allreduce with algo " + algo)
    st = comm.stats()
    expect(P == 1 or st["bytes_sent"] > 0, "stats: %s" % st)
    # The flight recorder: its last entries are the all-reduces just made, in order.
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "dump.json")
        comm.dump(path)
        with open(path) as f:
            ents = json.load(f)["entries"]
        last = ents[-6:]
        expect([e["profiling_name"] for e in last] == ["hoop:all_reduce"] * 6 and
               all(e["count"] == 1031 and e["dtype"] == "int32" and e["hoop_state"] == "finished"
                   for e in last), "dump: the last entries are %s" % last)
        expect_raises(hoop.SystemCallError, lambda: comm.dump(os.path.join(d, "no", "such", "dir.json")), "dump nowhere",
                      "dir.json")
    # A numpy scalar is immutable: a result written into it would be lost without a word.
    s = np.float32(R + 1)
    expect_raises(hoop.InvalidArgumentError, lambda: comm.allreduce(s), "numpy scalar in place",
                  "numpy scalar")
    expect(s == R + 1, "the scalar is unchanged")
    expect_raises(hoop.InvalidArgumentError, lambda: comm.broadcast(np.int64(3), 0),
                  "numpy scalar broadcast", "numpy scalar")
    out = np.zeros((), np.float32)  # a 0-d array is written in place
    got = comm.allreduce(np.float32(R + 1), out)
    expect(got is out and float(out) == P * (P + 1) / 2, "numpy scalar into a 0-d array: %r" % out)
    z = np.array(R + 1, np.int64)
    comm.allreduce(z)
    expect(int(z) == P * (P + 1) // 2, "0-d array in place: %r" % z)
    # Ranks, roots and peers are integers: 0.7 is not rank 0.
    for bad in (0.7, 0.0, True, "0", None):
        expect_raises(TypeError, lambda: comm.broadcast(np.zeros(3), root=bad),
                      "broadcast root=%r" % (bad,), "root must be an integer")
        expect_raises(TypeError, lambda: comm.reduce(np.zeros(3), root=bad),
                      "reduce root=%r" % (bad,), "root must be an integer")
    expect_raises(TypeError, lambda: comm.gather(np.zeros(3), None, root=0.7), "gather root")
    expect_raises(TypeError, lambda: comm.scatter(None, np.zeros(3), root=0.7), "scatter root")
    expect_raises(TypeError, lambda: comm.isend(np.zeros(3), (R + 1) % P + 0.5), "isend peer",
                  "peer must be an integer")
    expect_raises(TypeError, lambda: comm.recv(np.zeros(3), 1.0), "recv peer",
                  "peer must be an integer")
    expect_raises(TypeError, lambda: comm.split(0.5), "split color", "color must be an integer")
    expect_raises(TypeError, lambda: comm.split(0, key=1.5), "split key", "key must be an integer")
    expect_raises(TypeError, lambda: hoop.init("env://", rank=0.5), "init rank",
                  "rank must be an integer")
    comm.broadcast(np.zeros(3), root=np.int64(0))  # numpy integers are integers
    comm.barrier()
    # A missing library is an ImportError that says where to look.
    if R == 0:
        env = dict(os.environ, HOOP_LIBRARY="/nonexistent/libhoop.so")
        p = subprocess.run([sys.executable, "-c", "import hoop; hoop.version()"], env=env,
                           capture_output=True, text=True, timeout=60)
        expect(p.returncode != 0 and "HOOP_LIBRARY=/nonexistent/libhoop.so" in p.stderr,
               "missing library message: %r" % p.stderr[-300:])


def check_split():
    color = None if (P > 2 and R == P - 1) else R % 2
    sub = comm.split(color, key=-R)  # reversed order inside each color
    if color is None:
        expect(sub is None, "split with color None gives None")
    else:
        members = [r for r in range(P) if r % 2 == color and not (P > 2 and r == P - 1)]
        expect(sub.size == len(members), "split size %d, want %d" % (sub.size, len(members)))
        expect(sub.rank == sorted(members, reverse=True).index(R), "split rank %d" % sub.rank)
        x = np.array([R], np.int64)
        sub.allreduce(x)
        expect(int(x[0]) == sum(members), "allreduce on the split: %d" % x[0])
        with sub:
            pass
        expect_raises(hoop.InvalidArgumentError, lambda: sub.barrier(), "destroyed comm",
                      "destroyed")


def check_init_methods():
    # Rank 0 picks the rendezvous (a free port, a fresh path) and tells the others.
    import socket
    info = np.zeros(2, np.int64)
    if R == 0:
        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            info[0] = sk.getsockname()[1]
        info[1] = os.getpid()
    comm.broadcast(info, 0)
    methods = ["tcp://127.0.0.1:%d" % info[0],
               "file://%s/hoop-pytest-%d-%d" % (tempfile.gettempdir(), info[1], info[0])]
    for m in methods:
        c = hoop.init(m, R, P, timeout=30)
        expect((c.rank, c.size) == (R, P), "%s: rank %d size %d" % (m, c.rank, c.size))
        x = np.array([R + 1.0])
        c.allreduce(x)
        expect(x[0] == P * (P + 1) / 2, "%s: allreduce gives %s" % (m, x))
        c.destroy()
        c.destroy()  # twice is harmless
        comm.barrier()


def check_threads():
    """Posting calls come from one thread: another thread's are refused, never mixed."""
    refused, wrong = [], []

    def intruder():
        for i in range(20):
            x = np.full(8, 1000 + i, np.int64)
            try:
                comm.allreduce(x)
                wrong.append(i)  # posted: on some rank it would meet another call's data
            except hoop.InvalidArgumentError as e:
                refused.append(str(e))
        try:
            comm.barrier()
            wrong.append("barrier")
        except hoop.InvalidArgumentError as e:
            refused.append(str(e))

    th = threading.Thread(target=intruder, name="intruder")
    th.start()
    for i in range(40):  # meanwhile the owner's calls go on, and come out right
        x = np.full(8, R + i, np.int64)
        comm.allreduce(x)
        same(x, np.full(8, P * i + P * (P - 1) // 2, np.int64), "owner's allreduce %d" % i)
    th.join()
    expect(not wrong and len(refused) == 21, "another thread's calls: %d refused, %s posted" % (
        len(refused), wrong))
    expect("'intruder'" in refused[0] and "bind_thread" in refused[0],
           "the refusal names the threads: %s" % refused[0])
    # Handed over: the new thread's calls are right, the old one's are refused.
    results = []

    def successor():
        comm.bind_thread()
        for i in range(20):
            x = np.full(4, R * 3 + i, np.int32)
            comm.allreduce(x)
            results.append(x)
        req = comm.iallreduce(np.full(4, R, np.int32))
        results.append(req)

    th = threading.Thread(target=successor, name="successor")
    th.start()
    th.join()
    expect(len(results) == 21, "the successor posted %d calls" % len(results))
    for i, x in enumerate(results[:20]):
        same(x, np.full(4, 3 * P * (P - 1) // 2 + P * i, np.int32), "successor's allreduce %d" % i)
    expect_raises(hoop.InvalidArgumentError, lambda: comm.barrier(), "old owner's call",
                  "successor")
    # Its request is waited for here: waiting is allowed from any thread.
    same(results[20].wait(), np.full(4, P * (P - 1) // 2, np.int32), "request waited elsewhere")
    comm.bind_thread()
    comm.barrier()


def check_destroy_pending():
    """destroy() with a call the peer never joins returns at once; the call fails."""
    if P == 1:
        return
    sub = comm.split(0 if R < 2 else None)
    if sub is not None:
        sub.set_timeout(20)
        sub.barrier()
    if R == 0:
        r1 = sub.ibroadcast(np.zeros(8), root=1)  # rank 1 never joins these
        r2 = sub.irecv(np.zeros(8), 1)
        box = {}

        def waiter():
            try:
                r2.wait()
                box["rc"] = "returned"
            except hoop.HoopError as e:
                box["rc"] = e

        th = threading.Thread(target=waiter)
        th.start()
        time.sleep(0.1)
        t0 = time.time()
        sub.destroy()
        dt = time.time() - t0
        th.join(10)
        expect(dt < 2, "destroy with pending calls took %.1f s" % dt)
        expect(isinstance(box.get("rc"), hoop.AbortedError) and "destroyed" in str(box["rc"]),
               "a wait blocked in another thread: %r" % box.get("rc"))
        e = expect_raises(hoop.AbortedError, r1.wait, "the pending broadcast", "destroyed")
        expect(r1.done and r2.done, "requests of a destroyed Comm are done")
        print("rank 0: destroy with 2 calls pending: %.3f s (%s)" % (dt, e))
    comm.barrier()
    if R == 1:
        t0 = time.time()
        expect_raises(hoop.HoopError, sub.barrier, "barrier after the peer destroyed")
        expect(time.time() - t0 < 5, "the failure took %.1f s" % (time.time() - t0))
        sub.destroy()
    comm.barrier()


def check_abort():
    if P == 1:
        return
    sub = comm.split(0)
    sub.set_timeout(20)
    comm.barrier()  # a split returns on one rank before the others have connected
    if R == 0:
        sub.abort()
        expect_raises(hoop.AbortedError, lambda: sub.allreduce(np.zeros(4)), "call after abort",
                      "abort")
    else:
        t0 = time.time()
        e = expect_raises(hoop.HoopError, lambda: sub.allreduce(np.zeros(4)),
                          "allreduce with an aborted peer")
        expect(time.time() - t0 < 15, "the failure took %.1f s" % (time.time() - t0))
        expect(len(str(e)) > 20, "error message: %r" % str(e))
    sub.destroy()
    comm.barrier()


CHECKS = (check_allreduce, check_broadcast, check_reduce, check_allgather_gather, check_scatter,
          check_reduce_scatter, check_alltoall, check_barrier)
# Ordered on a stream, a rank's receive holds its stream until it completes, so the ring of
# irecv-then-isend in check_p2p would wait on every rank at once: such exchanges go in a group,
# as NCCL's do (check_group).
if not (DEVICE and STREAM is not None):
    CHECKS += (check_p2p,)
else:
    CHECKS += (check_group,)
if not DEVICE:  # these check the binding's handling of host objects, threads and the Comm
    CHECKS += (check_buffers, check_errors, check_split, check_init_methods, check_threads,
               check_destroy_pending, check_abort)
for check in CHECKS:
    check()
comm.destroy()
where = " on device buffers (%s)" % os.path.basename(DEVICE) if DEVICE else ""
print("rank %d of %d: %d checks passed%s" % (R, P, T.checks, where))
