/*
 * Reduce of N elements (n bytes) to root. v = (r - root + p) % p is the rank relative to the root.
 *
 * Small (the plan's small variant: n <= small_bytes, or on up to 4 ranks n <= 256 x small_bytes;
 * plan.c says why): binomial tree, the mirror of broadcast's.
 *   v receives from its children v + 2^j (2^j < lowbit(v), or < p for the root), all posted at
 *   once, and folds them in increasing j: acc = acc op child. Child v + 2^j holds the ranks
 *   [v + 2^j, v + 2^(j+1)), so every result is x[v0] op x[v0+1] op ... in relative rank order,
 *   whatever the arrival order. Then v sends acc to v - lowbit(v).
 *   Cost: ceil(log2 p) * (alpha + n*beta + n*gamma).
 *
 * Large: Rabenseifner. A ring reduce-scatter (reduce_scatter.c, pipelined in chunks) leaves rank i
 * with segment i (hoop__part(N, p, i)) fully reduced and AVG finished; then every rank sends its
 * segment to the root, which receives them all at once straight into recvbuf.
 *   Cost: (p - 1)*alpha + 2*(p-1)/p * n*beta + (p-1)/p * n*gamma, plus alpha for the gather.
 *
 * In place at the root (sendbuf == recvbuf): the root's segment is reduced over its own input
 * chunk by chunk, and the other segments arrive only after the reduce-scatter is done.
 */
#include <stdlib.h>

#include "collectives/coll.h"

enum { MAX_CHILDREN = 32, ALIGN = 64 };

static size_t align_up(size_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

static hoop_result_t no_memory(hoop_comm_t *comm, size_t bytes)
{
    hoop__comm_fail(comm, HOOP_ERR_NO_MEMORY, "reduce: no memory for %zu bytes of scratch", bytes);
    return HOOP_ERR_NO_MEMORY;
}

static hoop_result_t tree(const hoop__call_t *c, const char *in, char *out, size_t n)
{
    hoop_comm_t *comm = c->comm;
    int p = comm->size, r = comm->rank;
    long v = (r - c->root + p) % p;
    long children[MAX_CHILDREN];
    int nch = 0;
    long mask = 1;
    for (; mask < p && !(v & mask); mask <<= 1)
        if (v + mask < p) children[nch++] = v + mask;
    int parent = v == 0 ? -1 : (int)((v - mask + c->root) % p);

    if (nch == 0) { /* a leaf sends its input as is */
        hoop__xfer_t x;
        hoop__xsend(c, &x, parent, in, n);
        return hoop__xwait1(c, &x);
    }
    /* Received operands, then (not at the root) the partial result. */
    size_t slot = align_up(n);
    size_t need = slot * (size_t)nch + (v != 0 ? slot : 0) + ALIGN;
    char *s = hoop__scratch(c, need);
    if (s == NULL) return no_memory(comm, need);
    char *acc = v == 0 ? out : s + slot * (size_t)nch;
    hoop__xfer_t xs[MAX_CHILDREN];
    for (int i = 0; i < nch; i++)
        hoop__xrecv(c, &xs[i], (int)((children[i] + c->root) % p), s + slot * (size_t)i, n);
    const char *cur = in;
    size_t count = n / hoop__dsize(c);
    for (int i = 0; i < nch; i++) {
        hoop_result_t rc = hoop__xwait1(c, &xs[i]);
        if (rc != HOOP_OK) return rc;
        /* acc may be the root's recvbuf, equal to in when in place: an exact alias is allowed. */
        if (count > 0) hoop__mem_reduce(c, acc, cur, s + slot * (size_t)i, count);
        cur = acc;
    }
    if (v == 0) {
        if (c->op == HOOP_AVG && count > 0) hoop__mem_avg_finish(c, out, count);
        return HOOP_OK;
    }
    hoop__xfer_t x;
    hoop__xsend(c, &x, parent, acc, n);
    return hoop__xwait1(c, &x);
}

static hoop_result_t rabenseifner(const hoop__call_t *c, const char *in, char *out, size_t count)
{
    hoop_comm_t *comm = c->comm;
    int p = comm->size, r = comm->rank, root = c->root;
    size_t ds = hoop__dsize(c), off, len;
    hoop__part(count, p, r, &off, &len);
    /* Non-roots reduce their segment into scratch; the root straight into recvbuf. */
    char *seg_out = r == root ? out + off * ds : NULL;
    size_t core = align_up(hoop__rs_ring_scratch(c, in, count, seg_out));
    /* The root's transfers are host structures: in the scratch space only when that is host
     * memory, else apart. */
    size_t xbytes = (size_t)p * (sizeof(hoop__xfer_t) + sizeof(hoop__xfer_t *));
    int host = c->mem == HOOP__MEM_HOST;
    size_t extra = r == root ? (host ? xbytes : 0) : len * ds;
    char *s = hoop__scratch(c, core + extra);
    if (s == NULL) return no_memory(comm, core + extra);
    if (seg_out == NULL) seg_out = s + core;
    hoop_result_t rc = hoop__rs_ring(c, in, count, seg_out, s);
    if (rc != HOOP_OK) return rc;

    if (r != root) {
        hoop__xfer_t x;
        hoop__xsend(c, &x, root, seg_out, len * ds);
        return hoop__xwait1(c, &x);
    }
    char *xm = host ? s + core : malloc(xbytes);
    if (xm == NULL) return no_memory(comm, xbytes);
    hoop__xfer_t *xs = (hoop__xfer_t *)(void *)xm;
    hoop__xfer_t **ptrs = (hoop__xfer_t **)(void *)(xm + (size_t)p * sizeof(hoop__xfer_t));
    for (int i = 0; i < p; i++) {
        ptrs[i] = NULL;
        if (i == r) continue;
        hoop__part(count, p, i, &off, &len);
        hoop__xrecv(c, &xs[i], i, out + off * ds, len * ds);
        ptrs[i] = &xs[i];
    }
    rc = hoop__xwait(c, ptrs, p);
    if (!host) free(xm);
    return rc;
}

hoop_result_t hoop__reduce_coll(hoop__call_t *c)
{
    hoop_comm_t *comm = c->comm;
    int p = comm->size, r = comm->rank;
    /* The entry point checked that this product fits. */
    size_t ds = hoop__dsize(c), n = c->count * ds;
    char none = 0;
    const char *in = n > 0 ? c->sendbuf : &none;
    /* Only the root's recvbuf is touched. */
    char *out = r == c->root && n > 0 ? c->recvbuf : &none;
    if (p == 1) {
        if (out != in && n > 0) hoop__mem_move(c, out, in, n);
        return HOOP_OK; /* AVG over one rank divides by 1 */
    }
    if (c->plan.small) return tree(c, in, out, n);
    return rabenseifner(c, in, out, c->count);
}
