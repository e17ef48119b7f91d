#!/usr/bin/env python3
"""A timeout that explains itself (docs/reliability.md): starts the ranks of tests/explain/explain.c
itself (a launcher would end the job at the first death), makes one of them skip a call and sleep
in its own code, stop, or die, and checks the words every other rank says: one WARN line naming
the missing rank, where it is and which ranks are in the call, the same sentence at the head of
hoop_comm_last_error(), and the time from the timeout to it. With --hooprun, runs the skip case
under hooprun and checks its report at the end of the job. Exit status 0 when all holds."""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from hooptest import check, failures, free_port  # noqa: E402 - the tests' shared checks

LINE = re.compile(r"hoop WARN ((?:allreduce #(\d+) \(float32, 4\.0 kB, [^)]*\)|"
                  r"the call after #\d+ allreduce \(call #(\d+)\)) waits for .*)$")


def ranks_of(text):
    """[0, 1, 2, 5] from "ranks 0-2, 5" or "rank 3"."""
    out = []
    for part in text.split(", "):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b or a) + 1))
    return out


def expect_words(scen, victim, seq, hosts):
    """What the line must say of the victim, with seq the call it waits in (hosts: the victim on
    a host of its own, whose /proc is not read)."""
    if scen == "skip":
        return r"; rank %d's last call is #%d allreduce, finished \(alive" % (victim, seq - 1)
    if scen == "stop":
        return r"; rank %d is %s" % (victim, "not answering" if hosts else "stopped")
    return r"; (ranks [\d, -]*\b%d\b[\d, -]* are|rank %d is) dead" % (victim, victim)


def check_rank(scen, victim, n, r, out, err, timeout, hosts):
    where = "%s: rank %d" % (scen, r)
    lines = [m.group(1) for m in (LINE.search(l) for l in err.splitlines()) if m]
    if not check(len(lines) == 1, "%s: %d explanation lines, not one:\n%s" % (where, len(lines), err)):
        return None
    line = lines[0]
    print("rank %d: %s" % (r, line))
    m = LINE.search("hoop WARN " + line)
    seq = int(m.group(2) or m.group(3))
    waits = re.search(r"waits for ranks? ([\d, -]+);", line)
    check(waits is not None and victim in ranks_of(waits.group(1)),
          "%s: does not wait for rank %d: %s" % (where, victim, line))
    if scen != "kill":
        check(waits is not None and ranks_of(waits.group(1)) == [victim],
              "%s: waits for another rank than %d: %s" % (where, victim, line))
    words = expect_words(scen, victim, seq, hosts)
    check(re.search(words, line), "%s: does not say %r: %s" % (where, words, line))
    others = [j for j in range(n) if j != victim]
    want = "ranks %d-%d" % (others[0], others[-1]) if victim == n - 1 else None
    if want is not None and scen != "kill":
        check(("; %s are in #%d" % (want, seq)) in line, "%s: does not say %s are in #%d: %s"
              % (where, want, seq, line))
    res = re.search(r"RESULT rank=%d call=\d+ rc=(\w+) waited=([\d.-]+) past=([\d.-]+) "
                    r"t0=([\d.]+) t1=([\d.]+)" % r, out)
    last = re.search(r"LASTERROR rank=%d (.*)" % r, out)
    if not check(res is not None and last is not None, "%s: no result:\n%s" % (where, out)):
        return None
    # A call the failure reached at its start says so before the line.
    check(last.group(1).startswith(line) or
          last.group(1).startswith("hoop_allreduce: the communicator was aborted: " + line),
          "%s: hoop_comm_last_error() does not start with the line: %s" % (where, last.group(1)))
    t0, t1 = float(res.group(4)), float(res.group(5))
    if scen == "kill":
        check(res.group(1) in ("HOOP_ERR_PEER_LOST", "HOOP_ERR_ABORTED"), "%s: %s" % (where, res.group(1)))
        return t0, t1
    check(res.group(1) in ("HOOP_ERR_TIMEOUT", "HOOP_ERR_ABORTED"), "%s: %s" % (where, res.group(1)))
    past = float(res.group(3))
    # Loose, so that load cannot make it flaky; the figure itself is printed.
    check(past < 5.0, "%s: the line came %.3f s after the timeout" % (where, past))
    check(float(res.group(2)) > timeout - 0.5, "%s: failed after %.3f s, before its timeout"
          % (where, float(res.group(2))))
    return t0, t1


