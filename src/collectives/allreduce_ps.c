/*
 * Parameter-server all-reduce, the schedule data-parallel training used before the ring: every
 * worker sends its whole buffer to one server (rank 0), which reduces and sends the result back.
 *
 *   step 0   worker w -> server: chunk c of w's buffer          (p-1 incoming flows at the server)
 *   step 1   server reduces: x_0 op x_1 op ... op x_p-1          (rank order, so the bits are fixed)
 *   step 2   server -> worker w: chunk c of the result           (p-1 outgoing flows)
 *
 * Cost at the server: 2(p-1) a + 2(p-1) n b + (p-1) n c. The server's link carries (p-1) buffers
 * each way, so the time grows linearly with p, where the ring's stays near 2 n b.
 * Chunks (HOOP_CHUNK_BYTES) pipeline the three steps as in the ring, so the comparison is fair.
 *
 * The sharded variant spreads the server over all ranks: rank j serves shard j (1/p of the buffer).
 *
 *   step 0   every rank r -> rank j: shard j of r's buffer, for every j != r (all-to-all)
 *   step 1   rank j reduces shard j of every rank, in rank order
 *   step 2   rank j -> every rank: the reduced shard j (all-gather)
 *
 * It moves the same 2(p-1)/p n per rank as the ring, but in p-1 simultaneous flows per rank
 * (incast on every link), with 2 a of latency instead of 2(p-1) a.
 */
#include <stdlib.h>

#include "collectives/coll.h"

#define SERVER 0

static hoop_result_t server(hoop__call_t *c, size_t es, size_t n)
{
    hoop_comm_t *comm = c->comm;
    int p = comm->size;
    size_t chunk = comm->agreed.chunk_bytes / es ? comm->agreed.chunk_bytes / es : 1;
    size_t nch = n == 0 ? 1 : (n + chunk - 1) / chunk;
    size_t cbytes = (n < chunk ? n : chunk) * es;
    /* Two sets of p-1 staging slots: chunk k+1 arrives while chunk k is reduced. */
    uint8_t *stage = hoop__scratch(c, 2 * (size_t)(p - 1) * cbytes);
    hoop__xfer_t *recvs = malloc(2 * (size_t)(p - 1) * sizeof(hoop__xfer_t));
    hoop__xfer_t *sends = malloc(nch * (size_t)(p - 1) * sizeof(hoop__xfer_t));
    if (stage == NULL || recvs == NULL || sends == NULL) {
        free(recvs);
        free(sends);
        return HOOP_ERR_NO_MEMORY;
    }
    const uint8_t *in = c->sendbuf;
    uint8_t *out = c->recvbuf;
    hoop_result_t rc = HOOP_OK;

#define SLOT(k, w) (stage + (((k) % 2) * (size_t)(p - 1) + (size_t)(w)-1) * cbytes)
#define RECV(k, w) (&recvs[((k) % 2) * (size_t)(p - 1) + (size_t)(w)-1])
#define CHUNK(k, off, len)                                                                         \
    do {                                                                                           \
        size_t o_, l_;                                                                             \
        o_ = (k)*chunk;                                                                            \
        l_ = n - o_ < chunk ? n - o_ : chunk;                                                      \
        *(off) = o_ * es;                                                                          \
        *(len) = l_ * es;                                                                          \
    } while (0)

    size_t off, len;
    for (int w = 1; w < p; w++) {
        CHUNK(0, &off, &len);
        hoop__xrecv(c, RECV(0, w), w, SLOT(0, w), n == 0 ? 0 : len);
    }
    for (size_t k = 0; k < nch && rc == HOOP_OK; k++) {
        CHUNK(k, &off, &len);
        if (n == 0) off = len = 0;
        if (k + 1 < nch) {
            size_t o2, l2;
            CHUNK(k + 1, &o2, &l2);
            for (int w = 1; w < p; w++) hoop__xrecv(c, RECV(k + 1, w), w, SLOT(k + 1, w), l2);
        }
        for (int w = 1; w < p && rc == HOOP_OK; w++) {
            HOOP__TRACE_STEP(c, 0, "rank %d receives chunk %zu (%zu B) from rank %d", SERVER, k,
                             len, w);
            rc = hoop__xwait1(c, RECV(k, w));
        }
        if (rc != HOOP_OK) break;
        /* x_0 op x_1 first, then each further worker in rank order. */
        size_t cnt = len / es;
        if (p > 1) {
            hoop__mem_reduce(c, out + off, in + off, SLOT(k, 1), cnt);
            for (int w = 2; w < p; w++) hoop__mem_reduce(c, out + off, out + off, SLOT(k, w), cnt);
        }
        if (c->op == HOOP_AVG) hoop__mem_avg_finish(c, out + off, cnt);
        HOOP__TRACE_STEP(c, 1, "rank %d reduces chunk %zu of %d buffers (%zu elements)", SERVER, k,
                         p, cnt);
        for (int w = 1; w < p; w++) {
            HOOP__TRACE_STEP(c, 2, "rank %d sends reduced chunk %zu (%zu B) to rank %d", SERVER, k,
                             len, w);
            hoop__xsend(c, &sends[k * (size_t)(p - 1) + (size_t)w - 1], w, out + off, len);
        }
    }
    for (size_t i = 0; i < nch * (size_t)(p - 1) && rc == HOOP_OK; i++)
        rc = hoop__xwait1(c, &sends[i]);
#undef SLOT
#undef RECV
    free(recvs);
    free(sends);
    return rc;
}

