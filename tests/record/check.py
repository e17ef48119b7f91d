#!/usr/bin/env python3
"""Runs tests/record/record.c as every rank of a job under hooprun, in a fresh directory, and checks
what it leaves there: the dumps against what each rank called (ring, off), the dumps every rank
writes by itself and hoop-trace's verdict on them (hang, skip), the SIGUSR2 dumps (signal,
nosignal). Exit status 0 when all holds, 1 otherwise, with each failed check on stdout."""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from hooptest import check, failures  # noqa: E402 - the tests' shared checks

CODES = ["HOOP_OK", "HOOP_ERR_INVALID_ARGUMENT", "HOOP_ERR_SYSTEM", "HOOP_ERR_TIMEOUT",
         "HOOP_ERR_PEER_LOST", "HOOP_ERR_MISMATCH", "HOOP_ERR_AUTH", "HOOP_ERR_UNSUPPORTED",
         "HOOP_ERR_ABORTED", "HOOP_ERR_NO_MEMORY", "HOOP_ERR_INTERNAL"]
TORCH_DTYPE = {"int8": "Char", "uint8": "Byte", "int32": "Int", "uint32": "UInt32",
               "int64": "Long", "uint64": "UInt64", "float16": "Half", "bfloat16": "BFloat16",
               "float32": "Float", "float64": "Double"}
SIZE = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "float16": 2,
        "bfloat16": 2, "float32": 4, "float64": 8}
PROFILING = {"allreduce": "hoop:all_reduce", "broadcast": "hoop:broadcast",
             "reduce": "hoop:reduce", "allgather": "hoop:all_gather", "barrier": "hoop:barrier",
             "send": "hoop:send", "recv": "hoop:recv"}
TORCH_FIELDS = ["record_id", "pg_id", "collective_seq_id", "p2p_seq_id", "profiling_name",
                "input_sizes", "output_sizes", "input_dtypes", "state", "time_created_ns",
                "time_discovered_started_ns", "time_discovered_completed_ns", "duration_ms",
                "timeout_ms", "is_p2p", "retired"]
RECORD_N = 16

def load(path):
    with open(path) as f:
        return json.load(f)  # must parse: the check itself


def sizes(kind, count, p):
    if kind in ("allgather", "gather"):
        return count, count * p
    if kind in ("scatter", "reduce_scatter"):
        return count * p, count
    if kind == "barrier":
        return 0, 0
    return count, count


def check_layout(d, where):
    for k in ("version", "pg_config", "pg_status", "entries"):
        check(k in d, "%s: no top-level %s" % (where, k))
    for e in d.get("entries", []):
        for k in TORCH_FIELDS:
            check(k in e, "%s: entry %s has no %s" % (where, e.get("record_id"), k))


