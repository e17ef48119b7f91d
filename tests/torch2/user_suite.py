#!/usr/bin/env python3
"""Runs tests/torch2/cases.py on gloo and on hoop, at 2 and at 4 ranks, and compares.

    user_suite.py HOOPRUN [--ranks 2,4] [--only CASE,...] [--keep DIR] [--gloo-cache DIR]

A case passes when hoop's run of it passed its own checks on every rank and, where gloo passes
it too, every rank's results are bit for bit gloo's. A launch that ends early (a case that hangs
is stopped by cases.py's per-case limit, which ends the launch) loses the cases it had not
reached: they run again in a new launch. Exit status 0 when every case passes, else 1.

With --gloo-cache, gloo's results are kept in DIR under a key of this file, cases.py, torch's
version, the world size and the cases, and a later run with the same key (the C++ backend's run
after the Python one's) compares against them instead of running gloo again.
"""
import argparse
import ast
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "cases.py")


def names(world):
    """The cases cases.py runs at this world size, in its order, with their gloo flag."""
    with open(CASES) as f:
        tree = ast.parse(f.read())
    out = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for d in node.decorator_list:
            if isinstance(d, ast.Call) and getattr(d.func, "id", "") == "case":
                kw = {k.arg: ast.literal_eval(k.value) for k in d.keywords}
                if kw.get("world") is None or world in kw["world"]:
                    out.append((node.name, kw.get("gloo", True)))
    return out


def launch(hooprun, backend, n, out, only, limit, case_limit):
    cmd = [hooprun, "--timeout", str(limit), "-n", str(n), sys.executable, CASES,
           "--backend", backend, "--out", out, "--only", ",".join(only),
           "--case-limit", str(case_limit)]
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [ln for ln in p.stdout.splitlines() if " %s " % backend in ln and "rank " in ln]
    print("  %s at %d ranks, %d case(s): exit %d in %.0f s" % (backend, n, len(only),
                                                                p.returncode,
                                                                time.monotonic() - t0))
    for ln in lines:
        print("    " + ln)
    return p.returncode, p.stdout


def outcome(out, name, n):
    """'ok', or the first rank's reason for failing, or None when no rank finished it."""
    import torch

    res, why = [], None
    for r in range(n):
        pt = os.path.join(out, "%s.%d.pt" % (name, r))
        err = os.path.join(out, "%s.%d.err" % (name, r))
        if os.path.exists(err):
            with open(err) as f:
                why = why or "rank %d: %s" % (r, f.read().strip().splitlines()[-1])
        elif os.path.exists(pt):
            res.append(torch.load(pt))
        else:
            why = why or "rank %d has no result (the launch ended before or during it)" % r
    return ("ok", res) if why is None else (why, None)


def run_backend(hooprun, backend, n, cases, out, limit, case_limit):
    todo = list(cases)
    while todo:
        rc, _ = launch(hooprun, backend, n, out, todo, limit, case_limit)
        if rc == 0:
            return
        # The launch ended early: the first case some rank did not finish ended it (it stays
        # without a result); the cases after it run in a new launch.
        left = [c for c in todo if not all(
            any(os.path.exists(os.path.join(out, "%s.%d.%s" % (c, r, ext)))
                for ext in ("pt", "err")) for r in range(n))]
        if not left:
            return
        todo = todo[todo.index(left[0]) + 1:]


def gloo_key(n, cases):
    """The key of gloo's results for these cases at n ranks (see --gloo-cache)."""
    import torch

    h = hashlib.sha256()
    for path in (CASES, os.path.abspath(__file__)):
        with open(path, "rb") as f:
            h.update(f.read())
    h.update(("%s %d %r" % (torch.__version__, n, cases)).encode())
    return "gloo-%d-%s" % (n, h.hexdigest()[:16])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("hooprun")
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--only", default="")
    ap.add_argument("--keep", help="keep every result here")
    ap.add_argument("--gloo-cache", help="keep gloo's results here, and reuse them (see above)")
    ap.add_argument("--case-limit", type=int, default=180)
    ap.add_argument("--gloo-fail-limit", type=int, default=15,
                    help="seconds a case gloo is known to fail may take on gloo")
    args = ap.parse_args()
    import torch

    only = set(filter(None, args.only.split(",")))
    base = args.keep or tempfile.mkdtemp(prefix="hoop-torch2-")
    failed, passed, lines = 0, 0, []
    t0 = time.monotonic()
    try:
        for n in [int(x) for x in args.ranks.split(",")]:
            cases = [(c, g) for c, g in names(n) if not only or c in only]
            if not cases:
                continue
            limit = args.case_limit * len(cases) + 120
            outs = {}
            cached = None
            if args.gloo_cache:
                cached = os.path.join(args.gloo_cache, gloo_key(n, cases))
            for backend in ("gloo", "hoop"):
                outs[backend] = os.path.join(base, "%s-%d" % (backend, n))
                if backend == "gloo" and cached and os.path.isdir(cached):
                    print("  gloo at %d ranks: its results from %s" % (n, cached))
                    outs[backend] = cached
                    continue
                os.makedirs(outs[backend], exist_ok=True)
                known = [c for c, g in cases if g]
                run_backend(args.hooprun, backend, n, known if backend == "gloo" else
                            [c for c, _ in cases], outs[backend], limit, args.case_limit)
                # What gloo is known to fail runs on it too, to show that it still does, with a
                # short limit: some of it (ordered_callbacks) hangs gloo's ranks.
                odd = [c for c, g in cases if not g]
                # The whole launch is bounded too: a rank stuck where the case limit does not
                # reach (gloo's own threads, after its peer left) must not hold it.
                if backend == "gloo" and odd:
                    run_backend(args.hooprun, backend, n, odd, outs[backend],
                                args.gloo_fail_limit * len(odd) + 30, args.gloo_fail_limit)
                if backend == "gloo" and cached:
                    # Whole or not at all: copied beside it, then renamed into place.
                    os.makedirs(args.gloo_cache, exist_ok=True)
                    part = tempfile.mkdtemp(dir=args.gloo_cache)
                    shutil.copytree(outs[backend], part, dirs_exist_ok=True)
                    try:
                        os.rename(part, cached)
                    except OSError:
                        shutil.rmtree(part, ignore_errors=True)
            for c, gloo_ok in cases:
                hs, hres = outcome(outs["hoop"], c, n)
                gs, gres = outcome(outs["gloo"], c, n)
                if hs != "ok":
                    verdict = "FAIL (hoop: %s)" % hs
                elif gs != "ok":
                    verdict = "pass (hoop's own checks; gloo fails it: %s)" % gs[:160] \
                        if not gloo_ok else "FAIL (gloo failed a case it should pass: %s)" % gs
                else:
                    diff = [(r, k) for r in range(n) for k in sorted(gres[r])
                            if k not in hres[r] or hres[r][k].dtype != gres[r][k].dtype or
                            hres[r][k].shape != gres[r][k].shape or
                            not torch.equal(hres[r][k], gres[r][k])]
                    diff += [(r, k) for r in range(n) for k in hres[r] if k not in gres[r]]
                    verdict = "pass (bit for bit gloo's)" if not diff else \
                        "FAIL (differs from gloo's: rank %d %s)" % diff[0]
                ok = verdict.startswith("pass")
                passed += ok
                failed += not ok
                lines.append("%-22s %d ranks: %s" % (c, n, verdict))
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print("\n".join(lines))
    print("user suite: %d passed, %d failed in %.0f s" % (passed, failed, time.monotonic() - t0))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