static hoop_result_t worker(hoop__call_t *c, size_t es, size_t n)
{
    hoop_comm_t *comm = c->comm;
    size_t chunk = comm->agreed.chunk_bytes / es ? comm->agreed.chunk_bytes / es : 1;
    size_t nch = n == 0 ? 1 : (n + chunk - 1) / chunk;
    hoop__xfer_t *x = malloc(2 * nch * sizeof(hoop__xfer_t));
    if (x == NULL) return HOOP_ERR_NO_MEMORY;
    const uint8_t *in = c->sendbuf;
    uint8_t *out = c->recvbuf;
    size_t off, len;
    /* In place is safe: chunk k comes back only after the server has all of it. */
    for (size_t k = 0; k < nch; k++) {
        CHUNK(k, &off, &len);
        if (n == 0) off = len = 0;
        HOOP__TRACE_STEP(c, 0, "rank %d sends chunk %zu (%zu B) to rank %d", comm->rank, k, len,
                         SERVER);
        hoop__xsend(c, &x[2 * k], SERVER, in + off, len);
        hoop__xrecv(c, &x[2 * k + 1], SERVER, out + off, len);
    }
    hoop_result_t rc = HOOP_OK;
    for (size_t i = 0; i < 2 * nch && rc == HOOP_OK; i++) rc = hoop__xwait1(c, &x[i]);
    free(x);
    return rc;
}
#undef CHUNK

hoop_result_t hoop__allreduce_ps(hoop__call_t *c)
{
    size_t es = hoop__dsize(c), n = c->count;
    if (c->comm->size == 1) {
        if (c->sendbuf != c->recvbuf) hoop__mem_copy(c, c->recvbuf, c->sendbuf, n * es);
        return HOOP_OK;
    }
    return c->comm->rank == SERVER ? server(c, es, n) : worker(c, es, n);
}

hoop_result_t hoop__allreduce_ps_sharded(hoop__call_t *c)
{
    hoop_comm_t *comm = c->comm;
    int p = comm->size, r = comm->rank;
    size_t es = hoop__dsize(c), n = c->count;
    const uint8_t *in = c->sendbuf;
    uint8_t *out = c->recvbuf;
    if (p == 1) {
        if (in != out) hoop__mem_copy(c, out, in, n * es);
        return HOOP_OK;
    }
    size_t my_off, my_len;
    hoop__part(n, p, r, &my_off, &my_len);
    uint8_t *stage = hoop__scratch(c, (size_t)p * my_len * es);
    hoop__xfer_t *x = malloc(4 * (size_t)p * sizeof(hoop__xfer_t));
    if (stage == NULL || x == NULL) {
        free(x);
        return HOOP_ERR_NO_MEMORY;
    }
    hoop__xfer_t *rin = x, *sout = x + p, *rres = x + 2 * p, *sres = x + 3 * p;
    /* Step 0: my shard of everyone's buffer into staging; my copy of shard j to its server. */
    for (int j = 0; j < p; j++) {
        if (j == r) continue;
        size_t off, len;
        hoop__part(n, p, j, &off, &len);
        hoop__xrecv(c, &rin[j], j, stage + (size_t)j * my_len * es, my_len * es);
        HOOP__TRACE_STEP(c, 0, "rank %d sends shard %d (%zu B) to rank %d", r, j, len * es, j);
        hoop__xsend(c, &sout[j], j, in + off * es, len * es);
    }
    /* The results of the other shards land in place; posted now so they never wait on us. */
    for (int j = 0; j < p; j++) {
        if (j == r) continue;
        size_t off, len;
        hoop__part(n, p, j, &off, &len);
        hoop__xrecv(c, &rres[j], j, out + off * es, len * es);
    }
    hoop_result_t rc = HOOP_OK;
    for (int j = 0; j < p && rc == HOOP_OK; j++)
        if (j != r) rc = hoop__xwait1(c, &rin[j]);
    /* Outgoing shards must have left before the results overwrite them in place. */
    for (int j = 0; j < p && rc == HOOP_OK; j++)
        if (j != r) rc = hoop__xwait1(c, &sout[j]);
    if (rc == HOOP_OK) {
        /* Step 1: in rank order; the own contribution sits in its staging slot, since in place
         * the accumulator overwrites it. */
        uint8_t *acc = out + my_off * es;
        hoop__mem_copy(c, stage + (size_t)r * my_len * es, in + my_off * es, my_len * es);
        hoop__mem_reduce(c, acc, stage, stage + my_len * es, my_len);
        for (int j = 2; j < p; j++)
            hoop__mem_reduce(c, acc, acc, stage + (size_t)j * my_len * es, my_len);
        if (c->op == HOOP_AVG) hoop__mem_avg_finish(c, acc, my_len);
        HOOP__TRACE_STEP(c, 1, "rank %d reduces shard %d of %d buffers (%zu elements)", r, r, p,
                         my_len);
        /* Step 2: the reduced shard to everyone. */
        for (int j = 0; j < p; j++) {
            if (j == r) continue;
            HOOP__TRACE_STEP(c, 2, "rank %d sends reduced shard %d (%zu B) to rank %d", r, r,
                             my_len * es, j);
            hoop__xsend(c, &sres[j], j, acc, my_len * es);
        }
        for (int j = 0; j < p && rc == HOOP_OK; j++)
            if (j != r) rc = hoop__xwait1(c, &rres[j]);
        for (int j = 0; j < p && rc == HOOP_OK; j++)
            if (j != r) rc = hoop__xwait1(c, &sres[j]);
    }
    free(x);
    return rc;
}
