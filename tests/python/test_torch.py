"""The torch.distributed backend "hoop", run as every rank under hooprun.

The default group is hoop (init_process_group("hoop"), env:// from hooprun); a gloo group over the
same ranks is the comparison. Every collective runs on both and must agree exactly (integer-valued
data keep float sums exact); what gloo does not implement in this torch is compared with a
reference every rank computes from every rank's inputs. Then DistributedDataParallel trains the
same model on both groups and must end with the same parameters, and failures (mismatched calls,
a timeout, a rank that exits) must raise, not hang.

Under torch >= 2.0 with HOOP_TORCH_BACKEND=cpp the default group is served by the C++ backend
(python/hoop/csrc/backend.cpp), and the same checks run on it, but for what only the Python
backend has: its binding object (`pg.comm`), its Python Works and lanes, its CUDA section. Where
the two differ in what they raise (hoop's exception classes against torch's DistBackendError, a
sparse broadcast refused by torch's dispatcher before any backend sees it), each check says so.
"""
import os
import sys
import time

import torch
import torch.distributed as dist

import hoop
import hoop.torch  # registers "hoop"

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import hooptest  # noqa: E402 - the tests' shared checks, in tests/common

torch.set_num_threads(1)
dist.init_process_group("hoop")
R, P = dist.get_rank(), dist.get_world_size()
HOOP = dist.distributed_c10d._get_default_group()
GLOO = dist.new_group(backend="gloo")
CXX = not isinstance(HOOP, hoop.torch.ProcessGroupHoop)  # the C++ backend serves the group
# What a failed collective raises: hoop's exception classes, or torch's DistBackendError with
# hoop's sentence.
FAILED = dist.DistBackendError if CXX else hoop.HoopError
T = hooptest.Rank(R)
fail, expect, expect_raises = T.fail, T.expect, T.expect_raises

GLOO_DTYPES = [torch.float32, torch.float64, torch.float16, torch.int8, torch.uint8, torch.int32,
               torch.int64]
DTYPES = GLOO_DTYPES + [torch.bfloat16]
SIZES = [1, 7, 1031]
OPS = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
       "max": dist.ReduceOp.MAX}


def same(a, b, what):
    expect(a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b),
           "%s: %s against %s" % (what, a.reshape(-1)[:6].tolist(), b.reshape(-1)[:6].tolist()))


salt = [0]


def data(rank, n, dtype, op="sum"):
    """Integer-valued data of `rank` for call number salt[0]: no op overflows or rounds."""
    g = torch.Generator().manual_seed(1000 * salt[0] + rank)
    if op == "product":
        v = torch.randint(1, 3, (n,), generator=g)
    elif dtype == torch.uint8:
        v = torch.randint(0, 40, (n,), generator=g)
    else:
        v = torch.randint(-20, 21, (n,), generator=g)
    return v.to(dtype)


def ref_reduce(inputs, op):
    w = [x.double() if x.is_floating_point() else x.long() for x in inputs]
    out = w[0].clone()
    for x in w[1:]:
        out = {"sum": out + x, "avg": out + x, "product": out * x,
               "min": torch.minimum(out, x), "max": torch.maximum(out, x)}[op]
    if op == "avg":
        out = out / len(inputs) if out.is_floating_point() else \
            torch.div(out, len(inputs), rounding_mode="trunc")
    return out.to(inputs[0].dtype)


def on_both(fn, what):
    """fn(group) -> tensor or list of tensors, on the hoop group and on the gloo group."""
    h, g = fn(HOOP), fn(GLOO)
    hs, gs = (h, g) if isinstance(h, (list, tuple)) else ([h], [g])
    for a, b in zip(hs, gs):
        same(a, b, what + " (hoop against gloo)")
    return h


# ---- collectives ----

