"""Ctrl-C reaches a rank blocked in a call within a second: run as 2 ranks under hooprun.

Rank 0 blocks in a call on a communicator whose timeout is 60 s and that rank 1 does not join;
rank 1 sends rank 0 a SIGINT. Rank 0 must raise KeyboardInterrupt within 1 s of the signal (both
read the same monotonic clock), its communicator must then fail every call with AbortedError
saying why, and rank 1, joining the call afterwards (after a recv: calling a barrier), must fail
with AbortedError too rather than wait or get a result. Cases: a blocking allreduce, a blocking
recv, Request.wait() of an iallreduce, and a handler of the program's own that does not raise:
that SIGINT must abort nothing, and the allreduce completes with the exact sum once rank 1 joins.
Rank 0 then carries on with the other communicator and exits with status 0.
"""
import os
import signal
import sys
import time

import numpy as np

import hoop

ctl = hoop.init("env://", timeout=60)
R, P = ctl.rank, ctl.size
LIMIT = 1.0  # seconds from the signal to the KeyboardInterrupt


def fail(msg):
    sys.stderr.write("rank %d: FAIL: %s\n" % (R, msg))
    sys.stderr.flush()
    os._exit(1)


if P != 2:
    fail("run as 2 ranks")
pids = ctl.allgather(np.array([os.getpid()], np.int64), np.zeros(2, np.int64))


def victim():
    comm = ctl.split(0)
    comm.set_timeout(60)
    ctl.barrier()  # a split returns on one rank before the others have connected
    return comm


def interrupted(name, block, join):
    """Rank 0 runs block(comm), which blocks; rank 1 interrupts it, then runs join(comm), the
    matching call."""
    comm = victim()
    if R == 0:
        t0 = time.monotonic()
        try:
            block(comm)
            fail("%s: returned without an interrupt" % name)
        except KeyboardInterrupt:
            caught = time.monotonic()
        except BaseException as e:  # noqa: BLE001 - the wrong exception is the failure
            fail("%s: raised %s (%s), not KeyboardInterrupt, after %.1f s" % (
                name, type(e).__name__, e, time.monotonic() - t0))
        sent = ctl.broadcast(np.zeros(1), 1)[0]
        if not sent < caught < sent + LIMIT:
            fail("%s: KeyboardInterrupt %.3f s after the SIGINT (at most %.1f s)" % (
                name, caught - sent, LIMIT))
        try:
            comm.allreduce(np.ones(1))
            fail("%s: the interrupted communicator still works" % name)
        except hoop.AbortedError as e:
            if "SIGINT" not in str(e):
                fail("%s: the error after an interrupt does not say why: %s" % (name, e))
        print("rank 0: %s: KeyboardInterrupt %.3f s after the SIGINT" % (name, caught - sent),
              flush=True)
    else:
        time.sleep(0.5)  # rank 0 is in the call by then
        sent = time.monotonic()
        os.kill(int(pids[0]), signal.SIGINT)
        ctl.broadcast(np.array([sent]), 1)
        t0 = time.monotonic()
        try:
            join(comm)
            fail("%s: joining the interrupted call succeeded" % name)
        except hoop.AbortedError as e:
            print("rank 1: %s: the late call failed after %.3f s: %s" % (
                name, time.monotonic() - t0, e), flush=True)
        except hoop.HoopError as e:
            fail("%s: the late call failed with %s (%s), not AbortedError" % (
                name, type(e).__name__, e))
    comm.destroy()
    ctl.barrier()


def wait_request(comm):
    req = comm.iallreduce(np.ones(1))
    try:
        req.wait()
    except KeyboardInterrupt:
        if not req.done:
            fail("request-wait: the request is not done after the interrupt")
        try:
            req.wait()
            fail("request-wait: the interrupted request gave a result")
        except hoop.AbortedError:
            pass
        raise


interrupted("allreduce", lambda comm: comm.allreduce(np.ones(4)),
            lambda comm: comm.allreduce(np.ones(4)))
# (a send may complete once its bytes are handed over: rank 1 learns of the abort at a barrier)
interrupted("recv", lambda comm: comm.recv(np.zeros(4), 1), lambda comm: comm.barrier())
interrupted("request-wait", wait_request, lambda comm: comm.allreduce(np.ones(1)))

# A handler of the program's own runs when the call returns, and aborts nothing.
comm = victim()
if R == 0:
    seen = []
    signal.signal(signal.SIGINT, lambda sig, frame: seen.append(time.monotonic()))
    x = np.full(4, 1.0)
    comm.allreduce(x)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if not (x == 3.0).all():
        fail("own handler: allreduce gave %s, not 3" % x)
    if len(seen) != 1:
        fail("own handler: it ran %d times" % len(seen))
    print("rank 0: own handler: the allreduce completed, the handler ran once", flush=True)
else:
    time.sleep(0.5)
    os.kill(int(pids[0]), signal.SIGINT)
    time.sleep(0.5)  # an abort, were there one, would have happened by now
    x = np.full(4, 2.0)
    comm.allreduce(x)
    if not (x == 3.0).all():
        fail("own handler: allreduce gave %s, not 3" % x)
comm.destroy()

# The binding's wakeup fd: installed, dropped in a forked child (whose signals must not reach the
# parent's thread), and never put in place of one the program set itself.
ours = signal.set_wakeup_fd(-1)
signal.set_wakeup_fd(ours)
if ours == -1:
    fail("the binding installed no wakeup fd")
pid = os.fork()
if pid == 0:
    os._exit(0 if signal.set_wakeup_fd(-1) == -1 else 3)
if os.waitpid(pid, 0)[1] != 0:
    fail("a forked child still writes its signals to the parent's wakeup fd")
rd, wr = os.pipe()
os.set_blocking(wr, False)
signal.set_wakeup_fd(wr)
sub = ctl.split(0)  # a new Comm arms again
if signal.set_wakeup_fd(ours) != wr:
    fail("a new Comm replaced the program's own wakeup fd")
sub.destroy()
os.close(rd)
os.close(wr)

ctl.barrier()
ctl.destroy()
print("rank %d: interrupts passed" % R, flush=True)
