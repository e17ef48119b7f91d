"""What users of torch 2.x do with a process group, run as every rank under hooprun on one
backend; tests/torch2/user_suite.py runs it on gloo and on hoop and compares the two bit for bit.

    cases.py --backend hoop|gloo --out DIR [--only CASE,...]

Every case returns named tensors (its results); rank r writes them to DIR/CASE.r.pt. A case also
checks what can be computed on one process (the functional collectives against sums made here,
DTensor's full tensor against the tensor it was made from, a checkpoint loaded against what was
saved): a failed check, or an exception, writes DIR/CASE.r.err with the reason instead. The
cases run in the order listed, each with its own tensors; the default group is the backend
under test, and so are the groups DeviceMesh and new_group make from it.
"""
import argparse
import datetime
import faulthandler
import os
import shutil
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--backend", required=True, choices=["hoop", "gloo"])
ap.add_argument("--out", required=True)
ap.add_argument("--only", default="")
ap.add_argument("--case-limit", type=float, default=180, help="seconds one case may take")
ARGS = ap.parse_args()
CASE_LIMIT = ARGS.case_limit

if ARGS.backend == "hoop":
    import hoop.torch  # noqa: F401 - registers "hoop" (where no entry point did)

torch.set_num_threads(1)
dist.init_process_group(ARGS.backend, timeout=datetime.timedelta(seconds=60))
R, P = dist.get_rank(), dist.get_world_size()


class CheckFailed(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise CheckFailed(msg)


def same(a, b, what):
    check(a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b),
          "%s: %s against %s" % (what, a.reshape(-1)[:6].tolist(), b.reshape(-1)[:6].tolist()))


def data(rank, shape, salt, dtype=torch.float32):
    """Integer-valued data of `rank`: sums of a few of them are exact in every order."""
    g = torch.Generator().manual_seed(1000 * salt + rank)
    return torch.randint(-8, 9, shape, generator=g).to(dtype)


CASES = []


def case(world=None, gloo=True):
    """A case; world: the world sizes it needs (None: any); gloo=False: gloo fails it in this
    torch (user_suite.py then holds hoop to the case's own checks alone)."""
    def add(fn):
        fn.gloo = gloo
        CASES.append((fn.__name__, fn, world))
        return fn
    return add


# ---- DeviceMesh and DTensor ----

@case(world=(2,))
def mesh_1d():
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (P,))
    g = mesh.get_group()
    check(dist.get_backend(g) == ARGS.backend, "mesh group's backend %s" % dist.get_backend(g))
    check(isinstance(g.group_name, str) and g.group_name, "mesh group name %r" % g.group_name)
    t = data(R, (5,), 1)
    dist.all_reduce(t, group=g)
    same(t, sum(data(r, (5,), 1) for r in range(P)), "all_reduce on the mesh's group")
    return {"sum": t}


@case(world=(4,))
def mesh_2d():
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    out = {}
    for dim in ("dp", "tp"):
        g = mesh[dim].get_group()
        members = dist.get_process_group_ranks(g)
        t = data(R, (6,), 2)
        dist.all_reduce(t, group=g)
        same(t, sum(data(r, (6,), 2) for r in members), "all_reduce along %s %s" % (dim, members))
        ag = [torch.zeros(3) for _ in members]
        dist.all_gather(ag, data(R, (3,), 3), group=g)
        for r, x in zip(members, ag):
            same(x, data(r, (3,), 3), "all_gather along %s from %d" % (dim, r))
        out[dim] = t
        out[dim + "_gather"] = torch.cat(ag)
    return out


