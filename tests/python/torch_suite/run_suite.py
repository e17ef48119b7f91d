#!/usr/bin/env python3
"""torch's own distributed test suite (DistributedTest._DistTestBase of
torch/testing/_internal/distributed/distributed_test.py, the suite behind upstream's
test/distributed/test_distributed_spawn.py) run against hoop or gloo.

    run_suite.py --backend hoop --world-size 3 [--jobs 2] [-k PATTERN ...] [--json FILE]
                 [--against gloo [--against-cache DIR]]

It knows the suites of torch 1.13 (Debian 12) and torch 2.6 (Debian 13). With --against gloo it
then runs the same tests on gloo and fails unless hoop passes every test gloo passes; with
--against-cache DIR, gloo's outcomes are kept there and a later run with the same key (this file,
torch's version, the world size and the tests: the C++ backend's run after the Python one's)
compares with them instead of running gloo again.

What this runner changes, and nothing else (no assertion is touched):
  * expecttest, which torch's test utilities import and Debian lacks, comes from stubs/ when it
    is not installed;
  * INIT_METHOD is file:// (as upstream's file-init run; each test's setUp names its file);
  * in the suite's source, before it is compiled, the backend gates that name gloo alone also
    admit hoop: `BACKEND != "gloo"` becomes `BACKEND not in ("gloo", "hoop")`,
    `BACKEND == "gloo"` becomes `BACKEND in ("gloo", "hoop")`, `require_backend({"gloo"})`
    (torch 2.6: `require_backend_is_available({"gloo"})`) admits hoop too, and the 12 CPU
    all_to_all tests gated `BACKEND != "mpi"` ("Only MPI supports ...") run for hoop too (not
    for gloo, which fails them); each rewrite is counted per torch version: a different torch
    fails here instead of running something else;
  * hoop joins the suite's own lists as upstream's plugin backends do: DistTestCases'
    "ddp", "subgroup" and "plugin" features, and the profiling allowlists for collectives and
    for send/recv (not the CUDA one); also the "gpu" feature, which gates tests gloo runs on the
    CPU too (gather_object, all_gather_object, broadcast_object_list); those needing a GPU still
    skip by their own GPU decorators;
  * a test whose GPU or world-size decorator (skip_if_no_gpu, skip_if_lt_x_gpu,
    skip_if_small_worldsize) would make every rank exit with its skip code is skipped with the
    same reason without spawning the ranks (the check reads only the machine and WORLD_SIZE);
  * a test that fails only because of torch itself under the Python it comes with (TORCH_BROKEN:
    torch 1.13's torch.distributed._shard under Python 3.11, torch 2.6's gather_object tests
    under Python 3.13) is counted as broken in this torch, apart from the failures, for either
    backend;
  * the tests in KNOWN_FAILING (none for the Python backend; with HOOP_TORCH_BACKEND=cpp, the
    C++ one's "hoop-cpp" list) run and are listed as known to fail without failing
    the run, nor --against's comparison; one that passes fails it, to be taken off the list;
  * with --jobs N the tests are dealt round-robin to N runner processes;
  * each test's ranks are forked from the runner (as upstream's test_distributed_fork.py did
    before torch dropped it for CUDA's sake), not spawned: a spawned rank imports torch and
    compiles this 9000-line suite again, which was most of the run's time (--start spawn is
    upstream's way, for comparison).
The test class is the one upstream defines: TestDistBackend with _DistTestBase, each test in
WORLD_SIZE processes that join through a file:// init method.
"""
import os
import sys

if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="hoop", choices=["hoop", "gloo"])
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=1, help="runner processes sharing the tests")
    ap.add_argument("-k", dest="patterns", action="append", default=[],
                    help="run only tests whose name contains this (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the tests and exit")
    ap.add_argument("--json", help="write each test's outcome and seconds here")
    ap.add_argument("--against", choices=["gloo"],
                    help="then run gloo the same way, and fail unless every test gloo passes "
                         "passes here too")
    ap.add_argument("--against-cache", metavar="DIR",
                    help="keep the --against run's outcomes here under a key of this file, torch's "
                         "version and the tests, and compare with them when they are there")
    ap.add_argument("--start", choices=["fork", "spawn"], default="fork",
                    help="how each test's ranks start (default fork: see above)")
    ap.add_argument("--shard", help=argparse.SUPPRESS)  # i/N, for --jobs
    ARGS = ap.parse_args()
    os.environ["HOOP_SUITE_START"] = ARGS.start
    os.environ["BACKEND"] = ARGS.backend
    os.environ["WORLD_SIZE"] = str(ARGS.world_size)
    # As upstream's run of this suite with a file:// init method (each test's setUp then names
    # its own file): the tests that re-create the default group need it.
    os.environ.setdefault("INIT_METHOD", "file://")

