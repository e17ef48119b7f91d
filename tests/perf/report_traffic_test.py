#!/usr/bin/env python3
"""bench/peers/report.py's limits table against memory traffic, on made-up runs: the bound time of
a single copy ((3p-1)S, 5S at p = 2) and each library's fraction of it, computed here independently.

    report_traffic_test.py REPORT_PY
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
    sys.exit(main(sys.argv[1]))
