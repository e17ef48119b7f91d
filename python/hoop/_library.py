"""Finding libhoop.so and declaring its C prototypes for ctypes."""
import ctypes
import ctypes.util
import os
import sys
import threading

# Result codes, dtypes and ops: the values of the enums in hoop.h.
OK = 0
RESULT_NAMES = ("ok", "invalid argument", "system", "timeout", "peer lost", "mismatch",
                "authentication", "unsupported", "aborted", "no memory", "internal")
DTYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16",
          "float32", "float64")
DTYPE_CODE = {name: i for i, name in enumerate(DTYPES)}
DTYPE_SIZE = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
              "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
OPS = ("sum", "prod", "min", "max", "avg")
OP_CODE = {name: i for i, name in enumerate(OPS)}

_lock = threading.Lock()
_lib = None
_path = None


class LibraryNotFoundError(ImportError):
    """libhoop.so could not be loaded."""


def _installed_dirs(here):
    """The libdir meson install recorded beside the package: as recorded, and relative to where
    the package is now (a DESTDIR or a copied tree moves both together)."""
    try:
        from . import _installed
    except ImportError:  # the source tree: nothing was installed
        return []
    moved = os.path.normpath(os.path.join(here, os.path.relpath(_installed.LIBDIR,
                                                                _installed.PACKAGE_DIR)))
    return [_installed.LIBDIR] + ([moved] if moved != _installed.LIBDIR else [])


def _candidates():
    """(paths to try in order, whether HOOP_LIBRARY chose, every place looked at)."""
    env = os.environ.get("HOOP_LIBRARY")
    if env:
        # An explicit choice is the only one tried: falling back silently would hide a typo.
        return [env], True, [env]
    here = os.path.dirname(os.path.abspath(__file__))
    names = ["libhoop.so", "libhoop.so.0"]
    dirs = _installed_dirs(here) + [here, os.path.dirname(here), os.path.join(sys.prefix, "lib")]
    multiarch = getattr(sys.implementation, "_multiarch", None)
    for prefix in ("/usr/local/lib", "/usr/lib"):
        if multiarch:
            dirs.append(os.path.join(prefix, multiarch))
        dirs.append(prefix)
        dirs.append(prefix + "64")
    seen = set()
    dirs = [d for d in dirs if not (d in seen or seen.add(d))]
    found = [os.path.join(d, n) for d in dirs for n in names if os.path.exists(os.path.join(d, n))]
    looked = list(dirs)
    # The loader's own search (LD_LIBRARY_PATH, the ldconfig cache, its default directories).
    found.append("libhoop.so.0")
    looked.append("the loader's search for libhoop.so.0 (LD_LIBRARY_PATH, ldconfig's cache)")
    lib = ctypes.util.find_library("hoop")
    if lib and lib != "libhoop.so.0":
        found.append(lib)
    return found, False, looked


def _declare(lib):
    P = ctypes.c_void_p
    I = ctypes.c_int
    S = ctypes.c_size_t
    PP = ctypes.POINTER(ctypes.c_void_p)
    R = ctypes.c_int
    protos = {
        "hoop_error_string": (ctypes.c_char_p, [I]),
        "hoop_version": (ctypes.c_char_p, []),
        "hoop_comm_last_error": (ctypes.c_char_p, [P]),
        "hoop_init": (R, [PP, ctypes.c_char_p, I, I]),
        "hoop_comm_split": (R, [P, I, I, PP]),
        "hoop_comm_shrink_exclude": (R, [P, ctypes.POINTER(I), I, PP]),
        "hoop_comm_destroy": (R, [P]),
        "hoop_comm_abort": (R, [P]),
        "hoop_comm_rank": (I, [P]),
        "hoop_comm_size": (I, [P]),
        "hoop_comm_set_algo": (R, [P, ctypes.c_char_p]),
        "hoop_comm_set_timeout": (R, [P, ctypes.c_double]),
        "hoop_comm_stats": (R, [P, ctypes.POINTER(ctypes.c_uint64 * 4)]),
        "hoop_comm_dump": (R, [P, ctypes.c_char_p]),
        "hoop_allreduce": (R, [P, P, P, S, I, I]),
        "hoop_broadcast": (R, [P, P, S, I, I]),
        "hoop_reduce": (R, [P, P, P, S, I, I, I]),
        "hoop_allgather": (R, [P, P, P, S, I]),
        "hoop_gather": (R, [P, P, P, S, I, I]),
        "hoop_scatter": (R, [P, P, P, S, I, I]),
        "hoop_reduce_scatter": (R, [P, P, P, S, I, I]),
        "hoop_alltoall": (R, [P, P, P, S, I]),
        "hoop_barrier": (R, [P]),
        "hoop_send": (R, [P, P, S, I, I]),
        "hoop_recv": (R, [P, P, S, I, I]),
        "hoop_iallreduce": (R, [P, P, P, S, I, I, PP]),
        "hoop_ibroadcast": (R, [P, P, S, I, I, PP]),
        "hoop_ireduce": (R, [P, P, P, S, I, I, I, PP]),
        "hoop_iallgather": (R, [P, P, P, S, I, PP]),
        "hoop_igather": (R, [P, P, P, S, I, I, PP]),
        "hoop_iscatter": (R, [P, P, P, S, I, I, PP]),
        "hoop_ireduce_scatter": (R, [P, P, P, S, I, I, PP]),
        "hoop_ialltoall": (R, [P, P, P, S, I, PP]),
        "hoop_ibarrier": (R, [P, PP]),
        "hoop_isend": (R, [P, P, S, I, I, PP]),
        "hoop_irecv": (R, [P, P, S, I, I, PP]),
        "hoop_recv_any": (R, [P, P, S, I, ctypes.POINTER(ctypes.c_int)]),
        "hoop_irecv_any": (R, [P, P, S, I, ctypes.POINTER(ctypes.c_int), PP]),
        "hoop_wait": (R, [P]),
        "hoop_test": (R, [P, ctypes.POINTER(ctypes.c_int)]),
        "hoop_mem_alloc": (R, [P, S, PP]),
        "hoop_mem_free": (R, [P, P]),
    }
    for name, (res, args) in protos.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


def load():
    """The loaded library (ctypes.CDLL: every call releases the GIL)."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        paths, explicit, looked = _candidates()
        errors = []
        for p in paths:
            try:
                lib = ctypes.CDLL(p)
                _declare(lib)
            except (OSError, AttributeError) as e:
                errors.append(str(e) if str(e).startswith(p) else "%s: %s" % (p, e))
                continue
            _lib, _path = lib, p
            return lib
        if explicit:
            raise LibraryNotFoundError("HOOP_LIBRARY=%s cannot be loaded (%s)"
                                       % (paths[0], "; ".join(errors)))
        raise LibraryNotFoundError(
            "libhoop.so not found: set HOOP_LIBRARY to its path (a meson build puts it at "
            "BUILD/libhoop.so), or install hoop (meson install); looked in "
            + ", ".join(looked) + ("; tried " + "; ".join(errors) if errors else ""))


def path():
    """Path of the loaded library (loads it if needed)."""
    load()
    return _path