# Spawned ranks (--start spawn) import this file again (as __mp_main__) and take the backend
# from BACKEND.
import importlib.util  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402
import unittest  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import expecttest  # noqa: F401
except ImportError:
    sys.path.append(os.path.join(HERE, "stubs"))

try:
    import torch
    import torch.testing._internal.common_distributed  # noqa: F401
except ImportError as e:
    if __name__ == "__main__":
        print("SKIP: %s cannot import torch's test suite (%s); install python3-torch"
              % (sys.executable, e))
        sys.exit(77)
    raise

# Registers the backend "hoop", in gloo's runs too: the suite's gates name every backend of a
# feature (dist.Backend("hoop") must be valid), so both runs see the same gates. It also routes
# torch.distributed.monitored_barrier to hoop's own for hoop groups.
import hoop.torch  # noqa: E402,F401

SUITE = "torch.testing._internal.distributed.distributed_test"

# Per torch version, (text, replacement, count): every occurrence is rewritten, and the count is
# checked against that version's file.
REWRITES = {
    "1.13": [
        ('BACKEND != "gloo"', 'BACKEND not in ("gloo", "hoop")', 17),
        ('BACKEND == "gloo"', 'BACKEND in ("gloo", "hoop")', 3),
        ('require_backend({"gloo"})', 'require_backend({"gloo", "hoop"})', 18),
        # The CPU all_to_all tests (gloo 1.13 fails them; upstream runs them for mpi only).
        ('@sandcastle_skip_if(BACKEND != "mpi", "Only MPI supports',
         '@sandcastle_skip_if(BACKEND not in ("mpi", "hoop"), "Only MPI supports', 12),
    ],
    "2.6": [
        ('BACKEND != "gloo"', 'BACKEND not in ("gloo", "hoop")', 18),
        ('BACKEND == "gloo"', 'BACKEND in ("gloo", "hoop")', 1),
        ('require_backend_is_available({"gloo"})',
         'require_backend_is_available({"gloo", "hoop"})', 19),
        ('BACKEND != "mpi", "Only MPI supports',
         'BACKEND not in ("mpi", "hoop"), "Only MPI supports', 12),
    ],
}


def _load_suite():
    from torch.testing._internal.common_distributed import DistTestCases

    for feature in ("ddp", "subgroup", "plugin", "gpu"):
        DistTestCases.backend_feature[feature].add("hoop")
    spec = importlib.util.find_spec(SUITE)
    with open(spec.origin) as f:
        src = f.read()
    version = ".".join(torch.__version__.split(".")[:2])
    if version not in REWRITES:
        raise SystemExit("run_suite: torch %s: this runner knows the suite of torch %s only"
                         % (torch.__version__, " and ".join(sorted(REWRITES))))
    counts, want = [], []
    for old, new, n in REWRITES[version]:
        counts.append(src.count(old))
        want.append(n)
        src = src.replace(old, new)
    if counts != want:
        raise SystemExit("run_suite: the gates of %s differ from the ones this runner knows "
                         "(rewrote %s, expected %s)" % (spec.origin, counts, want))
    mod = types.ModuleType(SUITE)
    mod.__file__ = spec.origin
    sys.modules[SUITE] = mod
    exec(compile(src, spec.origin, "exec"), mod.__dict__)
    for name in ("PROFILING_SUPPORTED_BACKENDS", "SEND_RECV_PROFILING_SUPPORTED_BACKENDS"):
        getattr(mod, name).append("hoop")
    return mod


_suite = _load_suite()


