#!/usr/bin/env python3
"""hoop-trace on dumps made here, one case per way ranks part, each checked against the exact
paragraph it must print and its exit status: usage trace_test.py HOOP_TRACE."""
import json
import os
import subprocess
import sys
import tempfile

failures = []


def entry(rid, seq, kind, state="finished", count=1024, dtype="float32", root=-1, op="sum",
          algo="ring", error=None, p2p=False, peer=-1):
    e = {"record_id": rid, "collective_seq_id": 0 if p2p else seq, "p2p_seq_id": seq if p2p else 0,
         "is_p2p": p2p, "kind": kind, "dtype": dtype, "count": count, "op": op,
         "algorithm": algo, "hoop_state": state, "error": error}
    e["peer" if p2p else "root"] = peer if p2p else root
    return e


def dump(directory, rank, size, entries, record=2048, name="0"):
    d = {"version": "2.4", "pg_config": {name: {"name": name, "desc": "hoop", "ranks": "[]"}},
         "pg_status": {}, "hoop": {"rank": rank, "size": size, "record": record},
         "entries": entries}
    fname = "hoop-trace-%d.json" % rank if name == "0" else "hoop-trace-%s-%d.json" % (name, rank)
    with open(os.path.join(directory, fname), "w") as f:
        json.dump(d, f)


def history(last, first=4700):
    """Calls #first..#last finished: all-reduces, a broadcast from rank 0 at #4710."""
    out = []
    for n in range(first, last + 1):
        if n == 4710:
            out.append(entry(n, n, "broadcast", count=256, dtype="int64", root=0, op=None,
                             algo="pipelined chain"))
        else:
            out.append(entry(n, n, "allreduce"))
    return out


def case(name, build, want, status, trace):
    with tempfile.TemporaryDirectory() as d:
        build(d)
        p = subprocess.run([sys.executable, trace, d], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True)
    got = p.stdout.strip()
    if got != want or p.returncode != status:
        failures.append(name)
        print("FAIL %s:\n  got  (%d) %s\n  want (%d) %s" % (name, p.returncode, got, status, want))
    else:
        print("ok   %s: %s" % (name, got))


def main():
    trace = sys.argv[1]

    def hang(d):
        # The example of the issue: rank 5 never posted #4711.
        for r in range(8):
            ents = history(4710)
            if r != 5:
                ents.append(entry(4711, 4711, "allreduce", state="started", count=6250000))
            dump(d, r, 8, ents)
    case("hang", hang, "allreduce #4711 (float32, 25 MB, sum, ring): ranks 0-4,6-7 started, "
         "rank 5 last finished #4710 broadcast.", 1, trace)

    def mismatch(d):
        for r in range(4):
            ents = history(4705)
            kind = "broadcast" if r == 2 else "allreduce"
            ents.append(entry(4706, 4706, kind, state="failed", error="HOOP_ERR_MISMATCH",
                              root=2 if r == 2 else -1, op=None if r == 2 else "sum"))
            dump(d, r, 4, ents)
    case("mismatch", mismatch, "the ranks made different calls at #4706: ranks 0-1,3 called "
         "allreduce (float32, count 1024, sum, ring): ranks 0-1,3 failed (HOOP_ERR_MISMATCH); "
         "rank 2 called broadcast (float32, count 1024, root 2, ring): rank 2 failed "
         "(HOOP_ERR_MISMATCH) (rank 2 the odd one out).", 1, trace)

    def finished(d):
        for r in range(3):
            ents = history(4712)
            # Rank 1's ring is shorter: what it forgot is not missing.
            dump(d, r, 3, ents[5:] if r == 1 else ents)
    case("finished", finished, "every rank finished every collective it recorded, up to #4712.",
         0, trace)

    def absent(d):
        for r in (0, 1, 2):
            dump(d, r, 4, history(4709))
    case("absent", absent, "every rank finished every collective it recorded, up to #4709 (no "
         "dump from rank 3).", 1, trace)

    def p2p_after(d):
        # Rank 1 is stuck in a receive after #4709; rank 0 waits in #4710.
        dump(d, 0, 2, history(4709) + [entry(4710, 4710, "broadcast", state="started", count=256,
                                             dtype="int64", root=0, op=None,
                                             algo="pipelined chain")])
        dump(d, 1, 2, history(4709) + [entry(4710, 7, "recv", state="started", count=3,
                                             dtype="int64", op=None, p2p=True, peer=0)])
    case("p2p", p2p_after, "broadcast #4710 (int64, 2.05 KB, root 0, pipelined chain): rank 0 "
         "started, rank 1 last finished #4709 allreduce then recv(int64, count 3, from 0) "
         "started.", 1, trace)

    def off(d):
        for r in range(2):
            dump(d, r, 2, [], record=0)
    case("off", off, "ranks 0-1 recorded nothing (HOOP_RECORD=0).", 1, trace)

    def split(d):
        for r in range(2):
            dump(d, r, 2, history(4702))
            sub = [entry(0, 0, "allreduce"), entry(1, 1, "barrier", count=0, dtype="uint8",
                                                      op=None, algo="dissemination",
                                                      state="started" if r == 0 else "finished")]
            dump(d, r, 2, sub, name="00ab")
    case("split", split, "every rank finished every collective it recorded, up to #4702.\n"
         "communicator 00ab: barrier #1 (uint8, 0 B, dissemination): rank 0 started, rank 1 "
         "finished.", 1, trace)

    def empty(d):
        with open(os.path.join(d, "notes.json"), "w") as f:
            f.write("{}")
    with tempfile.TemporaryDirectory() as d:
        empty(d)
        p = subprocess.run([sys.executable, trace, d], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True)
        if p.returncode != 2 or "no flight recorder dump" not in p.stdout:
            failures.append("empty")
            print("FAIL empty: (%d) %s" % (p.returncode, p.stdout))
        else:
            print("ok   empty: " + p.stdout.strip())
    print("hoop-trace: %s" % ("FAILED: " + ", ".join(failures) if failures else "passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
