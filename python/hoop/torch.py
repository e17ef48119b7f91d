"""hoop as a torch.distributed backend.

    import hoop.torch                                  # registers the backend "hoop"
    torch.distributed.init_process_group("hoop")       # env:// from torchrun or hooprun

Every operation is posted to hoop as a nonblocking call at once and returns a Work backed by a
torch Future; a completion thread per lane (collectives; sends to / receives from each peer, which
complete in their own order) waits for hoop's requests and completes the futures, so that
DistributedDataParallel overlaps its all-reduces with the backward pass. The futures' callbacks
run in that thread in posting order; one that waits for a later operation keeps its lane going
(_State). A failed operation raises from Work.wait() (and from the future).
destroy_process_group(), or the end of the process, with operations still pending fails them
(hoop.AbortedError) rather than waiting for them: one that no peer matches would otherwise hold
it for the group's timeout. CPU tensors, and CUDA tensors ordered on torch's current stream (the
section at the end).
"""
import collections
import datetime
import functools
import inspect
import os
import queue
import random
import re
import socket
import threading
import time
import weakref

import torch
import torch.distributed as dist

import hoop as _hoop
from hoop._buffer import overlaps as _overlaps

BACKEND_NAME = "hoop"

try:
    from torch._C._distributed_c10d import Work as _WorkBase
except ImportError:
    _WorkBase = dist.distributed_c10d.Work

_DTYPES = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
           torch.int32, torch.int64}


def _reduce_op(opts):
    op = getattr(opts, "reduceOp", opts)
    if op is None:
        return "sum"
    for name, code in (("SUM", "sum"), ("PRODUCT", "prod"), ("MIN", "min"), ("MAX", "max"),
                       ("AVG", "avg")):
        v = getattr(dist.ReduceOp, name, None)
        if v is not None and op == v:
            return code
    raise ValueError("hoop backend: reduce op %s is not supported (SUM, PRODUCT, MIN, MAX, AVG)"
                     % (op,))


def _check(t, what, out=False):
    """t, if the CPU path can serve it (out: the call writes into it); raises before any data
    moves otherwise."""
    if not isinstance(t, torch.Tensor):
        raise TypeError("hoop backend: %s expects tensors, got %s" % (what, type(t).__name__))
    if t.device.type != "cpu":
        raise ValueError("hoop backend: %s got a %s tensor; it takes CPU tensors only (CUDA "
                         "tensors go to the collectives listed in docs/python.md)"
                         % (what, t.device.type))
    if t.layout != torch.strided:
        raise ValueError("hoop backend: %s got a %s tensor; only dense tensors are supported"
                         % (what, t.layout))
    if t.dtype not in _DTYPES:
        raise TypeError("hoop backend: %s got dtype %s (supported: float32, float64, float16, "
                        "bfloat16, int8, uint8, int32, int64)" % (what, t.dtype))
    if out and _overlaps(t):
        raise ValueError(_SHARED % (what, list(t.shape), list(t.stride())))
    return t


_SHARED = ("hoop backend: %s would write its result into a tensor whose elements share memory "
           "(an expand()ed view, shape %s, strides %s); give it a tensor of its own, e.g. a "
           "clone()")


def _one(tensors, what, out=False):
    if isinstance(tensors, torch.Tensor):
        return _check(tensors, what, out)
    if len(tensors) != 1:
        raise ValueError("hoop backend: %s takes one tensor per process, got %d" %
                         (what, len(tensors)))
    return _check(tensors[0], what, out)


def _same_shapes(ts, ref, n, what, out=False):
    if len(ts) != n:
        raise ValueError("hoop backend: %s needs %d tensors (one per rank), got %d"
                         % (what, n, len(ts)))
    for t in ts:
        _check(t, what, out)
        if t.dtype != ref.dtype or t.numel() != ref.numel():
            raise ValueError("hoop backend: %s tensors differ in dtype or size (%s x %d against "
                             "%s x %d)" % (what, t.dtype, t.numel(), ref.dtype, ref.numel()))


def _flat(ts):
    """One contiguous 1-D tensor holding ts one after another (a copy)."""
    return torch.cat([t.reshape(-1) for t in ts]) if ts else torch.empty(0)


def _copy_out(flat, outs):
    def post():
        off = 0
        for t in outs:
            n = t.numel()
            t.copy_(flat[off:off + n].view(t.shape))
            off += n
    return post


def _timeout_error(err):
    """hoop's sentence, saying which setting ran out (torch users know it as the group's)."""
    new = type(err)("%s: the process group's timeout (init_process_group(timeout=...), or "
                    "HOOP_TIMEOUT) ran out" % err.message, err.code)
    new.__cause__ = err
    return new


def _finish(work, reqs, post):
    """Waits for an operation's hoop requests and runs its copy-out; returns its error or None."""
    err = None
    for r in reqs:  # every request is waited, even after a failure, to free it
        try:
            r.wait()
        except BaseException as e:
            err = err or e
    if err is None and post is not None:
        try:
            post()
        except BaseException as e:
            err = e
    if isinstance(err, _hoop.TimeoutError):
        err = _timeout_error(err)
    return err


class _Lane:
    """Operations that complete in posting order: the group's collectives, or the sends to (the
    receives from) one peer. One thread at a time drives a lane: it waits for each operation in
    turn and completes its future, which runs the future's callbacks in that thread."""

    def __init__(self, name, state):
        self.name = name
        self.state = state  # the _State whose operations these are
        self.q = queue.SimpleQueue()  # (work, reqs, post); None ends the lane
        self.lock = threading.Lock()
        self.driver = None  # the ident of the thread driving the lane
        self.busy_since = None  # when the driver entered a future's callbacks (None: not in any)
        self.current = None  # the Work whose future the driver is completing
        self.after = None  # after a takeover: the Work the new driver's first must follow
        self.ended = threading.Event()


# The lane this thread drives while it runs a future's callbacks (see _State.help).
_DRIVING = threading.local()


class _Work(_WorkBase):
    """The Work of one operation, completed through a torch Future.

    A Python subclass of Work is only what it seems while its Python object lives: once that is
    gone, C++ holders (DistributedDataParallel) reach the base class, whose wait() never returns.
    The process group therefore keeps every Work referenced until it has completed and been
    consumed (waited, or its future taken), and a bounded number of completed, unconsumed ones.
    """

    def __init__(self, state, result):
        super().__init__()
        self._state = state
        self._fut = _Future()
        self._fut._hoop_state = state
        self._result = result
        self._error = None
        self._profiled = None
        self._any = None  # a receive from any source: its hoop Request, which knows the sender
        # Waits expected from C++ before the group may let go of this Work: torch 2.x's functional
        # collectives wait for a coalesced call's Work once per output tensor. A wait from Python
        # (no timeout: C++ always passes one) or a taking of the future lets go at once.
        self._holds = 1

    def wait(self, timeout=None):
        try:
            self._fut.wait()  # raises the operation's error (and keeps a callback's lane going)
        finally:
            if self._profiled is not None:
                self._profiled.wait()  # the profiler's event has ended too
            self._state.consumed(self, timeout is None)
        return True

    def get_future(self):
        self._state.consumed(self, True)
        return self._fut

    def is_completed(self):
        return self._fut.done()

    def is_success(self):
        return self._fut.done() and self._error is None

    def exception(self):
        return self._error

    def result(self):
        self.wait()
        return self._result

    def _source_rank(self):
        if self._any is None:
            raise RuntimeError("hoop backend: source_rank is only defined for receives from any "
                               "source (recv without src)")
        self._fut.wait()  # the sender is known once the receive completed on the host
        return self._any.source

    source_rank = _source_rank

    def synchronize(self):
        pass


class _Future(torch.futures.Future):
    """A Work's future: wait() from a callback of this group's futures keeps the callback's lane
    going (_State.help) instead of waiting for itself."""

    def wait(self):
        state = getattr(self, "_hoop_state", None)
        if state is not None and not self.done():
            state.help(self)
        return super().wait()


