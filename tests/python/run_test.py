"""Runs a test script as N ranks under hooprun, or skips (exit 77) when the Python modules it
needs are missing.

usage: run_test.py HOOPRUN NRANKS LIMIT MODULES SCRIPT [ARGS...]
LIMIT: seconds after which hooprun stops every rank (below meson's timeout, which would only end
this process). MODULES: comma-separated modules the script needs (numpy,torch).
"""
import importlib
import subprocess
import sys

SKIP = 77


def main():
    hooprun, n, limit, modules, script = sys.argv[1:6]
    args = sys.argv[6:]
    for m in filter(None, modules.split(",")):
        try:
            importlib.import_module(m)
        except Exception as e:  # noqa: BLE001 - any failure to import means "cannot run"
            print("SKIP: %s cannot import %s (%s: %s); install python3-%s" % (
                sys.executable, m, type(e).__name__, e, m))
            return SKIP
    try:
        import hoop
        print("hoop %s from %s" % (hoop.version(), hoop.library_path()))
    except Exception as e:  # noqa: BLE001
        print("FAIL: the hoop package cannot load its library: %s" % e)
        return 1
    sys.stdout.flush()
    cmd = [hooprun, "--timeout", limit, "-n", n, sys.executable, script] + args
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())
