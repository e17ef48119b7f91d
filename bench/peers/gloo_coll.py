#!/usr/bin/python3
"""gloo-coll: gloo's collectives through torch.distributed, measured the way hoop-perf measures
hoop's, so that the tables (and the --csv files) read the same and compare row by row.

    hooprun -n 2 /usr/bin/python3 bench/peers/gloo_coll.py allreduce -b 64K -e 256M -f 4
    torchrun --nproc_per_node 2 bench/peers/gloo_coll.py allreduce ...

"--then" starts another sweep in the same processes (torch takes seconds to start):
    gloo_coll.py allreduce -b 8 -e 8 -n 500 -z 1 --csv lat.csv --then -b 64K -e 1M --csv bw.csv

float32, sum. Sizes, counts and bus factors follow nccl-tests and hoop-perf. torch.distributed's
all_reduce and reduce work in place only, so their figures fill the in-place columns; broadcast (in
place too) runs as hoop-perf runs hoop_broadcast out of place: the root's input is copied to the
receive buffer first, untimed; all_gather is out of place. The time of a row is the slowest rank's
average over -n calls. Each row then runs once more, on fresh inputs over a receive buffer filled
with a sentinel, and counts the elements that differ from values computed here (#wrong).
"""
import argparse
import datetime
import os
import struct
import sys
import time

COLLS = ("allreduce", "broadcast", "allgather", "reduce")
# Inputs repeat with this prime period, so that the reference costs one period per rank and yet
# no block moved by a power-of-two offset lands on equal values.
PERIOD = 1000003
SENTINEL = struct.unpack("<f", b"\xa5" * 4)[0]
CSV_HEADER = ("collective,algo,transport,ranks,size_bytes,count,type,redop,root,oop_time_us,"
              "oop_algbw,oop_busbw,oop_wrong,ip_time_us,ip_algbw,ip_busbw,ip_wrong")


