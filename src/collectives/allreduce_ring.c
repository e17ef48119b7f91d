/*
 * Ring all-reduce: a reduce-scatter then an all-gather around the ring r -> r+1.
 *
 * The buffer is cut into p segments. In reduce-scatter step k (0 <= k < p-1) rank r sends segment
 * r-k and receives segment r-k-1, which it reduces with its own copy; after p-1 steps rank r holds
 * segment r+1 fully reduced. The all-gather steps then pass the finished segments on:
 *
 *   p = 4, segment s written as the ranks summed into it so far
 *                     rank 0        rank 1        rank 2        rank 3
 *   RS step 0 sends   s0{0}         s1{1}         s2{2}         s3{3}
 *   RS step 1 sends   s3{3,0}       s0{0,1}       s1{1,2}       s2{2,3}
 *   RS step 2 sends   s2{2,3,0}     s3{3,0,1}     s0{0,1,2}     s1{1,2,3}
 *   owns afterwards   s1 (all)      s2 (all)      s3 (all)      s0 (all)
 *   AG steps 0..2 forward the owned segment, then each one just received.
 *
 * Cost: 2(p-1) a + 2((p-1)/p) n b + ((p-1)/p) n c: each rank sends and receives 2(p-1)/p of the
 * buffer whatever p is, which is why the ring wins for large buffers (a parameter server moves
 * the whole buffer p-1 times through one rank).
 *
 * Pipelining: every segment is cut into the same number of chunks (about HOOP_CHUNK_BYTES each) and
 * the unit of work is (step, chunk). Chunk c of step k+1 leaves as soon as chunk c of step k has
 * been received and reduced, so sending, receiving and reducing overlap. Reduce-scatter chunks land
 * in a few staging slots; all-gather chunks land in place.
 *
 * Segment s is reduced as ((x_s op x_s+1) op x_s+2) ... by the ranks it passes, and then copied,
 * so every rank ends with the same bits. r above is a position in the communicator's ring order
 * (hoop__ring_rank), which keeps each host's ranks adjacent.
 */
#include <stdlib.h>

#include "collectives/coll.h"

#define STAGING_SLOTS 4

typedef struct ring {
    hoop__call_t *c;
    int p, r;
    size_t es, n;
    int chunks; /* chunks per segment */
    const uint8_t *in;
    uint8_t *out;
} ring_t;

static int mod(int a, int p) { return ((a % p) + p) % p; }

/* Byte range of chunk c of segment s. */
static void chunk_range(const ring_t *g, int s, int c, size_t *off, size_t *len)
{
    size_t so, sl, co, cl;
    hoop__part(g->n, g->p, s, &so, &sl);
    hoop__part(sl, g->chunks, c, &co, &cl);
    *off = (so + co) * g->es;
    *len = cl * g->es;
}

/* Segment sent at unit step k (0 .. 2p-3) and the one received. */
static int seg_sent(const ring_t *g, int k)
{
    return k < g->p - 1 ? mod(g->r - k, g->p) : mod(g->r + 1 - (k - (g->p - 1)), g->p);
}
static int seg_recv(const ring_t *g, int k)
{
    return k < g->p - 1 ? mod(g->r - k - 1, g->p) : mod(g->r - (k - (g->p - 1)), g->p);
}