def check_ring(d, called, rank, p, where):
    """The dump holds exactly the last RECORD_N calls of called, each as it was called."""
    check_layout(d, where)
    h = d["hoop"]
    check(h["record"] == RECORD_N and h["rank"] == rank and h["size"] == p,
          "%s: header %s" % (where, h))
    check(h["recorded"] == len(called),
          "%s: %d calls recorded, the rank made %d" % (where, h["recorded"], len(called)))
    check(len(called) > RECORD_N, "%s: only %d calls made" % (where, len(called)))
    ents = d["entries"]
    if not check(len(ents) == RECORD_N, "%s: %d entries, want %d" % (where, len(ents), RECORD_N)):
        return
    # The numbers every call must carry, counted independently from what was called.
    ncoll = np2p = 0
    numbers = []
    for c in called:
        if c["kind"] in ("send", "recv"):
            numbers.append((0, np2p))
            np2p += 1
        else:
            numbers.append((ncoll, 0))
            ncoll += 1
    first = len(called) - RECORD_N
    saw_fail = saw_p2p = 0
    for i, e in enumerate(ents):
        c, (cs, ps) = called[first + i], numbers[first + i]
        w = "%s: entry %d (%s)" % (where, i, c["kind"])
        p2p = c["kind"] in ("send", "recv")
        check(e["record_id"] == first + i, "%s: record_id %s" % (w, e["record_id"]))
        check(e["kind"] == c["kind"] and e["dtype"] == c["dtype"] and e["count"] == c["count"],
              "%s: %s %s %s, called %s %s %s" % (w, e["kind"], e["dtype"], e["count"], c["kind"],
                                                 c["dtype"], c["count"]))
        check(e["profiling_name"] == PROFILING[c["kind"]], "%s: %s" % (w, e["profiling_name"]))
        check(e["is_p2p"] == p2p, "%s: is_p2p %s" % (w, e["is_p2p"]))
        check(e["collective_seq_id"] == cs and e["p2p_seq_id"] == ps,
              "%s: numbers %s/%s, want %s/%s" % (w, e["collective_seq_id"], e["p2p_seq_id"], cs, ps))
        check(e.get("peer" if p2p else "root") == c["root"],
              "%s: root/peer %s, want %s" % (w, e.get("peer" if p2p else "root"), c["root"]))
        check(e["op"] == c["op"], "%s: op %s, want %s" % (w, e["op"], c["op"]))
        i_n, o_n = sizes(c["kind"], c["count"], p)
        check(e["input_sizes"] == [[i_n]] and e["output_sizes"] == [[o_n]],
              "%s: sizes %s %s" % (w, e["input_sizes"], e["output_sizes"]))
        check(e["input_dtypes"] == [TORCH_DTYPE[c["dtype"]]], "%s: %s" % (w, e["input_dtypes"]))
        check(e["state"] == "completed" and e["retired"] is True, "%s: state %s" % (w, e["state"]))
        if c["rc"] == 0:
            check(e["hoop_state"] == "finished" and e["error"] is None,
                  "%s: %s %s, the call returned HOOP_OK" % (w, e["hoop_state"], e["error"]))
        else:
            saw_fail += 1
            check(e["hoop_state"] == "failed" and e["error"] == CODES[c["rc"]],
                  "%s: %s %s, the call returned %s" % (w, e["hoop_state"], e["error"],
                                                      CODES[c["rc"]]))
        t0, t1, t2 = (e["time_created_ns"], e["time_discovered_started_ns"],
                      e["time_discovered_completed_ns"])
        check(0 < t0 <= t1 <= t2, "%s: times %s %s %s" % (w, t0, t1, t2))
        check(abs(e["duration_ms"] - (t2 - t1) / 1e6) < 1e-3, "%s: duration_ms" % w)
        check(e["memory"] == "host" and e["algorithm"], "%s: memory/algorithm" % w)
        if p2p and c["rc"] == 0:
            saw_p2p += 1
            check(e["bytes"] == c["count"] * SIZE[c["dtype"]], "%s: bytes %s" % (w, e["bytes"]))
    check(saw_p2p > 0, "%s: no send or receive among the last %d" % (where, RECORD_N))
    # The times are the monotonic clock's, whatever the recorder reads: the dump's own reading of
    # it comes after the last call ended, and not long after (the job lasts seconds).
    mono, end = h["monotonic_ns"], ents[-1]["time_discovered_completed_ns"]
    check(end <= mono < end + 60e9, "%s: last call ended at %s, the dump was at %s" % (where, end, mono))
    if rank == 0:
        check(saw_fail == 1, "%s: %d failed calls among the last entries, want 1" % (where, saw_fail))
    last = max(n for (n, _), c in zip(numbers, called) if c["kind"] not in ("send", "recv"))
    st = d["pg_status"]["0"]
    check(st["last_enqueued_collective"] == last and st["last_completed_collective"] == last,
          "%s: pg_status %s, last collective #%d" % (where, st, last))


def named(text):
    """The ranks a hoop-trace sentence names ('ranks 0-1,3 ...' -> {0, 1, 3})."""
    out = set()
    for m in re.finditer(r"ranks? ([0-9][0-9,-]*)", text):
        for part in m.group(1).strip(",-").split(","):
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    return out


def run(args, env, tmp, extra=()):
    cmd = [args.hooprun, "--timeout", "120", "-n", str(args.n), args.prog, "--scenario",
           args.scenario, "--dir", tmp] + list(extra)
    e = dict(os.environ, HOOP_TRANSPORT=args.transport, HOOP_RECORD_DIR=tmp, **env)
    p = subprocess.run(cmd, env=e, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=300)
    print(p.stdout, end="")
    return p.returncode


