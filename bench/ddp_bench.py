#!/usr/bin/env python3
"""DistributedDataParallel step time with the hoop backend against gloo.

    PYTHONPATH=python HOOP_LIBRARY=build/libhoop.so \\
        /usr/bin/python3 bench/ddp_bench.py --hooprun build/tools/hooprun [--runs 3] [--ranks 2]

Each run launches `ranks` local ranks (one torch thread each) that train two copies of an MLP of
about 10 million parameters with DistributedDataParallel (default 25 MB buckets): one over the
default group, hoop (init_process_group("hoop")), one over a gloo group. Where hoop's C++
backend serves the default group (torch >= 2.0 with the extension built, HOOP_TORCH_BACKEND
not python), a third copy runs over hoop's Python backend, registered beside it under the name
"hooppy". The copies take turns step by step (rotating which goes first), so that all see the
same machine. Per run and backend:
the median step time, the median step time without gradient all-reduce (ddp.no_sync(): compute
alone), the CPU time a rank spends per step in both cases (all its threads), and the all-reduce
time of DDP-sized buffers (1 MB: DDP's first bucket; 25 MB: the others) through torch.distributed
and, for hoop, through the binding alone. It prints each run, the medians over runs, and the
ratio of step times gloo/hoop for each hoop backend, with its spread over the runs.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

LAYERS = [1024, 2048, 2048, 1280, 1000]  # 10.2 M parameters


def worker(a):
    import torch
    import torch.distributed as dist
    import hoop.torch  # noqa: F401 - registers the backend

    torch.set_num_threads(1)
    dist.init_process_group("hoop")
    default = dist.distributed_c10d._get_default_group()
    if isinstance(default, hoop.torch.ProcessGroupHoop):
        groups = {"hoop-py": default}
    else:  # the C++ backend; the Python one beside it, under a name of its own
        dist.Backend.register_backend("hooppy", hoop.torch._create, devices=["cpu"])
        groups = {"hoop-cpp": default, "hoop-py": dist.new_group(backend="hooppy")}
    groups["gloo"] = dist.new_group(backend="gloo")
    rank, size = dist.get_rank(), dist.get_world_size()

    def mlp():
        torch.manual_seed(0)
        mods = []
        for i in range(len(LAYERS) - 1):
            mods.append(torch.nn.Linear(LAYERS[i], LAYERS[i + 1]))
            if i < len(LAYERS) - 2:
                mods.append(torch.nn.ReLU())
        return torch.nn.Sequential(*mods)

    g = torch.Generator().manual_seed(rank)
    x = torch.randn(a.batch, LAYERS[0], generator=g)
    y = torch.randint(0, LAYERS[-1], (a.batch,), generator=g)
    ddp, opt, steps = {}, {}, {}
    for b, pg in groups.items():
        ddp[b] = torch.nn.parallel.DistributedDataParallel(mlp(), process_group=pg)
        opt[b] = torch.optim.SGD(ddp[b].parameters(), lr=1e-3)

        def step(b=b):
            opt[b].zero_grad()
            torch.nn.functional.cross_entropy(ddp[b](x), y).backward()
            opt[b].step()
        steps[b] = step
    nparams = sum(p.numel() for p in ddp["gloo"].module.parameters())

    # Both backends live in this process and take turns, step by step, so that they see the
    # same machine: a shared, noisy machine's load changes from one second to the next.
    times = {}

    def timed(key, fn, n):
        t_all, c_all, m_all = times.setdefault(key, ([], [], []))
        for _ in range(n):
            dist.barrier(group=groups["gloo"])
            # CPU time: all this rank's threads, and the calling (training) thread alone
            c, m, t = time.process_time(), time.thread_time(), time.perf_counter()
            fn()
            t_all.append(time.perf_counter() - t)
            m_all.append(time.thread_time() - m)
            c_all.append(time.process_time() - c)

    for b in groups:
        for _ in range(a.warmup):
            steps[b]()
    order = list(groups)

    def turn(i):  # who goes first rotates, step by step
        k = i % len(order)
        return order[k:] + order[:k]

    for i in range(a.steps):
        for b in turn(i):
            timed((b, "step"), steps[b], 1)
    for i in range(a.steps):
        for b in turn(i):
            with ddp[b].no_sync():
                timed((b, "compute"), steps[b], 1)
    bufs = {mb: torch.ones(mb * 1024 * 1024 // 4) for mb in (1, 25)}
    comm = groups["hoop-py"].comm  # the Python backend's binding
    for i in range(a.reps):
        for mb, t in bufs.items():
            for b in turn(i):
                timed((b, "allreduce_%dMB" % mb), lambda: dist.all_reduce(t, group=groups[b]), 1)
            # the binding alone, without the process group around it
            timed(("hoop-py", "binding_allreduce_%dMB" % mb), lambda: comm.allreduce(t), 1)
    if rank == 0:
        res = {"ranks": size, "params": nparams, "batch": a.batch}
        for (b, what), (t, c, m) in times.items():
            res.setdefault(b, {})[what + "_s"] = statistics.median(t)
            res[b][what + "_cpu_s"] = statistics.mean(c)
            res[b][what + "_main_cpu_s"] = statistics.mean(m)
        print("RESULT " + json.dumps(res), flush=True)
    dist.barrier(group=groups["gloo"])
    os._exit(0)  # skip interpreter teardown of both groups


def launch(a):
    cmd = [a.hooprun, "--no-prefix", "-n", str(a.ranks), sys.executable, os.path.abspath(__file__),
           "--worker", "--steps", str(a.steps), "--warmup", str(a.warmup),
           "--batch", str(a.batch), "--reps", str(a.reps)]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    sys.exit("ddp_bench: a run failed (status %d):\n%s%s" % (p.returncode, p.stdout[-2000:],
                                                            p.stderr[-2000:]))


def blas_note():
    import torch
    cfg = torch.__config__.show()
    info = [w for w in cfg.replace(",", " ").split() if w.startswith("BLAS_INFO=")]
    n = 512
    x = torch.randn(n, n)
    torch.set_num_threads(1)
    t = time.perf_counter()
    for _ in range(10):
        x @ x
    gflops = 10 * 2 * n ** 3 / (time.perf_counter() - t) / 1e9
    return "%s, one thread: %.1f GFLOP/s on a %dx%d matmul" % (
        info[0] if info else "BLAS unknown", gflops, n, n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hooprun", default="build/tools/hooprun")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3, help="launches")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per backend and run")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32, help="per-rank batch")
    ap.add_argument("--reps", type=int, default=10, help="timed raw all-reduces per size")
    ap.add_argument("--json", help="write every run's figures to this file")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    print("ddp_bench: %d ranks, MLP %s, batch %d per rank, %d runs; %s"
          % (a.ranks, "-".join(map(str, LAYERS)), a.batch, a.runs, blas_note()), flush=True)
    runs = []
    for i in range(a.runs):
        r = launch(a)
        runs.append(r)
        backends = [b for b in ("hoop-cpp", "hoop-py", "gloo") if b in r]
        for b in backends:
            m = r[b]
            print("run %d %-8s step %6.1f ms (cpu %5.1f)  compute %6.1f ms (cpu %5.1f)  "
                  "all-reduce 1 MB %5.2f ms  25 MB %6.2f ms (cpu %5.1f)%s" % (
                      i + 1, b, m["step_s"] * 1e3, m["step_cpu_s"] * 1e3, m["compute_s"] * 1e3,
                      m["compute_cpu_s"] * 1e3, m["allreduce_1MB_s"] * 1e3,
                      m["allreduce_25MB_s"] * 1e3, m["allreduce_25MB_cpu_s"] * 1e3,
                      "  (binding alone %.2f / %.2f ms)" % (
                          m["binding_allreduce_1MB_s"] * 1e3, m["binding_allreduce_25MB_s"] * 1e3)
                      if "binding_allreduce_1MB_s" in m else ""), flush=True)
    med = {b: {k: statistics.median(r[b][k] for r in runs) for k in runs[0][b]}
           for b in backends}
    print("\nmedians over %d runs (%d parameters, batch %d per rank):"
          % (a.runs, runs[0]["params"], a.batch))
    print("%-8s %9s %11s %11s %14s %15s %15s" % (
        "", "step ms", "compute ms", "comm share", "comm cpu/step", "allreduce 1MB",
        "allreduce 25MB"))
    for b in backends:
        m = med[b]
        # comm share: the part of a step not explained by compute alone; comm cpu: the CPU time
        # a rank spends per step beyond compute (the all-reduces' own work, on every thread).
        share = max(0.0, 1 - m["compute_s"] / m["step_s"])
        print("%-8s %9.1f %11.1f %10.0f%% %11.1f ms %12.2f ms %12.2f ms" % (
            b, m["step_s"] * 1e3, m["compute_s"] * 1e3, share * 100,
            (m["step_cpu_s"] - m["compute_cpu_s"]) * 1e3, m["allreduce_1MB_s"] * 1e3,
            m["allreduce_25MB_s"] * 1e3))
    print("comm cpu/step by thread: the training thread's extra CPU, and the other threads' (the "
          "backend's own, and torch's)")
    for b in backends:
        m = med[b]
        main_extra = m["step_main_cpu_s"] - m["compute_main_cpu_s"]
        others = (m["step_cpu_s"] - m["step_main_cpu_s"]) - (
            m["compute_cpu_s"] - m["compute_main_cpu_s"])
        print("%-8s training thread %5.1f ms, other threads %5.1f ms; 25 MB all-reduce alone: "
              "%5.1f ms of CPU, %.2f ms per MB" % (
                  b, main_extra * 1e3, others * 1e3, m["allreduce_25MB_cpu_s"] * 1e3,
                  m["allreduce_25MB_cpu_s"] * 1e3 / 25))
    for mb in (1, 25):
        k = "allreduce_%dMB_s" % mb
        print("all-reduce %2d MB: %s, binding alone %.2f GB/s (algorithm bandwidth)" % (
            mb, ", ".join("%s %.2f GB/s" % (b, mb / 1024 / med[b][k]) for b in backends),
            mb / 1024 / med["hoop-py"]["binding_" + k]))
    ratio = {}
    for b in backends[:-1]:
        # the median step's ratio, and the spread of the runs' own ratios
        each = sorted(r["gloo"]["step_s"] / r[b]["step_s"] for r in runs)
        ratio[b] = med["gloo"]["step_s"] / med[b]["step_s"]
        print("step time gloo/%s: %.2fx (runs %s)" % (b, ratio[b], ", ".join(
            "%.2f" % x for x in each)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"runs": runs, "medians": med, "ratio": ratio}, f, indent=1)


if __name__ == "__main__":
    main()