@case(world=(2, 4))
def dtensor_redistribute():
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (P,))
    full = data(0, (8, 8), 4)  # the same on every rank
    d = distribute_tensor(full, mesh, [Shard(0)])
    same(d.to_local(), full.chunk(P, 0)[R], "Shard(0)'s local part")
    rep = d.redistribute(mesh, [Replicate()])
    same(rep.to_local(), full, "Shard(0) -> Replicate")
    s1 = d.redistribute(mesh, [Shard(1)])
    same(s1.to_local(), full.chunk(P, 1)[R], "Shard(0) -> Shard(1)")
    same(s1.full_tensor(), full, "Shard(1).full_tensor()")
    # A partial sum: each rank's own addend, reduced when replicated or sharded.
    mine = data(R, (4, 4), 5)
    part = torch.distributed.tensor.DTensor.from_local(mine, mesh, [Partial()])
    total = sum(data(r, (4, 4), 5) for r in range(P))
    same(part.redistribute(mesh, [Replicate()]).to_local(), total, "Partial -> Replicate")
    same(part.redistribute(mesh, [Shard(0)]).to_local(), total.chunk(P, 0)[R],
         "Partial -> Shard(0)")
    # DTensor arithmetic that needs communication: a matmul of row- and column-sharded operands.
    a = distribute_tensor(data(0, (4, 8), 6), mesh, [Shard(1)])
    b = distribute_tensor(data(0, (8, 4), 7), mesh, [Shard(0)])
    prod = (a @ b).full_tensor()
    same(prod, data(0, (4, 8), 6) @ data(0, (8, 4), 7), "sharded matmul")
    return {"rep": rep.to_local(), "s1": s1.to_local(), "partial": total, "prod": prod}


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def dyadic(model):
    """Weights that are multiples of 1/64 in a small range: products and sums stay exact."""
    g = torch.Generator().manual_seed(99)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randint(-16, 17, p.shape, generator=g).float() / 64)