def main():
    ap = argparse.ArgumentParser()
    for a in ("--hooprun", "--prog", "--trace", "--scenario", "--transport"):
        ap.add_argument(a, required=True)
    ap.add_argument("-n", type=int, required=True)
    args = ap.parse_args()
    # The job runs in its own directory (the dumps' default one): the paths must not be relative.
    args.hooprun, args.prog, args.trace = (os.path.abspath(x) for x in
                                           (args.hooprun, args.prog, args.trace))
    s, p = args.scenario, args.n
    with tempfile.TemporaryDirectory(prefix="hoop-record-") as tmp:
        if s == "ring":
            check(run(args, {"HOOP_RECORD": str(RECORD_N), "HOOP_TIMEOUT": "60"}, tmp) == 0,
                  "the job failed")
            for r in range(p):
                called = load(os.path.join(tmp, "called-%d.json" % r))
                check_ring(load(os.path.join(tmp, "dump-%d.json" % r)), called, r, p,
                           "rank %d's dump" % r)
            # rank 0's receive timed out: it wrote its dump by itself, the others none.
            auto = sorted(glob.glob(os.path.join(tmp, "hoop-trace-*.json")))
            check(auto == [os.path.join(tmp, "hoop-trace-0.json")],
                  "dumps written by themselves: %s, want rank 0's only" % auto)
            if auto:
                d = load(auto[0])
                check_layout(d, "rank 0's own dump")
                e = d["entries"][-1] if d["entries"] else {}
                check(e.get("kind") == "recv" and e.get("error") == "HOOP_ERR_TIMEOUT",
                      "rank 0's own dump does not end with the failed receive: %s" % e)
        elif s == "off":
            check(run(args, {"HOOP_RECORD": "0"}, tmp) == 0, "the job failed")
            for r in range(p):
                d = load(os.path.join(tmp, "dump-%d.json" % r))
                check_layout(d, "rank %d" % r)
                check(d["entries"] == [] and d["hoop"]["record"] == 0 and
                      d["hoop"]["recorded"] == 0, "rank %d: HOOP_RECORD=0 recorded calls" % r)
                check("HOOP_RECORD=0" in d["hoop"].get("note", ""),
                      "rank %d: the dump does not say the recorder is off" % r)
                check(d["pg_status"]["0"]["last_enqueued_collective"] == -1,
                      "rank %d: pg_status %s" % (r, d["pg_status"]))
        elif s in ("hang", "skip"):
            check(run(args, {"HOOP_TIMEOUT": "2"}, tmp) == 0, "the job failed")
            for r in range(p):
                path = os.path.join(tmp, "hoop-trace-%d.json" % r)
                if check(os.path.exists(path), "rank %d wrote no dump by itself" % r):
                    check_layout(load(path), "rank %d's dump" % r)
            t = subprocess.run([sys.executable, args.trace, tmp], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, universal_newlines=True)
            out = t.stdout.strip()
            print("hoop-trace: " + out)
            check(t.returncode == 1, "hoop-trace exited %d, want 1 (the ranks part)" % t.returncode)
            check("allreduce #5" in out or "at #5" in out, "hoop-trace does not name call #5")
            if s == "hang":
                check("rank 2 last finished #4 allreduce" in out,
                      "hoop-trace does not say rank 2 stopped after #4")
                head = out.split("rank 2 last")[0]
                check(named(head) == {0, 1, 3},
                      "hoop-trace says ranks %s are at #5, want 0, 1 and 3" % sorted(named(head)))
            else:
                check("different calls at #5" in out and "rank 2 the odd one out" in out,
                      "hoop-trace does not name rank 2 as the one that called otherwise")
                check("count 1005" in out and "count 1006" in out,
                      "hoop-trace does not show both calls' counts")
        elif s in ("signal", "nosignal"):
            env = {"HOOP_RECORD_SIGNAL": "1"} if s == "signal" else {}
            check(run(args, env, tmp) == 0, "the job failed")
            dumps = sorted(glob.glob(os.path.join(tmp, "hoop-trace-*.json")))
            if s == "signal":
                check(len(dumps) == p, "SIGUSR2 dumps: %s" % dumps)
                for path in dumps:
                    d = load(path)
                    check_layout(d, path)
                    check(len(d["entries"]) >= 5, "%s: %d entries" % (path, len(d["entries"])))
            else:
                check(dumps == [], "SIGUSR2 without HOOP_RECORD_SIGNAL wrote %s" % dumps)
        elif s == "badenv":
            check(run(args, {}, tmp) == 0, "init did not fail on every rank as it should")
        else:
            check(False, "no scenario %s" % s)
    print("%s: %s" % (s, "FAILED" if failures else "passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
