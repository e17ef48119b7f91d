"""What the Python tests share.

Drivers (a check.py that starts ranks or tools and judges what they say): check() records a
failure, says it at once and goes on, so that one run reports every failure; the driver ends by
`failures`. Ranks (a script run as every rank under hooprun): Rank's expect() counts a check and
ends the rank at the first failure, with its sentence on stderr.

A test finds this module next to it or in tests/common (see the top of each test).
"""
import os
import socket
import sys

failures = []


def check(ok, msg):
    """Records msg as a failure where ok is false, printed at once; returns ok."""
    if not ok:
        failures.append(msg)
        print("FAIL: " + msg, flush=True)
    return ok


def free_port():
    """A loopback TCP port that was free a moment ago (the kernel's choice)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Rank:
    """The checks of one rank: the first failure ends the whole process at once (os._exit, so
    that neither a thread nor a handler of SystemExit can swallow it)."""

    def __init__(self, rank):
        self.rank = rank
        self.checks = 0

    def fail(self, msg):
        sys.stderr.write("rank %d: FAIL: %s\n" % (self.rank, msg))
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)

    def expect(self, cond, msg):
        self.checks += 1
        if not cond:
            self.fail(msg)

    def expect_raises(self, cls, fn, what, contains=None):
        """fn() must raise cls, its message holding contains where given; returns the exception."""
        try:
            fn()
        except cls as e:
            self.expect(contains is None or contains in str(e),
                        "%s: message %r lacks %r" % (what, str(e), contains))
            return e
        except Exception as e:  # noqa: BLE001 - the wrong class is the failure being reported
            self.fail("%s raised %s (%s), not %s" % (what, type(e).__name__, e, cls.__name__))
        self.fail("%s did not raise %s" % (what, cls.__name__))