@case(world=(2, 4))
def tensor_parallel():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    ref = MLP()
    dyadic(ref)
    model = MLP()
    dyadic(model)
    mesh = init_device_mesh("cpu", (P,))
    model = parallelize_module(model, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    x = data(0, (3, 8), 8) / 4  # the same input on every rank
    y = model(x)
    y_ref = ref(x)
    same(y, y_ref, "tensor-parallel forward against the model on one process")
    y.sum().backward()
    y_ref.sum().backward()
    out = {"y": y.detach()}
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        g = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
        same(g, q.grad, "gradient of %s" % name)
        out["grad_" + name] = g
    return out


# ---- functional collectives ----

@case(world=(2, 4))
def functional():
    import torch.distributed._functional_collectives as fc

    pg = dist.group.WORLD
    x = data(R, (4, 3), 9)
    ar = fc.all_reduce(x, "sum", pg)
    ar = fc.wait_tensor(ar) if isinstance(ar, torch.Tensor) else ar
    same(torch.as_tensor(ar), sum(data(r, (4, 3), 9) for r in range(P)), "all_reduce")
    ag = fc.all_gather_tensor(x, 0, pg)
    ag = ag.wait() if hasattr(ag, "wait") else ag
    same(torch.as_tensor(ag), torch.cat([data(r, (4, 3), 9) for r in range(P)]),
         "all_gather_tensor")
    big = data(R, (2 * P, 3), 10)
    rs = fc.reduce_scatter_tensor(big, "sum", 0, pg)
    rs = rs.wait() if hasattr(rs, "wait") else rs
    same(torch.as_tensor(rs), sum(data(r, (2 * P, 3), 10) for r in range(P)).chunk(P)[R],
         "reduce_scatter_tensor")
    # The coalesced forms: several tensors in one call.
    xs = [data(R, (n,), 11 + n) for n in (1, 5, 2 * P)]
    ags = fc.all_gather_into_tensor_coalesced(xs, pg)
    for n, a in zip((1, 5, 2 * P), ags):
        same(torch.as_tensor(fc.wait_tensor(a)),
             torch.cat([data(r, (n,), 11 + n) for r in range(P)]), "coalesced all_gather")
    rss = fc.reduce_scatter_tensor_coalesced([data(R, (2 * P,), 30), data(R, (P,), 31)],
                                             "sum", [0, 0], pg)
    for (n, s), r_ in zip(((2 * P, 30), (P, 31)), rss):
        same(torch.as_tensor(fc.wait_tensor(r_)),
             sum(data(r, (n,), s) for r in range(P)).chunk(P)[R], "coalesced reduce_scatter")
    a2a = fc.all_to_all_single(data(R, (P * 2,), 12), None, None, pg)
    a2a = a2a.wait() if hasattr(a2a, "wait") else a2a
    same(torch.as_tensor(a2a), torch.cat([data(r, (P * 2,), 12)[2 * R:2 * R + 2]
                                          for r in range(P)]), "all_to_all_single")
    return {"ar": torch.as_tensor(ar), "ag": torch.as_tensor(ag), "rs": torch.as_tensor(rs)}


def _compiled(backend, salt):
    """Functional collectives between computations, under torch.compile(backend=...), against
    the same step run eagerly and against sums made here."""
    import torch.distributed._functional_collectives as fc

    pg = dist.group.WORLD

    def step(x):
        y = fc.all_reduce(x * 2, "sum", pg)
        z = fc.all_gather_tensor(y + 1, 0, pg)
        w = fc.reduce_scatter_tensor(z, "sum", 0, pg)
        return y, z, w

    x = data(R, (2 * P, 3), salt)
    want = [torch.as_tensor(t.wait() if hasattr(t, "wait") else t) for t in step(x)]
    got = torch.compile(step, backend=backend, fullgraph=True)(x)
    out = {}
    for i, (g, w) in enumerate(zip(got, want)):
        same(torch.as_tensor(g), w, "compiled output %d against eager" % i)
        out["o%d" % i] = torch.as_tensor(g)
    total = sum(data(r, (2 * P, 3), salt) for r in range(P)) * 2
    same(out["o0"], total, "compiled all_reduce")
    return out


@case(world=(2,))
def compiled_functional():
    return _compiled("aot_eager", 13)


@case(world=(2,))
def compiled_inductor():
    """inductor: it generates and compiles C++ for the computations, and calls the collectives
    through torch.ops._c10d_functional on the group it finds by name (the slowest case: a
    compiler run per rank)."""
    return _compiled("inductor", 14)


# ---- checkpoints ----

def _shared_dir(tag):
    """A folder every rank of this run uses (rank 0 makes it and broadcasts its name)."""
    name = [tempfile.mkdtemp(prefix="hoop-torch2-%s-" % tag) if R == 0 else None]
    dist.broadcast_object_list(name, 0)
    return name[0]


@case(world=(2, 4))
def checkpoint_dtensor():
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (P,))
    full_w, full_b = data(0, (8, 4), 14), data(0, (6,), 15)
    sd = {"w": distribute_tensor(full_w, mesh, [Shard(0)]),
          "b": distribute_tensor(full_b, mesh, [Shard(0)]), "step": torch.tensor(R * 0 + 7)}
    path = _shared_dir("dcp")
    try:
        dcp.save(sd, checkpoint_id=path)
        back = {"w": distribute_tensor(torch.zeros(8, 4), mesh, [Shard(0)]),
                "b": distribute_tensor(torch.zeros(6), mesh, [Shard(0)]),
                "step": torch.tensor(0)}
        dcp.load(back, checkpoint_id=path)
        dist.barrier()
    finally:
        if R == 0:
            shutil.rmtree(path, ignore_errors=True)
    same(back["w"].full_tensor(), full_w, "loaded sharded w")
    same(back["b"].full_tensor(), full_b, "loaded sharded b")
    same(back["step"], torch.tensor(7), "loaded step")
    return {"w": back["w"].to_local(), "b": back["b"].to_local()}


@case(world=(2,))
def checkpoint_ddp():
    import torch.distributed.checkpoint as dcp

    torch.manual_seed(5)
    model = torch.nn.parallel.DistributedDataParallel(MLP())
    dyadic(model.module)
    x = data(R, (4, 8), 16) / 4
    model(x).sum().backward()
    sd = {"model": model.state_dict()}
    path = _shared_dir("ddp")
    try:
        dcp.save(sd, checkpoint_id=path)
        fresh = torch.nn.parallel.DistributedDataParallel(MLP())
        back = {"model": fresh.state_dict()}
        dcp.load(back, checkpoint_id=path)
        fresh.load_state_dict(back["model"])
        dist.barrier()
    finally:
        if R == 0:
            shutil.rmtree(path, ignore_errors=True)
    out = {}
    for (k, v), (k2, v2) in zip(model.state_dict().items(), fresh.state_dict().items()):
        same(v2, v, "loaded %s" % k)
        out[k] = v2
    return out


