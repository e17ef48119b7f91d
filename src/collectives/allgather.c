/*
 * All-gather, ring: each rank contributes n bytes; recvbuf holds p blocks, block i from rank i.
 *
 *   step s = 0 .. p-2: rank r sends block (r - s) % p to r + 1 and receives block (r - s - 1) % p
 *                      from r - 1, straight into its place in recvbuf
 *
 * Each block is cut into m = ceil(n / chunk) chunks; message t = s*m + k carries chunk k of step s.
 * Messages are posted in t order (the order they match in) and at most WINDOW are outstanding per
 * direction. Sending message t of step s >= 1 needs message t - m received (it forwards that chunk),
 * so forwarding chunk k overlaps the arrival of the chunks after it. Every wait is on a message
 * posted earlier on both ends, which is why the schedule cannot deadlock.
 *
 * Cost: (p - 1) * (alpha + n*beta) for m = 1, tending to (p - 1)*n*beta + (p - 2 + m)*alpha when
 * pipelined; optimal in bandwidth. In place when sendbuf lies anywhere in recvbuf: the own block is
 * moved first.
 */
#include "collectives/coll.h"

enum { WINDOW = 8 };

static hoop_result_t wait_pair(const hoop__call_t *c, hoop__xfer_t *rx, hoop__xfer_t *sx)
{
    hoop__xfer_t *xs[2] = {rx, sx};
    return hoop__xwait(c, xs, 2);
}

hoop_result_t hoop__allgather_ring(hoop__call_t *c)
{
    hoop_comm_t *comm = c->comm;
    int p = comm->size, r = comm->rank;
    /* The entry point checked that this product fits. */
    size_t ds = hoop__dsize(c), n = c->count * ds;
    char none = 0;
    char *out = n > 0 ? c->recvbuf : &none;
    if (n > 0 && out + (size_t)r * n != (const char *)c->sendbuf)
        hoop__mem_move(c, out + (size_t)r * n, c->sendbuf, n);
    if (p == 1) return HOOP_OK;

    size_t chunk = comm->agreed.chunk_bytes / ds * ds;
    if (chunk == 0) chunk = ds;
    size_t m = n == 0 ? 1 : (n - 1) / chunk + 1;
    size_t msgs = (size_t)(p - 1) * m;
    /* The schedule runs over ring positions; blocks stay indexed by rank. */
    int v = hoop__ring_pos(comm);
    int left = hoop__ring_rank(comm, v - 1), right = hoop__ring_rank(comm, v + 1);
    hoop__xfer_t rx[WINDOW], sx[WINDOW];
    hoop_result_t rc;
    size_t w = 0; /* messages below w are complete both ways */

    for (size_t t = 0; t < msgs; t++) {
        size_t s = t / m, k = t % m;
        size_t rb = (size_t)hoop__ring_rank(comm, v - (int)s - 1);
        size_t sb = (size_t)hoop__ring_rank(comm, v - (int)s);
        size_t off = k * chunk, len = n - off < chunk ? n - off : chunk;
        hoop__xrecv(c, &rx[t % WINDOW], left, out + rb * n + off, len);
        if (s >= 1)
            for (; w <= t - m; w++)
                if ((rc = wait_pair(c, &rx[w % WINDOW], &sx[w % WINDOW])) != HOOP_OK) return rc;
        hoop__xsend(c, &sx[t % WINDOW], right, out + sb * n + off, len);
        for (; w + WINDOW <= t + 1; w++)
            if ((rc = wait_pair(c, &rx[w % WINDOW], &sx[w % WINDOW])) != HOOP_OK) return rc;
    }
    for (; w < msgs; w++)
        if ((rc = wait_pair(c, &rx[w % WINDOW], &sx[w % WINDOW])) != HOOP_OK) return rc;
    return HOOP_OK;
}