class _State:
    """What the completion threads need; apart from the process group so that dropping the group
    ends them.

    torch runs a future's callbacks in the thread that completes it, so a lane's callbacks run in
    its driver thread, one after the other in posting order (so that callbacks which post
    collectives post them in the same order on every rank). A callback may post another
    operation and wait for it there (DDP's PowerSGD hook does): such a wait, through a Work or a
    future of this backend, drives the lane itself until what it waits for is complete (help).
    A callback that blocks in a way the backend cannot see (a wait inside torch's C++) for longer
    than TAKEOVER_S while its lane has operations queued loses the lane to a new driver thread
    (the watchdog), so the lane never waits for its own callbacks; the callbacks of the two then
    run at the same time, as on gloo's worker threads."""

    # Completed Works nobody has waited for yet, kept in case a C++ holder still waits for them.
    KEEP_COMPLETED = 1024
    TAKEOVER_S = 0.5
    WATCH_S = 0.1

    def __init__(self, comm):
        self.comm = comm
        self.lock = threading.Lock()
        self.lanes = {}
        self.closed = False
        self.watching = threading.Event()  # set: the watchdog ends
        self.watchdog = None
        self.pending = {}  # id -> Work, posted and not completed
        self.done = collections.OrderedDict()  # id -> Work, completed and not consumed
        self.taken = set()  # ids consumed before they completed

    def lane(self, key):
        lane = self.lanes.get(key)
        if lane is None:
            with self.lock:
                if self.closed:
                    raise RuntimeError("hoop backend: the process group was destroyed")
                lane = self.lanes.get(key)
                if lane is None:
                    if self.watchdog is None:
                        self.watchdog = threading.Thread(target=self._watch, daemon=True,
                                                         name="hoop-watch")
                        self.watchdog.start()
                    lane = _Lane("%s" % (key,), self)
                    self._drive_in_new_thread(lane)
                    self.lanes[key] = lane
        return lane

    def _drive_in_new_thread(self, lane):
        threading.Thread(target=self._drive, args=(lane,), daemon=True,
                         name="hoop-%s" % lane.name).start()

    def _drive(self, lane):
        me = threading.get_ident()
        with lane.lock:
            if lane.driver is not None:
                return
            lane.driver = me
        while True:
            item = lane.q.get()
            if item is None:
                lane.ended.set()
                return
            mine = self._complete(lane, item, me)
            del item  # nothing here keeps the Work once it is consumed
            if not mine:
                return  # the watchdog gave the lane to another thread

    def _complete(self, lane, item, me):
        """Completes one operation of the lane in this thread, its driver; False when the lane
        was taken over while the future's callbacks ran."""
        work, reqs, post = item
        del item
        work._error = _finish(work, reqs, post)
        after = lane.after
        if after is not None:  # the first after a takeover: in posting order all the same
            lane.after = None
            while not after._fut.done():  # its set_result marks it before any callback runs
                time.sleep(0.001)
        self.completed(work)
        outer = getattr(_DRIVING, "lane", None)
        _DRIVING.lane = lane
        lane.current = work
        lane.busy_since = time.monotonic()
        try:
            if work._error is None:
                work._fut.set_result(work._result)
            else:
                work._fut.set_exception(work._error)
        finally:
            _DRIVING.lane = outer
            with lane.lock:
                mine = lane.driver == me
                if mine:
                    lane.busy_since = None
                    lane.current = None
        return mine

    def help(self, fut):
        """Called before a wait for fut: in a callback that runs in a lane's driver, the lane's
        next operations are completed here (their callbacks nested in this one) until fut is
        complete; anywhere else, nothing. fut may be another group's: the lane's operations are
        its own group's (lane.state)."""
        lane = getattr(_DRIVING, "lane", None)
        if lane is None:
            return
        me = threading.get_ident()
        with lane.lock:
            if lane.driver != me:
                return
            since, lane.busy_since = lane.busy_since, None  # not stuck: it drives
        try:
            while not fut.done():
                try:
                    item = lane.q.get(timeout=0.002)
                except queue.Empty:
                    continue  # fut is on another lane: its driver completes it
                if item is None:
                    lane.q.put(None)  # the lane ends once this callback has returned
                    return
                mine = lane.state._complete(lane, item, me)
                del item
                if not mine:
                    return
                with lane.lock:
                    lane.busy_since = None
        finally:
            with lane.lock:
                if lane.driver == me:
                    lane.busy_since = since

    def _watch(self):
        while not self.watching.wait(self.WATCH_S):
            now = time.monotonic()
            for lane in list(self.lanes.values()):
                with lane.lock:
                    stuck = lane.busy_since is not None and \
                        now - lane.busy_since > self.TAKEOVER_S and not lane.q.empty()
                    if stuck:  # the old driver stops driving when its callbacks return
                        lane.busy_since, lane.driver = None, None
                        lane.after, lane.current = lane.current, None
                if stuck:
                    self._drive_in_new_thread(lane)

    def submit(self, work, reqs, post, lane):
        with self.lock:
            self.pending[id(work)] = work
        self.lane(lane).q.put((work, reqs, post))

    def completed(self, work):
        with self.lock:
            self.pending.pop(id(work), None)
            if id(work) in self.taken:
                self.taken.discard(id(work))
                return
            self.done[id(work)] = work
            while len(self.done) > self.KEEP_COMPLETED:
                self.done.popitem(last=False)

    def consumed(self, work, every=False):
        """A wait for work, or every one expected (see _Work._holds)."""
        with self.lock:
            work._holds = 0 if every else work._holds - 1
            if work._holds > 0:
                return
            if id(work) in self.pending:
                self.taken.add(id(work))
            else:
                self.done.pop(id(work), None)

    def close(self):
        with self.lock:
            if self.closed:
                return
            self.closed = True
            lanes = list(self.lanes.values())
            unfinished = bool(self.pending)
        if unfinished:
            # An operation that no peer will match would hold its lane, and so this close (at
            # destroy_process_group() or at exit), for the group's timeout, 30 minutes by
            # default: fail what is left, as destroying a hoop communicator does.
            self.comm._abort_pending()
        for lane in lanes:  # the lanes finish what they hold, failed or not, and end
            lane.q.put(None)
        me = getattr(_DRIVING, "lane", None)
        for lane in lanes:
            if lane is not me:  # a callback that destroys its own group: its lane ends later
                lane.ended.wait()
        self.watching.set()
        with self.lock:
            self.done.clear()
        self.comm.destroy()


def _probe_port(host, port):
    fam, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    with socket.socket(fam, kind, proto) as s:
        try:
            s.bind(addr)
        except OSError:
            return None
        return s.getsockname()[1]


