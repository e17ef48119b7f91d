"""Python binding of hoop, the collective-communication library, through ctypes.

    import numpy as np, hoop
    comm = hoop.init()                  # env:// (torchrun, hooprun), tcp://HOST:PORT, file:///PATH
    x = np.ones(1000, np.float32)
    comm.allreduce(x)                   # in place, sum over every rank
    req = comm.iallreduce(x, op="max")  # nonblocking: req.wait() / req.test()
    comm.destroy()

Buffers are numpy arrays, torch CPU tensors, objects with __array_interface__ or the buffer
protocol. hoop.empty(comm, shape, dtype) and hoop.zeros give arrays on symmetric memory, which
collectives on one host read and write in place (docs/python.md).
Counts follow the C API (hoop.h): allgather/gather take the per-rank send buffer and a receive
buffer `size` times larger; scatter/reduce_scatter the reverse; alltoall one block per rank.
Failures raise HoopError subclasses carrying hoop's own sentence (hoop_comm_last_error).
"""
import atexit
import ctypes
import itertools
import operator
import os
import signal
import threading
import weakref
from threading import get_ident as _get_ident

from . import _interrupt, _library
from ._buffer import as_buffer
from ._errors import (AbortedError, AuthError, HoopError, InternalError, InvalidArgumentError,
                      MismatchError, NoMemoryError, PeerLostError, SystemCallError, TimeoutError,
                      UnsupportedError, error_for)
from ._library import DTYPES, OPS, LibraryNotFoundError
from ._sym import empty, zeros

__all__ = ["init", "Comm", "Request", "wait_all", "empty", "zeros", "version", "library_path",
           "DTYPES", "OPS",
           "SUM", "PROD", "MIN", "MAX", "AVG", "HoopError", "InvalidArgumentError",
           "SystemCallError", "TimeoutError", "PeerLostError", "MismatchError", "AuthError",
           "UnsupportedError", "AbortedError", "NoMemoryError", "InternalError",
           "LibraryNotFoundError"]


def __getattr__(name):
    # The version lives in hoop.h only: __version__ is the loaded library's (read on first use).
    if name == "__version__":
        return version()
    raise AttributeError("module 'hoop' has no attribute %r" % name)


SUM, PROD, MIN, MAX, AVG = "sum", "prod", "min", "max", "avg"
_OP_ALIASES = {"sum": 0, "prod": 1, "product": 1, "min": 2, "max": 3, "avg": 4, "mean": 4}

SPLIT_NONE = -1

# The objects each nonblocking call hands the C side (its buffers), by communicator and call,
# referenced from this module so that no collection can free them while the call may still read
# or write them: an entry goes once hoop says the call is over (its hoop_wait returned, or its
# communicator was destroyed), not when the Python objects that posted it go. A call's number is
# taken before it is posted, so its buffers are held even if posting is cut short by an exception.
_IN_FLIGHT = {}  # Comm._n -> {call number: buffers}
_COMMS = weakref.WeakValueDictionary()  # Comm._n -> Comm: the open ones, for _at_exit
_numbers = itertools.count()


@atexit.register
def _at_exit():
    """Before the interpreter frees its objects: a communicator with calls in flight is destroyed
    (so aborted, the peers told why), so that no call runs on to buffers already freed."""
    for comm in list(_COMMS.values()):
        try:
            if comm._h is not None and (comm._keep or comm._busy):
                comm.destroy()
        except Exception:  # noqa: BLE001 - the others are still to be closed
            pass


def _lib():
    return _library.load()


def version():
    """Version of the loaded libhoop."""
    return _lib().hoop_version().decode()


def library_path():
    """Path of the loaded libhoop.so."""
    return _library.path()


def _integer(value, what):
    """value as an int, for ranks, roots, peers, sizes, colors and keys: 0.7 is not rank 0."""
    if isinstance(value, bool):
        raise TypeError("%s must be an integer, not %r" % (what, value))
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError("%s must be an integer, not %s %r" % (what, type(value).__name__,
                                                           value)) from None


def _op_code(op):
    if isinstance(op, str) and op.lower() in _OP_ALIASES:
        return _OP_ALIASES[op.lower()]
    if isinstance(op, int) and not isinstance(op, bool) and 0 <= op < len(OPS):
        return op
    raise InvalidArgumentError("op %r is not one of sum, prod, min, max, avg" % (op,))


def init(method=None, rank=-1, size=-1, timeout=None, algo=None, any_thread=False):
    """Joins a communicator. method: "env://" (default: MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE
    as torchrun and hooprun set them, or Slurm/Open MPI variables), "tcp://HOST:PORT" (rank 0
    serves the rendezvous there) or "file:///PATH". rank/size of -1 come from the environment.
    timeout (seconds) and algo (as HOOP_ALGO: "auto", "ring", "rd", "rabenseifner", "ps",
    "ps-sharded", "ipc", "shm", "p2p", "hier") apply once joined.
    any_thread: see Comm (threads)."""
    rank = _integer(rank, "init: rank")
    size = _integer(size, "init: size")
    lib = _lib()
    h = ctypes.c_void_p()
    m = None if method is None else str(method).encode()
    rc = lib.hoop_init(ctypes.byref(h), m, rank, size)
    if rc != _library.OK:
        raise error_for(rc, "hoop_init(%s, rank=%d, size=%d) failed: %s (hoop's log line above "
                        "says why)" % (method or "env://", rank, size,
                                       lib.hoop_error_string(rc).decode()))
    comm = Comm(h.value, any_thread)
    try:
        if timeout is not None:
            comm.set_timeout(timeout)
        if algo is not None:
            comm.set_algo(algo)
    except BaseException:
        comm.destroy()
        raise
    return comm


