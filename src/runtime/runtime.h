/* The algorithms' runtime: what a schedule in src/collectives uses to move, copy and reduce bytes.
 * Transfers to peers (xfer.c), scratch space (scratch.c), tracing (trace.c).
 * Below it only the transports; the scheduler above hands it one call at a time, under exec. */
#ifndef HOOP_RUNTIME_H
#define HOOP_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/comm.h"
#include "reduce/reduce.h"
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
 * received into (dir HOOP_XFER_RECV) or sent from (HOOP_XFER_SEND) base + i * n, then waits for
 * all. Uses the scratch space. */
hoop_result_t hoop__root_exchange(const hoop__call_t *call, int dir, char *base, size_t n);

/* "allreduce(count=20, float32, sum)": the call as its messages' headers describe it. */
void hoop__call_describe(const hoop__call_t *call, char *buf, size_t n);

/* ---- scratch (scratch.c) ---- */

/* Scratch memory owned by the communicator, valid until the call returns; NULL if out of memory
 * (the communicator is then failed with the size it could not have). */
void *hoop__scratch(hoop_comm_t *c, size_t bytes);

/* ---- shapes of a schedule ---- */

/* Balanced split of n items into parts: part i starts at *off and holds *len items; the first
 * n % parts parts hold one more. */
static inline void hoop__part(size_t n, int parts, int i, size_t *off, size_t *len)
{
    size_t q = n / (size_t)parts, r = n % (size_t)parts, ui = (size_t)i;
    *off = ui * q + (ui < r ? ui : r);
    *len = q + (ui < r ? 1 : 0);
}

static inline size_t hoop__dsize(const hoop__call_t *c) { return hoop_dtype_size(c->dtype); }

/* Ring order (see hoop_comm.ring): the rank at ring position pos, and this rank's position. Ranks
 * of one host are neighbours, so ring algorithms cross each host boundary once. */
static inline int hoop__ring_rank(const hoop_comm_t *c, int pos)
{
    pos = ((pos % c->size) + c->size) % c->size;
    return c->ring != NULL ? c->ring[pos] : pos;
}
static inline int hoop__ring_pos(const hoop_comm_t *c) { return c->ring != NULL ? c->ring_pos : c->rank; }

/* ---- tracing (trace.c) ----
 * Schedule tracing (hoop_comm_set_trace): one line "<kind>#<call> <algo> step <k>: <text>".
 * The check is inline so that untraced runs pay one load and branch per event. */
void hoop__trace_emit(const hoop__call_t *call, int step, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define HOOP_TRACE_STEP(call, step, ...)                                                           \
    do {                                                                                           \
        if ((call)->comm->trace_fn != NULL) hoop__trace_emit((call), (step), __VA_ARGS__);         \
    } while (0)
/* The tracer of HOOP_TRACE=1 (ctx: the communicator): lines go to its log, whatever HOOP_DEBUG
 * says. */
void hoop__trace_to_log(void *ctx, const char *line);

#endif
