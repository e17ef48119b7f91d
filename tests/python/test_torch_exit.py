"""A process with an operation no peer matches must not hang: run as 2 ranks under hooprun.

    test_torch_exit.py destroy   rank 0 posts dist.all_reduce(async_op=True), which rank 1 never
                                 joins, then calls destroy_process_group(): it returns within
                                 5 s (hoop's timeout here is 30 s) and work.wait() raises
                                 hoop.AbortedError at once.
    test_torch_exit.py exit      rank 0 posts the same, then its script ends: the process is gone
                                 within 10 s, as rank 1, which watches its pid, checks.
    test_torch_exit.py monitored rank 0 leaves right after hoop.torch.monitored_barrier returns,
                                 with the store rank 1 still reads the outcome from (slowly):
                                 rank 1's barrier passes.

Rank 1 stays in the group until rank 0 is done (a marker file), so rank 0's operation cannot end
through a lost peer.
"""
import gc
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist

import hoop
import hoop.torch  # registers "hoop"

MODE = sys.argv[1]
dist.init_process_group("hoop")
R, P = dist.get_rank(), dist.get_world_size()
MARK = os.path.join(tempfile.gettempdir(), "hoop-exit-test-%s-%s" % (os.environ["MASTER_PORT"],
                                                                       os.getppid()))


def fail(msg):
    sys.stderr.write("rank %d: FAIL: %s\n" % (R, msg))
    sys.stderr.flush()
    os._exit(1)


def wait_for(path, limit):
    t0 = time.time()
    while not os.path.exists(path):
        if time.time() - t0 > limit:
            fail("%s did not appear within %.0f s" % (path, limit))
        time.sleep(0.02)
    with open(path) as f:
        return f.read()


if P != 2:
    fail("run as 2 ranks")
if MODE == "monitored":
    # Rank 0 leaves as soon as monitored_barrier returns, and its process holds the store the
    # barrier's outcome is read from; rank 1 reads it late. Rank 1's barrier must pass all the
    # same (rank 0 waits until every rank has read the outcome).
    pg = dist.distributed_c10d._get_default_group()
    if R == 1:
        class SlowReads:
            def __init__(self, store):
                self.store = store

            def get(self, key):
                time.sleep(1.0)
                return self.store.get(key)

            def __getattr__(self, name):
                return getattr(self.store, name)

        pg._store = SlowReads(pg._store)
    try:
        hoop.torch.monitored_barrier(timeout=20)
    except Exception as e:  # noqa: BLE001 - the failure being reported
        fail("monitored_barrier raised %s: %s" % (type(e).__name__, e))
    print("rank %d: passed" % R, flush=True)
    os._exit(0)

if R == 1:
    pid = int(wait_for(MARK + ".posted", 60))
    if MODE == "exit":
        t0 = time.time()
        while os.path.exists("/proc/%d" % pid):
            if time.time() - t0 > 10:
                fail("rank 0 (pid %d) still runs %.0f s after its script ended" % (
                    pid, time.time() - t0))
            time.sleep(0.02)
        print("rank 1: rank 0 exited %.3f s after its script ended with an unmatched "
              "operation" % (time.time() - t0), flush=True)
    else:
        wait_for(MARK + ".done", 60)
    for m in (".posted", ".done"):
        try:
            os.unlink(MARK + m)
        except FileNotFoundError:
            pass
    print("rank 1: passed", flush=True)
    sys.exit(0)

work = dist.all_reduce(torch.ones(4), async_op=True)  # rank 1 never joins it
time.sleep(0.2)
with open(MARK + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(MARK + ".tmp", MARK + ".posted")
if MODE == "exit":
    print("rank 0: leaving with the operation pending", flush=True)
    sys.exit(0)  # a normal exit: atexit handlers and finalizers run

t0 = time.time()
dist.destroy_process_group()
gc.collect()
dt = time.time() - t0
if dt > 5:
    fail("destroy_process_group with an unmatched operation took %.1f s" % dt)
t1 = time.time()
try:
    work.wait()
    fail("work.wait() returned for an operation nobody matched")
except hoop.AbortedError as e:
    msg = str(e)
except Exception as e:  # noqa: BLE001 - torch may wrap the error; its text must say why
    msg = "%s: %s" % (type(e).__name__, e)
    if "abort" not in msg.lower():
        fail("work.wait() raised %s" % msg)
if time.time() - t1 > 5:
    fail("work.wait() took %.1f s" % (time.time() - t1))
print("rank 0: destroy_process_group took %.3f s; the operation failed with: %s" % (dt, msg),
      flush=True)
with open(MARK + ".done", "w") as f:
    f.write("1")
print("rank 0: passed", flush=True)