def _free_port(host):
    """A port that was free a moment ago, drawn below the kernel's ephemeral range: a port from
    bind(0) lies inside it, where another process's outgoing connection may take it as its
    local port before hoop's store binds it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        lo = 32768
    if lo > 12000:
        rng = random.Random(os.getpid() ^ time.monotonic_ns())
        for _ in range(32):
            port = rng.randrange(10000, lo)
            if _probe_port(host, port) == port:
                return port
    port = _probe_port(host, 0)
    if port is None:
        raise RuntimeError("hoop: no free port on %s for the rendezvous" % host)
    return port


def _init_method(store, rank):
    """hoop's own rendezvous address: rank 0 publishes a tcp:// address in torch's store (torch's
    own store already listens on MASTER_PORT), the others read it there."""
    key = "hoop/init_method"
    if rank == 0:
        host = os.environ.get("HOOP_MASTER_ADDR") or os.environ.get("MASTER_ADDR")
        if not host:
            host = socket.gethostname()
        port = _free_port(host)
        method = "tcp://%s:%d" % ("[%s]" % host if ":" in host else host, port)
        store.set(key, method)
        return method
    return store.get(key).decode()


def _rendezvous(store, rank, size, timeout):
    method = _init_method(store, rank)
    # torch.distributed leaves the order of calls from several threads to its caller (DDP's
    # communication hooks may post from the completion threads).
    comm = _hoop.init(method, rank, size, any_thread=True)
    if "HOOP_TIMEOUT" not in os.environ and timeout is not None:
        secs = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout
        comm.set_timeout(secs)
    return comm


class ProcessGroupHoop(dist.ProcessGroup):
    """A torch.distributed process group over one hoop communicator."""

    def __init__(self, store, rank, size, timeout=None):
        super().__init__(rank, size)
        self._comm = _rendezvous(store, rank, size, timeout)
        self._store = store
        self._timeout = timeout if timeout is not None else datetime.timedelta(minutes=30)
        self._mb_seq = 0
        self._group_name = None
        self._group_desc = None
        self._state = _State(self._comm)
        weakref.finalize(self, self._state.close)

    @property
    def comm(self):
        """The hoop.Comm underneath."""
        return self._comm

    def getBackendName(self):
        return BACKEND_NAME

    # torch >= 2.0 keeps a group's name and description in the group's backends, which a Python
    # ProcessGroup has none of (its _set_group_name does nothing, and group_name raises "name not
    # set"): the group keeps them itself. torch names every group it makes, and DeviceMesh,
    # DTensor and the functional collectives find groups by that name. The camel-case methods are
    # what torch 2.x's C++ side calls (through its Python trampoline); the others are the Python
    # names.
    def setGroupName(self, name):
        self._group_name = name

    def getGroupName(self):
        if self._group_name is None:
            raise RuntimeError("hoop backend: this process group has no name yet (torch names "
                               "the groups that init_process_group and new_group make)")
        return self._group_name

    def setGroupDesc(self, desc):
        self._group_desc = desc

    def getGroupDesc(self):
        return self._group_desc if self._group_desc is not None else ""

    _set_group_name = setGroupName
    _set_group_desc = setGroupDesc
    group_name = property(getGroupName)
    group_desc = property(getGroupDesc)

    def _work(self, name, inputs, reqs, result, post=None, lane="coll", holds=1):
        work = _Work(self._state, result)
        work._holds = max(1, holds)
        if torch.autograd._profiler_enabled():
            # As gloo's "gloo:all_reduce": an event from the call to the completion (on the
            # lane's thread, so the profiler shows it as asynchronous), with the input shapes.
            handle = torch.autograd._record_function_with_args_enter("hoop:" + name, *inputs)
            work._profiled = torch.ops.profiler._call_end_callbacks_on_jit_fut(handle, work._fut)
        self._state.submit(work, reqs, post, lane)
        return work

    # ---- collectives ----

    def allreduce(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        op = _reduce_op(opts)
        if any(t.layout == torch.sparse_coo for t in tensors if isinstance(t, torch.Tensor)):
            if any(not isinstance(t, torch.Tensor) or t.layout != torch.sparse_coo
                   for t in tensors):
                raise ValueError("hoop backend: allreduce mixes sparse and dense tensors")
            for t in tensors:
                self._sparse_allreduce(t, op)
            return self._work("all_reduce", [t.coalesce() for t in tensors], [], list(tensors))
        for t in tensors:  # every tensor before the first is posted
            _check(t, "allreduce", out=True)
        reqs = [self._comm.iallreduce(t, None, op) for t in tensors]
        return self._work("all_reduce", tensors, reqs, list(tensors))

    # Header of a sparse all-reduce: sparse dims, dense dims, dtype, op, nnz, the shape.
    _SPARSE_MAX_DIMS = 16

    def _sparse_allreduce(self, t, op):
        """Sum of sparse COO tensors, in place, as gloo's: every rank's indices and values are
        gathered (padded to the largest count of entries) and added up. Blocking; ordered with
        the collectives posted before it."""
        if t.layout != torch.sparse_coo:
            raise ValueError("hoop backend: allreduce mixes sparse and dense tensors")
        if t.device.type != "cpu":
            _check(t, "sparse allreduce")  # the device sentence
        c = t.coalesce()
        idx, val = c._indices(), c._values()
        _check(val, "sparse allreduce")
        dtypes = sorted(_DTYPES, key=str)
        n, ndim, hmax = self.size(), t.dim(), self._SPARSE_MAX_DIMS
        if ndim > hmax:
            raise ValueError("hoop backend: sparse allreduce takes at most %d dimensions, got %d"
                             % (hmax, ndim))
        ops = ["sum", "prod", "min", "max", "avg"]
        head = torch.full((5 + hmax,), -1, dtype=torch.int64)
        head[0], head[1] = c.sparse_dim(), c.dense_dim()
        head[2], head[3] = dtypes.index(val.dtype), ops.index(op)
        head[4] = c._nnz()
        head[5:5 + ndim] = torch.tensor(t.shape, dtype=torch.int64)
        heads = torch.empty(n * head.numel(), dtype=torch.int64)
        self._comm.allgather(head, heads)
        heads = heads.view(n, -1)
        for r in range(n):  # every rank sees every header: all raise together
            mine = torch.cat([head[:4], head[5:]])
            theirs = torch.cat([heads[r, :4], heads[r, 5:]])
            if int(heads[r, 3]) != ops.index(op):
                raise ValueError("hoop backend: sparse allreduce: rank %d reduces with %s, rank "
                                 "%d with %s" % (self.rank(), op, r, ops[int(heads[r, 3])]))
            if not torch.equal(mine, theirs):
                raise ValueError(
                    "hoop backend: sparse allreduce: rank %d has a %s tensor of shape %s (%d "
                    "sparse dims), rank %d one of %s, shape %s (%d sparse dims)" % (
                        self.rank(), val.dtype, list(t.shape), c.sparse_dim(), r,
                        dtypes[int(heads[r, 2])], [int(x) for x in heads[r, 5:] if x >= 0],
                        int(heads[r, 0])))
        if op != "sum":  # after the comparison: every rank raises
            raise ValueError("hoop backend: a sparse allreduce sums only (got op %s)" % op)
        counts = [int(x) for x in heads[:, 4]]
        m = max(counts)
        idx_pad = torch.zeros((idx.shape[0], m), dtype=torch.int64)
        idx_pad[:, :idx.shape[1]] = idx
        val_pad = torch.zeros((m,) + tuple(val.shape[1:]), dtype=val.dtype)
        val_pad[:val.shape[0]] = val
        idx_all = torch.empty((n,) + tuple(idx_pad.shape), dtype=torch.int64)
        val_all = torch.empty((n,) + tuple(val_pad.shape), dtype=val.dtype)
        self._comm.allgather(idx_pad, idx_all)
        self._comm.allgather(val_pad, val_all)
        total = torch.sparse_coo_tensor(
            torch.cat([idx_all[r][:, :counts[r]] for r in range(n)], dim=1),
            torch.cat([val_all[r][:counts[r]] for r in range(n)]), t.shape).coalesce()
        t.copy_(total)

    def allreduce_coalesced(self, tensors, opts=None):
        op = _reduce_op(opts)
        for t in tensors:
            _check(t, "allreduce_coalesced", out=True)
            if t.dtype != tensors[0].dtype:
                raise ValueError("hoop backend: allreduce_coalesced tensors differ in dtype")
        flat = _flat(tensors)
        req = self._comm.iallreduce(flat, None, op)
        return self._work("all_reduce", tensors, [req], list(tensors),
                          _copy_out(flat, tensors), holds=len(tensors))

    def broadcast(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        root = opts.rootRank if opts is not None else 0
        for t in tensors:
            _check(t, "broadcast", out=True)
        reqs = [self._comm.ibroadcast(t, root) for t in tensors]
        return self._work("broadcast", tensors, reqs, list(tensors))

    def reduce(self, tensors, opts=None):
        t = _one(tensors, "reduce", out=True)
        root = opts.rootRank if opts is not None else 0
        req = self._comm.ireduce(t, None, _reduce_op(opts), root)
        return self._work("reduce", [t], [req], [t])

    def allgather(self, output_tensors, input_tensors, opts=None):
        inp = _one(input_tensors, "allgather")
        if len(output_tensors) != 1:
            raise ValueError("hoop backend: allgather takes one output list per process")
        outs = output_tensors[0]
        _same_shapes(outs, inp, self.size(), "allgather", out=True)
        flat = torch.empty(self.size() * inp.numel(), dtype=inp.dtype)
        req = self._comm.iallgather(inp, flat)
        return self._work("all_gather", [inp], [req], list(outs), _copy_out(flat, outs))

    def allgather_coalesced(self, output_lists, input_tensors, opts=None):
        """output_lists[r][i] receives rank r's input_tensors[i]: one allgather of them all."""
        n = self.size()
        if len(output_lists) != n:
            raise ValueError("hoop backend: allgather_coalesced needs %d output lists (one per "
                             "rank), got %d" % (n, len(output_lists)))
        for t in input_tensors:
            _check(t, "allgather_coalesced")
            if t.dtype != input_tensors[0].dtype:
                raise ValueError("hoop backend: allgather_coalesced tensors differ in dtype")
        for outs in output_lists:
            if len(outs) != len(input_tensors):
                raise ValueError("hoop backend: allgather_coalesced output lists need %d tensors "
                                 "(one per input), got %d" % (len(input_tensors), len(outs)))
            for o, t in zip(outs, input_tensors):
                _check(o, "allgather_coalesced", out=True)
                if o.dtype != t.dtype or o.numel() != t.numel():
                    raise ValueError("hoop backend: allgather_coalesced output %s x %d does not "
                                     "match input %s x %d" % (o.dtype, o.numel(), t.dtype,
                                                              t.numel()))
        flat = _flat(input_tensors)
        if input_tensors:
            flat = flat.to(input_tensors[0].dtype)
        out = torch.empty(n * flat.numel(), dtype=flat.dtype)
        req = self._comm.iallgather(flat, out)
        every = [t for outs in output_lists for t in outs]
        return self._work("all_gather", input_tensors, [req], list(output_lists),
                          _copy_out(out, every))

    def _allgather_base(self, output, input, opts=None):
        _check(input, "all_gather_into_tensor")
        _check(output, "all_gather_into_tensor", out=True)
        req = self._comm.iallgather(input, output)
        return self._work("all_gather_into_tensor", [input], [req], [output])

    def gather(self, output_tensors, input_tensors, opts=None):
        inp = _one(input_tensors, "gather")
        root = opts.rootRank if opts is not None else 0
        if self.rank() != root:
            return self._work("gather", [inp], [self._comm.igather(inp, None, root)], [])
        if len(output_tensors) != 1:
            raise ValueError("hoop backend: gather takes one output list at the root")
        outs = output_tensors[0]
        _same_shapes(outs, inp, self.size(), "gather", out=True)
        flat = torch.empty(self.size() * inp.numel(), dtype=inp.dtype)
        req = self._comm.igather(inp, flat, root)
        return self._work("gather", [inp], [req], list(outs), _copy_out(flat, outs))

    def scatter(self, output_tensors, input_tensors, opts=None):
        out = _one(output_tensors, "scatter", out=True)
        root = opts.rootRank if opts is not None else 0
        if self.rank() != root:
            return self._work("scatter", [out], [self._comm.iscatter(None, out, root)], [out])
        if len(input_tensors) != 1:
            raise ValueError("hoop backend: scatter takes one input list at the root")
        ins = input_tensors[0]
        _same_shapes(ins, out, self.size(), "scatter")
        req = self._comm.iscatter(_flat(ins), out, root)
        return self._work("scatter", [out], [req], [out])

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        out = _one(output_tensors, "reduce_scatter", out=True)
        if len(input_tensors) != 1:
            raise ValueError("hoop backend: reduce_scatter takes one input list per process")
        ins = input_tensors[0]
        _same_shapes(ins, out, self.size(), "reduce_scatter")
        req = self._comm.ireduce_scatter(_flat(ins), out, _reduce_op(opts))
        return self._work("reduce_scatter", [out], [req], [out])

    def _reduce_scatter_base(self, output, input, opts=None):
        _check(input, "reduce_scatter_tensor")
        _check(output, "reduce_scatter_tensor", out=True)
        req = self._comm.ireduce_scatter(input, output, _reduce_op(opts))
        return self._work("reduce_scatter_tensor", [input], [req], [output])

    def _pairs(self, outputs, inputs, what, factor, op=None):
        """Checks the (output, input) pairs of a coalesced call: output i holds factor times the
        elements of input i (factor size, or 1/size)."""
        outputs, inputs = list(outputs), list(inputs)
        if len(outputs) != len(inputs):
            raise ValueError("hoop backend: %s got %d outputs for %d inputs"
                             % (what, len(outputs), len(inputs)))
        n = self.size()
        for o, i in zip(outputs, inputs):
            _check(i, what)
            _check(o, what, out=True)
            want = i.numel() * n if factor == "size" else i.numel() // n
            if o.dtype != i.dtype or o.numel() != want or \
                    (factor != "size" and i.numel() % n):
                raise ValueError("hoop backend: %s: an output of %s x %d for an input of %s x %d "
                                 "(%s)" % (what, o.dtype, o.numel(), i.dtype, i.numel(),
                                           "the output holds every rank's input"
                                           if factor == "size" else
                                           "the input holds one output per rank"))
        return outputs, inputs

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        """outputs[i] receives every rank's inputs[i], in rank order (torch >= 2.0's functional
        all_gather_tensor calls this from C++)."""
        outputs, inputs = self._pairs(outputs, inputs, "allgather_into_tensor_coalesced", "size")
        reqs = [self._comm.iallgather(i, o) for o, i in zip(outputs, inputs)]
        return self._work("all_gather_into_tensor_coalesced", inputs, reqs, outputs,
                          holds=len(outputs))

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        """outputs[i] receives block `rank` of the reduction of inputs[i] (torch >= 2.0's
        functional reduce_scatter_tensor calls this from C++)."""
        op = _reduce_op(opts)
        outputs, inputs = self._pairs(outputs, inputs, "reduce_scatter_tensor_coalesced", "part")
        reqs = [self._comm.ireduce_scatter(i, o, op) for o, i in zip(outputs, inputs)]
        return self._work("reduce_scatter_tensor_coalesced", inputs, reqs, outputs,
                          holds=len(outputs))

    def _alltoall_p2p(self, outs, ins):
        """All-to-all of blocks of different sizes, as one send and one receive per peer."""
        me = self.rank()
        reqs = []
        for p in range(self.size()):
            if p != me:
                reqs.append(self._comm.irecv(outs[p], p))
        for p in range(self.size()):
            if p != me:
                reqs.append(self._comm.isend(ins[p], p))
        outs[me].copy_(ins[me])
        return reqs

    def alltoall(self, output_tensor_list, input_tensor_list, opts=None):
        n = self.size()
        if len(output_tensor_list) != n or len(input_tensor_list) != n:
            raise ValueError("hoop backend: alltoall needs %d input and output tensors" % n)
        for i, t in enumerate(list(output_tensor_list) + list(input_tensor_list)):
            _check(t, "alltoall", out=i < n)
            if t.dtype != input_tensor_list[0].dtype:
                raise ValueError("hoop backend: alltoall tensors differ in dtype")
        sizes = {t.numel() for t in output_tensor_list} | {t.numel() for t in input_tensor_list}
        if len(sizes) == 1:
            flat_out = torch.empty(n * sizes.pop(), dtype=input_tensor_list[0].dtype)
            req = self._comm.ialltoall(_flat(input_tensor_list), flat_out)
            return self._work("all_to_all", input_tensor_list, [req], list(output_tensor_list),
                              _copy_out(flat_out, output_tensor_list))
        reqs = self._alltoall_p2p(list(output_tensor_list), list(input_tensor_list))
        return self._work("all_to_all", input_tensor_list, reqs, list(output_tensor_list))

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        _check(output, "all_to_all_single", out=True)
        _check(input, "all_to_all_single")
        n = self.size()
        if not output_split_sizes and not input_split_sizes:
            req = self._comm.ialltoall(input, output)
            return self._work("all_to_all", [input], [req], [output])
        out_c = output if output.is_contiguous() else output.contiguous()
        in_c = input.contiguous()

        def blocks(t, splits, what):
            rows = t.shape[0] if t.dim() else 1
            splits = list(splits) or [rows // n] * n
            if len(splits) != n or sum(splits) != rows:
                raise ValueError("hoop backend: all_to_all_single %s split sizes %s do not cut "
                                 "%d rows into %d blocks" % (what, splits, rows, n))
            flat = t.reshape(rows, -1)
            out, off = [], 0
            for s in splits:
                out.append(flat[off:off + s])
                off += s
            return out

        outs = blocks(out_c, output_split_sizes, "output")
        ins = blocks(in_c, input_split_sizes, "input")
        reqs = self._alltoall_p2p(outs, ins)
        post = None if out_c is output else (lambda: output.copy_(out_c))
        return self._work("all_to_all", [input], reqs, [output], post)

    def barrier(self, opts=None):
        return self._work("barrier", [], [self._comm.ibarrier()], [])

    # ---- point to point ----

    def send(self, tensors, dstRank, tag=0):
        t = _one(tensors, "send")
        req = self._comm.isend(t, dstRank)
        return self._work("send", [t], [req], [t], lane=("send", dstRank))

    def recv(self, tensors, srcRank, tag=0):
        t = _one(tensors, "recv", out=True)
        req = self._comm.irecv(t, srcRank)
        return self._work("recv", [t], [req], [t], lane=("recv", srcRank))

    def recv_anysource(self, tensors, tag=0):
        t = _one(tensors, "recv", out=True)
        req = self._comm.irecv_any(t)
        work = self._work("recvAnySource", [t], [req], [t], lane=("recv", "any"))
        work._any = req
        return work

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        """A barrier that names the ranks that did not arrive: rank 0 waits for every other rank
        to check in (through the group's store, so the communicator stays usable whatever
        happens; store.add(key, 0) reads a count without blocking), up to timeout (seconds or a
        timedelta; the group's timeout by default), then tells each rank the outcome (and when all
        came, returns once each has read it: its process may hold the store). Raises
        MonitoredBarrierError on every rank that took part when one is missing: rank 0 names the
        first one missing (all of them with wait_all_ranks=True), the others say that rank 0
        reported a failure or never answered. The phrases are gloo's ("Rank 1 failed to pass
        monitoredBarrier"), so that code matching them works with either backend. Calls are
        counted per group: after a failure the ranks that were missing are a call behind."""
        if timeout is None:
            timeout = self._timeout
        secs = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else \
            float(timeout)
        ms = int(round(secs * 1000))
        self._mb_seq += 1
        key = "hoop/monitored_barrier/%d/" % self._mb_seq
        me, n, store = self.rank(), self.size(), self._store
        deadline = time.monotonic() + secs
        if me != 0:
            store.add(key + str(me), 1)
            while store.add(key + "answered", 0) == 0:
                if time.monotonic() >= deadline:
                    raise MonitoredBarrierError(
                        "hoop backend: Rank %d successfully reached monitoredBarrier, but "
                        "received errors while waiting for send/recv from rank 0: no answer from "
                        "rank 0 within %d ms (monitored_barrier #%d of this group)"
                        % (me, ms, self._mb_seq), [0])
                time.sleep(0.005)
            verdict = store.get(key + "result").decode()
            store.add(key + "read", 1)  # rank 0, whose process may hold the store, may go
            if verdict != "ok":
                raise MonitoredBarrierError(
                    "hoop backend: Rank %d successfully reached monitoredBarrier, but received "
                    "errors while waiting for send/recv from rank 0: rank 0 reports: %s"
                    % (me, verdict), [int(r) for r in re.findall(
                        r"\d+", verdict[verdict.rfind("missing: "):])])
            return
        missing = list(range(1, n))
        while True:  # rank order, as gloo: without wait_all_ranks the first missing is named
            missing = [r for r in missing if store.add(key + str(r), 0) == 0]
            if not missing or time.monotonic() >= deadline:
                break
            time.sleep(0.005)
        if not missing:
            store.set(key + "result", "ok")
            store.add(key + "answered", 1)
            # Rank 0's process often holds the store (torch's TCPStore under env://): leaving
            # before every rank has read the outcome would fail their barrier.
            until = max(deadline, time.monotonic() + 5.0)
            while store.add(key + "read", 0) < n - 1 and time.monotonic() < until:
                time.sleep(0.005)
            return
        named = missing if wait_all_ranks else missing[:1]
        if secs <= 0:
            msg = "Rank 0 timed out in monitoredBarrier after 0 ms"
        elif len(named) == 1:
            msg = "Rank %d failed to pass monitoredBarrier in %d ms" % (named[0], ms)
        else:
            msg = "Ranks %s failed to pass monitoredBarrier in %d ms" % (
                ", ".join(str(r) for r in named), ms)
        msg += " (monitored_barrier #%d of this group; missing: %s)" % (
            self._mb_seq, ", ".join(str(r) for r in missing))
        store.set(key + "result", msg)
        store.add(key + "answered", 1)
        raise MonitoredBarrierError("hoop backend: " + msg, missing)


class MonitoredBarrierError(RuntimeError):
    """A monitored_barrier that some rank did not reach; .missing lists the ranks known to
    be missing (rank 0 as seen from the other ranks when it did not answer)."""

    def __init__(self, message, missing):
        super().__init__(message)
        self.missing = list(missing)


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """hoop's torch.distributed.monitored_barrier (torch's own refuses every backend but gloo):
    see ProcessGroupHoop.monitored_barrier. A no-op on a rank outside the group, as torch's."""
    c10d = dist.distributed_c10d
    if group is not None and c10d._rank_not_in_group(group):
        return None
    pg = c10d._get_default_group() if group is None else group
    cxx = _cxx_group(pg)
    if cxx is not None:
        return cxx.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)
    if not isinstance(pg, ProcessGroupHoop):
        raise ValueError("hoop.torch.monitored_barrier: the group's backend is %s, not hoop "
                         "(use torch.distributed.monitored_barrier for gloo)"
                         % (pg.getBackendName() if hasattr(pg, "getBackendName") else "?"))
    return pg.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)


