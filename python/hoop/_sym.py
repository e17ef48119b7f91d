"""Arrays on symmetric memory (hoop_mem_alloc): hoop.empty and hoop.zeros.

The memory of one allocation is held by a _Block, which the array (and through it every view,
and a torch tensor made by torch.from_numpy) references, and which references its Comm: a Comm
is not collected while an array on its memory lives. A _Block that Python collects is not freed
there: hoop_mem_free is collective, and ranks collect at different times. It is marked let go on
its rank, and the allocations let go on every rank are freed together, in the order they were
made, at the Comm's next collective point of this module (hoop.empty, hoop.zeros,
Comm.reclaim), or with the Comm at destroy. A Comm destroyed while arrays on its memory live
keeps the memory mapped until the last of them is collected (docs/python.md).
"""
import ctypes
import sys

from ._errors import InvalidArgumentError

try:
    import numpy as _np
except ImportError:
    _np = None


class _Block:
    """One allocation of hoop_mem_alloc: numpy's base object for the arrays made on it."""

    def __init__(self, comm, number, ptr, nbytes, shape, typestr):
        self._comm = comm
        self._number = number
        self.ptr = ptr
        self.nbytes = nbytes
        self.__array_interface__ = {"version": 3, "shape": tuple(shape), "typestr": typestr,
                                    "data": (ptr, False)}

    def __del__(self):
        comm = getattr(self, "_comm", None)
        if comm is not None:
            try:
                comm._sym_let_go(self._number)
            except Exception:  # noqa: BLE001 - a finaliser must not raise
                pass


def _shape(shape):
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        shape = tuple(int(s) for s in shape)
    except TypeError:
        raise InvalidArgumentError("shape must be an int or a sequence of ints, not %r"
                                   % (shape,)) from None
    return shape


def _kind(dtype):
    """(numpy dtype to make, torch dtype to view it as or None)."""
    if _np is None:
        raise InvalidArgumentError("hoop.empty makes numpy arrays: numpy does not import")
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dtype, torch.dtype):
        if dtype == torch.bfloat16:  # numpy has none: its bits as int16, viewed by torch
            return _np.dtype(_np.int16), dtype
        return _np.dtype(torch.empty((), dtype=dtype).numpy().dtype), dtype
    return _np.dtype(dtype), None


def empty(comm, shape, dtype="float32", zero=False):
    """A numpy array of shape and dtype on symmetric memory of comm (a torch tensor where dtype is
    a torch dtype). Collective: every rank asks for the same shape and dtype, in the same order
    of calls; a size that differs, a size of 0 or ranks on several hosts fail on every rank.
    A collective whose buffers are such arrays on every rank reads and writes the peers' memory
    in place (docs/python.md)."""
    shape = _shape(shape)
    try:
        np_dtype, torch_dtype = _kind(dtype)
        bad = None
        if np_dtype.hasobject or np_dtype.itemsize == 0:
            bad = "dtype %s cannot live in shared memory" % (np_dtype,)
        elif any(s < 0 for s in shape):
            bad = "shape %r has a negative dimension" % (shape,)
    except (TypeError, InvalidArgumentError) as e:
        bad, np_dtype, torch_dtype = "dtype %r: %s" % (dtype, e), None, None
    n = 1
    for s in shape:
        n *= max(s, 0)
    # A rank's bad argument still takes part with a size of 0, which fails the allocation on
    # every rank, rather than leaving the others waiting in it.
    nbytes = 0 if bad else n * np_dtype.itemsize
    block = comm._sym_alloc(nbytes, bad, lambda num, ptr: _Block(
        comm, num, ptr, nbytes, shape, np_dtype.str))
    arr = _np.asarray(block)
    if arr.ctypes.data != block.ptr:  # numpy copied: never, as the interface is not read-only
        raise InvalidArgumentError("hoop.empty: numpy did not take the memory as it is")
    if zero:
        ctypes.memset(block.ptr, 0, nbytes)
    if torch_dtype is None:
        return arr
    import torch
    t = torch.from_numpy(arr)
    return t.view(torch_dtype) if t.dtype != torch_dtype else t


def zeros(comm, shape, dtype="float32"):
    """hoop.empty, filled with zeros."""
    return empty(comm, shape, dtype, zero=True)