# ---- groups ----

@case(world=(2, 4))
def destroy_subgroup():
    out = {}
    for i in range(3):  # made, used and destroyed, three times over
        sub = dist.new_group(list(range(P)))
        t = data(R, (4,), 17 + i)
        dist.all_reduce(t, group=sub)
        same(t, sum(data(r, (4,), 17 + i) for r in range(P)), "all_reduce on subgroup %d" % i)
        out["sub%d" % i] = t
        dist.destroy_process_group(sub)
    evens = dist.new_group(list(range(0, P, 2)))
    if R % 2 == 0:
        t = data(R, (4,), 20)
        dist.all_reduce(t, group=evens)
        same(t, sum(data(r, (4,), 20) for r in range(0, P, 2)), "all_reduce on the evens")
        out["evens"] = t
    dist.destroy_process_group(evens)
    t = data(R, (4,), 21)
    dist.all_reduce(t)  # the default group is intact
    same(t, sum(data(r, (4,), 21) for r in range(P)), "all_reduce on the default group")
    return out


# ---- DDP with every communication hook ----

def _hooks():
    from torch.distributed.algorithms.ddp_comm_hooks import (debugging_hooks, default_hooks,
                                                             post_localSGD_hook, powerSGD_hook)

    def powersgd(rank, wrap=None):
        def install(ddp):
            state = powerSGD_hook.PowerSGDState(process_group=None,
                                                matrix_approximation_rank=rank,
                                                start_powerSGD_iter=2, use_error_feedback=True,
                                                warm_start=True, random_seed=0)
            hook = powerSGD_hook.powerSGD_hook
            ddp.register_comm_hook(state, wrap(hook) if wrap else hook)
        return install

    def plain(hook):
        return lambda ddp: ddp.register_comm_hook(None, hook)

    def local_sgd(ddp):
        # Local steps within pairs of ranks after the first two global ones.
        subgroup, _ = dist.new_subgroups(group_size=2)
        state = post_localSGD_hook.PostLocalSGDState(process_group=None, subgroup=subgroup,
                                                     start_localSGD_iter=2)
        ddp.register_comm_hook(state, post_localSGD_hook.post_localSGD_hook)

    # Not here: the quantization hooks, which fail on gloo as on hoop in torch 2.6 (they index an
    # all_gather future's value as a tensor), batched_powerSGD_hook, which fails its own assertion
    # there (on gloo too), bf16_compress_hook, which needs CUDA and NCCL, and the built-in C++
    # FP16 hook (ddp_builtin_fp16 below).
    return [
        ("none", lambda ddp: None),
        ("allreduce", plain(default_hooks.allreduce_hook)),
        ("fp16_compress", plain(default_hooks.fp16_compress_hook)),
        ("noop", plain(debugging_hooks.noop_hook)),
        ("builtin_allreduce", lambda ddp: ddp._register_builtin_comm_hook(
            dist.BuiltinCommHookType.ALLREDUCE)),
        ("powersgd_rank1", powersgd(1)),
        ("powersgd_rank2", powersgd(2)),
        ("powersgd_fp16_wrapped", powersgd(1, wrap=default_hooks.fp16_compress_wrapper)),
        ("post_local_sgd", local_sgd),
    ]


@case(world=(2,))
def ddp_hooks():
    out = {}
    for name, install in _hooks():
        torch.manual_seed(3)
        model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(),
                                    torch.nn.Linear(24, 10), torch.nn.ReLU(),
                                    torch.nn.Linear(10, 3))
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        install(ddp)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        g = torch.Generator().manual_seed(40 + R)
        for _ in range(5):  # past start_powerSGD_iter and start_localSGD_iter
            x, y = torch.randn(8, 12, generator=g), torch.randint(0, 3, (8,), generator=g)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
            opt.step()
        params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        if name != "noop" and name != "post_local_sgd":
            every = [torch.zeros_like(params) for _ in range(P)]
            dist.all_gather(every, params)
            check(all(torch.equal(e, every[0]) for e in every),
                  "hook %s: ranks end with different parameters" % name)
        out[name] = params
    return out