class TestDistBackendWithSpawn(_suite.TestDistBackend, _suite.DistributedTest._DistTestBase):
    # As upstream's test_distributed_spawn.py, but for the way the ranks start (--start).
    def setUp(self):
        super().setUp()
        if os.environ.get("HOOP_SUITE_START", "fork") == "fork":
            self._start_processes(torch.multiprocessing.get_context("fork").Process)
        else:
            self._spawn_processes()
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()

    @classmethod
    def _run(cls, rank, test_name, file_name, pipe, **kwargs):
        # A spawned rank imports the suite after setUp has put this test's file in INIT_METHOD
        # (initialize_temp_directories); a forked one kept the runner's import: read it again.
        # torch 2.x passes more (fake_pg).
        _suite.INIT_METHOD = os.environ["INIT_METHOD"]
        super()._run(rank, test_name, file_name, pipe, **kwargs)


# Failures of torch itself under the Python it comes with, whatever the backend, as (text in the
# traceback, text in the error, what it is): torch 1.13's DistributedDataParallel imports
# torch.distributed._shard, whose dataclasses Python 3.11 refuses (a mutable default); torch 2.6's
# gather_object tests expect Python < 3.13's message for an object pickle cannot find.
TORCH_BROKEN = [
    ("torch/distributed/_shard/", "use default_factory", "torch 1.13 under Python 3.11"),
    ("_test_gather_object", "Can't get local object", "torch 2.6 under Python 3.13"),
]


# Tests hoop is known to fail, with the reason: they still run, are listed as KNOWN, do not fail
# the run, and fail it once they pass (so that the list only shrinks).
KNOWN_FAILING = {
    "hoop": {},
    # hoop's C++ backend (HOOP_TORCH_BACKEND=cpp, torch >= 2.0).
    "hoop-cpp": {
        "test_ddp_logging_data_cpu": "torch names a C++ plugin backend 'custom' in DDP's logging "
                                     "data (ProcessGroup::getBackendName), not 'hoop'",
    },
}


def _known():
    """This run's KNOWN_FAILING entry."""
    name = os.environ["BACKEND"]
    if name == "hoop" and os.environ.get("HOOP_TORCH_BACKEND", "").lower() == "cpp":
        name = "hoop-cpp"
    return KNOWN_FAILING.get(name, {})


def _short(test):
    return test.id().rsplit(".", 1)[-1]


