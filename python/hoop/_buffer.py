"""Turning Python objects into (pointer, element count, dtype) for the C library.

Accepted: numpy arrays, torch tensors (anything with data_ptr(); CUDA ones too), objects with
__array_interface__, objects with __cuda_array_interface__ (CUDA device memory: CuPy, Numba, ...),
and objects with the buffer protocol (bytearray, array.array, memoryview...). A non-contiguous
host array or tensor is copied into a contiguous one; for an output the result is copied back once
the call has completed (Buffer.finish). Device memory is told by the C library from the address
(docs/cuda.md): a call without a stream starts after the work queued on the legacy default
stream and returns with its result in device memory.
"""
import ctypes
import sys

from ._errors import InvalidArgumentError
from ._library import DTYPE_SIZE

try:
    import numpy as _np
except ImportError:  # numpy is optional: tensors, buffers and __array_interface__ still work
    _np = None

# A valid address for empty buffers: the library rejects NULL even when nothing is read.
_EMPTY = ctypes.create_string_buffer(8)
_EMPTY_PTR = ctypes.addressof(_EMPTY)

_NATIVE = "<" if sys.byteorder == "little" else ">"

# (kind, itemsize) of __array_interface__ type strings and numpy dtypes.
_KIND_SIZE = {("i", 1): "int8", ("u", 1): "uint8", ("i", 4): "int32", ("u", 4): "uint32",
              ("i", 8): "int64", ("u", 8): "uint64", ("f", 2): "float16", ("f", 4): "float32",
              ("f", 8): "float64"}

# struct-module format characters of the buffer protocol.
_FORMAT = {"b": "int8", "B": "uint8", "e": "float16", "f": "float32", "d": "float64"}
_FORMAT_INT = {"h": "i", "H": "u", "i": "i", "I": "u", "l": "i", "L": "u", "q": "i", "Q": "u",
               "n": "i", "N": "u"}


def dtype_name(x):
    """Canonical hoop dtype name of a str, numpy dtype or torch dtype, or None."""
    if x is None:
        return None
    s = str(x)
    if s.startswith("torch."):
        s = s[6:]
    s = {"float": "float32", "double": "float64", "half": "float16", "int": "int32",
         "long": "int64", "short": None, "byte": "uint8", "char": "int8"}.get(s, s)
    if s in DTYPE_SIZE:
        return s
    if _np is not None and not isinstance(x, str):
        try:
            d = _np.dtype(x)
        except TypeError:
            return None
        if d.name == "bfloat16":  # ml_dtypes
            return "bfloat16"
        return _KIND_SIZE.get((d.kind, d.itemsize))
    return None


class Buffer:
    """A contiguous view of an object's memory.

    ptr, nbytes, count, dtype describe it; `keep` holds what must stay alive while the C library
    uses the memory; `_back` is (original, contiguous copy) when the result must be copied back.
    """
    __slots__ = ("ptr", "nbytes", "count", "dtype", "keep", "_back", "obj")

    def __init__(self, obj, ptr, nbytes, dtype, keep, back=None):
        self.obj = obj
        self.ptr = ptr if nbytes > 0 and ptr else (ptr or _EMPTY_PTR)
        self.nbytes = nbytes
        self.dtype = dtype
        self.count = nbytes // DTYPE_SIZE[dtype]
        self.keep = keep
        self._back = back

    def at(self, elements):
        """Address of element `elements`."""
        return self.ptr + elements * DTYPE_SIZE[self.dtype]

    def finish(self):
        """Copies a result computed in a contiguous copy back into the original object."""
        if self._back is None:
            return
        orig, copy = self._back
        self._back = None
        if hasattr(orig, "copy_"):
            orig.copy_(copy)
        else:
            orig[...] = copy


def overlaps(t):
    """Whether elements of the tensor t may share memory (an expand()ed tensor's do): a result
    written into it cannot be kept, and torch would refuse the copy back only after the call had
    moved the data. torch's own test where it has one, else the strides."""
    torch = sys.modules.get("torch")
    known = 2  # torch's "too hard to tell"
    fn = getattr(torch, "_debug_has_internal_overlap", None)
    if fn is not None and isinstance(t, torch.Tensor):
        try:
            known = fn(t)  # 0 no, 1 yes, 2 too hard to tell
        except Exception:  # noqa: BLE001 - a torch without it for this tensor: the strides
            known = 2
    if known in (0, 1):
        return known == 1
    # A layout where each dimension's stride steps over everything the smaller strides span
    # cannot overlap; anything else is treated as overlapping.
    span = 1
    for stride, size in sorted((st, sz) for st, sz in zip(t.stride(), t.shape) if sz > 1):
        if stride < span:
            return True
        span += stride * (size - 1)
    return False


def _fail(name, msg):
    raise InvalidArgumentError("%s: %s" % (name, msg))


def _from_tensor(obj, name, writable, dtype):
    dev = getattr(obj, "device", None)
    if dev is not None and getattr(dev, "type", "cpu") not in ("cpu", "cuda"):
        _fail(name, "a %s tensor: hoop takes CPU and CUDA tensors" % dev.type)
    dt = dtype or dtype_name(obj.dtype)
    if dt is None:
        _fail(name, "dtype %s is not supported (float32, float64, float16, bfloat16, int8, "
              "uint8, int32, uint32, int64, uint64)" % (obj.dtype,))
    layout = getattr(obj, "layout", None)
    if layout is not None and str(layout) != "torch.strided":
        _fail(name, "a %s tensor: hoop takes dense (strided) tensors" % str(layout)[6:])
    if writable and overlaps(obj):
        _fail(name, "receives a result but its elements share memory (an expand()ed tensor, "
              "shape %s, strides %s); pass a tensor of its own, e.g. a clone()"
              % (list(obj.shape), list(obj.stride())))
    # Detached views share the memory; copies made from them stay out of autograd's graph.
    t = obj.detach() if hasattr(obj, "detach") else obj
    back = None
    if not t.is_contiguous():
        orig, t = t, t.contiguous()
        if writable:
            back = (orig, t)
    nbytes = t.numel() * t.element_size()
    if nbytes % DTYPE_SIZE[dt]:
        _fail(name, "%d bytes is not a whole number of %s elements" % (nbytes, dt))
    return Buffer(obj, t.data_ptr(), nbytes, dt, t, back)


