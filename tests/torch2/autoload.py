"""The package's entry point (group "torch.backends", which torch >= 2.5 loads at `import torch`),
as pip installs it: the backend "hoop" works without `import hoop.torch`, registers without
torch's "Device capability ... unspecified" warning, and routes dist.monitored_barrier to hoop's,
with the Python backend (HOOP_TORCH_BACKEND=python) and with the C++ one (=cpp, where
tests/torch2/build_ext.sh built it beside HOOP_LIBRARY); and an entry point that cannot register
the backend does not break `import torch`: hoop.torch that raises, the C++ backend asked for and
absent (a warning, "hoop" left unregistered); libhoop.so missing (the backend registers, and
init_process_group says the library is missing). Without the entry point the same copy leaves "hoop" unknown, which
shows that the entry point is what registers it.

    autoload.py HOOPRUN     builds the wheel (python/_build/hoop_backend.py), unpacks it as pip
                            would, and runs the checks with only the unpacked copy on PYTHONPATH
"""
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.join(HERE, "..", "..", "python")


def rank():
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import torch
        import torch.distributed as dist
    registered = "hoop" in dist.Backend.backend_list
    if os.environ.get("AUTOLOAD_BROKEN"):
        said = [str(w.message) for w in caught if "could not be registered" in str(w.message)]
        ok = bool(said) and "hoop.torch" not in sys.modules and not registered
        print("broken entry point (%s): import torch works, warning %r"
              % (os.environ["AUTOLOAD_BROKEN"], said[:1]))
        return 0 if ok else 1
    if os.environ.get("AUTOLOAD_NOLIB"):
        # The library is loaded when a group is made, not at registration: the backend
        # registers, and the group says what is missing.
        try:
            os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                              MASTER_PORT=str(29400 + os.getpid() % 1000))
            dist.init_process_group("hoop")
            why = "FAIL: a group was made"
        except Exception as e:  # noqa: BLE001 - the sentence is what is checked
            why = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
        ok = registered and "libhoop" in why
        print("no libhoop.so: import torch works, backend registered %s, init_process_group "
              "raises %s" % (registered, why))
        return 0 if ok else 1
    if os.environ.get("AUTOLOAD_NONE"):
        ok = not registered and "hoop.torch" not in sys.modules
        print("no entry point: hoop %s" % ("stays unknown" if ok else
                                           "FAIL: is registered all the same"))
        return 0 if ok else 1
    import hoop

    problems = []
    if not hoop.__file__.startswith(os.environ["AUTOLOAD_SITE"]):
        problems.append("hoop imported from %s, not the installed copy" % hoop.__file__)
    if "hoop.torch" not in sys.modules:
        problems.append("import torch did not register the backend (hoop.torch not imported)")
    noisy = [str(w.message) for w in caught if "hoop" in str(w.message).lower()]
    if noisy:
        problems.append("warnings at import torch: %s" % noisy)
    dist.init_process_group("hoop")
    r, p = dist.get_rank(), dist.get_world_size()
    if dist.get_backend() != "hoop":
        problems.append("default group's backend is %s" % dist.get_backend())
    python = isinstance(dist.group.WORLD, sys.modules["hoop.torch"].ProcessGroupHoop)
    if python != (os.environ["HOOP_TORCH_BACKEND"] == "python"):
        problems.append("HOOP_TORCH_BACKEND=%s, but the %s backend serves the group"
                        % (os.environ["HOOP_TORCH_BACKEND"], "Python" if python else "C++"))
    if not python and dist.group.WORLD._get_backend(torch.device("cpu")).name() != "hoop":
        problems.append("the group's cpu backend is not hoop's")
    t = torch.arange(5, dtype=torch.float64) * (r + 1)
    dist.all_reduce(t)
    if not torch.equal(t, torch.arange(5, dtype=torch.float64) * (p * (p + 1) // 2)):
        problems.append("all_reduce gave %s" % t.tolist())
    try:
        dist.monitored_barrier(timeout=__import__("datetime").timedelta(seconds=20))
    except Exception as e:  # noqa: BLE001 - reported
        problems.append("dist.monitored_barrier on the hoop group: %s: %s" % (type(e).__name__, e))
    dist.destroy_process_group()
    for msg in problems:
        print("rank %d: FAIL: %s" % (r, msg))
    print("rank %d: %s" % (r, "entry point ok" if not problems else "failed"))
    return 1 if problems else 0


def main():
    hooprun = sys.argv[1]
    sys.path.insert(0, os.path.join(PYDIR, "_build"))
    import hoop_backend

    status = 0
    me = [sys.executable, os.path.abspath(__file__), "--rank"]
    # (what, the rank's command, variables): the two backends at 2 ranks, then single processes
    # whose `import torch` must survive an entry point that cannot register the backend.
    runs = [("python backend", [hooprun, "--timeout", "240", "-n", "2"] + me,
             {"HOOP_TORCH_BACKEND": "python"}),
            ("C++ backend", [hooprun, "--timeout", "240", "-n", "2"] + me,
             {"HOOP_TORCH_BACKEND": "cpp"}),
            ("hoop.torch raises", me, {"AUTOLOAD_BROKEN": "hoop.torch raises"}),
            ("no libhoop.so", me, {"AUTOLOAD_NOLIB": "1",
                                   "HOOP_LIBRARY": "/nonexistent/libhoop.so"}),
            # A libhoop.so with no C++ backend built beside it.
            ("no C++ backend", me, {"AUTOLOAD_BROKEN": "C++ backend asked for, absent",
                                    "HOOP_TORCH_BACKEND": "cpp"}),
            ("no entry point", me, {"AUTOLOAD_NONE": "1"})]
    with tempfile.TemporaryDirectory() as tmp:
        alone = os.path.join(tmp, "lib", "libhoop.so")
        os.makedirs(os.path.dirname(alone))
        shutil.copy(os.environ["HOOP_LIBRARY"], alone)
        runs[4][2]["HOOP_LIBRARY"] = alone
        wheel = os.path.join(tmp, hoop_backend.build_wheel(tmp))
        for i, (what, cmd, extra) in enumerate(runs):
            site = os.path.join(tmp, "site%d" % i)
            with zipfile.ZipFile(wheel) as z:
                z.extractall(site)
            if what == "hoop.torch raises":
                with open(os.path.join(site, "hoop", "torch.py"), "w") as f:
                    f.write("raise ImportError('a hoop.torch that cannot be imported')\n")
            if what == "no entry point":
                for d in os.listdir(site):
                    ep = os.path.join(site, d, "entry_points.txt")
                    if os.path.exists(ep):
                        os.remove(ep)
            env = dict(os.environ, PYTHONPATH=site, AUTOLOAD_SITE=site)
            for k in ("AUTOLOAD_BROKEN", "AUTOLOAD_NONE", "AUTOLOAD_NOLIB"):
                env.pop(k, None)
            env.update(extra)
            rc = subprocess.call(cmd, env=env)
            print("%s: exit %d" % (what, rc), flush=True)
            status = status or rc
    return status


if __name__ == "__main__":
    sys.exit(rank() if sys.argv[1:] == ["--rank"] else main())
