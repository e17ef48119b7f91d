/*
 * Broadcast of n bytes from root, in place in c->recvbuf. v = (r - root + p) % p is the rank
 * relative to the root.
 *
 * Small (the plan's small variant, n <= small_bytes): base/tree.h's binomial tree over v.
 *   v != 0 receives the whole buffer from v - lowbit(v); then every node (root included) sends it
 *   to v + 2^j for 2^j < lowbit(v) (root: 2^j < p), largest subtree first.
 *   Cost: ceil(log2 p) * (alpha + n*beta).
 *
 * Large: pipelined chain root = v0 -> v1 -> ... -> v(p-1), in m = ceil(n / chunk) chunks.
 *   step k: v receives chunk k from v-1 while chunk k-1 is on its way to v+1; at most WINDOW
 *   receives are posted ahead and WINDOW sends are outstanding.
 *   Cost: (p - 2 + m) * (alpha + (n/m)*beta), about n*beta for m >> p.
 */
#include "base/tree.h"
#include "collectives/coll.h"

enum { WINDOW = 8 };

static hoop_result_t tree(const hoop__call_t *c, char *buf, size_t n)
{
    int p = c->comm->size, r = c->comm->rank, v = (r - c->root + p) % p;
    int kids[HOOP__TREE_MAX_KIDS], nk = hoop__tree_kids(v, p, kids);
    if (v != 0) {
        hoop__xfer_t x;
        hoop__xrecv(c, &x, (hoop__tree_parent(v) + c->root) % p, buf, n);
        hoop_result_t rc = hoop__xwait1(c, &x);
        if (rc != HOOP_OK) return rc;
    }
    hoop__xfer_t xs[HOOP__TREE_MAX_KIDS];
    hoop__xfer_t *ptrs[HOOP__TREE_MAX_KIDS];
    /* tree.h lists the children smallest subtree first; the largest goes first, as its subtree
     * has the most levels still to pass the buffer down. */
    for (int k = 0; k < nk; k++) {
        hoop__xsend(c, &xs[k], (kids[nk - 1 - k] + c->root) % p, buf, n);
        ptrs[k] = &xs[k];
    }
    return hoop__xwait(c, ptrs, nk);
}

/* One link of a chain: receive from left (none: < 0), pass on to right (none: < 0), chunk by
 * chunk. */
static hoop_result_t chain(const hoop__call_t *c, char *buf, size_t n, size_t chunk, int left,
                           int right)
{
    size_t m = n == 0 ? 1 : (n - 1) / chunk + 1;
    hoop__xfer_t rx[WINDOW], sx[WINDOW];
    hoop_result_t rc;
    size_t posted = 0;

    if (left >= 0)
        for (; posted < m && posted < WINDOW; posted++)
            hoop__xrecv(c, &rx[posted % WINDOW], left, buf + posted * chunk,
                        n - posted * chunk < chunk ? n - posted * chunk : chunk);
    for (size_t k = 0; k < m; k++) {
        size_t off = k * chunk, len = n - off < chunk ? n - off : chunk;
        if (left >= 0) {
            if ((rc = hoop__xwait1(c, &rx[k % WINDOW])) != HOOP_OK) return rc;
            if (posted < m) {
                size_t o = posted * chunk;
                hoop__xrecv(c, &rx[posted % WINDOW], left, buf + o, n - o < chunk ? n - o : chunk);
                posted++;
            }
        }
        if (right >= 0) {
            /* The slot's previous send (k - WINDOW) must be done before it is reused. */
            if (k >= WINDOW && (rc = hoop__xwait1(c, &sx[k % WINDOW])) != HOOP_OK) return rc;
            hoop__xsend(c, &sx[k % WINDOW], right, buf + off, len);
        }
    }
    if (right >= 0) {
        hoop__xfer_t *ptrs[WINDOW];
        int k = 0;
        for (size_t i = m > WINDOW ? m - WINDOW : 0; i < m; i++) ptrs[k++] = &sx[i % WINDOW];
        return hoop__xwait(c, ptrs, k);
    }
    return HOOP_OK;
}

hoop_result_t hoop__broadcast(hoop__call_t *c)
{
    hoop_comm_t *comm = c->comm;
    /* The entry point checked that this product fits. */
    size_t ds = hoop__dsize(c), n = c->count * ds;
    char none, *buf = n > 0 ? c->recvbuf : &none;
    if (comm->rank == c->root && c->sendbuf != NULL && c->sendbuf != c->recvbuf && n > 0)
        hoop__mem_move(c, buf, c->sendbuf, n);
    if (comm->size == 1) return HOOP_OK;
    if (c->plan.small) return tree(c, buf, n);
    int p = comm->size, r = comm->rank, v = (r - c->root + p) % p;
    return hoop__broadcast_chain(c, buf, n, v > 0 ? (r - 1 + p) % p : -1,
                                 v < p - 1 ? (r + 1) % p : -1);
}

hoop_result_t hoop__broadcast_chain(const hoop__call_t *c, void *buf, size_t n, int left, int right)
{
    /* Whole elements per chunk keep messages readable in traces. */
    size_t ds = hoop__dsize(c), chunk = c->comm->agreed.chunk_bytes / ds * ds;
    if (chunk == 0) chunk = ds;
    char none;
    return chain(c, n > 0 ? buf : &none, n, chunk, left, right);
}
