"""The torch.distributed backend "hoop" on CUDA tensors, run as every rank under hooprun:

    torch_cuda.py --launch HOOPRUN NRANKS LIMIT

Needs a CUDA torch and a GPU (exit 77, "no CUDA torch", elsewhere). Every rank uses device
LOCAL_RANK modulo the GPUs there are, so several ranks may share one GPU. Every collective the
backend serves runs on CUDA tensors of every dtype at sizes 1, 7 and 1031 (and 0), in and out of
place, against a reference every rank computes on the CPU from every rank's inputs (integer
values, so that float sums are exact in any order). Then stream order: the input is written by a
kernel queued behind a long sleep on a side stream just before the call on that stream, and read
just after on it, nothing synchronized by hand; Work.wait() called from another stream orders
that stream; a non-contiguous tensor; mixed CPU and CUDA tensors refused; and a
DistributedDataParallel CUDA model against the same model trained on gloo on the CPU.
"""
import os
import subprocess
import sys

try:
    import torch
except ImportError as e:
    print("SKIP: no CUDA torch (torch does not import: %s)" % e)
    sys.exit(77)

if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
    print("SKIP: no CUDA torch (torch %s, CUDA %s)" % (torch.__version__, torch.version.cuda))
    sys.exit(77)
if len(sys.argv) == 5 and sys.argv[1] == "--launch":  # torch_cuda.py --launch HOOPRUN N LIMIT
    hooprun, n, limit = sys.argv[2:]
    sys.exit(subprocess.call([hooprun, "--timeout", limit, "-n", n, sys.executable,
                              os.path.abspath(__file__)]))

import torch.distributed as dist  # noqa: E402

import hoop.torch  # noqa: E402 - registers "hoop"

# The tests' shared checks: ../common from here, in the tree and in the GPU check's bundle.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import hooptest  # noqa: E402

assert hoop.torch.BACKEND_NAME == "hoop"

dist.init_process_group("hoop")
R, P = dist.get_rank(), dist.get_world_size()
T = hooptest.Rank(R)
fail, expect = T.fail, T.expect
DEV = torch.device("cuda", int(os.environ.get("LOCAL_RANK", R)) % torch.cuda.device_count())
torch.cuda.set_device(DEV)
GLOO = dist.new_group(backend="gloo")
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int32, torch.int64]
SIZES = [0, 1, 7, 1031]
OPS = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
       "max": dist.ReduceOp.MAX}


def inp(rank, n, dt, salt=0):
    """Small integers, exact in every dtype, different on every rank and element."""
    v = (torch.arange(n, dtype=torch.int64) * 7 + rank * 3 + salt) % 5 + 1
    return v.to(dt)


def ref_reduce(n, dt, op):
    vals = [inp(r, n, dt).to(torch.float64) for r in range(P)]
    out = vals[0].clone()
    for v in vals[1:]:
        out = {"sum": out + v, "product": out * v, "min": torch.minimum(out, v),
               "max": torch.maximum(out, v)}[op]
    if dt in (torch.int8, torch.uint8, torch.int32, torch.int64):
        # Integer products wrap: compute them in the dtype itself, as every kernel does.
        if op == "product":
            out = inp(0, n, dt).clone()
            for r in range(1, P):
                out = out * inp(r, n, dt)
            return out
    return out.to(dt)


def same(got, want, what):
    g = got.detach().cpu()
    expect(g.dtype == want.dtype and g.shape == want.shape and torch.equal(g, want),
           "%s: got %s, want %s" % (what, g[:8].tolist(), want[:8].tolist()))


def cuda(t):
    return t.to(DEV)