@case(world=(2,), gloo=False)
def ddp_builtin_fp16():
    """DDP's built-in C++ FP16 hook reads the all-reduce's future as a C++ tensor list. The
    future of a Python process group is not one (it holds a Python list): an error on every rank
    (not a hang, not wrong gradients), and the group goes on. The C++ backend's future is one:
    the hook works, and every rank gets the average of the ranks' gradients."""
    model = torch.nn.Linear(4, 2)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    ddp._register_builtin_comm_hook(dist.BuiltinCommHookType.FP16_COMPRESS)
    exc = raised(lambda: ddp(torch.ones(3, 4) * (R + 1)).sum().backward())
    if python_group():
        check(exc is not None, "the built-in FP16 hook did not raise")
    else:
        check(exc is None, "the built-in FP16 hook raised %r" % (exc,))
        # d(sum)/dW is the batch's column sums, 3 (R + 1) here: their mean over the ranks, which
        # fp16 holds exactly.
        want = 3.0 * sum(r + 1 for r in range(P)) / P
        same(model.weight.grad, torch.full((2, 4), want), "the FP16 hook's weight gradient")
        same(model.bias.grad, torch.full((2,), 3.0), "the FP16 hook's bias gradient")
    t = data(R, (5,), 26)
    dist.all_reduce(t)
    same(t, sum(data(r, (5,), 26) for r in range(P)), "all_reduce after the built-in hooks")
    return {"after": t}


# ---- futures whose callbacks post collectives ----

@case(world=(2, 4))
def future_chains():
    """Callbacks that post collectives and wait for them (as DDP's PowerSGD hook does). Rank 0
    posts late, so that elsewhere the callbacks are chained before the future completes and run
    in the backend's completion thread rather than in this one."""
    total = sum(data(r, (6,), 22) for r in range(P))

    def again(fut):
        t = fut.value()[0] * 2
        return dist.all_reduce(t, async_op=True).get_future().wait()

    def late():
        if R == 0:
            time.sleep(0.3)

    late()
    t = data(R, (6,), 22)
    fut = dist.all_reduce(t, async_op=True).get_future().then(again).then(again)
    got = fut.wait()[0]
    same(got, total * 2 * P * 2 * P, "a chain of two callbacks that all-reduce again")
    # A callback that waits for a collective posted after the one it is chained to.
    t2, t3 = data(R, (3,), 23), data(R, (3,), 24)
    late()
    w2 = dist.all_reduce(t2, async_op=True)
    w3 = dist.all_reduce(t3, async_op=True)
    chained = w2.get_future().then(lambda f: w3.wait() and f.value()[0] + t3)
    got2 = chained.wait()
    same(got2, sum(data(r, (3,), 23) for r in range(P)) + sum(data(r, (3,), 24)
                                                              for r in range(P)),
         "a callback waiting for a later collective")
    # The same wait inside torch's C++ (torch.futures.wait_all), which the backend cannot see.
    t4, t5 = data(R, (3,), 26), data(R, (3,), 27)
    late()
    w4 = dist.all_reduce(t4, async_op=True)
    w5 = dist.all_reduce(t5, async_op=True)
    got3 = w4.get_future().then(
        lambda f: torch.futures.wait_all([w5.get_future()])[0][0] + f.value()[0]).wait()
    same(got3, sum(data(r, (3,), 26) + data(r, (3,), 27) for r in range(P)),
         "a callback waiting in torch.futures.wait_all for a later collective")
    return {"chain": got, "later": got2, "wait_all": got3}