def size_arg(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    try:
        if s and s[-1].upper() in mult:
            v = int(s[:-1]) * mult[s[-1].upper()]
        else:
            v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError("bad size '%s'" % s)
    if v < 0:
        raise argparse.ArgumentTypeError("bad size '%s'" % s)
    return v


def parse_args(argv):
    p = argparse.ArgumentParser(prog="gloo-coll", description=__doc__.split("\n\n")[0])
    p.add_argument("collective", nargs="?", default="allreduce", choices=COLLS)
    p.add_argument("-b", "--minbytes", type=size_arg, default=8, help="smallest size (default 8)")
    p.add_argument("-e", "--maxbytes", type=size_arg, default=64 << 20, help="largest (default 64M)")
    p.add_argument("-f", "--stepfactor", type=int, default=2, help="size factor row to row (2)")
    p.add_argument("-n", "--iters", type=int, default=20, help="timed calls per row (20)")
    p.add_argument("-w", "--warmup_iters", type=int, default=5,
                   help="warm-up calls at the largest and the smallest size (5)")
    p.add_argument("--warm-each", action="store_true",
                   help="also make the warm-up calls before every timed row")
    p.add_argument("-c", "--check", type=int, default=1, choices=(0, 1), help="count wrong elements")
    p.add_argument("-z", "--blocking", type=int, default=0, choices=(0, 1),
                   help="0: calls back to back; 1: each followed by a barrier (timed)")
    p.add_argument("-r", "--root", type=int, default=0, help="root of broadcast and reduce (0)")
    p.add_argument("--csv", help="rank 0 writes the rows there, in hoop-perf's --csv columns")
    p.add_argument("--timeout", type=int, default=300, help="seconds any call may take (300)")
    a = p.parse_args(argv)
    if a.stepfactor < 2 or a.iters < 1 or a.warmup_iters < 0 or a.root < 0:
        p.error("-f needs at least 2, -n at least 1, -w and -r at least 0")
    if a.minbytes > a.maxbytes:
        p.error("-b %d is larger than -e %d" % (a.minbytes, a.maxbytes))
    return a


class Bench:
    def __init__(self, a, rank, size):
        import torch
        self.torch, self.a, self.rank, self.size = torch, a, rank, size
        self.coll = a.collective
        self.tables = {}

    # ---- inputs and the reference ----

    def table(self, rank):
        """One period of rank's input: small integers in [-8, 8], so that every sum is exact."""
        if rank not in self.tables:
            t = self.torch
            j = t.arange(PERIOD, dtype=t.int64)
            h = j * 2654435761 + rank * 40503 + 12345
            self.tables[rank] = ((h >> 7) % 17 - 8).to(t.float32)
        return self.tables[rank]

    def tile(self, dst, base):
        off, count = 0, dst.numel()
        while off < count:
            k = min(PERIOD, count - off)
            dst[off:off + k].copy_(base[:k])
            off += k

    def expected(self, count):
        t = self.torch
        if self.coll in ("allreduce", "reduce"):
            s = t.zeros(PERIOD, dtype=t.float64)
            for q in range(self.size):
                s += self.table(q)
            e = t.empty(count)
            self.tile(e, s.to(t.float32))
            return e
        if self.coll == "broadcast":
            e = t.empty(count)
            self.tile(e, self.table(self.a.root))
            return e
        e = t.empty(count * self.size)
        for q in range(self.size):
            self.tile(e[q * count:(q + 1) * count], self.table(q))
        return e

    # ---- the calls ----

    def counts(self, nbytes):
        if self.coll == "allgather":
            count = nbytes // 4 // self.size
            return count, count * self.size
        return nbytes // 4, nbytes // 4

    def buffers(self, count):
        """(send, receive) for this size, inputs in place; for allreduce and reduce they are one."""
        t = self.torch
        send = t.empty(count)
        self.tile(send, self.table(self.rank))
        if self.coll in ("allreduce", "reduce"):
            return send, send
        if self.coll == "broadcast":
            recv = send.clone()  # the untimed copy of the root's input; others' is overwritten
            return send, recv
        recv = t.empty(count * self.size)
        return send, recv

    def caller(self, send, recv, count):
        d = self.dist
        root = self.a.root
        if self.coll == "allreduce":
            return lambda: d.all_reduce(recv)
        if self.coll == "reduce":
            return lambda: d.reduce(recv, dst=root)
        if self.coll == "broadcast":
            return lambda: d.broadcast(recv, src=root)
        outs = [recv[q * count:(q + 1) * count] for q in range(self.size)]
        return lambda: d.all_gather(outs, send)

    def batch(self, call, iters):
        for _ in range(iters):
            call()
            if self.a.blocking:
                self.dist.barrier()

    def row(self, nbytes):
        t, d, a = self.torch, self.dist, self.a
        count, nrecv = self.counts(nbytes)
        send, recv = self.buffers(count)
        call = self.caller(send, recv, count)
        if a.warm_each and a.warmup_iters > 0:
            self.batch(call, a.warmup_iters)
        d.barrier()
        t0 = time.perf_counter()
        self.batch(call, a.iters)
        us = (time.perf_counter() - t0) / a.iters * 1e6
        tt = t.tensor([us], dtype=t.float64)
        d.all_reduce(tt, op=d.ReduceOp.MAX)
        us = tt.item()
        wrong = None
        if a.check:
            send, recv = self.buffers(count)
            if recv is not send and not (self.coll == "broadcast" and self.rank == a.root):
                recv.fill_(SENTINEL)
            self.caller(send, recv, count)()
            w = 0
            if self.coll != "reduce" or self.rank == a.root:
                exp = self.expected(count)
                w = int((recv.view(t.int32) != exp.view(t.int32)).sum().item())
            wt = t.tensor([w], dtype=t.int64)
            d.all_reduce(wt)
            wrong = int(wt.item())
        size = nrecv * 4
        algbw = size / 1e9 / (us * 1e-6) if us > 0 else 0.0
        factor = {"allreduce": 2.0 * (self.size - 1) / self.size,
                  "allgather": (self.size - 1) / self.size}.get(self.coll, 1.0)
        return {"size": size, "count": count, "us": us, "algbw": algbw, "busbw": algbw * factor,
                "wrong": wrong}

    # ---- output ----

    def in_place(self):
        return self.coll in ("allreduce", "reduce")

    def redop(self):
        return "sum" if self.coll in ("allreduce", "reduce") else "none"

    def root(self):
        return self.a.root if self.coll in ("broadcast", "reduce") else -1

    def header(self):
        a = self.a
        print("# gloo-coll %s: nRanks %d minBytes %d maxBytes %d step: %d(factor) warmup iters: %d "
              "iters: %d validation: %d blocking: %d" % (self.coll, self.size, a.minbytes,
                                                          a.maxbytes, a.stepfactor, a.warmup_iters,
                                                          a.iters, a.check, a.blocking))
        print("# torch %s gloo transport: tcp, float32 sum, %s, time = slowest rank's average, "
              "torch threads %d" % (self.torch.__version__,
                                    "in place" if self.in_place() else "out of place",
                                    self.torch.get_num_threads()))
        print("#\n# %10s  %12s  %8s  %6s  %6s           out-of-place                       "
              "in-place          " % ("", "", "", "", ""))
        print("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s"
              % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                 "time", "algbw", "busbw", "#wrong"))
        print("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s"
              % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
                 "(GB/s)", "(GB/s)", ""))
        sys.stdout.flush()

    def print_row(self, r):
        us = r["us"]
        ts = "%7.0f" % us if us >= 10000 else "%7.1f" % us if us >= 100 else "%7.2f" % us
        ws = "N/A" if r["wrong"] is None else str(r["wrong"])
        cols = ["%7s" % ts, "%6.2f" % r["algbw"], "%6.2f" % r["busbw"], "%5s" % ws]
        na = ["%7s" % "N/A", "%6s" % "N/A", "%6s" % "N/A", "%5s" % "N/A"]
        oop, ip = (na, cols) if self.in_place() else (cols, na)
        print("%12d  %12d  %8s  %6s  %6d  %s  %s" % (r["size"], r["count"], "float32", self.redop(),
                                                      self.root(), "  ".join(oop), "  ".join(ip)))
        sys.stdout.flush()

    def csv_row(self, r):
        vals = ["%.3f" % r["us"], "%.6f" % r["algbw"], "%.6f" % r["busbw"],
                "" if r["wrong"] is None else str(r["wrong"])]
        oop, ip = (["", "", "", ""], vals) if self.in_place() else (vals, ["", "", "", ""])
        return ",".join([self.coll, "gloo", "tcp", str(self.size), str(r["size"]), str(r["count"]),
                         "float32", self.redop(), str(self.root())] + oop + ip)

    # ---- the sweep ----

    def run(self):
        import torch.distributed as dist
        self.dist = dist
        a = self.a
        csv = None
        if self.rank == 0:
            if a.csv:
                csv = open(a.csv, "w")
                csv.write(CSV_HEADER + "\n")
            self.header()
        # Warm up at the largest and the smallest size, as nccl-tests and hoop-perf do.
        for nbytes in (a.maxbytes, a.minbytes):
            if a.warmup_iters > 0:
                count, _ = self.counts(nbytes)
                send, recv = self.buffers(count)
                self.batch(self.caller(send, recv, count), a.warmup_iters)
        wrong_total, bw, rows = 0, 0.0, 0
        nbytes = a.minbytes
        while True:
            r = self.row(nbytes)
            wrong_total += r["wrong"] or 0
            bw += r["busbw"]
            rows += 1
            if self.rank == 0:
                self.print_row(r)
                if csv:
                    csv.write(self.csv_row(r) + "\n")
            if nbytes > a.maxbytes // a.stepfactor:
                break
            nbytes = nbytes * a.stepfactor if nbytes else 1
        if self.rank == 0:
            print("# Out of bounds values : %d %s" % (wrong_total, "FAILED" if wrong_total else "OK"))
            print("# Avg bus bandwidth    : %g \n#" % (bw / rows if rows else 0.0))
            if csv:
                csv.close()
        return wrong_total == 0


def split_sweeps(argv):
    """Argument lists separated by --then; later ones inherit the first one's collective."""
    groups = [[]]
    for arg in argv:
        if arg == "--then":
            groups.append([])
        else:
            groups[-1].append(arg)
    first = parse_args(groups[0])
    sweeps = [first]
    for g in groups[1:]:
        sweeps.append(parse_args(g if g and g[0] in COLLS else [first.collective] + g))
    return sweeps


def main(argv):
    sweeps = split_sweeps(argv)
    for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        if v not in os.environ:
            print("gloo-coll: %s is not set: run under hooprun or torchrun" % v, file=sys.stderr)
            return 2
    # Local ranks: keep gloo on loopback rather than whatever the host name resolves to.
    if os.environ["MASTER_ADDR"] in ("127.0.0.1", "localhost", "::1"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        print("gloo-coll: torch is needed (python3-torch): %s" % e, file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    for a in sweeps:
        if a.root >= size:
            print("gloo-coll: -r %d: only %d ranks" % (a.root, size), file=sys.stderr)
            return 2
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=max(a.timeout for a in sweeps)))
    ok = True
    try:
        for a in sweeps:
            ok = Bench(a, rank, size).run() and ok
    finally:
        dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
