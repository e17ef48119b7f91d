/* What algorithms see: the call, point-to-point transfers to peers, scratch space. Never sockets. */
#ifndef HOOP_COLL_H
#define HOOP_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "core/comm.h"
#include "reduce/reduce.h"
#include "transport/transport.h"

typedef enum {
    HOOP_ALGO_AUTO = 0,
    HOOP_ALGO_RING,
    HOOP_ALGO_RD,   /* recursive doubling */
    HOOP_ALGO_PS,   /* parameter server: rank 0 reduces everything */
    HOOP_ALGO_PS_SHARDED, /* every rank serves 1/p of the buffer */
    HOOP_ALGO_COUNT
} hoop__algo_t;

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

/* Scratch memory owned by the communicator, valid until the call returns; NULL if out of memory. */
void *hoop__scratch(hoop_comm_t *c, size_t bytes);

/* Balanced split of n items into parts: part i starts at *off and holds *len items; the first
 * n % parts parts hold one more. */
static inline void hoop__part(size_t n, int parts, int i, size_t *off, size_t *len)
{
    size_t q = n / (size_t)parts, r = n % (size_t)parts, ui = (size_t)i;
    *off = ui * q + (ui < r ? ui : r);
    *len = q + (ui < r ? 1 : 0);
}

static inline size_t hoop__dsize(const hoop__call_t *c) { return hoop_dtype_size(c->dtype); }

/* Picks and runs the algorithm of call (select.c). */
hoop_result_t hoop__collective_run(hoop__call_t *call);
/* The algorithm that will run call (resolves HOOP_ALGO_AUTO by size and rank count). */
int hoop__algo_choose(const hoop__call_t *call);
const char *hoop__algo_name(int algo);
int hoop__algo_parse(const char *s); /* -1 if unknown */

/* Schedule tracing (hoop_comm_set_trace): one line "<kind>#<call> <algo> step <k>: <text>".
 * The check is inline so that untraced runs pay one load and branch per event. */
void hoop__trace_emit(const hoop__call_t *call, int step, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define HOOP_TRACE_STEP(call, step, ...)                                                           \
    do {                                                                                           \
        if ((call)->comm->trace_fn != NULL) hoop__trace_emit((call), (step), __VA_ARGS__);         \
    } while (0)

/* Algorithms: one file each. */
hoop_result_t hoop__allreduce_ring(hoop__call_t *c);
hoop_result_t hoop__allreduce_rd(hoop__call_t *c);
hoop_result_t hoop__allreduce_ps(hoop__call_t *c);
hoop_result_t hoop__allreduce_ps_sharded(hoop__call_t *c);
hoop_result_t hoop__broadcast(hoop__call_t *c);      /* binomial tree small, pipelined chain large */
hoop_result_t hoop__reduce_coll(hoop__call_t *c);    /* binomial tree small, ring reduce-scatter + gather large */
hoop_result_t hoop__allgather_ring(hoop__call_t *c);
hoop_result_t hoop__gather(hoop__call_t *c);
hoop_result_t hoop__scatter(hoop__call_t *c);
hoop_result_t hoop__reduce_scatter_ring(hoop__call_t *c);
/* The ring reduce-scatter core, shared with reduce (reduce_scatter.c). Scratch bytes (never 0) that
 * hoop__rs_ring needs for these buffers; out == NULL stands for an output that does not overlap in. */
size_t hoop__rs_ring_scratch(const hoop__call_t *c, const void *in, size_t total, const void *out);
/* Ring reduce-scatter of total elements at in: block r's result (AVG finished) goes to out.
 * scratch: at least hoop__rs_ring_scratch() bytes, aligned as malloc aligns. Needs p >= 2. */
hoop_result_t hoop__rs_ring(const hoop__call_t *c, const void *in, size_t total, void *out,
                            void *scratch);
hoop_result_t hoop__alltoall_pairwise(hoop__call_t *c);
hoop_result_t hoop__barrier_dissemination(hoop__call_t *c);

/* Ring order (see hoop_comm.ring): the rank at ring position pos, and this rank's position. Ranks
 * of one host are neighbours, so ring algorithms cross each host boundary once. */
static inline int hoop__ring_rank(const hoop_comm_t *c, int pos)
{
    pos = ((pos % c->size) + c->size) % c->size;
    return c->ring != NULL ? c->ring[pos] : pos;
}
static inline int hoop__ring_pos(const hoop_comm_t *c) { return c->ring != NULL ? c->ring_pos : c->rank; }

#endif