def check_all_reduce():
    for dt in DTYPES:
        for name, op in OPS.items():
            for n in SIZES:
                salt[0] += 1
                inputs = [data(r, n, dt, name) for r in range(P)]
                want = ref_reduce(inputs, name)

                def run(group):
                    t = inputs[R].clone()
                    if salt[0] % 2:
                        dist.all_reduce(t, op=op, group=group)
                    else:
                        w = dist.all_reduce(t, op=op, group=group, async_op=True)
                        w.wait()
                        expect(w.is_completed(), "work completed after wait")
                    return t

                what = "all_reduce %s %s n=%d" % (dt, name, n)
                got = on_both(run, what) if dt in GLOO_DTYPES else run(HOOP)
                same(got, want, what)
    # AVG (gloo has none), through the future API.
    for dt in (torch.float32, torch.int64, torch.bfloat16):
        salt[0] += 1
        inputs = [data(r, 33, dt) for r in range(P)]
        t = inputs[R].clone()
        fut = dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True).get_future()
        got = fut.wait()[0]
        same(got, ref_reduce(inputs, "avg"), "all_reduce AVG %s" % dt)
    # A non-contiguous tensor is reduced in a copy and copied back.
    salt[0] += 1
    base = [data(r, 40, torch.float32).reshape(5, 8) for r in range(P)]
    x = base[R].clone()
    HOOP.allreduce([x[:, ::3]]).wait()
    same(x[:, ::3], ref_reduce([b[:, ::3] for b in base], "sum"), "all_reduce strided view")
    same(x[:, 1::3], base[R][:, 1::3], "all_reduce strided view: gaps untouched")
    expect_raises(ValueError, lambda: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND),
                  "all_reduce BAND", "not supported")
    # The C++ backend: torch's dispatcher has no meta kernel for c10d's ops, and refuses first.
    expect_raises(NotImplementedError if CXX else ValueError,
                  lambda: dist.all_reduce(torch.ones(3, device="meta")),
                  "all_reduce of a meta tensor", "Meta" if CXX else "CPU")


def check_broadcast_reduce():
    for root in range(P):
        for dt in (torch.float32, torch.int64, torch.float16, torch.uint8):
            salt[0] += 1
            inputs = [data(r, 1031, dt) for r in range(P)]

            def bcast(group):
                t = inputs[R].clone()
                dist.broadcast(t, root, group=group)
                return t

            same(on_both(bcast, "broadcast %s root %d" % (dt, root)), inputs[root],
                 "broadcast %s root %d" % (dt, root))

            def red(group):
                t = inputs[R].clone()
                dist.reduce(t, root, op=dist.ReduceOp.MAX, group=group)
                return t

            got = red(HOOP)
            if R == root:
                same(got, red(GLOO), "reduce %s root %d (hoop against gloo)" % (dt, root))
                same(got, ref_reduce(inputs, "max"), "reduce %s root %d" % (dt, root))
            else:
                red(GLOO)
                same(got, inputs[R], "reduce leaves a non-root tensor alone")
        salt[0] += 1
        x = torch.zeros(3, dtype=torch.bfloat16) + R
        dist.broadcast(x, root)
        same(x, torch.zeros(3, dtype=torch.bfloat16) + root, "broadcast bfloat16")


def check_gathers():
    for dt in (torch.float32, torch.int8, torch.float64):
        for n in SIZES:
            salt[0] += 1
            inputs = [data(r, n, dt) for r in range(P)]

            def allgather(group):
                out = [torch.zeros(n, dtype=dt) for _ in range(P)]
                dist.all_gather(out, inputs[R], group=group)
                return out

            for r, t in enumerate(on_both(allgather, "all_gather %s n=%d" % (dt, n))):
                same(t, inputs[r], "all_gather block %d" % r)
            flat = torch.zeros(P * n, dtype=dt)
            dist.all_gather_into_tensor(flat, inputs[R])
            same(flat, torch.cat(inputs), "all_gather_into_tensor %s n=%d" % (dt, n))
            for root in range(P):
                def gather(group):
                    out = [torch.zeros(n, dtype=dt) for _ in range(P)] if R == root else None
                    dist.gather(inputs[R], out, dst=root, group=group)
                    return out if R == root else []

                got = on_both(gather, "gather root %d" % root)
                for r, t in enumerate(got):
                    same(t, inputs[r], "gather block %d root %d" % (r, root))

                def scatter(group):
                    out = torch.zeros(n, dtype=dt)
                    src = [data(root, n, dt) + i for i in range(P)] if R == root else None
                    dist.scatter(out, src, src=root, group=group)
                    return out

                same(on_both(scatter, "scatter root %d" % root), data(root, n, dt) + R,
                     "scatter %s n=%d root %d" % (dt, n, root))
    salt[0] += 1
    objs = [None] * P
    dist.all_gather_object(objs, {"rank": R, "name": "r%d" % R})
    expect(objs == [{"rank": r, "name": "r%d" % r} for r in range(P)], "all_gather_object %s" %
           objs)
    lst = [R, "x" * R] if R == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0)
    expect(lst == [0, ""], "broadcast_object_list %s" % lst)