class Request:
    """A nonblocking call. Its buffers stay referenced until it has completed, and it keeps its
    Comm alive."""

    def __init__(self, comm, handle, what, n, outs, result):
        self._comm = comm
        self._h = handle
        self._what = what
        self._n = n  # its entry in the Comm's calls in flight
        self._outs = outs
        self._result = result
        self._error = None
        self._lock = threading.Lock()
        self._source = None  # a receive from any source: the C int its sender's rank goes to

    @property
    def done(self):
        """True once completed (and waited or tested)."""
        return self._h is None

    def _complete(self, rc):
        # Under self._lock, the C request just freed by hoop_wait; done only once copied back.
        try:
            if rc != _library.OK:
                self._error = self._comm._error(rc, self._what)
            else:
                for b in self._outs:
                    b.finish()
        except BaseException as e:  # a copy-back that failed is this request's failure
            self._error = e
        finally:
            self._outs = None
            self._h = None
            self._comm._forget(self)

    @property
    def source(self):
        """For irecv_any: the rank it received from, once completed (-1 if it matched none);
        None for every other request and before completion."""
        if self._source is None or not self.done:
            return None
        return self._source.value

    def _wait_locked(self):
        """hoop_wait, then _complete; under self._lock, with the request not yet done."""
        comm = self._comm
        if not _interrupt.in_main():
            self._complete(_lib().hoop_wait(self._h))
            return
        # The main thread, where a signal's handler may raise as soon as hoop_wait returns, before
        # its result is kept: ctypes keeps it (_main_wait), and the request is completed whatever
        # is raised, its handle being freed by then. A handler that waits too stacks its result
        # above this one.
        rc = _WAIT_RC
        at = len(rc)
        wait = _main_wait()
        _interrupt.blocked = comm
        try:
            wait(self._h)
            self._complete(rc[at])
            if comm._interrupted:
                _interrupt.deliver()  # the KeyboardInterrupt, where not raised yet
        except BaseException:
            if len(rc) > at and self._h is not None:
                self._complete(rc[at])
            raise
        finally:
            _interrupt.blocked = None
            del rc[at:]

    def wait(self):
        """Blocks until the call completes; returns its output object (None for barrier, send).
        Raises the HoopError the call failed with. In the main thread, Ctrl-C aborts the
        communicator and raises KeyboardInterrupt (docs/python.md)."""
        with self._lock:
            if self._h is not None:
                self._wait_locked()
        if self._error is not None:
            raise self._error
        return self._result

    def test(self):
        """True once the call has completed (raising its error if it failed); never blocks."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._h is not None:
                lib = _lib()
                flag = ctypes.c_int(0)
                lib.hoop_test(self._h, ctypes.byref(flag))
                if not flag.value:
                    return False
                self._wait_locked()  # returns at once
        finally:
            self._lock.release()
        if self._error is not None:
            raise self._error
        return True

    def __repr__(self):
        return "<hoop.Request %s %s>" % (self._what, "done" if self.done else "pending")


_WAIT_RC = []  # the main thread's hoop_wait results, appended by ctypes (a stack)
_main_wait_fn = None


def _main_wait():
    """hoop_wait whose result ctypes appends to _WAIT_RC as the call returns: restype is a C
    method, which runs no Python code, so no signal handler can raise before the result is kept
    (one may, right after, in the main thread)."""
    global _main_wait_fn
    if _main_wait_fn is None:
        lib = _lib()
        fn = lib._FuncPtr(("hoop_wait", lib))
        fn.argtypes = [ctypes.c_void_p]
        fn.restype = _WAIT_RC.append
        _main_wait_fn = fn
    return _main_wait_fn


def wait_all(requests):
    """Waits for every request (all of them, even after a failure); raises the first error."""
    first = None
    results = []
    for r in requests:
        try:
            results.append(r.wait())
        except HoopError as e:
            results.append(None)
            if first is None:
                first = e
    if first is not None:
        raise first
    return results


def _stream_fn(name):
    """hoop_comm_set_stream, hoop_comm_get_stream, hoop_group_start/end, typed at first use."""
    fn = getattr(_lib(), name, None)
    if fn is None:
        raise HoopError("this libhoop (%s) has no %s" % (library_path(), name))
    if name == "hoop_comm_set_stream":
        fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int
    elif name == "hoop_comm_get_stream":
        fn.argtypes, fn.restype = [ctypes.c_void_p], ctypes.c_void_p
    else:
        fn.argtypes, fn.restype = [ctypes.c_void_p], ctypes.c_int
    return fn


class Comm:
    """A communicator. Collectives must be called in the same order on every rank.

    Threads: calls that post (the collectives, send/recv, split, set_algo) are taken from one
    thread, the one that created the Comm or last called bind_thread(); from any other thread
    they raise InvalidArgumentError before anything is posted. Posting from two threads cannot be
    made safe here: the threads reach each rank's Comm in whatever order they run, which is not
    the same on every rank, so one call's data would be combined with another's (no lock can give
    every rank the same order). Waiting (Request.wait/test), abort(), destroy(), stats() and the
    properties may come from any thread.

    With any_thread=True (hoop.init(..., any_thread=True), which the torch backend uses, as
    torch.distributed leaves the order to its caller) calls may come from any thread: each
    posting call is then made under a lock, one at a time as hoop.h requires, but giving them the
    same order on every rank is the caller's task, and calls from two threads at once may mix
    data without an error.
    """

    def __init__(self, handle, any_thread=False):
        self._h = handle
        self._lock = threading.RLock()  # posting: one thread at a time, as hoop.h requires
        self._plock = threading.Lock()  # the pending set, touched by completing threads
        self._hlock = threading.Lock()  # the handle's lifetime, for calls outside _lock
        # Requests not yet completed, weakly: a Request keeps its Comm, not the reverse, so that a
        # Comm nothing references is destroyed at once; what a call uses is held in _keep.
        self._pending = weakref.WeakSet()
        self._n = next(_numbers)
        self._keep = _IN_FLIGHT.setdefault(self._n, {})  # call number -> buffers, until over
        _COMMS[self._n] = self
        self._busy = 0  # blocking calls under way
        self._closing = False  # aborted by destroy(): pending calls fail for that reason
        self._interrupted = None  # the signal that aborted it while the main thread waited
        self._any_thread = bool(any_thread)
        self._owner = threading.get_ident()
        self._owner_name = threading.current_thread().name
        # Symmetric memory (_sym.py): allocation number -> pointer, for those not yet freed;
        # the numbers whose arrays this rank has let go; the handle whose hoop_comm_destroy waits
        # for the last array on its memory, after destroy().
        self._sym_live = {}
        self._sym_gone = set()
        self._sym_next = 0
        self._sym_hold = None
        self._rank = _lib().hoop_comm_rank(handle)
        self._size = _lib().hoop_comm_size(handle)
        _interrupt.arm()  # in the main thread: see _interrupt.py

    # ---- state ----

    @property
    def rank(self):
        return self._rank

    @property
    def size(self):
        return self._size

    @property
    def last_error(self):
        """hoop's sentence for the last failure on this communicator ("" if none)."""
        with self._hlock:
            if self._h is None:
                return ""
            return _lib().hoop_comm_last_error(self._h).decode(errors="replace")

    def _handle(self):
        h = self._h
        if h is None:
            raise InvalidArgumentError("the communicator was destroyed")
        return h

    def _poster(self, what):
        """Refuses a posting call from a thread other than the Comm's (see the class)."""
        if self._any_thread or threading.get_ident() == self._owner:
            return
        raise InvalidArgumentError(
            "%s: called from thread %r, but this Comm takes its calls from thread %r (the one "
            "that created it or called bind_thread()): calls from two threads reach the ranks in "
            "different orders and would mix their data; post from one thread, hand the Comm over "
            "with bind_thread() at the same point on every rank, or create it with "
            "any_thread=True and order the calls yourself"
            % (what, threading.current_thread().name, self._owner_name))

    def bind_thread(self):
        """Makes the calling thread the one whose calls this Comm takes from now on. Hand over at
        the same point of the sequence of calls on every rank; requests posted before may still
        be waited for from any thread."""
        with self._lock:
            self._owner = threading.get_ident()
            self._owner_name = threading.current_thread().name

    def _on_signal(self, sig):
        """From the binding's signal thread (_interrupt.py): sig came while the main thread was
        in a call on this Comm, and its handler will raise: the call ends now, as abort() ends
        it, and so do the peers' calls."""
        self._interrupted = sig
        self.abort()

    def _error(self, rc, what):
        msg = self.last_error or _lib().hoop_error_string(rc).decode()
        if self._closing and rc == AbortedError.code:
            msg = "the communicator was destroyed with this call pending (%s)" % msg
        elif self._interrupted is not None and rc == AbortedError.code:
            msg = ("%s arrived while the main thread was in a call, so the communicator was "
                   "aborted (%s)" % (_signal_name(self._interrupted), msg))
        return error_for(rc, "%s: %s" % (what, msg))

    def _check(self, rc, what):
        if rc != _library.OK:
            raise self._error(rc, what)

    def _forget(self, req):
        """req is over on the C side: its buffers may go."""
        with self._plock:
            self._pending.discard(req)
            self._keep.pop(req._n, None)

    def set_timeout(self, seconds):
        """Timeout of every blocking wait on this communicator (default HOOP_TIMEOUT, 300 s)."""
        with self._hlock:
            rc = _lib().hoop_comm_set_timeout(self._handle(), float(seconds))
        self._check(rc, "set_timeout")

    def set_algo(self, algo):
        """Algorithm from now on, as HOOP_ALGO: auto, ring, rd, rabenseifner, ps, ps-sharded, ipc,
        shm, p2p or hier (the same on every rank)."""
        self._poster("set_algo")
        with self._lock:
            self._check(_lib().hoop_comm_set_algo(self._handle(), str(algo).encode()),
                        "set_algo")

    def set_stream(self, stream):
        """Orders this Comm's calls on device buffers on a CUDA stream from now on (docs/cuda.md):
        a call starts after the work queued there, work queued after it sees its result, and it
        returns (a request completes) without waiting for the device. stream: a handle as an int
        (0 is the legacy default stream), an object with one (CuPy's .ptr, torch's .cuda_stream),
        or None for no stream (calls return with their result in device memory). A setting of
        this rank alone; the stream must outlive the calls ordered on it."""
        self._poster("set_stream")
        if stream is not None and not isinstance(stream, int):
            for attr in ("ptr", "cuda_stream"):
                if isinstance(getattr(stream, attr, None), int):
                    stream = getattr(stream, attr)
                    break
            else:
                raise TypeError("set_stream: a stream handle (int), an object with .ptr or "
                                ".cuda_stream, or None; got %s" % type(stream).__name__)
        fn = _stream_fn("hoop_comm_set_stream")
        handle = None if stream is None else ctypes.c_void_p(1 if stream == 0 else stream)
        with self._lock:
            self._check(fn(self._handle(), handle), "set_stream")

    def group_start(self):
        """Starts a group of stream-ordered calls (hoop_group_start; docs/cuda.md): until the
        matching group_end, no call on device buffers posted under a stream waits for another
        of the group, so that a ring of irecv-then-isend on one stream does not wait on itself.
        Groups nest; `with comm.group():` pairs the two."""
        self._poster("group_start")
        fn = _stream_fn("hoop_group_start")
        with self._lock:
            self._check(fn(self._handle()), "group_start")

    def group_end(self):
        """Ends a group (see group_start): the streams now wait for the group's calls."""
        self._poster("group_end")
        fn = _stream_fn("hoop_group_end")
        with self._lock:
            self._check(fn(self._handle()), "group_end")

    def group(self):
        """A context manager: group_start on entry, group_end on exit."""
        comm = self

        class _Group:
            def __enter__(self):
                comm.group_start()
                return comm

            def __exit__(self, *exc):
                comm.group_end()
                return False
        return _Group()

    @property
    def stream(self):
        """The stream set by set_stream (0 for the legacy default stream), or None."""
        with self._hlock:
            v = _stream_fn("hoop_comm_get_stream")(self._handle())
        return None if not v else 0 if v == 1 else v

    def stats(self):
        """Payload bytes and messages this rank sent and received on this communicator."""
        st = (ctypes.c_uint64 * 4)()
        with self._hlock:
            rc = _lib().hoop_comm_stats(self._handle(), ctypes.byref(st))
        self._check(rc, "stats")
        return {"bytes_sent": st[0], "bytes_received": st[1], "messages_sent": st[2],
                "messages_received": st[3]}

    def dump(self, path=None):
        """Writes the flight recorder's last calls on this communicator as JSON (PyTorch's
        flight recorder layout; docs/reliability.md) to path, or to HOOP_RECORD_DIR's
        hoop-trace-<rank>.json where path is None."""
        p = None if path is None else os.fsencode(path)
        with self._hlock:
            rc = _lib().hoop_comm_dump(self._handle(), p)
        self._check(rc, "dump")

    def split(self, color, key=None):
        """Collective: ranks with the same color form a new Comm, ordered by (key, rank).
        color None takes part and gets None."""
        nc = ctypes.c_void_p()
        c = SPLIT_NONE if color is None else _integer(color, "split: color")
        k = self._rank if key is None else _integer(key, "split: key")
        self._poster("split")
        with self._lock:
            lib, h = _lib(), self._handle()
            main = _interrupt.in_main()
            if main:
                _interrupt.blocked = self
            try:
                rc = lib.hoop_comm_split(h, c, k, ctypes.byref(nc))
                if main and self._interrupted:
                    _interrupt.deliver()
            except BaseException:
                if nc.value:  # split, then interrupted before it became a Comm
                    _lib().hoop_comm_destroy(nc.value)
                raise
            finally:
                if main:
                    _interrupt.blocked = None
            self._check(rc, "split")
        return Comm(nc.value, self._any_thread) if nc.value else None

    def shrink(self, exclude=()):
        """After a peer was lost (a call raised PeerLostError, AbortedError or TimeoutError), every
        rank still running calls it and gets a new Comm of the ranks that took part, numbered in
        their old order (hoop_comm_shrink; docs/reliability.md). exclude: ranks to leave out as
        well, the same list on every caller; an excluded rank gets None. This Comm is not
        changed: destroy it as usual. Raises on every member where the shrink fails."""
        ranks = [_integer(r, "shrink: exclude") for r in exclude]
        arr = (ctypes.c_int * max(len(ranks), 1))(*ranks)
        nc = ctypes.c_void_p()
        self._poster("shrink")
        with self._lock:
            try:
                rc = _lib().hoop_comm_shrink_exclude(self._handle(), arr, len(ranks),
                                                     ctypes.byref(nc))
            except BaseException:
                if nc.value:
                    _lib().hoop_comm_destroy(nc.value)
                raise
            self._check(rc, "shrink")
        return Comm(nc.value, self._any_thread) if nc.value else None

    def abort(self):
        """Fails every pending and future call (here and, as connections drop, on the peers).
        The communicator must still be destroyed. Safe from any thread."""
        with self._hlock:
            if self._h is not None:
                _lib().hoop_comm_abort(self._h)

    def _abort_pending(self):
        """Aborts, so that the calls still pending end at once, because the Comm goes away."""
        self._closing = True
        self.abort()

    def destroy(self):
        """Frees the communicator. Not collective; safe from any thread; twice is harmless.
        Calls still pending (a nonblocking call that a peer never joins, say, or a blocking call
        in another thread) are aborted first, so that destroy returns at once: they fail with
        AbortedError (a request raises it from wait()), and the peers' calls fail too. Wait for
        the requests whose results you need before destroying. Where arrays made by hoop.empty
        on it still live, the Comm takes no more calls at once, but its memory (and the C
        communicator) goes only with the last of them."""
        if self._h is None:
            return
        with self._plock:
            # Calls in flight, including those whose Request was dropped unwaited.
            unfinished = bool(self._keep)
        if unfinished or self._busy:
            self._abort_pending()  # a blocking call in another thread holds _lock until it ends
        with self._lock:
            if self._h is None:
                return
            with self._plock:
                pending = list(self._pending)
                posted = bool(self._keep)
            if posted and not unfinished:  # posted meanwhile
                self._abort_pending()
            for r in pending:  # prompt once aborted; their handles die with the communicator
                try:
                    r.wait()
                except HoopError:
                    pass
            with self._hlock:
                h, self._h = self._h, None
                with self._plock:
                    # Arrays on its symmetric memory still live here: unmapping it would leave
                    # them pointing at nothing, so the last of them to go destroys it.
                    if set(self._sym_live) - self._sym_gone:
                        self._sym_hold, h = h, None
                if h is not None:
                    _lib().hoop_comm_destroy(h)
            # Every call of the communicator is over (failed if it was still pending).
            with self._plock:
                self._keep.clear()
            _IN_FLIGHT.pop(self._n, None)

    # ---- symmetric memory (_sym.py) ----

    def _sym_alloc(self, nbytes, bad, make):
        """hoop.empty's collective part: the agreed frees, then hoop_mem_alloc of nbytes; bad:
        this rank's reason to fail (it then asks for 0 bytes, which fails every rank)."""
        what = "hoop.empty"
        self._poster(what)
        with self._lock:
            self._reclaim(what)
            ptr = ctypes.c_void_p()
            try:
                self._run(what, "hoop_mem_alloc", (nbytes, ctypes.byref(ptr)), [], [], None,
                          False)
            except InvalidArgumentError:
                if bad:
                    raise InvalidArgumentError("%s: %s" % (what, bad)) from None
                raise
            n = self._sym_next
            self._sym_next += 1
            block = make(n, ptr.value)
            with self._plock:
                self._sym_live[n] = ptr.value
            return block

    def _sym_let_go(self, n):
        """From a _Block's finaliser (any thread): allocation n has no array left here."""
        with self._plock:
            self._sym_gone.add(n)
            h = None
            if self._sym_hold is not None and not set(self._sym_live) - self._sym_gone:
                h, self._sym_hold = self._sym_hold, None
        if h is not None:
            _lib().hoop_comm_destroy(h)

    def _reclaim(self, what):
        """Frees, in the order they were made, the allocations every rank has let go: an
        all-reduce (min) of one flag per live allocation, whose list is the same on every rank
        since allocating and freeing are."""
        with self._plock:
            live = sorted(self._sym_live)
            flags = (ctypes.c_uint8 * max(len(live), 1))(
                *[1 if n in self._sym_gone else 0 for n in live])
        if not live:
            return 0
        p = ctypes.addressof(flags)
        self._run(what, "hoop_allreduce", (p, p, len(live), _library.DTYPE_CODE["uint8"],
                                           _OP_ALIASES["min"]), [flags], [], None, False)
        freed = 0
        for i, n in enumerate(live):
            if flags[i]:
                self._run(what, "hoop_mem_free", (ctypes.c_void_p(self._sym_live[n]),), [], [],
                          None, False)
                with self._plock:
                    del self._sym_live[n]
                    self._sym_gone.discard(n)
                freed += 1
        return freed

    def reclaim(self):
        """Collective: frees the symmetric memory (hoop.empty) whose arrays every rank has let
        go (no array or view of it left, collected); returns how many allocations it freed.
        hoop.empty does the same before it allocates; memory let go on some ranks only stays."""
        self._poster("reclaim")
        with self._lock:
            self._handle()
            return self._reclaim("reclaim")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def __del__(self):
        # Nothing references the Comm, so no Request of it is left to wait for: it is destroyed,
        # which aborts the calls still in flight (bounded by the timeout, not a wait for peers) so
        # that they are over before the buffers held for them in _IN_FLIGHT are let go.
        try:
            if getattr(self, "_h", None) is not None:
                self.destroy()
        except Exception:  # noqa: BLE001 - a finaliser must not raise
            pass

    def __repr__(self):
        return "<hoop.Comm rank %d of %d%s>" % (self._rank, self._size,
                                                 "" if self._h else " (destroyed)")

    # ---- calls ----

    def _run(self, what, fn, args, bufs, outs, result, nonblocking):
        """Posts fn(comm, *args) (blocking) or its nonblocking twin; bufs are kept alive, outs
        get their results copied back."""
        lib = _lib()
        self._poster(what)
        with self._lock:
            h = self._handle()
            if not nonblocking:
                # Made directly, not as the nonblocking twin waited for in slices, which would hand
                # the call to another thread: in the main thread, Ctrl-C ends it through
                # _interrupt.py instead.
                f = getattr(lib, fn)
                main = _get_ident() == _interrupt.main
                if main:
                    if not _interrupt.tried:
                        _interrupt.arm()
                    _interrupt.blocked = self
                self._busy += 1
                try:
                    rc = f(h, *args)
                    if main and self._interrupted:
                        _interrupt.deliver()
                finally:
                    self._busy -= 1
                    if main:
                        _interrupt.blocked = None  # no call here: a handler could raise in it
                if rc == _library.OK:
                    for b in outs:
                        b.finish()
                self._check(rc, what)
                return result
            n = next(_numbers)
            with self._plock:
                self._keep[n] = bufs
            req = ctypes.c_void_p()
            rc = getattr(lib, "hoop_i" + fn[5:])(h, *args, ctypes.byref(req))
            if rc != _library.OK:
                with self._plock:
                    self._keep.pop(n, None)
                self._check(rc, what)
            r = Request(self, req.value, what, n, outs, result)
            with self._plock:
                self._pending.add(r)
            return r

    @staticmethod
    def _same(a, b, what):
        if a.dtype != b.dtype:
            raise InvalidArgumentError("%s: sendbuf is %s but recvbuf is %s" % (what, a.dtype,
                                                                             b.dtype))

    def _root(self, root, what):
        root = _integer(root, "%s: root" % what)
        if not 0 <= root < self._size:
            raise InvalidArgumentError("%s: root %d is outside the communicator (size %d)"
                                       % (what, root, self._size))
        return root

    def _split_count(self, buf, what, name):
        if buf.count % self._size:
            raise InvalidArgumentError("%s: %s holds %d elements, not a multiple of the size %d"
                                       % (what, name, buf.count, self._size))
        return buf.count // self._size

    def _allreduce(self, sendbuf, recvbuf, op, dtype, nb):
        w = "allreduce"
        o = _op_code(op)
        inplace = recvbuf is None or recvbuf is sendbuf
        s = as_buffer(sendbuf, "allreduce sendbuf", inplace, dtype)
        r = s if inplace else as_buffer(recvbuf, "allreduce recvbuf", True, dtype)
        self._same(s, r, w)
        if r.count != s.count:
            raise InvalidArgumentError("allreduce: sendbuf has %d elements, recvbuf %d"
                                       % (s.count, r.count))
        return self._run(w, "hoop_allreduce", (s.ptr, r.ptr, s.count, _DT(s), o), (s, r), (r,),
                         r.obj, nb)

    def allreduce(self, sendbuf, recvbuf=None, op=SUM, dtype=None):
        """recvbuf[i] = op over ranks of sendbuf[i]; recvbuf None: in place. Returns recvbuf."""
        return self._allreduce(sendbuf, recvbuf, op, dtype, False)

    def iallreduce(self, sendbuf, recvbuf=None, op=SUM, dtype=None):
        return self._allreduce(sendbuf, recvbuf, op, dtype, True)

    def _broadcast(self, buf, root, dtype, nb):
        root = self._root(root, "broadcast")
        b = as_buffer(buf, "broadcast buf", True, dtype)
        return self._run("broadcast", "hoop_broadcast", (b.ptr, b.count, _DT(b), root), (b,),
                         (b,), b.obj, nb)

    def broadcast(self, buf, root=0, dtype=None):
        """buf of root, copied into buf on every rank. Returns buf."""
        return self._broadcast(buf, root, dtype, False)

    def ibroadcast(self, buf, root=0, dtype=None):
        return self._broadcast(buf, root, dtype, True)

    def _reduce(self, sendbuf, recvbuf, op, root, dtype, nb):
        w = "reduce"
        o = _op_code(op)
        root = self._root(root, w)
        at_root = self._rank == root
        inplace = at_root and (recvbuf is None or recvbuf is sendbuf)
        s = as_buffer(sendbuf, "reduce sendbuf", inplace, dtype)
        if not at_root:
            r, outs = None, ()
        else:
            r = s if inplace else as_buffer(recvbuf, "reduce recvbuf", True, dtype)
            self._same(s, r, w)
            if r.count != s.count:
                raise InvalidArgumentError("reduce: sendbuf has %d elements, recvbuf %d"
                                           % (s.count, r.count))
            outs = (r,)
        return self._run(w, "hoop_reduce", (s.ptr, r.ptr if r else None, s.count, _DT(s), o, root),
                         (s, r), outs, r.obj if r else None, nb)

    def reduce(self, sendbuf, recvbuf=None, op=SUM, root=0, dtype=None):
        """recvbuf of root = op over ranks of sendbuf (root's recvbuf None: in place in sendbuf).
        Other ranks' recvbuf is ignored. Returns the root's result (None elsewhere)."""
        return self._reduce(sendbuf, recvbuf, op, root, dtype, False)

    def ireduce(self, sendbuf, recvbuf=None, op=SUM, root=0, dtype=None):
        return self._reduce(sendbuf, recvbuf, op, root, dtype, True)

    def _gathering(self, kind, sendbuf, recvbuf, root, dtype, nb):
        # allgather (root None) and gather: recvbuf holds size blocks of sendbuf's count.
        w = kind
        at_root = root is None or self._rank == root
        if not at_root:
            s = as_buffer(sendbuf, w + " sendbuf", False, dtype)
            return self._run(w, "hoop_gather", (s.ptr, None, s.count, _DT(s), root), (s,), (),
                             None, nb)
        if recvbuf is None:
            raise InvalidArgumentError("%s: recvbuf is required%s" % (
                w, "" if root is None else " at the root"))
        r = as_buffer(recvbuf, w + " recvbuf", True, dtype)
        if sendbuf is None:  # in place: this rank's block of recvbuf is its contribution
            n = self._split_count(r, w, "recvbuf")
            sptr, s = r.at(self._rank * n), r
        else:
            s = as_buffer(sendbuf, w + " sendbuf", False, dtype)
            self._same(s, r, w)
            n, sptr = s.count, s.ptr
            if r.count != n * self._size:
                raise InvalidArgumentError("%s: recvbuf has %d elements, not size (%d) x "
                                           "sendbuf's %d" % (w, r.count, self._size, n))
        if root is None:
            return self._run(w, "hoop_allgather", (sptr, r.ptr, n, _DT(r)), (s, r), (r,), r.obj,
                             nb)
        return self._run(w, "hoop_gather", (sptr, r.ptr, n, _DT(r), root), (s, r), (r,), r.obj,
                         nb)

    def allgather(self, sendbuf, recvbuf, dtype=None):
        """recvbuf = the ranks' sendbufs one after another (size x sendbuf's count);
        sendbuf None: in place (this rank's block of recvbuf is its contribution)."""
        return self._gathering("allgather", sendbuf, recvbuf, None, dtype, False)

    def iallgather(self, sendbuf, recvbuf, dtype=None):
        return self._gathering("allgather", sendbuf, recvbuf, None, dtype, True)

    def gather(self, sendbuf, recvbuf=None, root=0, dtype=None):
        """As allgather, into root's recvbuf only (others pass None)."""
        return self._gathering("gather", sendbuf, recvbuf, self._root(root, "gather"), dtype,
                               False)

    def igather(self, sendbuf, recvbuf=None, root=0, dtype=None):
        return self._gathering("gather", sendbuf, recvbuf, self._root(root, "gather"), dtype,
                               True)

    def _scatter(self, sendbuf, recvbuf, root, dtype, nb):
        w = "scatter"
        root = self._root(root, w)
        if self._rank != root:
            if recvbuf is None:
                raise InvalidArgumentError("scatter: recvbuf is required")
            r = as_buffer(recvbuf, "scatter recvbuf", True, dtype)
            return self._run(w, "hoop_scatter", (None, r.ptr, r.count, _DT(r), root), (r,),
                             (r,), r.obj, nb)
        if sendbuf is None:
            raise InvalidArgumentError("scatter: sendbuf is required at the root")
        s = as_buffer(sendbuf, "scatter sendbuf", recvbuf is None, dtype)
        if recvbuf is None:  # in place: the root's block stays where it is in sendbuf
            n = self._split_count(s, w, "sendbuf")
            return self._run(w, "hoop_scatter", (s.ptr, s.at(root * n), n, _DT(s), root), (s,),
                             (), None, nb)
        r = as_buffer(recvbuf, "scatter recvbuf", True, dtype)
        self._same(s, r, w)
        if s.count != r.count * self._size:
            raise InvalidArgumentError("scatter: sendbuf has %d elements, not size (%d) x "
                                       "recvbuf's %d" % (s.count, self._size, r.count))
        return self._run(w, "hoop_scatter", (s.ptr, r.ptr, r.count, _DT(r), root), (s, r), (r,),
                         r.obj, nb)

    def scatter(self, sendbuf, recvbuf, root=0, dtype=None):
        """Block i of root's sendbuf (size x recvbuf's count) lands in rank i's recvbuf. Other
        ranks pass sendbuf None; the root may pass recvbuf None (in place). Returns recvbuf."""
        return self._scatter(sendbuf, recvbuf, root, dtype, False)

    def iscatter(self, sendbuf, recvbuf, root=0, dtype=None):
        return self._scatter(sendbuf, recvbuf, root, dtype, True)

    def _reduce_scatter(self, sendbuf, recvbuf, op, dtype, nb):
        w = "reduce_scatter"
        o = _op_code(op)
        inplace = recvbuf is None or recvbuf is sendbuf
        s = as_buffer(sendbuf, "reduce_scatter sendbuf", inplace, dtype)
        if inplace:  # the result lands at the start of sendbuf
            n = self._split_count(s, w, "sendbuf")
            return self._run(w, "hoop_reduce_scatter", (s.ptr, s.ptr, n, _DT(s), o), (s,), (s,),
                             s.obj, nb)
        r = as_buffer(recvbuf, "reduce_scatter recvbuf", True, dtype)
        self._same(s, r, w)
        if s.count != r.count * self._size:
            raise InvalidArgumentError("reduce_scatter: sendbuf has %d elements, not size (%d) x "
                                       "recvbuf's %d" % (s.count, self._size, r.count))
        return self._run(w, "hoop_reduce_scatter", (s.ptr, r.ptr, r.count, _DT(r), o), (s, r),
                         (r,), r.obj, nb)

    def reduce_scatter(self, sendbuf, recvbuf=None, op=SUM, dtype=None):
        """recvbuf on rank i = op over ranks of block i of sendbuf (size x recvbuf's count).
        recvbuf None: in place, the result lands in the first block of sendbuf."""
        return self._reduce_scatter(sendbuf, recvbuf, op, dtype, False)

    def ireduce_scatter(self, sendbuf, recvbuf=None, op=SUM, dtype=None):
        return self._reduce_scatter(sendbuf, recvbuf, op, dtype, True)

    def _alltoall(self, sendbuf, recvbuf, dtype, nb):
        w = "alltoall"
        inplace = recvbuf is None or recvbuf is sendbuf
        s = as_buffer(sendbuf, "alltoall sendbuf", inplace, dtype)
        r = s if inplace else as_buffer(recvbuf, "alltoall recvbuf", True, dtype)
        self._same(s, r, w)
        if r.count != s.count:
            raise InvalidArgumentError("alltoall: sendbuf has %d elements, recvbuf %d"
                                       % (s.count, r.count))
        n = self._split_count(s, w, "sendbuf")
        return self._run(w, "hoop_alltoall", (s.ptr, r.ptr, n, _DT(s)), (s, r), (r,), r.obj, nb)

    def alltoall(self, sendbuf, recvbuf=None, dtype=None):
        """Block j of sendbuf on rank i lands in block i of recvbuf on rank j (size equal
        blocks); recvbuf None: in place."""
        return self._alltoall(sendbuf, recvbuf, dtype, False)

    def ialltoall(self, sendbuf, recvbuf=None, dtype=None):
        return self._alltoall(sendbuf, recvbuf, dtype, True)

    def barrier(self):
        """Returns once every rank has entered it."""
        return self._run("barrier", "hoop_barrier", (), (), (), None, False)

    def ibarrier(self):
        return self._run("barrier", "hoop_barrier", (), (), (), None, True)

    def _peer(self, peer, what):
        peer = _integer(peer, "%s: peer" % what)
        if not 0 <= peer < self._size or peer == self._rank:
            raise InvalidArgumentError("%s: peer %d is not another rank of the communicator "
                                       "(rank %d of %d)" % (what, peer, self._rank, self._size))
        return peer

    def send(self, buf, peer, dtype=None):
        """Sends buf to peer; matched with peer's receives from this rank in posting order (same
        count and dtype)."""
        peer = self._peer(peer, "send")
        b = as_buffer(buf, "send buf", False, dtype)
        return self._run("send to rank %d" % peer, "hoop_send", (b.ptr, b.count, _DT(b), peer),
                         (b,), (), None, False)

    def isend(self, buf, peer, dtype=None):
        peer = self._peer(peer, "isend")
        b = as_buffer(buf, "isend buf", False, dtype)
        return self._run("send to rank %d" % peer, "hoop_send", (b.ptr, b.count, _DT(b), peer),
                         (b,), (), None, True)

    def recv(self, buf, peer, dtype=None):
        """Receives into buf from peer. Returns buf."""
        peer = self._peer(peer, "recv")
        b = as_buffer(buf, "recv buf", True, dtype)
        return self._run("recv from rank %d" % peer, "hoop_recv", (b.ptr, b.count, _DT(b), peer),
                         (b,), (b,), b.obj, False)

    def irecv(self, buf, peer, dtype=None):
        peer = self._peer(peer, "irecv")
        b = as_buffer(buf, "irecv buf", True, dtype)
        return self._run("recv from rank %d" % peer, "hoop_recv", (b.ptr, b.count, _DT(b), peer),
                         (b,), (b,), b.obj, True)

    def recv_any(self, buf, dtype=None):
        """Receives into buf from whichever other rank's send arrives first (hoop_recv_any:
        later receives and collectives wait until it has matched). Returns (buf, source)."""
        b = as_buffer(buf, "recv_any buf", True, dtype)
        src = ctypes.c_int(-1)
        self._run("recv from any source", "hoop_recv_any",
                  (b.ptr, b.count, _DT(b), ctypes.byref(src)), (b, src), (b,), None, False)
        return b.obj, src.value

    def irecv_any(self, buf, dtype=None):
        """Nonblocking recv_any: wait() returns buf, and the request's source says who sent it."""
        b = as_buffer(buf, "irecv_any buf", True, dtype)
        src = ctypes.c_int(-1)
        r = self._run("recv from any source", "hoop_recv_any",
                      (b.ptr, b.count, _DT(b), ctypes.byref(src)), (b, src), (b,), b.obj, True)
        r._source = src
        return r


def _DT(buf):
    return _library.DTYPE_CODE[buf.dtype]


def _signal_name(sig):
    try:
        return signal.Signals(sig).name
    except ValueError:
        return "signal %d" % sig

