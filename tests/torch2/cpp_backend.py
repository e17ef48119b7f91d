"""hoop's C++ c10d::Backend (python/hoop/csrc/backend.cpp) under torch 2.6, as torch sees it.

    cpp_backend.py HOOPRUN      builds nothing; launches itself on 2 ranks, twice:
                                plainly, then with TORCH_DISTRIBUTED_DEBUG=DETAIL; then
                                tests/python/test_torch.py on 2 ranks

Plain: the default group is a ProcessGroup whose CPU backend is hoop's C++ one
(`pg._get_backend(cpu)`, `_get_process_group_backend`...), every collective agrees with a gloo
group over the same ranks, a rank blocked in a collective leaves the GIL to the other threads,
a failure raises torch's DistBackendError with hoop's sentence on every rank, a Work's future
holds a tensor list, and a callback that waits for a later collective does not hang.
DETAIL: torch wraps the C++ backend in its checking wrapper, which catches ranks that call
different collectives before hoop moves anything.
test_torch.py: the Python backend's own test (every collective against gloo and a reference,
sparse all-reduce against gloo, DDP and its hooks, refusals, failures), on the C++ backend; it
says in place what it leaves out there (what only the Python backend has).
"""
import datetime
import os
import subprocess
import sys
import tempfile
import threading
import time


def fail(r, msg):
    sys.stderr.write("rank %d: FAIL: %s\n" % (r, msg))
    sys.stderr.flush()
    os._exit(1)


def data(rank, n, salt, dtype):
    import torch

    g = torch.Generator().manual_seed(1000 * salt + rank)
    return torch.randint(-20, 21, (n,), generator=g).to(dtype)