def check_reduce_scatter_alltoall():
    # gloo in this torch has neither reduce_scatter nor list all_to_all: reference only.
    for dt in (torch.float32, torch.int32, torch.bfloat16):
        for name, op in OPS.items():
            for n in (1, 13):
                salt[0] += 1
                inputs = [[data(r * P + j, n, dt, name) for j in range(P)] for r in range(P)]
                out = torch.zeros(n, dtype=dt)
                dist.reduce_scatter(out, inputs[R], op=op)
                want = ref_reduce([inputs[r][R] for r in range(P)], name)
                same(out, want, "reduce_scatter %s %s n=%d" % (dt, name, n))
                out2 = torch.zeros(n, dtype=dt)
                dist.reduce_scatter_tensor(out2, torch.cat(inputs[R]), op=op)
                same(out2, want, "reduce_scatter_tensor %s %s n=%d" % (dt, name, n))
    for equal in (True, False):  # unequal blocks take the point-to-point path
        salt[0] += 1
        # sizes[r][i]: elements rank r sends to rank i
        sizes = [[5 if equal else (i * 3 + r) % 4 for i in range(P)] for r in range(P)]
        ins = [[data(r * P + i, sizes[r][i], torch.float64) for i in range(P)] for r in range(P)]
        want = torch.cat([ins[j][R] for j in range(P)])
        outs = [torch.zeros(sizes[j][R], dtype=torch.float64) for j in range(P)]
        dist.all_to_all(outs, ins[R])
        for j in range(P):
            same(outs[j], ins[j][R], "all_to_all block from %d (equal %s)" % (j, equal))

        def single(group):
            out = torch.zeros(want.numel(), dtype=torch.float64)
            if equal:
                dist.all_to_all_single(out, torch.cat(ins[R]), group=group)
            else:
                dist.all_to_all_single(out, torch.cat(ins[R]), [sizes[j][R] for j in range(P)],
                                       sizes[R], group=group)
            return out

        same(on_both(single, "all_to_all_single equal %s" % equal), want,
             "all_to_all_single equal %s" % equal)


def check_p2p_barrier():
    t0 = time.time()
    if R == P - 1:
        time.sleep(0.3)
    dist.barrier()
    expect(P == 1 or time.time() - t0 >= 0.25, "barrier returned before the last rank came")
    salt[0] += 1
    right, left = (R + 1) % P, (R - 1) % P
    out = torch.zeros(1031, dtype=torch.int64)
    reqs = [dist.irecv(out, left), dist.isend(data(R, 1031, torch.int64), right)]
    for w in reqs:
        w.wait()
    same(out, data(left, 1031, torch.int64), "isend/irecv ring")
    salt[0] += 1
    peer = R ^ 1
    if peer < P:
        out = torch.zeros(7)
        if R < peer:
            dist.send(data(R, 7, torch.float32), peer)
            dist.recv(out, peer)
        else:
            dist.recv(out, peer)
            dist.send(data(R, 7, torch.float32), peer)
        same(out, data(peer, 7, torch.float32), "send/recv pair")
    # From any source: rank 0 takes one message from every other rank (dist.recv without src
    # returns the sender), then one more each through irecv and Work._source_rank().
    if R == 0:
        got = set()
        for _ in range(P - 1):
            out = torch.zeros(5)
            src = dist.recv(out)
            expect(0 < src < P and src not in got, "recv from any source: sender %r" % (src,))
            got.add(src)
            same(out, data(src, 5, torch.float32), "recv from any source, from rank %d" % src)
        dist.barrier()
        again = set()
        for _ in range(P - 1):
            out = torch.zeros(5)
            w = dist.irecv(out)
            w.wait()
            src = w._source_rank()
            expect(0 < src < P and src not in again, "irecv from any source: sender %r" % (src,))
            again.add(src)
            same(out, data(src, 5, torch.float32) * 2, "irecv from any source, rank %d" % src)
    elif P > 1:
        dist.send(data(R, 5, torch.float32), 0)
        dist.barrier()
        dist.send(data(R, 5, torch.float32) * 2, 0)
    dist.barrier()


