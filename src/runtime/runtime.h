/* The algorithms' runtime: what a schedule in src/collectives uses to move, copy and reduce bytes.
 * Transfers to peers (xfer.c), scratch space and the memory layer (mem.c, mem_cuda*.c), staging of
 * device buffers through host memory (stage.c), tracing (trace.c).
 * Below it only the transports; the scheduler above hands it one call at a time, under exec. */
#ifndef HOOP_RUNTIME_H
#define HOOP_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/part.h"
#include "runtime/comm.h"
#include "reduce/reduce.h"
#include "runtime/mem.h"
#include "transport/transport.h"

/* ---- transfers (xfer.c) ---- */

/* Posts a send of bytes [buf, buf+len) to peer as part of call; x must live until waited. */
void hoop__xsend(const hoop__call_t *call, hoop__xfer_t *x, int peer, const void *buf, size_t len);
/* Posts a receive of exactly len bytes from peer into buf. */
void hoop__xrecv(const hoop__call_t *call, hoop__xfer_t *x, int peer, void *buf, size_t len);
/* Waits for n transfers (NULL entries are skipped). Returns the first error: a failed transfer,
 * a timeout (HOOP_TIMEOUT with no progress), or the communicator's abort. Any error aborts the
 * communicator, so the caller just returns it. */
hoop_result_t hoop__xwait(const hoop__call_t *call, hoop__xfer_t *const *xs, int n);
hoop_result_t hoop__xwait1(const hoop__call_t *call, hoop__xfer_t *x);
/* Send to one peer and receive from another at once (either peer may be -1 to skip). */
hoop_result_t hoop__sendrecv(const hoop__call_t *call, int to, const void *sbuf, size_t slen,
                             int from, void *rbuf, size_t rlen);

/* The root's side of gather and scatter: one transfer of n bytes with every other rank i at once,
 * received into (dir HOOP__XFER_RECV) or sent from (HOOP__XFER_SEND) base + i * n, then waits for
 * all. Uses the scratch space. */
hoop_result_t hoop__root_exchange(const hoop__call_t *call, int dir, char *base, size_t n);

/* "allreduce(count=20, float32, sum)": the call as its messages' headers describe it. */
void hoop__call_describe(const hoop__call_t *call, char *buf, size_t n);

/* ---- memory (mem.c) ----
 * Every copy, reduction and staging buffer of an algorithm goes through these, in the memory type
 * of the call's buffers. Host memory is tested first and calls memcpy and the CPU kernels
 * directly, so the host path costs what the plain calls did; other types go through their table. */

static inline void hoop__mem_copy(const hoop__call_t *call, void *dst, const void *src, size_t n)
{
    if (call->mem == HOOP__MEM_HOST)
        memcpy(dst, src, n);
    else
        hoop__mem_ops(call->mem)->copy(call, dst, src, n);
}

/* As hoop__mem_copy, for ranges that may overlap. */
static inline void hoop__mem_move(const hoop__call_t *call, void *dst, const void *src, size_t n)
{
    if (call->mem == HOOP__MEM_HOST)
        memmove(dst, src, n);
    else
        hoop__mem_ops(call->mem)->move(call, dst, src, n);
}

/* out[i] = a[i] op b[i] for i < count, in the call's dtype and op (see hoop__reduce). */
static inline void hoop__mem_reduce(const hoop__call_t *call, void *out, const void *a,
                                    const void *b, size_t count)
{
    if (call->mem == HOOP__MEM_HOST)
        hoop__reduce(out, a, b, count, call->dtype, call->op);
    else
        hoop__mem_ops(call->mem)->reduce(call, out, a, b, count, call->dtype, call->op);
}

/* The last step of HOOP_AVG: buf[i] /= the communicator's size. */
static inline void hoop__mem_avg_finish(const hoop__call_t *call, void *buf, size_t count)
{
    int p = call->comm->size;
    if (call->mem == HOOP__MEM_HOST)
        hoop__reduce_avg_finish(buf, count, call->dtype, p);
    else
        hoop__mem_ops(call->mem)->avg_finish(call, buf, count, call->dtype, p);
}

/* Scratch memory owned by the communicator, in the memory type of the call's buffers, aligned as
 * malloc aligns and valid until the call returns; NULL if out of memory (the communicator is then
 * failed with the size it could not have). */
void *hoop__scratch(const hoop__call_t *call, size_t bytes);
/* As hoop__scratch, a second buffer of the communicator's, which the scheduler alone uses: where
 * a call's input overlaps its output other than as hoop.h's in-place forms, it copies the input
 * there before the algorithm runs (sched.c), so that the algorithm's own scratch stays free. */