def _cxx_group(pg):
    """The _CxxGroup of a group the C++ backend serves, else None."""
    if not _CXX_GROUPS or isinstance(pg, ProcessGroupHoop):
        return None
    try:
        if dist.get_backend(pg) != BACKEND_NAME:
            return None
        return _CXX_GROUPS.get(pg.group_name)
    except Exception:  # noqa: BLE001 - not a group torch knows
        return None


def _create(store, rank, size, timeout):
    return ProcessGroupHoop(store, rank, size, timeout)


# ---- the C++ backend (torch >= 2.0) ----------------------------------------------------------
#
# python/hoop/csrc/backend.cpp, built into hoop/_c10d<EXT_SUFFIX> (installed) or into the build
# directory beside libhoop.so (build/python/hoop/). It is used where it loads, unless
# HOOP_TORCH_BACKEND=python; HOOP_TORCH_BACKEND=cpp makes a missing or broken extension an error
# rather than a quiet fallback to the Python backend.

_CXX_GROUPS = {}  # group name -> _CxxGroup, for monitored_barrier


class _CxxGroup:
    """What hoop's monitored_barrier needs of a group served by the C++ backend."""

    def __init__(self, store, rank, size, timeout):
        self._store = store
        self._rank = rank
        self._size = size
        self._timeout = timeout
        self._mb_seq = 0

    def rank(self):
        return self._rank

    def size(self):
        return self._size

    monitored_barrier = ProcessGroupHoop.monitored_barrier