def check_new_group():
    members = list(range(0, P, 2))
    sub = dist.new_group(members, backend="hoop")
    if R in members:
        expect(dist.get_backend(sub) == "hoop", "backend of the subgroup: %s" %
               dist.get_backend(sub))
        t = torch.tensor([float(R)])
        dist.all_reduce(t, group=sub)
        expect(t.item() == sum(members), "all_reduce on new_group(%s): %s" % (members, t))
    dist.barrier(group=GLOO)


def check_extras():
    """allgather_coalesced and sparse all-reduce against gloo, profiler events, and hoop's
    monitored_barrier (which gloo has and torch refuses for other backends)."""
    for dtype in (torch.float32, torch.int64, torch.float16):
        for sizes in ([1, 7, 0], [1031]):  # gloo refuses an empty list
            salt[0] += 1

            def coalesced(group, sizes=sizes, dtype=dtype):
                ins = [data(R, n, dtype) for n in sizes]
                outs = [[torch.full((n,), -1).to(dtype) for n in sizes] for _ in range(P)]
                dist.all_gather_coalesced(outs, ins, group=group)
                return torch.cat([t for o in outs for t in o] + [torch.zeros(0).to(dtype)])
            on_both(coalesced, "all_gather_coalesced %s %s" % (dtype, sizes))
    for dense_dims in (0, 2):
        salt[0] += 1

        def sparse(group, dense_dims=dense_dims):
            g = torch.Generator().manual_seed(1000 * salt[0] + R)
            nnz = [0, 1, 5, 3][R % 4]  # rank 0 has no entries; indices repeat across ranks
            idx = torch.randint(0, 11, (2, nnz), generator=g)
            val = torch.randint(-9, 10, (nnz,) + (3,) * dense_dims, generator=g).float()
            t = torch.sparse_coo_tensor(idx, val, (11, 13) + (3,) * dense_dims)
            dist.all_reduce(t, group=group)
            return t.to_dense()
        on_both(sparse, "sparse all_reduce, %d dense dims" % dense_dims)
    mixed = torch.sparse_coo_tensor(torch.zeros((1, 1), dtype=torch.int64), torch.ones(1),
                                    (5 if R == 0 else 6,))
    if P > 1:
        expect_raises(ValueError, lambda: dist.all_reduce(mixed), "sparse shapes differ",
                      "shape [5] (1 sparse dims)" if R != 0 else "shape [6] (1 sparse dims)")
    one = torch.sparse_coo_tensor(torch.zeros((1, 1), dtype=torch.int64), torch.ones(1), (5,))
    expect_raises(ValueError, lambda: dist.all_reduce(one, dist.ReduceOp.MAX), "sparse max",
                  "sums only")
    dist.barrier()
    # Profiler events, as gloo's "gloo:all_reduce": asynchronous, with the input shapes.
    t = torch.ones(2, 3)
    with torch.autograd.profiler.profile(record_shapes=True) as prof:
        dist.all_reduce(t)
        dist.broadcast(t, 0)
        dist.all_reduce(t, async_op=True).wait()
    names = [e.name for e in prof.function_events if e.name.startswith("hoop:")]
    expect(sorted(names) == ["hoop:all_reduce", "hoop:all_reduce", "hoop:broadcast"],
           "profiler events %s" % names)
    for e in prof.function_events:
        if e.name.startswith("hoop:"):
            expect(e.is_async and e.input_shapes == [[2, 3]],
                   "event %s async %s shapes %s" % (e.name, e.is_async, e.input_shapes))
    # monitored_barrier: everyone comes; then the last rank stays away; then all but rank 0 do.
    hoop.torch.monitored_barrier(timeout=5)
    hoop.torch.monitored_barrier(HOOP, timeout=5, wait_all_ranks=True)
    if P > 1:
        late = P - 1
        if R == 0:
            e = expect_raises(hoop.torch.MonitoredBarrierError,
                              lambda: hoop.torch.monitored_barrier(timeout=0.5), "rank 0",
                              "Rank %d failed to pass monitoredBarrier" % late)
            expect(e.missing == [late], "missing %s" % e.missing)
        elif R != late:
            e = expect_raises(hoop.torch.MonitoredBarrierError,
                              lambda: hoop.torch.monitored_barrier(timeout=2), "rank %d" % R,
                              "rank 0 reports: Rank %d failed" % late)
            expect(e.missing == [late], "missing as rank 0 reported %s" % e.missing)
        dist.barrier(group=GLOO)
        if R == 0:
            e = expect_raises(hoop.torch.MonitoredBarrierError,
                              lambda: hoop.torch.monitored_barrier(timeout=0.3,
                                                                   wait_all_ranks=True),
                              "wait_all_ranks", "failed to pass monitoredBarrier")
            expect(e.missing == list(range(1, P)), "wait_all_ranks missing %s" % e.missing)
        dist.barrier(group=GLOO)
    # The group is intact after those failures.
    t = torch.tensor([float(R)])
    dist.all_reduce(t)
    expect(t.item() == P * (P - 1) / 2, "all_reduce after monitored_barrier failures: %s" % t)
    expect_raises(ValueError, lambda: hoop.torch.monitored_barrier(GLOO), "gloo group", "gloo")


