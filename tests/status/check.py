#!/usr/bin/env python3
"""The live view of a running job (docs/reliability.md). Starts N ranks of status_rank (by hand
over env://, or under hooprun), the last of which sleeps outside hoop before call STALL while the
others wait in it; meanwhile asks with hoop-status (or hooprun --status) and checks that the
last rank is named the slowest, at call STALL-1 finished, the others in call STALL, and that
the job then finishes with right sums. Also: a wrong key is a clear error; questions not sealed
with the job's key get no answer; no job is a clear error within the timeout. --measure R: the
median time of R queries instead. Exit status 0 when all holds."""
import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from hooptest import check, failures, free_port  # noqa: E402 - the tests' shared checks


def run(cmd, env, timeout=20):
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    return p, time.monotonic() - t0


def check_view(view, n, stall, where):
    check(view["size"] == n, "%s: size %s, not %d" % (where, view["size"], n))
    check(view["slowest"] == n - 1, "%s: slowest %s, not rank %d" % (where, view["slowest"], n - 1))
    check(view["not_answering"] == [], "%s: not answering %s" % (where, view["not_answering"]))
    for r in view["ranks"]:
        # Call numbers count from 0: call STALL (from 1) is #STALL-1.
        want = (stall - 2, ("finished",)) if r["rank"] == n - 1 else (stall - 1, ("posted", "started"))
        check(r.get("seq") == want[0] and r.get("state") in want[1] and
              r.get("collective") == "allreduce" and r.get("dtype") == "float32",
              "%s: rank %d is %s, not #%d %s" % (where, r["rank"], r, want[0], want[1]))