def run_direct(args, scen):
    n, victim, timeout = args.n, args.n - 1, 2
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(n), HOOP_TIMEOUT=str(timeout),
               HOOP_JOB_ID=str(uuid.uuid4()), HOOP_DEBUG="WARN")
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(n):
            e = dict(env, RANK=str(r))
            # hosts: the victim on a fake host of its own (HOOP_HOSTID), TCP to it, shared
            # memory among the others.
            if args.transport == "hosts":
                e["HOOP_HOSTID"] = "b" if r == victim else "a"
            else:
                e["HOOP_TRANSPORT"] = args.transport
            o = open(os.path.join(tmp, "out-%d" % r), "w+")
            er = open(os.path.join(tmp, "err-%d" % r), "w+")
            procs.append((subprocess.Popen([args.prog, "--scenario", scen, "--victim", str(victim)],
                                           env=e, stdout=o, stderr=er, cwd=tmp), o, er))
        deadline = time.time() + 60
        for r, (pr, _, _) in enumerate(procs):
            if r == victim:
                continue
            try:
                pr.wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                check(False, "%s: rank %d did not end" % (scen, r))
                pr.kill()
                pr.wait()
        vp = procs[victim][0]
        if scen == "stop":
            vp.send_signal(signal.SIGCONT)
        try:
            vp.wait(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            check(False, "%s: the victim did not end" % scen)
            vp.kill()
            vp.wait()
        figures = []
        for r, (pr, o, er) in enumerate(procs):
            o.seek(0)
            er.seek(0)
            out, err = o.read(), er.read()
            if r == victim:
                want = -signal.SIGKILL if scen == "kill" else 0
                check(pr.returncode == want, "%s: the victim ended with %d:\n%s%s"
                      % (scen, pr.returncode, out, err))
                continue
            check(pr.returncode == 0, "%s: rank %d ended with %d:\n%s%s"
                  % (scen, r, pr.returncode, out, err))
            f = check_rank(scen, victim, n, r, out, err, timeout, args.transport == "hosts")
            if f is not None:
                figures.append(f)
        if figures:
            # From the job's first timeout (the first entry + HOOP_TIMEOUT), or for kill from
            # the last entry into the call, to each rank's return, which follows its line.
            if scen == "kill":
                start, what = max(t0 for t0, _ in figures), "from the last entry to the line"
            else:
                start, what = min(t0 for t0, _ in figures) + timeout, "from the timeout to the line"
            d = [t1 - start for _, t1 in figures]
            print("%s over %s, %d ranks: %s s %s; median %.3f s, spread %.3f s" %
                  (scen, args.transport, n, " ".join("%.3f" % f for f in d), what,
                   statistics.median(d), max(d) - min(d)), flush=True)


def run_hooprun(args):
    """The skip case under hooprun: its report at the end of the job."""
    n, victim = args.n, args.n - 1
    env = dict(os.environ, HOOP_TIMEOUT="2", HOOP_TRANSPORT=args.transport)
    with tempfile.TemporaryDirectory() as tmp:  # the dumps go there
        p = subprocess.run([args.hooprun, "--timeout", "60", "-n", str(n), args.prog,
                            "--scenario", "skip", "--victim", str(victim)], env=env,
                           capture_output=True, text=True, timeout=90, cwd=tmp)
    report = p.stderr[p.stderr.find("hooprun: timeout report"):] if "hooprun: timeout report" in p.stderr else ""
    print(report)
    if not check(report != "", "no timeout report from hooprun:\n%s" % p.stderr):
        return
    body = report.splitlines()
    others = [j for j in range(n) if j != victim]
    check(re.search(r"ranks? %s failed in allreduce #3" % re.escape(
        "%d-%d" % (others[0], others[-1])), report) is not None,
          "the report does not say ranks %d-%d failed in allreduce #3" % (others[0], others[-1]))
    check(re.search(r"rank %d's last call is #2 allreduce, finished" % victim, report)
          is not None, "the report does not say where rank %d was" % victim)
    check(len(body) <= 3 + n, "the report is not small: %d lines" % len(body))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prog", required=True)
    ap.add_argument("--hooprun")
    ap.add_argument("--scenario", required=True, choices=["skip", "stop", "kill", "hooprun"])
    ap.add_argument("-n", type=int, default=4)
    ap.add_argument("--transport", default="tcp")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    # The ranks run in a fresh directory each.
    args.prog = os.path.abspath(args.prog)
    if args.hooprun:
        args.hooprun = os.path.abspath(args.hooprun)
    for _ in range(args.repeat):
        if args.scenario == "hooprun":
            run_hooprun(args)
        else:
            run_direct(args, args.scenario)
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