# ---- DistributedDataParallel: hoop against gloo ----

def train(group, steps=6):
    torch.manual_seed(1234)  # the same initial model on every rank and for both groups
    model = torch.nn.Sequential(torch.nn.Linear(24, 64), torch.nn.BatchNorm1d(64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 48), torch.nn.ReLU(), torch.nn.Linear(48, 5))
    # Small buckets: several all-reduces per step, overlapping with the backward pass.
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group,
                                                    bucket_cap_mb=0.004)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(77 + R)  # each rank its own data
    for _ in range(steps):
        x, y = torch.randn(16, 24, generator=g), torch.randint(0, 5, (16,), generator=g)
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return ([p.detach().clone() for p in model.parameters()],
            [b.clone() for b in model.buffers()])


def check_ddp():
    hp, hb = train(HOOP)
    gp, gb = train(GLOO)
    h, g = hp + hb, gp + gb
    worst = max((a - b).abs().max().item() for a, b in zip(h, g))
    if P <= 2:  # a sum of two values does not depend on the order: bit for bit
        for a, b in zip(h, g):
            same(a, b, "DDP parameters, hoop against gloo")
    else:  # gloo and hoop add up to 4 gradients in different orders
        for a, b in zip(h, g):
            expect(torch.allclose(a, b, rtol=1e-5, atol=1e-6),
                   "DDP parameters differ from gloo's by %g" % worst)
    # Every rank ends with bit-identical parameters under hoop (buffers such as BatchNorm's
    # running statistics are local between the broadcasts at each forward).
    mine = torch.cat([p.reshape(-1).double() for p in hp])
    everyone = [torch.zeros_like(mine) for _ in range(P)]
    dist.all_gather(everyone, mine, group=GLOO)
    expect(all(torch.equal(e, everyone[0]) for e in everyone), "DDP ranks disagree under hoop")
    return worst