def plain():
    import torch
    import torch.distributed as dist

    import hoop.torch

    torch.set_num_threads(1)
    dist.init_process_group("hoop", timeout=datetime.timedelta(seconds=60))
    R, P = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    if isinstance(pg, hoop.torch.ProcessGroupHoop):
        fail(R, "the Python backend serves the group (HOOP_TORCH_BACKEND=%s)"
             % os.environ.get("HOOP_TORCH_BACKEND"))
    be = pg._get_backend(torch.device("cpu"))
    if not isinstance(be, torch._C._distributed_c10d.Backend) or be.name() != "hoop":
        fail(R, "pg._get_backend(cpu) is %r" % (be,))
    if dist.get_backend(pg) != "hoop":
        fail(R, "dist.get_backend() is %s" % dist.get_backend(pg))
    gloo = dist.new_group(backend="gloo")
    sub = dist.new_group([0, 1])  # a second hoop group, named by torch
    if sub._get_backend(torch.device("cpu")).name() != "hoop":
        fail(R, "new_group's backend is not hoop's")

    def both(fn, what):
        a, b = fn(pg), fn(gloo)
        a = a if isinstance(a, list) else [a]
        b = b if isinstance(b, list) else [b]
        for x, y in zip(a, b):
            if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(x, y):
                fail(R, "%s: hoop %s, gloo %s" % (what, x.reshape(-1)[:6].tolist(),
                                                  y.reshape(-1)[:6].tolist()))

    salt = 0
    for dt in (torch.float32, torch.float64, torch.int32, torch.int64, torch.float16):
        for n in (1, 7, 1031):
            salt += 1
            for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN):
                def ar(g, op=op):
                    t = data(R, n, salt, dt)
                    dist.all_reduce(t, op, group=g)
                    return t
                both(ar, "all_reduce %s %s x %d" % (op, dt, n))

            def bc(g):
                t = data(R, n, salt, dt)
                dist.broadcast(t, 1, group=g)
                return t
            both(bc, "broadcast %s x %d" % (dt, n))

            def rd(g):
                t = data(R, n, salt, dt)
                dist.reduce(t, 0, group=g)
                return t if R == 0 else torch.zeros(0)
            both(rd, "reduce")

            def ag(g):
                outs = [torch.empty(n, dtype=dt) for _ in range(P)]
                dist.all_gather(outs, data(R, n, salt, dt), group=g)
                return outs
            both(ag, "all_gather")

            def agt(g):
                out = torch.empty(P * n, dtype=dt)
                dist.all_gather_into_tensor(out, data(R, n, salt, dt), group=g)
                return out
            both(agt, "all_gather_into_tensor")

            def ga(g):
                outs = [torch.empty(n, dtype=dt) for _ in range(P)] if R == 1 else None
                dist.gather(data(R, n, salt, dt), outs, dst=1, group=g)
                return outs if R == 1 else torch.zeros(0)
            both(ga, "gather")

            def sc(g):
                out = torch.empty(n, dtype=dt)
                ins = [data(r, n, salt, dt) for r in range(P)] if R == 0 else None
                dist.scatter(out, ins, src=0, group=g)
                return out
            both(sc, "scatter")

            # gloo has no reduce_scatter of lists: the reference is computed here.
            out = torch.empty(n, dtype=dt)
            dist.reduce_scatter(out, [data(R + 10 * r, n, salt, dt) for r in range(P)])
            want = sum(data(r + 10 * R, n, salt, dt) for r in range(P))
            if not torch.equal(out, want):
                fail(R, "reduce_scatter %s x %d: %s against %s" % (dt, n, out[:4].tolist(),
                                                                  want[:4].tolist()))

            def rst(g):
                out = torch.empty(n, dtype=dt)
                dist.reduce_scatter_tensor(out, data(R, n * P, salt, dt), group=g)
                return out
            both(rst, "reduce_scatter_tensor")

            def a2a(g):
                out = torch.empty(n * P, dtype=dt)
                dist.all_to_all_single(out, data(R, n * P, salt, dt), group=g)
                return out
            both(a2a, "all_to_all_single")

            def a2av(g):
                ins = [1 + r for r in range(P)]  # rows to rank r
                outs = [1 + R] * P
                out = torch.empty(sum(outs), n, dtype=dt)
                dist.all_to_all_single(out, data(R, sum(ins) * n, salt, dt).view(-1, n), outs,
                                       ins, group=g)
                return out
            both(a2av, "all_to_all_single, unequal blocks")

    # A non-contiguous tensor is reduced in place through a copy.
    x = torch.arange(24, dtype=torch.float32).view(4, 6) * (R + 1)
    dist.all_reduce(x[:, ::3])
    want = torch.arange(24, dtype=torch.float32).view(4, 6)
    want[:, ::3] *= P * (P + 1) // 2
    want[:, 1::3] *= R + 1
    want[:, 2::3] *= R + 1
    if not torch.equal(x, want):
        fail(R, "all_reduce of a strided view: %s" % x.tolist())

    # Point to point, and a receive from any source.
    t = torch.full((5,), float(R))
    if R == 0:
        dist.send(t + 1, 1)
        dist.recv(t, 1)
        if not torch.equal(t, torch.full((5,), 7.0)):
            fail(R, "recv got %s" % t.tolist())
    else:
        dist.recv(t, 0)
        if not torch.equal(t, torch.full((5,), 1.0)):
            fail(R, "recv got %s" % t.tolist())
        dist.send(torch.full((5,), 7.0), 0)
    if R == 0:
        src = dist.recv(t)
        if src != 1 or not torch.equal(t, torch.full((5,), 3.0)):
            fail(R, "recv from any source: rank %s, %s" % (src, t.tolist()))
    else:
        dist.send(torch.full((5,), 3.0), 0)
    dist.barrier()

    # The functional collectives' coalesced forms, as torch 2.6 calls them.
    import torch.distributed._functional_collectives as fc
    outs = fc.all_gather_into_tensor_coalesced([data(R, 4, 90, torch.float32),
                                               data(R, 3, 91, torch.float64)], pg)
    for o, s, n, dt in zip(outs, (90, 91), (4, 3), (torch.float32, torch.float64)):
        if not torch.equal(o, torch.cat([data(r, n, s, dt) for r in range(P)])):
            fail(R, "all_gather_into_tensor_coalesced")
    outs = fc.reduce_scatter_tensor_coalesced([data(R, 4 * P, 92, torch.float32)], "sum", [0],
                                              pg)
    want = sum(data(r, 4 * P, 92, torch.float32) for r in range(P)).view(P, 4)[R]
    if not torch.equal(outs[0], want):
        fail(R, "reduce_scatter_tensor_coalesced")
    ts = [data(R, 3, 93, torch.float32), data(R, 2, 94, torch.float32)]
    dist.all_reduce_coalesced(ts)
    for t, s in zip(ts, (93, 94)):
        if not torch.equal(t, sum(data(r, t.numel(), s, torch.float32) for r in range(P))):
            fail(R, "all_reduce_coalesced")

    # The future holds a tensor list (what DDP's C++ hooks read), completed off the caller.
    w = dist.all_reduce(data(R, 3, 95, torch.float32), async_op=True)
    v = w.get_future().wait()
    if not isinstance(v, list) or not torch.equal(
            v[0], sum(data(r, 3, 95, torch.float32) for r in range(P))):
        fail(R, "the future's value is %r" % (v,))
    # A callback that waits (in the future's own wait, which the backend cannot see) for a
    # collective posted after the one it is chained to.
    if R == 0:
        time.sleep(0.3)
    w2 = dist.all_reduce(torch.ones(2), async_op=True)
    w3 = dist.all_reduce(torch.ones(2) * 2, async_op=True)
    got = w2.get_future().then(lambda f: w3.get_future().wait()[0] + f.value()[0]).wait()
    if not torch.equal(got, torch.full((2,), 3.0 * P)):
        fail(R, "a callback waiting for a later collective: %s" % got.tolist())

    # Under torch's profiler, as torch's own suite calls collectives: the call's record ends
    # before wait() returns and the profiler's scope closes. It ended after, from the thread
    # that completed the call, and crashed a rank within a few hundred calls (SIGSEGV, or
    # glibc's "corrupted size vs. prev_size").
    for i in range(400):
        ins = [torch.full([t] * t, complex(R + t, i % 7), dtype=torch.cfloat) for t in (1, 2, 3)]
        outs = [[torch.zeros([t] * t, dtype=torch.cfloat) for t in (1, 2, 3)] for _ in range(P)]
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            dist.all_gather_coalesced(outs, ins)
        if i == 0 and not any("hoop:all_gather_coalesced" in e.name for e in prof.events()):
            fail(R, "the profiler has no record of the call: %s"
                 % sorted({e.name for e in prof.events()}))
        for q in range(P):
            for t, o in zip((1, 2, 3), outs[q]):
                if not torch.equal(o, torch.full([t] * t, complex(q + t, i % 7),
                                                 dtype=torch.cfloat)):
                    fail(R, "all_gather_coalesced under the profiler, call %d" % i)

    # The GIL: a rank blocked in a collective (its peer comes 0.5 s late) leaves it to others.
    ticks = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1

    th = threading.Thread(target=count)
    th.start()
    time.sleep(0.05)
    if R == 1:
        time.sleep(0.5)
    before = ticks[0]
    t0 = time.monotonic()
    dist.all_reduce(torch.ones(1))
    spent, moved = time.monotonic() - t0, ticks[0] - before
    stop.set()
    th.join()
    if R == 0 and spent > 0.3 and moved < 1000:
        fail(R, "another thread made %d steps during %.2f s in all_reduce: the GIL was held"
             % (moved, spent))

    # Refused before any data moves: the tensor untouched, the same error on every rank.
    e = torch.full((1,), 1.0 + R).expand(4)
    try:
        dist.all_reduce(e)
        fail(R, "all_reduce into an expanded tensor did not raise")
    except ValueError as exc:
        if "expand" not in str(exc):
            fail(R, "expanded: %s" % exc)
    sp = torch.sparse_coo_tensor(torch.tensor([[1]]), torch.ones(1), (5,))
    # torch's dispatcher refuses it (no sparse kernel for c10d::broadcast_) before the backend.
    try:
        dist.broadcast(sp, 0)
        fail(R, "broadcast of a sparse tensor did not raise")
    except NotImplementedError as exc:
        if "Sparse" not in str(exc):
            fail(R, "sparse: %s" % exc)
    # A sparse all-reduce is served, as gloo's (test_torch.py tries more shapes).
    sh = torch.sparse_coo_tensor(torch.tensor([[1, R + 2]]), torch.tensor([1.0, R + 3.0]), (5,))
    sg = sh.clone()
    dist.all_reduce(sh)
    dist.all_reduce(sg, group=gloo)
    if not torch.equal(sh.to_dense(), sg.to_dense()):
        fail(R, "sparse all_reduce: %s, gloo's %s" % (sh.to_dense().tolist(),
                                                      sg.to_dense().tolist()))
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.bool))
        fail(R, "all_reduce of bool did not raise")
    except TypeError:
        pass

    # Ranks that disagree: hoop compares before data moves; torch's DistBackendError with
    # hoop's sentence, on every rank; a group with a short timeout: the timeout's sentence.
    mm = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=10))
    try:
        dist.all_reduce(torch.ones(3 + R), group=mm)
        fail(R, "mismatched all_reduce did not raise")
    except dist.DistBackendError as exc:
        if "hoop backend: allreduce failed" not in str(exc):
            fail(R, "mismatch: %s" % exc)
    tg = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=1))
    if R == 0:
        t0 = time.monotonic()
        try:
            dist.all_reduce(torch.ones(3), group=tg)
            fail(R, "all_reduce that rank 1 never joins did not raise")
        except dist.DistBackendError as exc:
            if "timeout" not in str(exc).lower():
                fail(R, "timeout: %s" % exc)
        if time.monotonic() - t0 > 20:
            fail(R, "the 1 s timeout took %.1f s" % (time.monotonic() - t0))
    dist.barrier(group=gloo)

    t = torch.ones(4)
    dist.all_reduce(t)
    if not torch.equal(t, torch.full((4,), float(P))):
        fail(R, "all_reduce after the failures: %s" % t.tolist())
    dist.destroy_process_group()
    print("rank %d: C++ backend ok" % R)


