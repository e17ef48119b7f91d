"""Exceptions: one class per hoop_result_t, all under HoopError."""
import builtins


class HoopError(Exception):
    """A hoop call failed. `code` is the hoop_result_t, `message` hoop's sentence."""
    code = None

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class InvalidArgumentError(HoopError, ValueError):
    code = 1


class SystemCallError(HoopError, OSError):
    code = 2


class TimeoutError(HoopError, builtins.TimeoutError):
    code = 3


class PeerLostError(HoopError, ConnectionError):
    code = 4


class MismatchError(HoopError):
    code = 5


class AuthError(HoopError):
    code = 6


class UnsupportedError(HoopError):
    code = 7


class AbortedError(HoopError):
    code = 8


class NoMemoryError(HoopError, MemoryError):
    code = 9


class InternalError(HoopError):
    code = 10


BY_CODE = {c.code: c for c in (InvalidArgumentError, SystemCallError, TimeoutError, PeerLostError,
                               MismatchError, AuthError, UnsupportedError, AbortedError,
                               NoMemoryError, InternalError)}


def error_for(code, message):
    cls = BY_CODE.get(code, HoopError)
    return cls(message, code)