def _cxx_monitored_barrier(name, timeout, wait_all_ranks):
    """ProcessGroup.monitored_barrier() on a group of the C++ backend (its monitoredBarrier
    calls this); timeout < 0: the group's."""
    group = _CXX_GROUPS.get(name)
    if group is None:
        raise RuntimeError("hoop backend: monitored_barrier on a group the C++ backend does not "
                           "know (%s)" % name)
    return group.monitored_barrier(None if timeout < 0 else timeout,
                                   wait_all_ranks=wait_all_ranks)


def _load_cxx():
    """The extension module, or None where the Python backend serves; raises where
    HOOP_TORCH_BACKEND=cpp asks for the C++ one and it cannot be had."""
    choice = os.environ.get("HOOP_TORCH_BACKEND", "").strip().lower()
    if choice not in ("", "auto", "python", "cpp"):
        raise ValueError("HOOP_TORCH_BACKEND=%s: expected python, cpp or auto" % choice)
    if choice == "python":
        return None
    why = None
    if int(torch.__version__.split(".")[0]) < 2:
        why = "torch %s has no c10d::Backend (torch >= 2.0 does)" % torch.__version__
    else:
        import importlib.util
        import sysconfig
        name = "_c10d" + sysconfig.get_config_var("EXT_SUFFIX")
        places = [os.path.join(os.path.dirname(os.path.abspath(__file__)), name)]
        lib = os.environ.get("HOOP_LIBRARY")
        if lib:
            places.append(os.path.join(os.path.dirname(os.path.abspath(lib)), "python", "hoop",
                                       name))
        path = next((p for p in places if os.path.exists(p)), None)
        if path is None:
            why = "no %s in %s" % (name, " or ".join(places))
        else:
            try:
                spec = importlib.util.spec_from_file_location("hoop._c10d", path)
                mod = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
                return mod
            except Exception as e:  # noqa: BLE001 - an extension for another torch, say
                why = "%s does not load: %s: %s" % (path, type(e).__name__, e)
    if choice == "cpp":
        raise ImportError("hoop: HOOP_TORCH_BACKEND=cpp, but the C++ backend cannot be "
                          "used: " + why)
    return None