def detail():
    import torch
    import torch.distributed as dist

    import hoop.torch  # noqa: F401

    dist.init_process_group("hoop", timeout=datetime.timedelta(seconds=60))
    R = dist.get_rank()
    be = dist.group.WORLD._get_backend(torch.device("cpu"))
    if "Wrapper" not in type(be).__name__:
        fail(R, "DETAIL mode did not wrap the backend: %r" % (be,))
    t = torch.ones(3)
    dist.all_reduce(t)
    if not torch.equal(t, torch.full((3,), 2.0)):
        fail(R, "all_reduce through the wrapper: %s" % t.tolist())
    try:
        if R == 0:
            dist.all_reduce(torch.ones(3))
        else:
            dist.broadcast(torch.ones(3), 0)
        fail(R, "mismatched collectives were not caught")
    except RuntimeError as exc:
        if "mismatch" not in str(exc).lower():
            fail(R, "the wrapper's error: %s" % exc)
    print("rank %d: DETAIL wrapper ok" % R, flush=True)
    os._exit(0)  # the group has a collective in flight on the other rank's side


def main():
    if os.environ.get("CPP_BACKEND_RANK") == "plain":
        return plain()
    if os.environ.get("CPP_BACKEND_RANK") == "detail":
        return detail()
    hooprun = sys.argv[1]
    rc = 0
    test_torch = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python",
                              "test_torch.py")
    for mode in ("plain", "detail", "test_torch"):
        # The groups' own timeouts are under test: HOOP_TIMEOUT would win over them.
        env = {k: v for k, v in os.environ.items() if k != "HOOP_TIMEOUT"}
        env.update(CPP_BACKEND_RANK=mode, HOOP_TORCH_BACKEND="cpp",
                   HOOP_RECORD_DIR=tempfile.gettempdir())
        if mode == "detail":
            env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
        t0 = time.monotonic()
        script = test_torch if mode == "test_torch" else os.path.abspath(__file__)
        r = subprocess.call([hooprun, "--timeout", "300" if mode == "test_torch" else "200",
                             "-n", "2", sys.executable, script], env=env)
        print("%s: exit %d in %.0f s" % (mode, r, time.monotonic() - t0))
        rc = rc or r
    return rc


if __name__ == "__main__":
    sys.exit(main())