def wait_stalling(procs_out, deadline):
    """Until the last rank said it stalls (its stdout is a file)."""
    while time.monotonic() < deadline:
        with open(procs_out) as f:
            if "stalling" in f.read():
                return True
        time.sleep(0.05)
    return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prog", required=True)
    ap.add_argument("--status", required=True)
    ap.add_argument("--probe", required=True)
    ap.add_argument("--hooprun")
    ap.add_argument("-n", type=int, default=4)
    ap.add_argument("--transport", default="tcp")
    ap.add_argument("--measure", type=int, default=0)
    args = ap.parse_args()
    n, calls, stall, count = args.n, 6, 4, 1000
    sleep_s = 6.0 if args.measure == 0 else 4.0 + 0.05 * args.measure * n
    key = secrets.token_hex(32)
    job = str(uuid.uuid4())
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="hoop-status-")
    env = dict(os.environ, HOOP_AUTH_KEY=key, HOOP_TIMEOUT="60", HOOP_TRANSPORT=args.transport,
               XDG_RUNTIME_DIR=tmp)
    out_path = os.path.join(tmp, "out")
    argv = [args.prog, str(calls), str(count), str(stall), str(sleep_s)]
    out = open(out_path, "w")
    procs = []
    if args.hooprun:
        # hooprun makes the key and the job id; hooprun --status finds them in its state file.
        henv = dict(env)
        del henv["HOOP_AUTH_KEY"]
        procs.append(subprocess.Popen([args.hooprun, "-n", str(n), "--no-prefix"] + argv,
                                      env=henv, stdout=out, stderr=subprocess.STDOUT))
    else:
        for r in range(n):
            e = dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                     WORLD_SIZE=str(n), HOOP_JOB_ID=job)
            procs.append(subprocess.Popen(argv, env=e, stdout=out, stderr=subprocess.STDOUT))
    try:
        check(wait_stalling(out_path, time.monotonic() + 30), "the last rank never stalled")
        time.sleep(0.5)  # the others post call STALL
        if args.hooprun:
            p, took = run([args.hooprun, "--status", "--json"], env)
            check(p.returncode == 0, "hooprun --status: rc %d: %s" % (p.returncode, p.stderr))
            if p.returncode == 0:
                check_view(json.loads(p.stdout), n, stall, "hooprun --status")
            p, _ = run([args.hooprun, "--status"], env)
            check(p.returncode == 0 and "slowest: rank %d" % (n - 1) in p.stdout,
                  "hooprun --status text: %s %s" % (p.stdout, p.stderr))
            print(p.stdout, end="")
        elif args.measure:
            times, walls = [], []
            for _ in range(args.measure):
                p, took = run([args.status, "--json", "127.0.0.1:%d" % port], env)
                check(p.returncode == 0, "hoop-status: %s" % p.stderr)
                if p.returncode == 0:
                    v = json.loads(p.stdout)
                    check(v["slowest"] == n - 1, "slowest %s" % v["slowest"])
                    times.append(v["took_s"])
                    walls.append(took)
            if times:
                print("query of %d ranks (%s): median %.1f ms, min %.1f, max %.1f over %d runs; "
                      "the whole command: median %.1f ms"
                      % (n, args.transport, 1e3 * statistics.median(times), 1e3 * min(times),
                         1e3 * max(times), len(times), 1e3 * statistics.median(walls)))
        else:
            p, took = run([args.status, "--json", "127.0.0.1:%d" % port], env)
            check(p.returncode == 0, "hoop-status: rc %d: %s" % (p.returncode, p.stderr))
            if p.returncode == 0:
                view = json.loads(p.stdout)
                check(view["sealed"], "the questions were not sealed")
                check_view(view, n, stall, "hoop-status")
            p, _ = run([args.status, "127.0.0.1:%d" % port], env)
            check(p.returncode == 0 and "slowest: rank %d, #%d allreduce" % (n - 1, stall - 2)
                  in p.stdout, "hoop-status text: %s %s" % (p.stdout, p.stderr))
            print(p.stdout, end="")
            # A wrong key: the store turns it away, with a sentence that says so.
            p, took = run([args.status, "127.0.0.1:%d" % port],
                          dict(env, HOOP_AUTH_KEY=secrets.token_hex(32)))
            check(p.returncode == 1 and "authentication" in p.stderr and p.stdout == "",
                  "wrong key: rc %d, %r %r" % (p.returncode, p.stdout, p.stderr))
            p, _ = run([args.status, "127.0.0.1:%d" % port], dict(env, HOOP_AUTH_KEY=""))
            check(p.returncode == 1 and "HOOP_AUTH_KEY" in p.stderr, "no key: %d %r" % (p.returncode, p.stderr))
            # The store read with the key, but questions unsealed or sealed otherwise: no rank
            # answers.
            for mode in ("unsealed", "wrongkey"):
                p, _ = run([args.probe, "127.0.0.1", str(port), mode], env)
                v = json.loads(p.stdout) if p.returncode == 0 else {}
                # No rank answered at all (strays: datagrams that came back, whatever they were).
                check(p.returncode == 0 and v["not_answering"] == list(range(n)) and
                      v["strays"] == 0,
                      "%s questions: %s %s" % (mode, p.stdout, p.stderr))
        # No job: a clear error, within the timeout (and the store's second of grace).
        nojob = free_port()
        p, took = run([args.status, "--timeout", "1", "127.0.0.1:%d" % nojob], env)
        check(p.returncode == 1 and "cannot read the job's store" in p.stderr and took < 4,
              "no job: rc %d in %.1f s: %r" % (p.returncode, took, p.stderr))
        empty = tempfile.mkdtemp(prefix="hoop-status-none-")
        if args.hooprun:
            p, took = run([args.hooprun, "--status"], dict(env, XDG_RUNTIME_DIR=empty))
            check(p.returncode == 1 and "no job" in p.stderr and took < 4,
                  "hooprun --status, no job: %d %r" % (p.returncode, p.stderr))
        # The job goes on and finishes right.
        for pr in procs:
            check(pr.wait(timeout=60 + sleep_s) == 0, "a rank (or hooprun) failed")
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
                pr.wait()
        out.close()
    text = open(out_path).read()
    check(all(("rank %d ok" % r) in text for r in range(n)), "not every rank ok:\n" + text)
    if args.hooprun:
        check(os.listdir(os.path.join(tmp, "hoop")) == [], "hooprun left its state file")
    if failures:
        print(text)
    print("status check: %s" % ("FAIL" if failures else "ok"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