def _create_cxx(opts, backend_options=None):
    """The C++ backend's creator (register_backend's extended API): the same rendezvous as the
    Python backend, then hoop_init in C++ with the GIL released."""
    rank, size, timeout = opts.group_rank, opts.group_size, opts.timeout
    method = _init_method(opts.store, rank)
    secs = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout
    if "HOOP_TIMEOUT" in os.environ:
        try:
            secs = float(os.environ["HOOP_TIMEOUT"])
        except ValueError:
            secs = -1.0  # hoop_init reports it
    backend = _CXX.create(method, rank, size, -1.0 if secs is None else float(secs))
    _CXX_GROUPS[opts.group_id] = _CxxGroup(opts.store, rank, size, timeout or
                                           datetime.timedelta(minutes=30))
    return backend


_CXX = None


def _register():
    global _CXX
    if BACKEND_NAME.upper() in getattr(dist.Backend, "_plugins", {}) or \
            hasattr(dist.Backend, BACKEND_NAME.upper()):
        return
    _CXX = _load_cxx()
    if _CXX is not None:
        # It serves CPU tensors only, but registers for "cuda" too, so that a CUDA tensor reaches
        # its own refusal, which names HOOP_TORCH_BACKEND=python (the Python backend serves CUDA
        # tensors), rather than torch's "No backend type associated with device type cuda".
        dist.Backend.register_backend(BACKEND_NAME, _create_cxx, extended_api=True,
                                      devices=["cpu", "cuda"])
        return
    # torch >= 2.0 asks which devices a backend serves (and warns at every registration that
    # does not say); torch 1.13 has no such argument.
    try:
        takes_devices = "devices" in inspect.signature(dist.Backend.register_backend).parameters
    except (TypeError, ValueError):
        takes_devices = False
    if takes_devices:
        dist.Backend.register_backend(BACKEND_NAME, _create, devices=["cpu", "cuda"])
    else:
        dist.Backend.register_backend(BACKEND_NAME, _create)


def _route_monitored_barrier():
    """torch.distributed.monitored_barrier refuses every backend but gloo before it looks at the
    group: a hoop group's call goes to hoop's own (monitored_barrier above), any other to torch's.
    Code that took the function before hoop.torch was imported keeps torch's."""
    original = dist.distributed_c10d.monitored_barrier
    if getattr(original, "_hoop_route", False):
        return

    @functools.wraps(original)
    def routed(group=None, timeout=None, wait_all_ranks=False):
        c10d = dist.distributed_c10d
        if group is None or not c10d._rank_not_in_group(group):
            pg = group if group is not None else c10d._get_default_group()
            if isinstance(pg, ProcessGroupHoop) or _cxx_group(pg) is not None:
                return monitored_barrier(pg, timeout, wait_all_ranks)
        return original(group=group, timeout=timeout, wait_all_ranks=wait_all_ranks)

    routed._hoop_route = True
    dist.distributed_c10d.monitored_barrier = routed
    dist.monitored_barrier = routed


_register()
_route_monitored_barrier()


# ---- CUDA tensors --------------------------------------------------------------------------
#
# Kept apart from the CPU path above, which it leaves as it is: each collective of
# ProcessGroupHoop is wrapped (_route, at the end) so that a call whose tensors are CUDA tensors
# comes here, as ProcessGroupNCCL would serve it. The call is ordered on torch's current stream
# of the tensors' device (hoop_comm_set_stream around the posting: it starts after the work
# queued there, and work queued after it sees its result); the host does not wait. An event
# recorded on that stream after the call (and after any copies into the caller's tensors, queued
# on the same stream) is what Work.wait() makes the then-current stream wait for, so that a
# stream switched to in between is ordered too. The Work's future completes, on a completion
# thread, once that event has passed: its tensors are then final for any stream. The Work keeps
# every tensor the call uses alive until then (peers may read them through CUDA IPC).
#
# A tensor travels to the binding as its address and length (_DevicePtr), whatever its dtype
# (the call names the dtype); libhoop itself tells device memory by the address.


class _DevicePtr:
    """A contiguous CUDA tensor's memory in the shape the binding takes: bytes at an address."""

    def __init__(self, t):
        self.tensor = t
        self.__array_interface__ = {"data": (t.data_ptr(), False), "typestr": "|u1",
                                    "shape": (t.numel() * t.element_size(),), "version": 3}


def _is_cuda(x):
    if isinstance(x, torch.Tensor):
        return x.is_cuda
    if isinstance(x, (list, tuple)):
        return any(_is_cuda(y) for y in x)
    return False


def _dtype_name(dt):
    return str(dt)[len("torch."):]


def _set_stream(comm, stream):
    """stream: a torch stream's cuda_stream (0 for the default stream, which Comm.set_stream
    passes as the legacy default stream, never as no stream), or None for none."""
    comm.set_stream(stream)