class _Result(unittest.TextTestResult):
    """Records each test's outcome and duration."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.outcomes = {}
        self._t0 = {}

    def startTest(self, test):
        self._t0[test.id()] = time.monotonic()
        super().startTest(test)

    def _done(self, test, outcome, detail=""):
        name = _short(test)
        self.outcomes[name] = {"outcome": outcome, "seconds": round(
            time.monotonic() - self._t0.get(test.id(), time.monotonic()), 2), "detail": detail}

    def addSuccess(self, test):
        super().addSuccess(test)
        known = _known().get(_short(test))
        if known is None:
            self._done(test, "pass")
        else:
            self._done(test, "fail", "passes, but is listed in KNOWN_FAILING (%s): take it out"
                       % known)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._done(test, "skip", reason)

    def _failed(self, test, err, outcome):
        text = self._exc_info_to_string(err, test)
        if any(where in text and what in text for where, what, _ in TORCH_BROKEN):
            outcome = "broken"
        elif _short(test) in _known():
            outcome = "known"
        self._done(test, outcome, text[-2000:])

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._failed(test, err, "fail")

    def addError(self, test, err):
        super().addError(test, err)
        self._failed(test, err, "error")

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._done(test, "pass")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._done(test, "fail", "unexpected success")


def _certain_skip(fn):
    """The skip that fn's GPU or world-size decorator would make every spawned rank exit with,
    decided here when it is certain (its condition reads only the machine and WORLD_SIZE), so
    that such a test spawns nothing; None otherwise."""
    cd = sys.modules["torch.testing._internal.common_distributed"]
    skips = cd.TEST_SKIPS
    codes = {
        cd.skip_if_no_gpu(len).__code__: "no_gpu",
        cd.skip_if_lt_x_gpu(1)(len).__code__: "lt_x_gpu",
        cd.skip_if_small_worldsize(len).__code__: "small_worldsize",
    }
    world = int(os.environ["WORLD_SIZE"])
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    while fn is not None:
        kind = codes.get(getattr(fn, "__code__", None))
        cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ())) if kind else {}
        if kind == "no_gpu" and gpus < world:
            return skips["no_cuda" if gpus == 0 else "multi-gpu-%d" % world].message
        if kind == "lt_x_gpu" and gpus < cells["x"].cell_contents:
            return skips["multi-gpu-%d" % cells["x"].cell_contents].message
        if kind == "small_worldsize" and os.environ["BACKEND"] != "mpi" and world <= 2:
            return skips["small_worldsize"].message
        fn = getattr(fn, "__wrapped__", None)
    return None


def _names(patterns):
    names = unittest.TestLoader().getTestCaseNames(TestDistBackendWithSpawn)
    if patterns:
        names = [n for n in names if any(p in n for p in patterns)]
    return names


def _run(names, json_path):
    for n in names:
        reason = _certain_skip(getattr(TestDistBackendWithSpawn, n))
        if reason is not None:
            setattr(TestDistBackendWithSpawn, n,
                    unittest.skip(reason)(getattr(TestDistBackendWithSpawn, n)))
    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)
    runner = unittest.TextTestRunner(verbosity=2, resultclass=_Result, stream=sys.stdout)
    result = runner.run(suite)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result.outcomes, f, indent=1, sort_keys=True)
    return result.outcomes


def _summary(outcomes, label, seconds):
    count = {k: 0 for k in ("pass", "skip", "fail", "error", "broken", "known")}
    for o in outcomes.values():
        count[o["outcome"]] += 1
    print("%s: %d tests, %d passed, %d skipped, %d failed, %d errors, %d known to fail, %d broken "
          "in this torch (torch %s) in %.0f s" % (
              label, len(outcomes), count["pass"], count["skip"], count["fail"], count["error"],
              count["known"], count["broken"], torch.__version__, seconds))
    known = _known()
    for name, o in sorted(outcomes.items()):
        if o["outcome"] in ("fail", "error", "broken", "known"):
            print("  %s %s%s" % (o["outcome"].upper(), name,
                                 " (%s)" % known[name] if o["outcome"] == "known" else ""))
    return count["fail"] + count["error"] == 0


def main():
    names = _names(ARGS.patterns)
    if ARGS.list:
        print("\n".join(names))
        return 0
    label = "%s at %d ranks" % (ARGS.backend, ARGS.world_size)
    t0 = time.monotonic()
    if ARGS.shard:
        i, n = (int(x) for x in ARGS.shard.split("/"))
        _run(names[i::n], ARGS.json)
        return 0
    if ARGS.jobs <= 1:
        outcomes = _run(names, ARGS.json)
    else:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            procs = []
            for i in range(ARGS.jobs):
                cmd = [sys.executable, os.path.abspath(__file__), "--backend", ARGS.backend,
                       "--world-size", str(ARGS.world_size), "--start", ARGS.start,
                       "--shard", "%d/%d" % (i, ARGS.jobs),
                       "--json", os.path.join(tmp, "%d.json" % i)]
                for p in ARGS.patterns:
                    cmd += ["-k", p]
                log = open(os.path.join(tmp, "%d.log" % i), "w")
                procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log))
            outcomes = {}
            for i, (p, log) in enumerate(procs):
                p.wait()
                log.close()
                with open(os.path.join(tmp, "%d.log" % i)) as f:
                    sys.stdout.write(f.read())
                try:
                    with open(os.path.join(tmp, "%d.json" % i)) as f:
                        outcomes.update(json.load(f))
                except FileNotFoundError:
                    print("run_suite: runner %d of %d ended with status %d before reporting"
                          % (i, ARGS.jobs, p.returncode))
                    return 1
            missing = set(names) - set(outcomes)
            for name in missing:
                outcomes[name] = {"outcome": "error", "seconds": 0, "detail": "not run"}
        if ARGS.json:
            with open(ARGS.json, "w") as f:
                json.dump(outcomes, f, indent=1, sort_keys=True)
    ok = _summary(outcomes, label, time.monotonic() - t0)
    if ARGS.against:
        ok = _against(outcomes) and ok
    if not ok:
        _failures(outcomes, label)
    return 0 if ok else 1


def _failures(outcomes, label):
    """Each failed test's detail, last, so that a log's tail (all a CI excerpt may keep) names
    the tests that failed the run and how."""
    for name, o in sorted(outcomes.items()):
        if o["outcome"] in ("fail", "error"):
            print("==== %s %s on %s, %.1f s; the end of what it reported:" % (
                o["outcome"].upper(), name, label, o["seconds"]))
            print("\n".join(o["detail"].splitlines()[-25:]))
    print("==== %s: failed (the lines above name each failure)" % label)


def _against(outcomes):
    """Runs the same tests on ARGS.against and fails unless this backend passes every test that
    one passes."""
    import tempfile

    cached = None
    if ARGS.against_cache:
        import hashlib

        h = hashlib.sha256()
        with open(os.path.abspath(__file__), "rb") as f:
            h.update(f.read())
        h.update(repr((torch.__version__, ARGS.against, ARGS.world_size, ARGS.start,
                       sorted(ARGS.patterns))).encode())
        cached = os.path.join(ARGS.against_cache, "%s-%d-%s" % (ARGS.against, ARGS.world_size,
                                                                 h.hexdigest()[:16]))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "against.json")
        if cached and os.path.exists(cached + ".json"):
            with open(cached + ".txt") as f:
                sys.stdout.write("%s's outcomes from %s\n%s" % (ARGS.against, cached, f.read()))
            with open(cached + ".json") as f:
                theirs = json.load(f)
            return _compare(outcomes, theirs)
        cmd = [sys.executable, os.path.abspath(__file__), "--backend", ARGS.against,
               "--world-size", str(ARGS.world_size), "--start", ARGS.start,
               "--jobs", str(ARGS.jobs), "--json", path]
        for p in ARGS.patterns:
            cmd += ["-k", p]
        sys.stdout.flush()
        # A test that hangs on the reference (torch 2.6's test_ddp_logging_data_cpu on gloo here)
        # would hold the run for torch's 300 s default; 60 s is several times the slowest pass.
        env = dict(os.environ)
        env.setdefault("DISTRIBUTED_TESTS_DEFAULT_TIMEOUT", "60")
        # Its own failures are its own: only its passes count here. Its log goes to a file and
        # only its summary is shown, so that this run's own failures stay at the log's end.
        log_path = os.path.join(tmp, "against.log")
        with open(log_path, "w") as log:
            subprocess.call(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        with open(log_path) as f:
            lines = f.read().splitlines()
        at = next((i for i, l in enumerate(lines) if l.startswith("%s at " % ARGS.against)), None)
        shown = "\n".join(lines[at:] if at is not None else lines[-40:]) + "\n"
        sys.stdout.write(shown)
        try:
            with open(path) as f:
                theirs = json.load(f)
        except FileNotFoundError:
            print("run_suite: the %s run ended before reporting" % ARGS.against)
            return False
        if cached:
            # The summary first, then the outcomes, each renamed into place whole: the outcomes
            # are what says the entry is there.
            os.makedirs(ARGS.against_cache, exist_ok=True)
            for ext, text in ((".txt", shown), (".json", json.dumps(theirs))):
                with open(cached + ext + ".part", "w") as f:
                    f.write(text)
                os.replace(cached + ext + ".part", cached + ext)
    return _compare(outcomes, theirs)


def _compare(outcomes, theirs):
    """Whether this backend passed every test the reference passed (theirs), saying which not."""
    passed = {n for n, o in theirs.items() if o["outcome"] == "pass"}
    mine = {n for n, o in outcomes.items() if o["outcome"] == "pass"}
    # Known failures are listed (with their reason) but do not fail the comparison.
    known = {n for n, o in outcomes.items() if o["outcome"] == "known"}
    for n in sorted((passed - mine) & known):
        print("  KNOWN %s (%s)" % (n, _known().get(n, "")))
    missing = sorted(passed - mine - known)
    print("%s passes %d tests, %s %d: %d of %s's passes not passed by %s%s" % (
        ARGS.against, len(passed), ARGS.backend, len(mine), len(missing), ARGS.against,
        ARGS.backend, "".join("\n  NOT PASSED %s" % n for n in missing)))
    extra = sorted(mine - passed)
    if extra:
        print("%s also passes %d that %s does not: %s" % (ARGS.backend, len(extra), ARGS.against,
                                                           ", ".join(extra)))
    return not missing


if __name__ == "__main__":
    sys.exit(main())
