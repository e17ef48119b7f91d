#!/usr/bin/env python3
"""bench/peers/report.py's tables on made-up runs, the arithmetic redone here.

    report_traffic_test.py REPORT_PY             the limits table against memory traffic: the
                                                 bound time of a single copy ((3p-1)S, 5S at
                                                 p = 2) and each library's fraction of it
    report_traffic_test.py REPORT_PY --sym       symmetric memory's tables: beside Open MPI's
                                                 shared memory and hoop's own copies, ratios
                                                 and verdicts against 2.5x and 2x from 16 MiB
"""
import os
import re
import subprocess
import sys
import tempfile

HEADER = ("collective,algo,transport,ranks,size_bytes,count,type,redop,root,oop_time_us,"
          "oop_algbw,oop_busbw,oop_wrong,ip_time_us,ip_algbw,ip_busbw,ip_wrong")


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def rows(times):
    out = [HEADER]
    for size, us in times.items():
        bw = size / us / 1e3
        out.append("allreduce,auto,shm,2,%d,%d,float32,sum,-1,%.3f,%.6f,%.6f,0,,,," %
                   (size, size // 4, us, bw, bw))
    return "\n".join(out) + "\n"


def sym_tables(report_py):
    """hoop sym against Open MPI (target 2.5x) and hoop shm (2x) from 16 MiB; none below."""
    mib = 1 << 20
    # bus bandwidth = algorithm bandwidth at p = 2: size / time.
    sym = {4 * mib: 1000.0, 16 * mib: 4000.0, 64 * mib: 10000.0}
    shm = {4 * mib: 1500.0, 16 * mib: 9000.0, 64 * mib: 19000.0}
    ompi = {4 * mib: 2000.0, 16 * mib: 9000.0, 64 * mib: 26000.0}
    with tempfile.TemporaryDirectory() as out:
        write(os.path.join(out, "meta"), "ranks=2\ncolls=allreduce\nreps=1\nhoop=shm,sym\n"
              "peers=ompi-shm\ngloo_colls=\ntcp_colls=\n")
        raw = os.path.join(out, "raw")
        for cfg, times in (("hoop-sym", sym), ("hoop-shm", shm), ("ompi-shm", ompi)):
            write(os.path.join(raw, "n2/allreduce/%s.large.1.csv" % cfg), rows(times))
        text = subprocess.run([sys.executable, report_py, out], capture_output=True,
                              text=True).stdout
    bad = 0
    for peer, title, times, target in (
            ("ompi-shm", "hoop sym vs Open MPI vader (shared memory)", ompi, 2.5),
            ("hoop-shm", "hoop sym vs hoop shm (the area's copies)", shm, 2.0)):
        lines = text.split("== all-reduce, 2 ranks: " + title + "\n")
        if len(lines) != 2:
            print("FAIL: no table '%s':\n%s" % (title, text))
            return 1
        table = lines[1].split("\n\n")[0].splitlines()
        for size, label in ((4 * mib, "4 MiB"), (16 * mib, "16 MiB"), (64 * mib, "64 MiB")):
            ratio = times[size] / sym[size]
            if size >= 16 * mib:
                want = "%.2fx >=%.2f %s" % (ratio, target,
                                            "PASS" if ratio >= target else "MISS")
            else:
                want = "%.2fx - -" % ratio
            got = [line for line in table if line.split()[:2] == label.split()]
            if len(got) != 1 or " ".join(got[0].split()[-3:]) != want:
                print("FAIL: %s, %s: want '%s', rows %s" % (title, label, want, got))
                bad = 1
    if not bad:
        print("PASS: symmetric memory's tables, ratios and verdicts")
    return bad


def main(report_py):
    mib = 1 << 20
    hoop = {16 * mib: 20000.0, 64 * mib: 90000.0}
    ompi = {16 * mib: 40000.0, 64 * mib: 150000.0}
    copy = 2.5  # GB/s per process, two processes at once
    with tempfile.TemporaryDirectory() as out:
        write(os.path.join(out, "meta"), "ranks=2\ncolls=allreduce\nreps=1\nhoop=shm\n"
              "peers=ompi-shm\ngloo_colls=\ntcp_colls=\n")
        raw = os.path.join(out, "raw")
        write(os.path.join(raw, "n2/allreduce/hoop-shm.large.1.csv"), rows(hoop))
        write(os.path.join(raw, "n2/allreduce/ompi-shm.large.1.csv"), rows(ompi))
        write(os.path.join(raw, "line.1.txt"), "one_way_ns 60.0\nexchange_ns 130.0\n")
        write(os.path.join(raw, "mem-copy.1.txt"),
              "procs 2 bytes %d median copy_GBps %.3f\n" % (64 * mib, copy))
        text = subprocess.run([sys.executable, report_py, out], capture_output=True,
                              text=True).stdout
    if "single\n   copy's 5S" not in text:
        print("FAIL: no traffic table naming 5S:\n" + text)
        return 1
    bad = 0
    for size, label in ((16 * mib, "16 MiB"), (64 * mib, "64 MiB")):
        # 5S bytes at 2 processes x (read + write) x 2.5e9 B/s.
        bound_us = 5 * size / (2 * 2 * copy * 1e9) * 1e6
        want = "%.1f %.1f %.2f %.1f %.2f" % (bound_us, hoop[size], bound_us / hoop[size],
                                              ompi[size], bound_us / ompi[size])
        got = [line for line in text.splitlines()
               if re.match(r"\s+%s\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+$" % label,
                           line)]
        if len(got) != 1 or " ".join(got[0].split()[2:]) != want:
            print("FAIL: %s: want '%s', rows %s" % (label, want, got))
            bad = 1
    if not bad:
        print("PASS: the traffic table's bounds and fractions")
    return bad


if __name__ == "__main__":
    sys.exit(sym_tables(sys.argv[1]) if sys.argv[2:] == ["--sym"] else main(sys.argv[1]))