void *hoop__input_copy(const hoop__call_t *call, size_t bytes);
/* The bytes of sendbuf that this rank's part of call reads (*rd) and of recvbuf that it writes
 * (*wr), 0 for a buffer it does not touch (a non-root's, a broadcast root's recvbuf, a count of
 * 0). The one table of them: the memory a call is detected in (core/api.c), the copy of an
 * overlapping input (core/sched.c) and the pinned copies of a stream-ordered call (mem_cuda_order.c). */
void hoop__call_extents(const hoop__call_t *call, size_t *rd, size_t *wr);
/* Frees both (hoop__mem_close). */
void hoop__scratch_free(hoop_comm_t *c);

/* ---- staging (stage.c) ----
 * The transports read and write host memory only. A transfer of a call in another memory type
 * goes through a host buffer of the communicator's (the type's host_alloc: pinned for CUDA). A
 * collective's copies are asynchronous, on the copy streams below: a send is given to the
 * transport once its copy to host memory is done, a receive is done for the algorithm once its
 * copy to the device is, and waits (hoop__xwait) move every staged transfer of the call along
 * meanwhile. A point-to-point request's go the same way, moved along by the scheduler's reap
 * (hoop__stage_reap) instead of a call's waits. A host-memory send (a host call, or a device
 * call's host messages: the shared-memory area's setup, the IPC path's steps) first gives the
 * transport the staged sends queued before it (hoop__stage_flush), so that none overtakes a
 * staged send to the same peer still being copied. */

/* Called by hoop__xsend/xrecv for a call not in host memory, x filled in. Returns 0 when x is to
 * go to the transport as it is now (x->buf pointed at the staging buffer, or 0 bytes), 1 when the
 * stage gives the transport a transfer of its own for x and completes x itself, or -1 having
 * completed x at once with the communicator's error (out of memory, a failed copy). */
int hoop__stage_post(const hoop__call_t *call, hoop__xfer_t *x);
/* A wait's round for a call not in host memory, over every staged transfer (whichever the wait
 * is for): sends whose copy is done go to the transport, in posting order; received payloads are copied to their buffers, and
 * transfers whose copy is done complete. Never blocks. Returns 1 when something moved, 0 when
 * nothing did, -1 when a copy failed (the communicator failed with its sentence). *busy says
 * whether copies are still in flight (a wait then polls rather than sleeps in the transport). */
int hoop__stage_progress(const hoop__call_t *call, int *busy);
/* The scheduler's round for the point-to-point requests' staged transfers (and any other's):
 * as hoop__stage_progress, without a call; on an aborted communicator (a failed copy aborts it)
 * the requests' transfers complete with its code. hoop__stage_busy: whether the last round saw
 * copies in flight (a thread driving requests then polls rather than sleeps in the transport). */
void hoop__stage_reap(hoop_comm_t *c);
int hoop__stage_busy(const hoop_comm_t *c);
/* Gives the transport every staged send still queued (waiting for their copies out, bounded by
 * the timeout), so that a host send posted now comes after them. */
hoop_result_t hoop__stage_flush(hoop_comm_t *c);
/* Frees the staging buffers (hoop__mem_close, after the transport is closed). */
void hoop__stage_free(hoop_comm_t *c);

/* The copy streams (mem_cuda.c): one per direction, so that copies to host memory and to the
 * device run at once (a GPU has a copy engine for each), made by the first staged call. Failures
 * fail the communicator with the sentence of a failed CUDA copy. Under exec. */
/* Orders both streams after the work queued on the call's stream (the legacy default stream, or
 * the communicator's for a stream-ordered call) so far: once per call, before its first copy. */
int hoop__cuda_stage_begin(const hoop__call_t *call);
/* Queues a copy of n bytes on the stream of its direction (to_device: host to device), then a
 * record of *ev (made the first time, kept by the caller for the next copy). 0, or -1. */
int hoop__cuda_stage_copy(const hoop__call_t *call, int to_device, void *dst, const void *src,
                          size_t n, void **ev);
/* 1 once the copies before ev's last record are done, 0 while not, -1 on an error. Never
 * blocks. */
int hoop__cuda_stage_query(hoop_comm_t *c, void *ev);
/* Waits for both streams' queued work, at most seconds: 1 when done, 0 (time up) or -1. */
int hoop__cuda_stage_drain(hoop_comm_t *c, double seconds);
void hoop__cuda_stage_event_free(hoop_comm_t *c, void *ev);
/* ---- CUDA IPC (mem_cuda.c) ----
 * The CUDA IPC path's memory: each rank's area, device memory that its peers open once from its
 * handle and keep open, by rank, until the communicator goes. Under exec. */
#define HOOP__IPC_HANDLE 64
/* An area's handle: the module's, and the address of the page where its peers say whether they
 * have it open (hoop__cuda_ipc_release). */