def train_hook(group, hook, state, steps=5):
    """A DDP run with a communication hook, as train() but smaller: the same on every group."""
    torch.manual_seed(4321)
    model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(), torch.nn.Linear(24, 3))
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group)
    ddp.register_comm_hook(state(group) if state else group, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(55 + R)
    for _ in range(steps):
        x, y = torch.randn(8, 12, generator=g), torch.randint(0, 3, (8,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def check_hooks():
    """DDP's PowerSGD hook, whose callbacks post all-reduces and wait for them in the thread that
    completes the future (a thread of the backend), against gloo; and chains of callbacks that do
    the same by hand."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    def powersgd(group):
        return powerSGD_hook.PowerSGDState(process_group=group, matrix_approximation_rank=1,
                                           start_powerSGD_iter=2, random_seed=0)

    for name, hook, state in (("allreduce", default_hooks.allreduce_hook, None),
                              ("PowerSGD", powerSGD_hook.powerSGD_hook, powersgd)):
        h, g = train_hook(HOOP, hook, state), train_hook(GLOO, hook, state)
        for a, b in zip(h, g):
            if P <= 2:
                same(a, b, "DDP with the %s hook, hoop against gloo" % name)
            else:  # up to 4 addends in different orders
                expect(torch.allclose(a, b, rtol=1e-5, atol=1e-6),
                       "DDP with the %s hook differs from gloo's" % name)
    salt[0] += 1
    inputs = [data(r, 6, torch.float32) for r in range(P)]
    total = ref_reduce(inputs, "sum")

    def again(fut):  # in the completing thread: another all-reduce, waited there
        return dist.all_reduce(fut.value()[0] * 2, async_op=True).get_future().wait()

    if R == 0:
        time.sleep(0.3)  # elsewhere the callbacks are chained before the future completes
    t = inputs[R].clone()
    got = dist.all_reduce(t, async_op=True).get_future().then(again).then(again).wait()[0]
    same(got, total * (2 * P) ** 2, "a chain of callbacks that all-reduce again")
    t2, t3 = inputs[R].clone(), inputs[R].clone() + 1
    if R == 0:
        time.sleep(0.3)
    w2 = dist.all_reduce(t2, async_op=True)
    w3 = dist.all_reduce(t3, async_op=True)
    got = w2.get_future().then(lambda f: w3.wait() and f.value()[0] + t3).wait()
    same(got, total * 2 + P, "a callback that waits for a collective posted after its own")
    # The same wait for another group's collective: the callback's lane goes on through its own
    # group, whose operations it completes are then over there (none left pending).
    other = dist.new_group(backend="hoop")
    if R == 0:
        time.sleep(0.3)
    wa = dist.all_reduce(inputs[R].clone(), async_op=True)
    if R == 0:
        time.sleep(0.3)  # elsewhere the callback waits for wb while wa2 is queued behind wa
    wb = dist.all_reduce(inputs[R].clone(), async_op=True, group=other)
    wa2 = dist.all_reduce(inputs[R].clone(), async_op=True)
    got = wa.get_future().then(lambda f: wb.wait() and f.value()[0]).wait()
    wa2.wait()
    same(got, total, "a callback that waits for another group's collective")
    if not CXX:  # the Python backend's own bookkeeping
        expect(not HOOP._state.pending, "operations left pending in the group after a "
               "callback waited for another group's: %s" % list(HOOP._state.pending.values()))
    dist.destroy_process_group(other)
    # The same wait inside torch's C++, which the backend cannot see: its lane goes on all the same.
    t4, t5 = inputs[R].clone(), inputs[R].clone() * 3
    if R == 0:
        time.sleep(0.3)
    w4 = dist.all_reduce(t4, async_op=True)
    w5 = dist.all_reduce(t5, async_op=True)
    got = w4.get_future().then(
        lambda f: torch.futures.wait_all([w5.get_future()])[0][0] + f.value()[0]).wait()
    same(got, total * 4, "a callback waiting in torch.futures.wait_all for a later collective")


def check_released():
    """A coalesced call's Work that Python waited for once is let go by the group (C++ waits once
    per output tensor, Python once): nothing keeps it, or its tensors, alive. The Python backend
    only: the C++ backend's Works are torch's C++ objects, which take no weak reference."""
    if CXX:
        return
    import gc
    import weakref
    for what, post in (
            ("allreduce_coalesced", lambda: HOOP.allreduce_coalesced([torch.ones(3),
                                                                      torch.ones(5)])),
            ("allgather_into_tensor_coalesced", lambda: HOOP.allgather_into_tensor_coalesced(
                [torch.zeros(3 * P), torch.zeros(5 * P)], [torch.ones(3), torch.ones(5)]))):
        for how in ("wait", "get_future"):
            work = post()
            if how == "wait":
                work.wait()
            else:
                work.get_future().wait()
            ref = weakref.ref(work)
            del work
            for _ in range(100):  # the completion thread lets go as its callbacks return
                gc.collect()
                if ref() is None:
                    break
                time.sleep(0.01)
            expect(ref() is None, "the Work of a %s still referenced after a Python %s"
                   % (what, how))


def check_refused():
    """Tensors the backend cannot serve raise before anything moves, on every rank alike, and
    leave the group usable: an expand()ed tensor to write into (its elements share memory), a
    sparse tensor where only dense ones are served."""
    e = torch.full((1,), R + 1.0).expand(4)
    expect_raises(ValueError, lambda: dist.all_reduce(e), "all_reduce into an expanded tensor",
                  "share memory")
    same(e, torch.full((4,), R + 1.0), "the expanded tensor after the refused all_reduce")
    out = [torch.zeros(1).expand(3) for _ in range(P)]
    expect_raises(ValueError, lambda: dist.all_gather(out, torch.ones(3)),
                  "all_gather into expanded tensors", "share memory")
    flat = torch.zeros(1).expand(3 * P)
    expect_raises(ValueError, lambda: dist.all_gather_into_tensor(flat, torch.ones(3)),
                  "all_gather_into_tensor into an expanded tensor", "share memory")
    if P > 1:
        r = torch.zeros(1).expand(2)
        expect_raises(ValueError, lambda: HOOP.recv([r], (R + 1) % P, 0), "recv into an expanded "
                      "tensor", "share memory")
    got = [torch.zeros(4) for _ in range(P)]
    dist.all_gather(got, e)  # read, an expanded tensor is an input like any other
    for r, x in enumerate(got):
        same(x, torch.full((4,), r + 1.0), "all_gather of an expanded input from rank %d" % r)
    # The binding refuses what the backend refuses: elements that overlap without a zero stride.
    ov = torch.zeros(4).as_strided((3, 2), (1, 1))
    if not CXX:  # the C++ backend has no binding object
        expect_raises(hoop.InvalidArgumentError, lambda: HOOP.comm.allreduce(ov),
                      "the binding's allreduce into overlapping elements", "share memory")
    expect_raises(ValueError, lambda: dist.all_reduce(ov),
                  "all_reduce into overlapping elements", "share memory")
    check_refused_cuda(e)
    sp = torch.sparse_coo_tensor(torch.tensor([[1]]), torch.ones(1), (5,))
    # The C++ backend: torch's dispatcher refuses a sparse broadcast or all_gather (no sparse
    # kernel for c10d's ops) before any backend sees it.
    for what, fn, cxx in (("broadcast", lambda: dist.broadcast(sp, 0), NotImplementedError),
                          ("all_gather", lambda: dist.all_gather([sp] * P, sp),
                           NotImplementedError),
                          ("all_reduce of sparse and dense",
                           lambda: HOOP.allreduce([sp, e.clone()]), ValueError)):
        cls = cxx if CXX else ValueError
        expect_raises(cls, fn, what + " of a sparse tensor",
                      "Sparse" if cls is NotImplementedError else "sparse")
    t = torch.tensor([float(R)])
    dist.all_reduce(t)
    expect(t.item() == P * (P - 1) / 2, "all_reduce after the refused tensors: %s" % t)


class FakeCuda(torch.Tensor):
    """A CPU tensor that says it is a CUDA tensor: enough to reach the backend's CUDA section up
    to its checks, which must refuse before anything is posted (torch.cuda is never reached)."""
    __torch_function__ = torch._C._disabled_torch_function_impl
    is_cuda = property(lambda self: True)
    device = property(lambda self: torch.device("cuda", 0))


def check_refused_cuda(e):
    """The CUDA section refuses an expanded tensor to write into, as the CPU path does, before
    anything is posted (without a GPU: only its checks run). The C++ backend serves CPU tensors
    only: it is the group's backend for CUDA tensors too, so that they reach its refusal, which
    names the Python backend (a meta tensor given to it directly stands in for a CUDA one)."""
    if CXX:
        be = HOOP._get_backend(torch.device("cuda"))
        expect(be.name() == "hoop", "the group's backend for cuda is %s" % be.name())
        expect_raises(ValueError, lambda: be.allreduce([torch.ones(2, device="meta")]),
                      "the C++ backend given a meta tensor", "HOOP_TORCH_BACKEND=python")
        return
    if P < 2:
        return
    ex = e.as_subclass(FakeCuda)
    ok = torch.zeros(4).as_subclass(FakeCuda)
    big = torch.zeros(4 * P).as_subclass(FakeCuda)
    flat = torch.zeros(1).expand(4 * P).as_subclass(FakeCuda)
    for what, fn in (("allreduce", lambda: HOOP.allreduce([ok, ex])),
                     ("allreduce_coalesced", lambda: HOOP.allreduce_coalesced([ex])),
                     ("broadcast to a non-root",
                      lambda: HOOP.broadcast([ex], _Opts(root=(R + 1) % P))),
                     ("reduce", lambda: HOOP.reduce([ex])),
                     ("allgather", lambda: HOOP.allgather([[ex] * P], [ok])),
                     ("_allgather_base", lambda: HOOP._allgather_base(flat, ok)),
                     ("scatter", lambda: HOOP.scatter([ex], [[ok] * P])),
                     ("reduce_scatter", lambda: HOOP.reduce_scatter([ex], [[ok] * P])),
                     ("_reduce_scatter_base", lambda: HOOP._reduce_scatter_base(ex, big)),
                     ("alltoall", lambda: HOOP.alltoall([ex] * P, [ok] * P)),
                     ("alltoall_base", lambda: HOOP.alltoall_base(flat, big, [], [])),
                     ("recv", lambda: HOOP.recv([ex], (R + 1) % P))):
        expect_raises(ValueError, fn, "CUDA %s into an expanded tensor" % what, "share memory")


class _Opts:
    def __init__(self, root):
        self.rootRank = root


# ---- failures: an exception, never a hang ----

def group_with_timeout(secs):
    """A new hoop group whose calls time out after secs: the binding's setting for the Python
    backend; the group's own timeout for the C++ one (which HOOP_TIMEOUT, if set, overrides)."""
    if CXX:
        import datetime
        return dist.new_group(backend="hoop", timeout=datetime.timedelta(seconds=secs))
    g = dist.new_group(backend="hoop")
    g.comm.set_timeout(secs)
    return g


def check_failures():
    deadline = 15.0
    # Ranks that call different collectives.
    mm = group_with_timeout(deadline)
    t0 = time.time()
    t = torch.ones(10)
    if R == 0:
        e = expect_raises(FAILED, lambda: dist.all_reduce(t, group=mm), "mismatch")
    else:
        e = expect_raises(FAILED, lambda: dist.broadcast(t, 0, group=mm), "mismatch")
    # The rank that sees the wrong call fails with MismatchError; the others fail because it
    # aborted (AbortedError naming the mismatch) or dropped its connections (PeerLostError).
    if CXX:  # one class; the sentence says which failure it was
        expect("hoop backend: " in str(e), "mismatch: %r" % e)
    else:
        expect(isinstance(e, (hoop.MismatchError, hoop.AbortedError, hoop.PeerLostError)),
               "mismatch: %r" % e)
    if isinstance(e, hoop.MismatchError) or (CXX and "mismatch" in str(e).lower()):
        expect("allreduce" in str(e) and "broadcast" in str(e), "mismatch message: %s" % e)
    expect(time.time() - t0 < deadline, "mismatch took %.1f s" % (time.time() - t0))
    # DDP on the failed group: its constructor's collectives raise too.
    expect_raises(Exception, lambda: torch.nn.parallel.DistributedDataParallel(
        torch.nn.Linear(2, 2), process_group=mm), "DDP on a failed group")
    dist.barrier(group=GLOO)
    # A collective nobody else joins: hoop's timeout.
    tg = group_with_timeout(1.0)
    if R == 0 and P > 1:
        t0 = time.time()
        e = expect_raises(hoop.TimeoutError if not CXX else FAILED,
                          lambda: dist.all_reduce(torch.ones(3), group=tg),
                          "lone all_reduce", "timed out")
        # torch's own tests match " timeout " (or " Timed out ", " closed ") in such errors.
        expect(" timeout " in str(e), "lone all_reduce: %r lacks ' timeout '" % str(e))
        expect(time.time() - t0 < deadline, "timeout took %.1f s" % (time.time() - t0))
    dist.barrier(group=GLOO)
    # A rank that exits: the others' next collective fails.
    if P > 1 and R == P - 1:
        sys.stdout.flush()
        os._exit(0)
    if P > 1:
        t0 = time.time()
        expect_raises(FAILED, lambda: dist.all_reduce(torch.ones(1000)),
                      "all_reduce after rank %d exited" % (P - 1))
        expect(time.time() - t0 < deadline, "peer loss took %.1f s" % (time.time() - t0))


check_all_reduce()
check_broadcast_reduce()
check_gathers()
check_reduce_scatter_alltoall()
check_p2p_barrier()
check_new_group()
check_extras()
check_refused()
check_released()
worst = check_ddp()
check_hooks()
print("rank %d of %d: collectives and DDP agree with gloo (largest DDP difference %g)"
      % (R, P, worst), flush=True)
check_failures()
print("rank %d of %d: %d checks passed" % (R, P, T.checks), flush=True)
# The gloo group has a rank that is gone: leave without its teardown.
os._exit(0)