def run_colls():
    for dt in DTYPES:
        for n in SIZES:
            tag = "%s x %d" % (str(dt)[6:], n)
            for name, op in OPS.items():
                if dt in (torch.float16, torch.bfloat16) and name == "product" and P > 3:
                    continue  # 5^4 is not exact in bfloat16
                x = cuda(inp(R, n, dt))
                dist.all_reduce(x, op=op)
                same(x, ref_reduce(n, dt, name), "all_reduce %s %s" % (name, tag))
                x = cuda(inp(R, n, dt))
                dist.reduce(x, dst=P - 1, op=op)
                if R == P - 1:
                    same(x, ref_reduce(n, dt, name), "reduce %s %s" % (name, tag))
            for root in range(P):
                x = cuda(inp(R, n, dt))
                dist.broadcast(x, src=root)
                same(x, inp(root, n, dt), "broadcast root %d %s" % (root, tag))
            outs = [cuda(torch.full((n,), 9, dtype=dt)) for _ in range(P)]
            dist.all_gather(outs, cuda(inp(R, n, dt)))
            for r in range(P):
                same(outs[r], inp(r, n, dt), "all_gather block %d %s" % (r, tag))
            flat = cuda(torch.zeros(P * n, dtype=dt))
            dist.all_gather_into_tensor(flat, cuda(inp(R, n, dt)))
            same(flat, torch.cat([inp(r, n, dt) for r in range(P)]),
                 "all_gather_into_tensor %s" % tag)
            root = 1 % P
            outs = [cuda(torch.zeros(n, dtype=dt)) for _ in range(P)] if R == root else None
            dist.gather(cuda(inp(R, n, dt)), outs, dst=root)
            if R == root:
                for r in range(P):
                    same(outs[r], inp(r, n, dt), "gather block %d %s" % (r, tag))
            out = cuda(torch.zeros(n, dtype=dt))
            ins = [cuda(inp(r, n, dt, 1)) for r in range(P)] if R == root else None
            dist.scatter(out, ins, src=root)
            same(out, inp(R, n, dt, 1), "scatter %s" % tag)
            # reduce_scatter: block R of every rank's input, summed.
            ins = [cuda(inp(R, n, dt, b)) for b in range(P)]
            out = cuda(torch.zeros(n, dtype=dt))
            dist.reduce_scatter(out, ins)
            want = sum(inp(r, n, dt, R).to(torch.float64) for r in range(P)).to(dt)
            same(out, want, "reduce_scatter %s" % tag)
            out = cuda(torch.zeros(n, dtype=dt))
            dist.reduce_scatter_tensor(out, torch.cat(ins))
            same(out, want, "reduce_scatter_tensor %s" % tag)
            # all_to_all: block b of rank r goes to rank b.
            outs = [cuda(torch.zeros(n, dtype=dt)) for _ in range(P)]
            dist.all_to_all(outs, [cuda(inp(R, n, dt, b)) for b in range(P)])
            for r in range(P):
                same(outs[r], inp(r, n, dt, R), "all_to_all from %d %s" % (r, tag))
            out = cuda(torch.zeros(P * n, dtype=dt))
            dist.all_to_all_single(out, torch.cat([cuda(inp(R, n, dt, b)) for b in range(P)]))
            same(out, torch.cat([inp(r, n, dt, R) for r in range(P)]),
                 "all_to_all_single %s" % tag)
        # Uneven blocks: rank r sends r + b + 1 rows to rank b.
        ins = [cuda(inp(R, R + b + 1, dt, b)) for b in range(P)]
        outs = [cuda(torch.zeros(r + R + 1, dtype=dt)) for r in range(P)]
        dist.all_to_all(outs, ins)
        for r in range(P):
            same(outs[r], inp(r, r + R + 1, dt, R), "uneven all_to_all from %d" % r)
        out = cuda(torch.zeros(sum(r + R + 1 for r in range(P)), dtype=dt))
        dist.all_to_all_single(out, torch.cat(ins), [r + R + 1 for r in range(P)],
                               [R + b + 1 for b in range(P)])
        same(out, torch.cat([inp(r, r + R + 1, dt, R) for r in range(P)]),
             "uneven all_to_all_single")
        # Point to point around the ring.
        x = cuda(inp(R, 1031, dt))
        y = cuda(torch.zeros(1031, dtype=dt))
        reqs = [dist.isend(x, (R + 1) % P), dist.irecv(y, (R - 1) % P)]
        for q in reqs:
            q.wait()
        same(y, inp((R - 1) % P, 1031, dt), "send/recv %s" % dt)
    # Coalesced (several tensors, one call).
    ts = [cuda(inp(R, n, torch.float32)) for n in (3, 1031, 1)]
    dist.all_reduce_coalesced(ts)
    for t, n in zip(ts, (3, 1031, 1)):
        same(t, ref_reduce(n, torch.float32, "sum"), "all_reduce_coalesced %d" % n)


def run_streams():
    n = 1 << 22
    side, other = torch.cuda.Stream(DEV), torch.cuda.Stream(DEV)
    want = ref_reduce(n, torch.float32, "sum")
    with torch.cuda.stream(side):
        x = cuda(torch.zeros(n))
        torch.cuda._sleep(50_000_000)  # the input's writer is still queued when the call posts
        x.copy_(cuda(inp(R, n, torch.float32)))
        w = dist.all_reduce(x, async_op=True)
        y = x * 1  # queued after the call on its stream: must see the result
    with torch.cuda.stream(other):
        w.wait()  # orders `other` after the call
        z = x * 1
    torch.cuda.synchronize(DEV)
    same(y, want, "read after the call on its stream")
    same(z, want, "read on another stream after Work.wait()")
    # A non-contiguous tensor: the result lands in its strided view.
    m = cuda(inp(R, 6 * 7, torch.float32).view(6, 7)).t()
    dist.all_reduce(m)
    same(m, ref_reduce(6 * 7, torch.float32, "sum").view(6, 7).t(), "non-contiguous all_reduce")
    try:
        dist.all_gather([torch.zeros(1) for _ in range(P)], cuda(torch.zeros(1)))
    except ValueError as e:
        expect("mixes CUDA and cpu" in str(e), "mixed tensors: %s" % e)
    else:
        fail("mixed CPU and CUDA tensors were accepted")


def run_ddp():
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    m_cuda = torch.nn.parallel.DistributedDataParallel(base.to(DEV), device_ids=[DEV.index])
    torch.manual_seed(0)
    base_cpu = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                   torch.nn.Linear(32, 4))
    m_cpu = torch.nn.parallel.DistributedDataParallel(base_cpu, process_group=GLOO)
    opt_c = torch.optim.SGD(m_cuda.parameters(), lr=0.1)
    opt_h = torch.optim.SGD(m_cpu.parameters(), lr=0.1)
    for step in range(5):
        g = torch.Generator().manual_seed(100 * step + R)
        data, target = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        for model, opt, d, t in ((m_cuda, opt_c, cuda(data), cuda(target)),
                                 (m_cpu, opt_h, data, target)):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(d), t).backward()
            opt.step()
    for pc, ph in zip(m_cuda.parameters(), m_cpu.parameters()):
        expect(torch.allclose(pc.detach().cpu(), ph.detach(), rtol=1e-4, atol=1e-5),
               "DDP on CUDA with hoop differs from DDP on the CPU with gloo")


run_colls()
run_streams()
run_ddp()
dist.barrier()
print("rank %d: %d checks passed" % (R, T.checks))
dist.destroy_process_group()