#define HOOP__IPC_AREA_HANDLE (HOOP__IPC_HANDLE + 16)
/* This rank's area (made by the first call, about want bytes, HOOP_CUDA_IPC_BYTES): 0 with
 * *area, *cap and handle (HOOP__IPC_AREA_HANDLE bytes) set, or -1 with a sentence in err. */
int hoop__cuda_ipc_area(hoop_comm_t *c, size_t want, void **area, size_t *cap, void *handle,
                        char *err, size_t errlen);
/* Peer's area opened here from its handle: the one opened before when the handle is the same
 * (byte for byte), else opened now (a different handle is a different allocation: the old one
 * is closed first, never served for it). NULL with a sentence in err. */
void *hoop__cuda_ipc_peer(hoop_comm_t *c, int peer, const void *handle, char *err, size_t errlen);
/* The path's device work: queued on the communicator's IPC stream, never waited for one by one,
 * and ordered across processes by IPC events. Each rank has HOOP__IPC_EVENTS events of its own
 * (which it records), that its peers open once from their handles and make the stream wait for.
 * Failures fail the communicator with their sentence (hoop__mem_failed). Under exec. */
#define HOOP__IPC_EVENTS 3
/* This rank's events' handles (HOOP__IPC_EVENTS x HOOP__IPC_HANDLE bytes, made the first time):
 * 0, or -1 with a sentence in err. */
int hoop__cuda_ipc_events(hoop_comm_t *c, void *handles, char *err, size_t errlen);
/* Peer's events opened here from its handles (kept, as the areas are): 0, or -1 with err. */
int hoop__cuda_ipc_peer_events(hoop_comm_t *c, int peer, const void *handles, char *err,
                               size_t errlen);
/* The stream's work of call starts after what was queued on the call's stream before. */
void hoop__cuda_ipc_begin(const hoop__call_t *call);
void hoop__cuda_ipc_copy(const hoop__call_t *call, void *dst, const void *src, size_t n);
/* Ranges that may overlap: synchronous, after the stream's queued work. */
void hoop__cuda_ipc_move(const hoop__call_t *call, void *dst, const void *src, size_t n);
void hoop__cuda_ipc_reduce(const hoop__call_t *call, void *out, const void *a, const void *b,
                           size_t count);
void hoop__cuda_ipc_avg(const hoop__call_t *call, void *buf, size_t count);
/* This rank's event which marks the stream's work so far; the stream's next work waits for the
 * latest record of peer's event which (made before the peer said so in a message). */
void hoop__cuda_ipc_record(const hoop__call_t *call, int which);
void hoop__cuda_ipc_wait(const hoop__call_t *call, int peer, int which);
/* Waits, polling within the timeout, until the stream's work of the call is done: its results
 * are then in device memory. Every millisecond meanwhile watch(arg) looks at the peers, and
 * stops the wait (having failed the communicator) with a non-zero answer. HOOP_OK, or the error
 * that failed the communicator. */
hoop_result_t hoop__cuda_ipc_end(const hoop__call_t *call, int (*watch)(void *), void *arg);

/* At destroy, once no call runs (hoop__mem_release): the IPC stream destroyed and every peer's
 * area closed here (each peer told so), then this rank's area freed once no live peer has it
 * open, within the timeout; past it the area is left allocated (a WARN line says why). */
void hoop__cuda_ipc_release(hoop_comm_t *c);
/* The CUDA module's context and handle (mem_cuda.c; hoop__mem_close). */
void hoop__cuda_close(hoop_comm_t *c);

/* ---- shapes of a schedule ---- */

static inline size_t hoop__dsize(const hoop__call_t *c) { return hoop__dtype_size(c->dtype); }

/* Ring order (see hoop_comm.ring): the rank at ring position pos, and this rank's position. Ranks
 * of one host are neighbours, so ring algorithms cross each host boundary once. */
static inline int hoop__ring_rank(const hoop_comm_t *c, int pos)
{
    pos = ((pos % c->size) + c->size) % c->size;
    return c->ring != NULL ? c->ring[pos] : pos;
}
static inline int hoop__ring_pos(const hoop_comm_t *c)
{
    return c->ring != NULL ? c->ring_pos : c->rank;
}

/* ---- tracing (trace.c) ----
 * Schedule tracing (hoop_comm_set_trace): one line "<kind>#<call> <algo> step <k>: <text>".
 * The check is inline so that untraced runs pay one load and branch per event. */
void hoop__trace_emit(const hoop__call_t *call, int step, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define HOOP__TRACE_STEP(call, step, ...)                                                          \
    do {                                                                                           \
        if ((call)->comm->trace_fn != NULL) hoop__trace_emit((call), (step), __VA_ARGS__);         \
    } while (0)
/* The tracer of HOOP_TRACE=1 (ctx: the communicator): lines go to its log, whatever HOOP_DEBUG
 * says. */
void hoop__trace_to_log(void *ctx, const char *line);

#endif
