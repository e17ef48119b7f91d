"""Per-call time of a small dist.all_reduce on hoop's C++ backend, hoop's Python backend and gloo,
in one launch, alternating, so that the three see the same machine.

    tests/torch2/run.sh -b build tests/torch2/build_ext.sh build \\
        build/tools/hooprun -n 2 python3 bench/torch_small.py [--bytes 8] [--calls 400] [--reps 9]

Each rep runs --calls blocking all_reduce calls of a float32 tensor of --bytes bytes on each group
in turn (the order rotating from rep to rep) after a barrier on that group; rank 0 prints each
backend's median over the reps of the per-call mean, and the best rep.
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist

import hoop.torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", type=int, default=8)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if hoop.torch._CXX is None:
        raise SystemExit("the C++ backend is not loaded (build it: tests/torch2/build_ext.sh)")
    # The Python backend under a name of its own, beside the C++ one registered as "hoop".
    dist.Backend.register_backend("hooppy", hoop.torch._create, devices=["cpu"])
    dist.init_process_group("hoop")
    groups = {"hoop C++": dist.group.WORLD, "hoop Python": dist.new_group(backend="hooppy"),
              "gloo": dist.new_group(backend="gloo")}
    t = torch.ones(max(1, args.bytes // 4))
    times = {k: [] for k in groups}
    names = list(groups)
    for rep in range(args.reps):
        for k in names[rep % 3:] + names[:rep % 3]:
            g = groups[k]
            for _ in range(20):
                dist.all_reduce(t, group=g)
            dist.barrier(group=g)
            t0 = time.perf_counter()
            for _ in range(args.calls):
                dist.all_reduce(t, group=g)
            times[k].append((time.perf_counter() - t0) / args.calls * 1e6)
    if dist.get_rank() == 0:
        print("all_reduce of %d bytes, %d ranks, %d calls x %d reps (torch %s):"
              % (t.numel() * 4, dist.get_world_size(), args.calls, args.reps, torch.__version__))
        for k in names:
            print("  %-12s median %7.1f us  best %7.1f us" % (k, statistics.median(times[k]),
                                                              min(times[k])))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