class _CudaCall:
    """One operation on CUDA tensors: its device and stream, the tensors it must keep alive,
    the copies into the caller's tensors queued after it."""

    def __init__(self, pg, what, tensors, out=()):
        """tensors: those the call uses; out: those of them it writes into. All are checked
        here, before anything is posted."""
        self.pg, self.what = pg, what
        self.device = None
        for t in tensors:
            self.check(t)
        for t in out:
            self.check(t, out=True)
        self._stream = None
        self.keep = list(tensors)
        self.after = []

    @property
    def stream(self):
        """torch's current stream of the device, taken at the first posting: after the checks
        of every tensor, those made once the call is built too."""
        if self._stream is None:
            self._stream = torch.cuda.current_stream(self.device)
        return self._stream

    @stream.setter
    def stream(self, s):
        self._stream = s

    def check(self, t, out=False):
        w = self.what
        if not isinstance(t, torch.Tensor):
            raise TypeError("hoop backend: %s expects tensors, got %s" % (w, type(t).__name__))
        if not t.is_cuda:
            raise ValueError("hoop backend: %s mixes CUDA and %s tensors; one call's tensors "
                             "are all on one device" % (w, t.device.type))
        if self.device is None:
            self.device = t.device
        elif t.device != self.device:
            raise ValueError("hoop backend: %s got tensors on %s and %s; one call's tensors are "
                             "all on one device" % (w, self.device, t.device))
        if t.layout != torch.strided:
            raise ValueError("hoop backend: %s got a %s tensor; only dense tensors are "
                             "supported" % (w, t.layout))
        if t.dtype not in _DTYPES:
            raise TypeError("hoop backend: %s got dtype %s (supported: float32, float64, "
                            "float16, bfloat16, int8, uint8, int32, int64)" % (w, t.dtype))
        if out and _overlaps(t):
            raise ValueError(_SHARED % (w, list(t.shape), list(t.stride())))
        return t

    def buf(self, t, out=False):
        """t for the binding; a contiguous copy, on the stream, when t is not contiguous (copied
        back into t after the call when out)."""
        c = t.detach()
        if not c.is_contiguous():
            c = c.contiguous()
            if out:
                self.after.append(lambda: t.detach().copy_(c))
        self.keep.append(c)
        return _DevicePtr(c)

    def empty(self, n, dtype):
        t = torch.empty(n, dtype=dtype, device=self.device)
        self.keep.append(t)
        return t

    def flat(self, ts):
        """One contiguous tensor holding ts one after another (a copy, on the stream)."""
        dt = ts[0].dtype if ts else torch.float32
        f = torch.cat([t.detach().reshape(-1) for t in ts]) if ts else self.empty(0, dt)
        self.keep.append(f)
        return f

    def copy_out(self, flat, outs):
        def post():
            off = 0
            for t in outs:
                n = t.numel()
                t.detach().copy_(flat[off:off + n].view(t.shape))
                off += n
        self.after.append(post)

    def post(self, fn, *args, **kwargs):
        """fn(*args) posted on the comm, ordered on the stream. Calls from several threads each
        set the stream, post and unset it under one lock (the setting is the communicator's)."""
        comm = self.pg._comm
        with _CUDA_LOCK:
            _set_stream(comm, self.stream.cuda_stream)
            try:
                return fn(*args, **kwargs)
            finally:
                _set_stream(comm, None)

    def post_group(self, posts):
        """Each (fn, args) of posts posted ordered on the stream in one group (docs/cuda.md,
        "Groups"): none waits for another, so receives posted before the sends they depend on
        (on every rank) do not wait for themselves. Under the lock throughout, so that no other
        thread's call joins the group (its Work's event would come before its stream's wait)."""
        comm = self.pg._comm
        with _CUDA_LOCK:
            _set_stream(comm, self.stream.cuda_stream)
            comm.group_start()
            try:
                return [fn(*args) for fn, args in posts]
            finally:
                comm.group_end()
                _set_stream(comm, None)

    def work(self, reqs, result, lane="coll"):
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            for f in self.after:
                f()
        ev = torch.cuda.Event()
        ev.record(self.stream)
        work = _CudaWork(self.pg._state, result, ev, self.device, self.keep)
        self.pg._state.submit(work, reqs, ev.synchronize, lane)
        return work


_CUDA_LOCK = threading.Lock()


class _CudaWork(_Work):
    """The Work of an operation on CUDA tensors: wait() orders the current stream after it and
    does not block the host, as ProcessGroupNCCL's (a failure raises once it is known)."""

    def __init__(self, state, result, event, device, keep):
        super().__init__(state, result)
        self._event, self._device, self._keep = event, device, keep

    def wait(self, timeout=None):
        torch.cuda.current_stream(self._device).wait_event(self._event)
        self._state.consumed(self, timeout is None)
        if self._fut.done() and self._error is not None:
            raise self._error
        return True

    def synchronize(self):
        torch.cuda.current_stream(self._device).wait_event(self._event)


def _cuda_tensors(x):
    return [x] if isinstance(x, torch.Tensor) else list(x)


def _cuda_allreduce(self, tensors, opts=None):
    tensors = _cuda_tensors(tensors)
    op = _reduce_op(opts)
    call = _CudaCall(self, "allreduce", tensors, tensors)
    reqs = [call.post(self._comm.iallreduce, call.buf(t, True), None, op, _dtype_name(t.dtype))
            for t in tensors]
    return call.work(reqs, tensors)


def _cuda_allreduce_coalesced(self, tensors, opts=None):
    tensors = list(tensors)
    call = _CudaCall(self, "allreduce_coalesced", tensors, tensors)
    if any(t.dtype != tensors[0].dtype for t in tensors):
        raise ValueError("hoop backend: allreduce_coalesced tensors differ in dtype")
    flat = call.flat(tensors)
    req = call.post(self._comm.iallreduce, _DevicePtr(flat), None, _reduce_op(opts),
                    _dtype_name(flat.dtype))
    call.copy_out(flat, tensors)
    return call.work([req], tensors)


def _cuda_broadcast(self, tensors, opts=None):
    tensors = _cuda_tensors(tensors)
    root = opts.rootRank if opts is not None else 0
    call = _CudaCall(self, "broadcast", tensors, tensors)
    reqs = [call.post(self._comm.ibroadcast, call.buf(t, True), root, _dtype_name(t.dtype))
            for t in tensors]
    return call.work(reqs, tensors)


def _cuda_one(tensors, what):
    tensors = _cuda_tensors(tensors)
    if len(tensors) != 1:
        raise ValueError("hoop backend: %s takes one tensor per process, got %d"
                         % (what, len(tensors)))
    return tensors[0]


def _cuda_same_shapes(call, ts, ref, n, out=False):
    if len(ts) != n:
        raise ValueError("hoop backend: %s needs %d tensors (one per rank), got %d"
                         % (call.what, n, len(ts)))
    for t in ts:
        call.check(t, out)
        if t.dtype != ref.dtype or t.numel() != ref.numel():
            raise ValueError("hoop backend: %s tensors differ in dtype or size (%s x %d against "
                             "%s x %d)" % (call.what, t.dtype, t.numel(), ref.dtype, ref.numel()))


def _cuda_reduce(self, tensors, opts=None):
    t = _cuda_one(tensors, "reduce")
    root = opts.rootRank if opts is not None else 0
    call = _CudaCall(self, "reduce", [t], [t])
    req = call.post(self._comm.ireduce, call.buf(t, True), None, _reduce_op(opts), root,
                    _dtype_name(t.dtype))
    return call.work([req], [t])


def _cuda_allgather(self, output_tensors, input_tensors, opts=None):
    inp = _cuda_one(input_tensors, "allgather")
    if len(output_tensors) != 1:
        raise ValueError("hoop backend: allgather takes one output list per process")
    outs = list(output_tensors[0])
    call = _CudaCall(self, "allgather", [inp])
    _cuda_same_shapes(call, outs, inp, self.size(), out=True)
    flat = call.empty(self.size() * inp.numel(), inp.dtype)
    req = call.post(self._comm.iallgather, call.buf(inp), _DevicePtr(flat),
                    _dtype_name(inp.dtype))
    call.copy_out(flat, outs)
    return call.work([req], outs)


def _cuda_allgather_base(self, output, input, opts=None):
    call = _CudaCall(self, "all_gather_into_tensor", [output, input], [output])
    req = call.post(self._comm.iallgather, call.buf(input), call.buf(output, True),
                    _dtype_name(input.dtype))
    return call.work([req], [output])