def _from_numpy(obj, name, writable, dtype):
    dt = dtype or dtype_name(obj.dtype)
    if dt is None:
        _fail(name, "dtype %s is not supported (float32, float64, float16, bfloat16, int8, "
              "uint8, int32, uint32, int64, uint64)" % obj.dtype)
    if not obj.dtype.isnative:
        _fail(name, "byte order of dtype %s is not the machine's" % obj.dtype)
    if writable and not obj.flags.writeable:
        _fail(name, "the array is read-only but receives a result")
    a, back = obj, None
    if not obj.flags.c_contiguous:
        a = _np.ascontiguousarray(obj)
        if writable:
            back = (obj, a)
    if a.nbytes % DTYPE_SIZE[dt]:
        _fail(name, "%d bytes is not a whole number of %s elements" % (a.nbytes, dt))
    return Buffer(obj, a.__array_interface__["data"][0], a.nbytes, dt, a, back)


def _from_interface(obj, ai, name, writable, dtype, device=False):
    typestr = ai["typestr"]
    order, kind, size = typestr[0], typestr[1], int(typestr[2:])
    if order not in ("|", "=", _NATIVE) and size > 1:
        _fail(name, "byte order of type %s is not the machine's" % typestr)
    dt = dtype or _KIND_SIZE.get((kind, size))
    if dt is None:
        _fail(name, "type %s is not supported" % typestr)
    shape = tuple(ai["shape"])
    n = 1
    for s in shape:
        n *= s
    strides = ai.get("strides")
    if strides is not None and n > 1:
        expect, contiguous = size, True
        for dim, st in zip(reversed(shape), reversed(strides)):
            if dim > 1 and st != expect:
                contiguous = False
            expect *= dim
        if not contiguous:
            if _np is not None and not device:
                return _from_numpy(_np.asarray(obj), name, writable, dtype)
            _fail(name, "not contiguous (make it contiguous first)")
    ptr, readonly = ai["data"]
    if writable and readonly:
        _fail(name, "the buffer is read-only but receives a result")
    nbytes = n * size
    if nbytes % DTYPE_SIZE[dt]:
        _fail(name, "%d bytes is not a whole number of %s elements" % (nbytes, dt))
    return Buffer(obj, ptr, nbytes, dt, obj)


def _from_buffer(obj, name, writable, dtype):
    try:
        mv = memoryview(obj)
    except TypeError:
        _fail(name, "%s is neither an array, a tensor nor a buffer" % type(obj).__name__)
    if not mv.c_contiguous:
        if _np is not None:
            return _from_numpy(_np.asarray(obj), name, writable, dtype)
        _fail(name, "not contiguous (make it contiguous first)")
    fmt = mv.format.lstrip("@=")
    dt = dtype or _FORMAT.get(fmt)
    if dt is None and fmt in _FORMAT_INT:
        dt = _KIND_SIZE.get((_FORMAT_INT[fmt], mv.itemsize))
    if dt is None:
        _fail(name, "buffer format %r is not supported" % mv.format)
    nbytes = mv.nbytes
    if nbytes % DTYPE_SIZE[dt]:
        _fail(name, "%d bytes is not a whole number of %s elements" % (nbytes, dt))
    if mv.readonly:
        if writable:
            _fail(name, "the buffer is read-only but receives a result")
        # ctypes only exports writable buffers; an input can travel as a copy.
        copy = ctypes.create_string_buffer(mv.tobytes(), max(nbytes, 1))
        return Buffer(obj, ctypes.addressof(copy), nbytes, dt, copy)
    if nbytes == 0:
        return Buffer(obj, _EMPTY_PTR, 0, dt, None)
    c = (ctypes.c_char * nbytes).from_buffer(mv.cast("B"))
    return Buffer(obj, ctypes.addressof(c), nbytes, dt, (c, mv))


def as_buffer(obj, name, writable, dtype=None):
    """The Buffer of obj; `writable` when the library writes into it; dtype overrides the type."""
    if dtype is not None:
        d = dtype_name(dtype)
        if d is None:
            _fail(name, "dtype %r is not supported" % (dtype,))
        dtype = d
    if _np is not None and isinstance(obj, _np.ndarray):
        return _from_numpy(obj, name, writable, dtype)
    if _np is not None and isinstance(obj, _np.generic):
        # A numpy scalar is immutable: its __array_interface__ lends a fresh copy, so a result
        # written there would vanish without a word.
        if writable:
            _fail(name, "a numpy scalar (%s) cannot receive a result: it is immutable; pass an "
                  "array, such as np.array(x) (0-d arrays work in place)" % type(obj).__name__)
        return _from_numpy(_np.asarray(obj), name, writable, dtype)
    if hasattr(obj, "data_ptr") and hasattr(obj, "is_contiguous"):
        return _from_tensor(obj, name, writable, dtype)
    ai = getattr(obj, "__array_interface__", None)
    if isinstance(ai, dict):
        return _from_interface(obj, ai, name, writable, dtype)
    ai = getattr(obj, "__cuda_array_interface__", None)
    if isinstance(ai, dict):
        return _from_interface(obj, ai, name, writable, dtype, device=True)
    return _from_buffer(obj, name, writable, dtype)
