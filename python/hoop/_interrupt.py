"""Ctrl-C while a hoop call holds the main thread.

A call into libhoop keeps the main thread in C, where Python's signal handlers cannot run, so a
SIGINT would raise KeyboardInterrupt only once the call returns: for a call that some peer never
joins, the communicator's timeout later. Python's C-level handler does one thing at once, whatever
the main thread is doing: it writes the signal's number to the wakeup fd (signal.set_wakeup_fd).
The binding installs a pipe there, when the program has none of its own, and a thread that reads
it. A SIGINT that Python's default handler will turn into KeyboardInterrupt, arriving while the
main thread is in a call, aborts that call's communicator (hoop_comm_abort, which any thread may
call): the call returns at once, failed here and on the peers, which learn why, and no buffer is
touched after it; the KeyboardInterrupt is raised as it returns.

The calls themselves are still made directly. Posting the nonblocking twin and waiting in slices
would let the handlers run, but someone else must then run the call: the progress thread, which
leaves a small call to a waiter for a millisecond, or a thread of the binding, and either hand-off
costs a small call many times its own time.

Only SIGINT under Python's default handler aborts: a handler of the program's own may not raise
(one that sets a flag to stop after the current step is common), and whether it does is known only
once it has run, which is after the call. Those, and every other signal, are handled as Python
always handles them, when the call returns.
"""
import os
import signal
import threading

# A caller marks a call by storing `blocked` right before it and clearing it in a `finally`,
# with no function call in between: a handler may raise as any function starts or returns, and
# must not leave a stale mark behind (a later SIGINT would abort a communicator not in a call).
_lock = threading.Lock()
_pipe = None  # (read end, write end) of the pipe this module installed as the wakeup fd
tried = False  # arm() ran in the main thread at least once
main = threading.main_thread().ident  # where Python runs signal handlers
blocked = None  # the Comm whose call holds the main thread now, or None


def arm():
    """Installs the pipe as the wakeup fd, from the main thread, unless the program has a wakeup
    fd of its own (asyncio's loop sets one for its signal handlers): that one is left alone.
    Called again at every new Comm, since the program may have set or cleared its own since."""
    global _pipe, tried
    if threading.get_ident() != main:
        return
    with _lock:
        tried = True
        try:
            if _pipe is None:
                r, w = os.pipe()
                try:
                    os.set_blocking(w, False)  # Python writes from its signal handler
                    threading.Thread(target=_watch, args=(r,), name="hoop-signals",
                                     daemon=True).start()
                except BaseException:
                    os.close(r)
                    os.close(w)
                    raise
                _pipe = (r, w)
            old = signal.set_wakeup_fd(_pipe[1], warn_on_full_buffer=False)
            if old not in (-1, _pipe[1]):  # the program's own: put back
                signal.set_wakeup_fd(old)
        except (OSError, RuntimeError, ValueError):
            # No descriptor or thread left, or not Python's main thread: calls stay as they were.
            pass


def in_main():
    """Whether the caller is the main thread; arms on its first call there."""
    if threading.get_ident() != main:
        return False
    if not tried:
        arm()
    return True


def deliver():
    """Called by the main thread after an interrupted call: Python runs pending handlers as a
    function starts, so the KeyboardInterrupt, if not raised yet, is raised here. Returns when
    no handler raised (it was replaced meanwhile)."""


def _watch(r):
    while True:
        try:
            data = os.read(r, 256)
        except OSError:  # the pipe is gone
            return
        if not data:
            return
        if (signal.SIGINT in data and
                signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            comm = blocked
            if comm is not None:
                try:
                    comm._on_signal(signal.SIGINT)
                except Exception:  # noqa: BLE001 - this thread must go on; the call ends anyway
                    pass


def _after_fork_in_child():
    # The thread that reads the pipe is not in the child, and the pipe is the parent's: the
    # child's signals must not reach the parent's thread. The child arms again at its next call.
    global _lock, _pipe, tried, main, blocked
    _lock = threading.Lock()  # another thread may have held it at the fork
    main = threading.get_ident()
    blocked = None
    tried = False
    if _pipe is not None:
        try:
            old = signal.set_wakeup_fd(-1)
            if old != _pipe[1]:
                signal.set_wakeup_fd(old)
        except (OSError, ValueError):
            pass
        for fd in _pipe:
            try:
                os.close(fd)
            except OSError:
                pass
        _pipe = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