hoop_result_t hoop__allreduce_ring(hoop__call_t *c)
{
    hoop_comm_t *comm = c->comm;
    ring_t g = {.c = c,
                .p = comm->size,
                .r = hoop__ring_pos(comm),
                .es = hoop__dsize(c),
                .n = c->count,
                .in = c->sendbuf,
                .out = c->recvbuf};
    if (g.p == 1) {
        if (c->sendbuf != c->recvbuf) hoop__mem_copy(c, c->recvbuf, c->sendbuf, g.n * g.es);
        return HOOP_OK;
    }
    size_t seg_max = (g.n + (size_t)g.p - 1) / (size_t)g.p;
    size_t chunk_elems = comm->agreed.chunk_bytes / g.es;
    if (chunk_elems == 0) chunk_elems = 1;
    size_t nch = (seg_max + chunk_elems - 1) / chunk_elems;
    g.chunks = nch == 0 ? 1 : (int)nch;
    size_t slot_bytes = ((seg_max + (size_t)g.chunks - 1) / (size_t)g.chunks) * g.es;

    int steps = 2 * (g.p - 1);
    int units = steps * g.chunks;
    int window = STAGING_SLOTS < units ? STAGING_SLOTS : units;
    uint8_t *staging = hoop__scratch(c, slot_bytes * (size_t)window + 1);
    hoop__xfer_t *sends = malloc(sizeof(hoop__xfer_t) * (size_t)units);
    hoop__xfer_t *recvs = malloc(sizeof(hoop__xfer_t) * (size_t)units);
    if (staging == NULL || sends == NULL || recvs == NULL) {
        free(sends);
        free(recvs);
        return HOOP_ERR_NO_MEMORY;
    }
    int right = hoop__ring_rank(comm, g.r + 1), left = hoop__ring_rank(comm, g.r - 1);
    size_t off, len;

    /* Unit u = k * chunks + ch. */
#define POST_RECV(u)                                                                               \
    do {                                                                                           \
        int k_ = (u) / g.chunks, ch_ = (u) % g.chunks;                                             \
        chunk_range(&g, seg_recv(&g, k_), ch_, &off, &len);                                        \
        void *dst_ = k_ < g.p - 1 ? staging + (size_t)((u) % window) * slot_bytes : g.out + off;   \
        hoop__xrecv(c, &recvs[u], left, dst_, len);                                                \
    } while (0)

    for (int u = 0; u < window; u++) POST_RECV(u);
    for (int ch = 0; ch < g.chunks; ch++) {
        chunk_range(&g, seg_sent(&g, 0), ch, &off, &len);
        HOOP__TRACE_STEP(c, 0, "rank %d sends segment %d chunk %d (%zu B) to rank %d", comm->rank,
                         seg_sent(&g, 0), ch, len, right);
        hoop__xsend(c, &sends[ch], right, g.in + off, len);
    }

    hoop_result_t rc = HOOP_OK;
    for (int u = 0; u < units && rc == HOOP_OK; u++) {
        int k = u / g.chunks, ch = u % g.chunks;
        rc = hoop__xwait1(c, &recvs[u]);
        if (rc != HOOP_OK) break;
        chunk_range(&g, seg_recv(&g, k), ch, &off, &len);
        if (k < g.p - 1) {
            /* Incoming partial first, own contribution second: a fixed order on every rank. */
            const uint8_t *slot = staging + (size_t)(u % window) * slot_bytes;
            hoop__mem_reduce(c, g.out + off, slot, g.in + off, len / g.es);
            HOOP__TRACE_STEP(c, k,
                             "rank %d receives segment %d chunk %d (%zu B) from rank %d and "
                             "reduces it with its own",
                             comm->rank, seg_recv(&g, k), ch, len, left);
            if (k == g.p - 2 && c->op == HOOP_AVG) hoop__mem_avg_finish(c, g.out + off, len / g.es);
        } else {
            HOOP__TRACE_STEP(c, k,
                             "rank %d receives finished segment %d chunk %d (%zu B) from "
                             "rank %d",
                             comm->rank, seg_recv(&g, k), ch, len, left);
        }
        /* The slot is free again: keep the window full. */
        if (u + window < units) POST_RECV(u + window);
        if (k + 1 < steps) {
            size_t so, sl;
            chunk_range(&g, seg_sent(&g, k + 1), ch, &so, &sl);
            HOOP__TRACE_STEP(c, k + 1, "rank %d sends segment %d chunk %d (%zu B) to rank %d",
                             comm->rank, seg_sent(&g, k + 1), ch, sl, right);
            hoop__xsend(c, &sends[(k + 1) * g.chunks + ch], right, g.out + so, sl);
        }
    }
#undef POST_RECV
    /* The last sends may still be queued in the transport. */
    for (int u = 0; u < units && rc == HOOP_OK; u++) rc = hoop__xwait1(c, &sends[u]);
    free(sends);
    free(recvs);
    return rc;
}
