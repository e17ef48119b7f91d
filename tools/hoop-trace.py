#!/usr/bin/env python3
"""hoop-trace DIR: where the ranks of a job part, from their flight recorder dumps.

Reads every dump in DIR (hoop_comm_dump's JSON: hoop-trace-<rank>.json, or any *.json with the
same fields), groups them by communicator, and says in one paragraph per communicator the first
collective call number at which the ranks are not all done alike: which ranks are at which call,
in which state, what the call is, and the ranks that never got to it ("allreduce #4711 (float32,
25 MB, ring): ranks 0-4,6-7 started, rank 5 last finished #4710 broadcast"); or, where the ranks
made different calls under one number, which rank made which. Exit status: 0 where every rank
finished every call it recorded alike, 1 where they part, 2 where DIR holds no dump.
"""
import glob
import json
import os
import sys

DTYPE_SIZE = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
              "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


def ranks_text(ranks):
    """[0,1,2,4] -> 'ranks 0-2,4'; [5] -> 'rank 5'."""
    ranks = sorted(ranks)
    parts, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else "%d-%d" % (ranks[i], ranks[j]))
        i = j + 1
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(parts)


def size_text(n):
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return "%.3g %s" % (n / scale, unit)
    return "%d B" % n


def what(e):
    """The call as every rank must have made it: kind, dtype, count, root, op."""
    return (e["kind"], e["dtype"], e["count"], e.get("root"), e.get("op"))


def call_text(e, number=True):
    """'allreduce #5 (float32, 4 KB, sum, ring)'; without the number, the count spelt out."""
    n = e["count"] * DTYPE_SIZE.get(e["dtype"], 1)
    extra = [e["dtype"], size_text(n), e["algorithm"]]
    if not number:
        extra[1] = "count %d" % e["count"]
    if e.get("op"):
        extra.insert(2, e["op"])
    if e.get("root", -1) is not None and e.get("root", -1) >= 0:
        extra.insert(2, "root %d" % e["root"])
    return "%s%s (%s)" % (e["kind"], " #%d" % e["collective_seq_id"] if number else "",
                          ", ".join(extra))


def state_text(e):
    s = e["hoop_state"]
    return "failed (%s)" % e["error"] if s == "failed" else s


def states_text(at, ranks):
    """'rank 0 failed (HOOP_ERR_TIMEOUT), ranks 1,3 started': who of ranks is in which state."""
    states = {}
    for r in ranks:
        states.setdefault(state_text(at[r]), []).append(r)
    return ", ".join("%s %s" % (ranks_text(g), s)
                     for s, g in sorted(states.items(), key=lambda kv: min(kv[1])))


def p2p_text(e):
    return "%s(%s, count %d, %s %d) %s" % (e["kind"], e["dtype"], e["count"],
                                           "from" if e["kind"] == "recv" else "to",
                                           e.get("peer", -1), state_text(e))


def load(directory):
    comms = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        try:
            with open(path) as f:
                d = json.load(f)
            rank, size = d["hoop"]["rank"], d["hoop"]["size"]
            name = next(iter(d["pg_config"]))
        except (OSError, ValueError, KeyError, TypeError, StopIteration):
            continue  # not a dump
        comms.setdefault(name, {"size": size, "ranks": {}})["ranks"][rank] = d
    return comms


def verdict(name, comm):
    """(parted, paragraph) for one communicator."""
    dumps = comm["ranks"]
    label = "" if name == "0" else "communicator %s: " % name
    absent = [r for r in range(comm["size"]) if r not in dumps]
    colls = {}
    for r, d in dumps.items():
        colls[r] = {e["collective_seq_id"]: e for e in d["entries"] if not e["is_p2p"]}
    off = [r for r, d in dumps.items() if d["hoop"].get("record", 1) == 0]
    if off:
        return True, "%s%s recorded nothing (HOOP_RECORD=0)" % (label, ranks_text(off))
    # Where each rank's ring starts: below it, a rank's calls are forgotten, not missing.
    low = {r: min(c) if c else None for r, c in colls.items()}
    high = {r: max(c) if c else -1 for r, c in colls.items()}
    top = max(high.values()) if high else -1
    start = max((v for v in low.values() if v is not None), default=0)
    for n in range(start, top + 1):
        at = {r: c[n] for r, c in colls.items() if n in c}
        behind = [r for r in colls if n not in colls[r] and high[r] < n]
        kinds = {}
        for r, e in at.items():
            kinds.setdefault(what(e), []).append(r)
        if len(kinds) > 1:
            groups = sorted(kinds.values(), key=lambda g: (-len(g), g))
            parts = ["%s called %s: %s" % (ranks_text(g), call_text(at[g[0]], False),
                                           states_text(at, g)) for g in groups]
            odd = [r for g in groups[1:] for r in g]
            text = "%sthe ranks made different calls at #%d: %s" % (label, n, "; ".join(parts))
            text += " (%s the odd one%s out)" % (ranks_text(odd), "" if len(odd) == 1 else "s")
            return True, text + missing_text(behind, colls, absent, dumps)
        if not behind and all(e["hoop_state"] == "finished" for e in at.values()):
            continue
        # Not done alike: the call, then who is where.
        first = at[min(at)] if at else None
        head = call_text(first) if first else "#%d" % n
        return True, "%s%s: %s%s" % (label, head, states_text(at, sorted(at)),
                                     missing_text(behind, colls, absent, dumps))
    tail = " (no dump from %s)" % ranks_text(absent) if absent else ""
    return bool(absent), "%severy rank finished every collective it recorded, up to #%d%s" % (
        label, top, tail)


def missing_text(behind, colls, absent, dumps):
    """The ranks that never got to the call: their last collective, and what they did after it
    that did not finish well (a send or receive, which has no collective number)."""
    out = ""
    for r in sorted(behind):
        done = [e for e in colls[r].values() if e["hoop_state"] in ("finished", "failed")]
        last = max(done, key=lambda e: e["record_id"]) if done else None
        if last:
            out += ", %s last %s #%d %s" % (ranks_text([r]), "finished" if
                                            last["hoop_state"] == "finished" else "failed",
                                            last["collective_seq_id"], last["kind"])
        else:
            out += ", %s recorded no collective" % ranks_text([r])
        after = [e for e in dumps[r]["entries"] if e["is_p2p"] and e["hoop_state"] != "finished"
                 and (last is None or e["record_id"] > last["record_id"])]
        if after:
            out += " then " + ", ".join(p2p_text(e) for e in after[:3])
    if absent:
        out += ", no dump from %s" % ranks_text(absent)
    return out


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) == 2 else 2
    comms = load(argv[1])
    if not comms:
        print("hoop-trace: no flight recorder dump in %s" % argv[1], file=sys.stderr)
        return 2
    parted = False
    for name in sorted(comms, key=lambda k: (k != "0", k)):
        p, text = verdict(name, comms[name])
        parted |= p
        print(text + ".")
    return 1 if parted else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
