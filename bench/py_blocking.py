#!/usr/bin/env python3
"""Time of a small blocking call from Python, and of the ways it could be made interruptible.

    PYTHONPATH=python HOOP_LIBRARY=build/libhoop.so build/tools/hooprun -n 2 \\
        /usr/bin/python3 bench/py_blocking.py [--calls 5000] [--reps 9] [--baseline DIR]

An 8-byte float64 sum all-reduce, back to back, each way on a communicator of its own (a
nonblocking call switches a communicator to the progress thread's path for good, so it must not
touch the others), the ways taking turns rep by rep (the order rotating) so that all see the same
machine; rank 0 prints each way's median time per call and its reps:

    binding      comm.allreduce(x), as programs call it
    baseline     the same through another copy of the package (--baseline DIR: the folder that
                 holds its hoop/, e.g. a checkout of another branch's python/)
    direct       hoop_allreduce through ctypes, nothing else
    twin-wait    hoop_iallreduce, then hoop_wait on the same thread: not interruptible either,
                 the nonblocking twin's own cost
    twin-thread  hoop_iallreduce, then hoop_wait on a second thread while this one waits on a
                 lock (which signals interrupt): interruptible, at the cost of two hand-offs
    twin-spin    hoop_iallreduce, then hoop_test until done, without a pause: the progress
                 thread runs the call, and it leaves a small one to a waiter for a while first
    twin-poll    the same, sleeping 100 us between looks
"""
import argparse
import ctypes
import importlib.util
import os
import statistics
import sys
import threading
import time

import numpy as np

import hoop
from hoop import _library


def load_baseline(folder):
    path = os.path.join(folder, "hoop", "__init__.py")
    spec = importlib.util.spec_from_file_location(
        "hoop_baseline", path, submodule_search_locations=[os.path.dirname(path)])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["hoop_baseline"] = mod
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--baseline")
    ap.add_argument("--ways",
                    default="binding,baseline,direct,twin-wait,twin-thread,twin-spin,twin-poll")
    a = ap.parse_args()
    ways = [w for w in a.ways.split(",") if w != "baseline" or a.baseline]
    comm = hoop.init("env://", timeout=60)
    lib = _library.load()
    f64, SUM = _library.DTYPE_CODE["float64"], 0

    def raw_split():
        h = ctypes.c_void_p()
        if lib.hoop_comm_split(comm._h, 0, comm.rank, ctypes.byref(h)) != 0:
            raise RuntimeError("split failed")
        return h.value

    fns, keep = {}, []
    for w in ways:
        x = np.ones(1, np.float64)
        keep.append(x)
        p = x.ctypes.data
        if w == "binding":
            c = comm.split(0)
            keep.append(c)
            fns[w] = (lambda c, x: lambda: c.allreduce(x))(c, x)
        elif w == "baseline":
            c = load_baseline(a.baseline).Comm(raw_split())
            keep.append(c)
            fns[w] = (lambda c, x: lambda: c.allreduce(x))(c, x)
        elif w == "direct":
            h = raw_split()
            fns[w] = (lambda h, p: lambda: lib.hoop_allreduce(h, p, p, 1, f64, SUM))(h, p)
        elif w == "twin-wait":
            h = raw_split()

            def twin_wait(h=h, p=p):
                r = ctypes.c_void_p()
                lib.hoop_iallreduce(h, p, p, 1, f64, SUM, ctypes.byref(r))
                return lib.hoop_wait(r)
            fns[w] = twin_wait
        elif w == "twin-thread":
            h = raw_split()
            go, done, box = threading.Semaphore(0), threading.Semaphore(0), [None, None]

            def waiter(go=go, done=done, box=box):
                while True:
                    go.acquire()
                    box[1] = lib.hoop_wait(box[0])
                    done.release()
            threading.Thread(target=waiter, daemon=True).start()

            def twin_thread(h=h, p=p, go=go, done=done, box=box):
                r = ctypes.c_void_p()
                lib.hoop_iallreduce(h, p, p, 1, f64, SUM, ctypes.byref(r))
                box[0] = r
                go.release()
                done.acquire()
                return box[1]
            fns[w] = twin_thread
        elif w in ("twin-spin", "twin-poll"):
            h = raw_split()

            def twin_poll(h=h, p=p, pause=100e-6 if w == "twin-poll" else 0):
                r, flag = ctypes.c_void_p(), ctypes.c_int(0)
                lib.hoop_iallreduce(h, p, p, 1, f64, SUM, ctypes.byref(r))
                while True:
                    lib.hoop_test(r, ctypes.byref(flag))
                    if flag.value:
                        return lib.hoop_wait(r)
                    if pause:
                        time.sleep(pause)
            fns[w] = twin_poll
        else:
            raise SystemExit("unknown way %r" % w)
    comm.barrier()
    times = {w: [] for w in ways}
    for rep in range(a.reps + 1):
        order = ways[rep % len(ways):] + ways[:rep % len(ways)]
        for w in order:
            fn = fns[w]
            n = a.calls if not w.startswith("twin-") else max(1, a.calls // 20)
            comm.barrier()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            if rep > 0:  # the first is a warm-up
                times[w].append((time.perf_counter() - t0) / n * 1e6)
    if comm.rank == 0:
        for w in ways:
            print("%-12s median %8.2f us   reps %s" % (w, statistics.median(times[w]), " ".join(
                "%.2f" % t for t in times[w])))
    os._exit(0)  # the waiter thread and the raw communicators go with the process


if __name__ == "__main__":
    main()