def _cuda_gather(self, output_tensors, input_tensors, opts=None):
    inp = _cuda_one(input_tensors, "gather")
    root = opts.rootRank if opts is not None else 0
    call = _CudaCall(self, "gather", [inp])
    if self.rank() != root:
        return call.work([call.post(self._comm.igather, call.buf(inp), None, root,
                                    _dtype_name(inp.dtype))], [])
    if len(output_tensors) != 1:
        raise ValueError("hoop backend: gather takes one output list at the root")
    outs = list(output_tensors[0])
    _cuda_same_shapes(call, outs, inp, self.size(), out=True)
    flat = call.empty(self.size() * inp.numel(), inp.dtype)
    req = call.post(self._comm.igather, call.buf(inp), _DevicePtr(flat), root,
                    _dtype_name(inp.dtype))
    call.copy_out(flat, outs)
    return call.work([req], outs)


def _cuda_scatter(self, output_tensors, input_tensors, opts=None):
    out = _cuda_one(output_tensors, "scatter")
    root = opts.rootRank if opts is not None else 0
    call = _CudaCall(self, "scatter", [out], [out])
    if self.rank() != root:
        return call.work([call.post(self._comm.iscatter, None, call.buf(out, True), root,
                                    _dtype_name(out.dtype))], [out])
    if len(input_tensors) != 1:
        raise ValueError("hoop backend: scatter takes one input list at the root")
    ins = list(input_tensors[0])
    _cuda_same_shapes(call, ins, out, self.size())
    req = call.post(self._comm.iscatter, _DevicePtr(call.flat(ins)), call.buf(out, True), root,
                    _dtype_name(out.dtype))
    return call.work([req], [out])


def _cuda_reduce_scatter(self, output_tensors, input_tensors, opts=None):
    out = _cuda_one(output_tensors, "reduce_scatter")
    if len(input_tensors) != 1:
        raise ValueError("hoop backend: reduce_scatter takes one input list per process")
    ins = list(input_tensors[0])
    call = _CudaCall(self, "reduce_scatter", [out], [out])
    _cuda_same_shapes(call, ins, out, self.size())
    req = call.post(self._comm.ireduce_scatter, _DevicePtr(call.flat(ins)), call.buf(out, True),
                    _reduce_op(opts), _dtype_name(out.dtype))
    return call.work([req], [out])


def _cuda_reduce_scatter_base(self, output, input, opts=None):
    call = _CudaCall(self, "reduce_scatter_tensor", [output, input], [output])
    req = call.post(self._comm.ireduce_scatter, call.buf(input), call.buf(output, True),
                    _reduce_op(opts), _dtype_name(input.dtype))
    return call.work([req], [output])


def _cuda_alltoall_p2p(self, call, outs, ins):
    """Blocks of different sizes: one send and one receive per peer, posted on the stream in one
    group (every rank posts its receives first)."""
    me, posts = self.rank(), []
    for p in range(self.size()):
        if p != me:
            posts.append((self._comm.irecv, (call.buf(outs[p], True), p,
                                             _dtype_name(outs[p].dtype))))
    for p in range(self.size()):
        if p != me:
            posts.append((self._comm.isend, (call.buf(ins[p]), p, _dtype_name(ins[p].dtype))))
    reqs = call.post_group(posts)
    outs[me].detach().copy_(ins[me])  # on the current stream, which is the call's
    return reqs


def _cuda_alltoall(self, output_tensor_list, input_tensor_list, opts=None):
    outs, ins, n = list(output_tensor_list), list(input_tensor_list), self.size()
    if len(outs) != n or len(ins) != n:
        raise ValueError("hoop backend: alltoall needs %d input and output tensors" % n)
    call = _CudaCall(self, "alltoall", outs + ins, outs)
    if any(t.dtype != ins[0].dtype for t in outs + ins):
        raise ValueError("hoop backend: alltoall tensors differ in dtype")
    sizes = {t.numel() for t in outs + ins}
    if len(sizes) == 1:
        flat_out = call.empty(n * sizes.pop(), ins[0].dtype)
        req = call.post(self._comm.ialltoall, _DevicePtr(call.flat(ins)), _DevicePtr(flat_out),
                        _dtype_name(ins[0].dtype))
        call.copy_out(flat_out, outs)
        return call.work([req], outs)
    return call.work(_cuda_alltoall_p2p(self, call, outs, ins), outs)


def _cuda_alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
    call = _CudaCall(self, "all_to_all_single", [output, input], [output])
    n = self.size()
    if not output_split_sizes and not input_split_sizes:
        req = call.post(self._comm.ialltoall, call.buf(input), call.buf(output, True),
                        _dtype_name(input.dtype))
        return call.work([req], [output])
    out_c = output.detach() if output.is_contiguous() else output.detach().contiguous()
    in_c = input.detach().contiguous()
    call.keep += [out_c, in_c]

    def blocks(t, splits, what):
        rows = t.shape[0] if t.dim() else 1
        splits = list(splits) or [rows // n] * n
        if len(splits) != n or sum(splits) != rows:
            raise ValueError("hoop backend: all_to_all_single %s split sizes %s do not cut "
                             "%d rows into %d blocks" % (what, splits, rows, n))
        flat, out, off = t.reshape(rows, -1), [], 0
        for s in splits:
            out.append(flat[off:off + s])
            off += s
        return out

    outs = blocks(out_c, output_split_sizes, "output")
    ins = blocks(in_c, input_split_sizes, "input")
    reqs = _cuda_alltoall_p2p(self, call, outs, ins)
    if out_c.data_ptr() != output.data_ptr() or not output.is_contiguous():
        call.after.append(lambda: output.detach().copy_(out_c))
    return call.work(reqs, [output])


def _cuda_send(self, tensors, dstRank, tag=0):
    t = _cuda_one(tensors, "send")
    call = _CudaCall(self, "send", [t])
    req = call.post(self._comm.isend, call.buf(t), dstRank, _dtype_name(t.dtype))
    return call.work([req], [t], lane=("send", dstRank))


def _cuda_recv(self, tensors, srcRank, tag=0):
    t = _cuda_one(tensors, "recv")
    call = _CudaCall(self, "recv", [t], [t])
    req = call.post(self._comm.irecv, call.buf(t, True), srcRank, _dtype_name(t.dtype))
    return call.work([req], [t], lane=("recv", srcRank))


def _cuda_recv_anysource(self, tensors, tag=0):
    t = _cuda_one(tensors, "recv")
    call = _CudaCall(self, "recvAnySource", [t], [t])
    req = call.post(self._comm.irecv_any, call.buf(t, True), _dtype_name(t.dtype))
    work = call.work([req], [t], lane=("recv", "any"))
    work._any = req
    return work


def _route(name, cuda_impl):
    """ProcessGroupHoop.<name> serves CUDA tensors with cuda_impl, the rest as before."""
    cpu_impl = getattr(ProcessGroupHoop, name)

    @functools.wraps(cpu_impl)
    def method(self, *args, **kwargs):
        if _is_cuda(args[:2]) or _is_cuda(list(kwargs.values())):
            return cuda_impl(self, *args, **kwargs)
        return cpu_impl(self, *args, **kwargs)

    setattr(ProcessGroupHoop, name, method)


for _name, _impl in (("allreduce", _cuda_allreduce),
                     ("allreduce_coalesced", _cuda_allreduce_coalesced),
                     ("broadcast", _cuda_broadcast), ("reduce", _cuda_reduce),
                     ("allgather", _cuda_allgather), ("_allgather_base", _cuda_allgather_base),
                     ("gather", _cuda_gather), ("scatter", _cuda_scatter),
                     ("reduce_scatter", _cuda_reduce_scatter),
                     ("_reduce_scatter_base", _cuda_reduce_scatter_base),
                     ("alltoall", _cuda_alltoall), ("alltoall_base", _cuda_alltoall_base),
                     ("send", _cuda_send), ("recv", _cuda_recv),
                     ("recv_anysource", _cuda_recv_anysource)):
    _route(_name, _impl)
del _name, _impl
