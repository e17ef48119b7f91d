"""The torch backend's stream handle (python/hoop/torch.py, the CUDA section), run as one rank
under hooprun with any torch, CUDA or not: the stream a CUDA-tensor call is ordered on is torch's
current stream, and torch's default stream, whose handle is 0, must reach libhoop as the legacy
default stream (HOOP_STREAM_LEGACY), never as "no stream", which would leave the call unordered
against the kernels that made its input (and DistributedDataParallel reducing stale gradients).
What libhoop does with the legacy stream is checked on the CUDA test double by
cuda-stream-legacy-ordered-* (tests/cuda/stream.c).
"""
import sys
import types

import hoop
import hoop.torch as ht


def main():
    comm = hoop.init()
    fails = []

    def expect(cond, msg):
        if not cond:
            fails.append(msg)

    # _set_stream, as the CUDA section calls it: torch's handle of the current stream.
    ht._set_stream(comm, 0)
    expect(comm.stream == 0, "torch's default stream (handle 0) set as %r, not the legacy "
                             "default stream" % (comm.stream,))
    ht._set_stream(comm, 0x5000)
    expect(comm.stream == 0x5000, "a stream's handle set as %r" % (comm.stream,))
    ht._set_stream(comm, None)
    expect(comm.stream is None, "None (no stream) set as %r" % (comm.stream,))

    # A call posted the way _CudaCall posts one, on a stand-in of torch's default stream: the
    # communicator's stream while it is posted, and none after.
    call = object.__new__(ht._CudaCall)
    call.pg = types.SimpleNamespace(_comm=comm)
    call.stream = types.SimpleNamespace(cuda_stream=0)
    seen = call.post(lambda: comm.stream)
    expect(seen == 0, "a call on torch's default stream was posted with stream %r, not the "
                      "legacy default stream" % (seen,))
    expect(comm.stream is None, "the stream stayed set after the post: %r" % (comm.stream,))
    seen = call.post_group([(lambda: comm.stream, ())])
    expect(seen == [0], "a group on torch's default stream was posted with %r" % (seen,))

    comm.destroy()
    for f in fails:
        print("FAIL: %s" % f)
    print("torch_stream: %s" % ("FAILED" if fails else "ok"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
