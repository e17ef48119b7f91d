"""The package's entry point (group "torch.backends", which torch >= 2.5 loads at `import torch`),
as pip installs it: the backend "hoop" works without `import hoop.torch`, registers without
torch's "Device capability ... unspecified" warning, and routes dist.monitored_barrier to hoop's;
and an entry point that cannot register the backend does not break `import torch`.

    autoload.py HOOPRUN     builds the wheel (python/_build/hoop_backend.py), unpacks it as pip
                            would, and runs the checks with only the unpacked copy on PYTHONPATH
"""
import os
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
    if os.environ.get("AUTOLOAD_BROKEN"):
        said = [str(w.message) for w in caught if "could not be registered" in str(w.message)]
        ok = bool(said) and "hoop.torch" not in sys.modules
        print("broken entry point: import torch %s, warning %r" % ("works", said[:1]))
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
    with tempfile.TemporaryDirectory() as tmp:
        wheel = os.path.join(tmp, hoop_backend.build_wheel(tmp))
        for broken in (False, True):
            site = os.path.join(tmp, "broken" if broken else "site")
            with zipfile.ZipFile(wheel) as z:
                z.extractall(site)
            if broken:  # hoop.torch cannot be imported: the entry point must not raise
                with open(os.path.join(site, "hoop", "torch.py"), "w") as f:
                    f.write("raise ImportError('a hoop.torch that cannot be imported')\n")
            env = dict(os.environ, PYTHONPATH=site, AUTOLOAD_SITE=site)
            env.pop("AUTOLOAD_BROKEN", None)
            if broken:
                env["AUTOLOAD_BROKEN"] = "1"
                cmd = [sys.executable, os.path.abspath(__file__), "--rank"]
            else:
                cmd = [hooprun, "--timeout", "240", "-n", "2", sys.executable,
                       os.path.abspath(__file__), "--rank"]
            rc = subprocess.call(cmd, env=env)
            print("%s: exit %d" % ("broken entry point" if broken else "2 ranks", rc))
            status = status or rc
    return status


if __name__ == "__main__":
    sys.exit(rank() if sys.argv[1:] == ["--rank"] else main())