@case(world=(2, 4), gloo=False)
def ordered_callbacks():
    """Callbacks that each post a collective on another group without waiting: hoop runs a
    group's callbacks one after the other in posting order (those chained to a future that is
    already complete run at once, in the caller, after the ones before it), so every rank posts
    their collectives in the same order. (gloo runs them on several worker threads at once, so
    its ranks post them in different orders and mix up the data.)"""
    other = dist.new_group(list(range(P)))
    if R == 0:
        time.sleep(0.3)
    futs = []
    for i in range(8):
        x = data(R, (2,), 30 + i)
        futs.append(dist.all_reduce(x, async_op=True).get_future().then(
            lambda f: dist.all_reduce(f.value()[0] + 1, group=other, async_op=True).get_future()))
    outs = [f.wait().wait()[0] for f in futs]
    for i, o in enumerate(outs):
        same(o, (sum(data(r, (2,), 30 + i) for r in range(P)) + 1) * P,
             "callback %d's collective" % i)
    dist.destroy_process_group(other)
    return {"many": torch.cat(outs)}


# ---- refused input ----

@case(world=(2,), gloo=False)
def refused():
    """A sparse tensor where only dense ones are served, and an expand()ed tensor to write into:
    an error before any data moves, the tensor left as it was, and the group still works.
    (gloo reduces into the expanded tensor without an error.)"""
    e = torch.full((1,), 1.0 + R).expand(4)
    exc = raised(lambda: dist.all_reduce(e))
    # The backend's ValueError, before the call: torch's RuntimeError comes after it has run.
    check(isinstance(exc, ValueError), "all_reduce into an expanded tensor: %r" % (exc,))
    same(e, torch.full((4,), 1.0 + R), "the expanded tensor after the refused all_reduce")
    sp = torch.sparse_coo_tensor(torch.tensor([[1]]), torch.ones(1), (5,))
    exc = raised(lambda: dist.broadcast(sp, 0))
    # The Python backend's ValueError; with the C++ backend torch's dispatcher refuses it first
    # (no sparse kernel for c10d::broadcast_), before any data moves too.
    check(isinstance(exc, ValueError if python_group() else NotImplementedError),
          "broadcast of a sparse tensor: %r" % (exc,))
    t = data(R, (5,), 25)
    dist.all_reduce(t)
    same(t, sum(data(r, (5,), 25) for r in range(P)), "all_reduce after the refusals")
    return {"after": t, "expanded": e.contiguous()}


def python_group():
    """Whether hoop's Python backend serves the default group (not its C++ one, nor gloo)."""
    cls = getattr(sys.modules.get("hoop.torch"), "ProcessGroupHoop", None)
    return cls is not None and isinstance(dist.group.WORLD, cls)


def raised(fn):
    """The exception fn raised, or None."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - returned to be checked
        return e
    return None


def main():
    os.makedirs(ARGS.out, exist_ok=True)
    only = set(filter(None, ARGS.only.split(",")))
    for name, fn, world in CASES:
        if (only and name not in only) or (world is not None and P not in world):
            continue
        t0 = time.monotonic()
        # A case that hangs (a deadlock has no timeout of its own) ends the rank, and with it the
        # launch: the driver then runs the cases after it in a new one.
        faulthandler.dump_traceback_later(CASE_LIMIT, exit=True)
        try:
            res = fn()
            torch.save({k: v.detach().clone() for k, v in res.items()},
                       os.path.join(ARGS.out, "%s.%d.pt" % (name, R)))
            status = "ok"
        except Exception as exc:  # noqa: BLE001 - the case's failure is the report
            with open(os.path.join(ARGS.out, "%s.%d.err" % (name, R)), "w") as f:
                f.write("".join(traceback.format_exception(exc))[-4000:])
            status = "FAILED: %s: %s" % (type(exc).__name__, str(exc).splitlines()[0][:200]
                                         if str(exc) else "")
        faulthandler.cancel_dump_traceback_later()
        print("rank %d %s %s: %s (%.1f s)" % (R, ARGS.backend, name, status,
                                             time.monotonic() - t0), flush=True)
        # The ranks meet after every case (on a group of their own: the case's may be broken).
        dist.barrier(group=SYNC)
    dist.destroy_process_group()


SYNC = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=120))
if __name__ == "__main__":
    main()
    sys.stdout.flush()
