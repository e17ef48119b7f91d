/*
 * Reduce-scatter, ring: the input is p blocks (block b = part b of hoop__part(total, p)); rank r
 * ends with block r reduced over all ranks. Also the first half of the large reduce (reduce.c).
 *
 *   step s = 0 .. p-2: rank r sends block (r - s - 1) % p to r + 1 and receives block
 *                      (r - s - 2) % p from r - 1, then reduces: acc = received op own input
 *   step 0 sends the own input; step s >= 1 sends what step s - 1 reduced; step p - 2 receives
 *   block r and its reduction is the result.
 *
 * Operand order: block b is folded around the ring starting at rank b + 1,
 * ((x[b+1] op x[b+2]) op ...) op x[b], fixed by the schedule and independent of timing.
 *
 * Pipelining: blocks are cut into m chunks, and chunks into groups of GROUP. For each group the
 * whole ring runs before the next group starts; message t (group g, step s, chunk k of the group)
 * is numbered g*GROUP*(p-1) + s*gs + k, gs being the group's size. Messages are posted in t
 * order, at most WINDOW outstanding per direction; sending message t of step s >= 1 needs message
 * t - gs received and reduced. Every wait is for a message both ends posted before, so the
 * schedule cannot deadlock. Grouping bounds the scratch to WINDOW receive slots plus GROUP slots of
 * reduced chunks awaiting their send, whatever the buffer size.
 *
 * Cost: (p - 1) * (alpha + (N/p)*beta + (N/p)*gamma) unpipelined; pipelined, transfer and
 * reduction of consecutive chunks overlap. Optimal in bandwidth.
 *
 * In place (sendbuf == recvbuf, recvbuf holding the p*recvcount input): the result goes to the start
 * of recvbuf. The final chunk k is written over input block 0's chunk k only after every read of it
 * (those come earlier in t order and are waited first), so no copy is needed. NCCL's placement,
 * recvbuf = sendbuf + r*recvcount, is an exact alias of the own block and needs none either; any
 * other overlap gets a staging copy of the result.
 */
#include "collectives/coll.h"

enum { WINDOW = 4, GROUP = 4, ALIGN = 64 };

typedef struct {
    size_t ds;     /* element size */
    size_t ce;     /* elements per chunk */
    size_t m;      /* chunks per block (of the largest block) */
    size_t slot;   /* bytes per scratch slot, aligned */
    size_t nout;   /* slots of reduced chunks */
    int direct;    /* result written straight to out */
    size_t outlen; /* bytes of the result */
} plan_t;

static size_t align_up(size_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

static void plan(const hoop__call_t *c, const void *in, size_t total, const void *out, plan_t *pl)
{
    int p = c->comm->size, r = c->comm->rank;
    size_t off, len, off_r, len_r;
    pl->ds = hoop__dsize(c);
    pl->ce = c->comm->agreed.chunk_bytes / pl->ds;
    if (pl->ce == 0) pl->ce = 1;
    hoop__part(total, p, 0, &off, &len); /* block 0 is the largest */
    pl->m = len == 0 ? 1 : (len - 1) / pl->ce + 1;
    pl->slot = align_up((len < pl->ce ? len : pl->ce) * pl->ds);
    pl->nout = p > 2 ? GROUP : 0;
    hoop__part(total, p, r, &off_r, &len_r);
    pl->outlen = len_r * pl->ds;
    const char *i0 = in, *o0 = out;
    if (out == NULL || pl->outlen == 0) {
        pl->direct = 1;
    } else {
        uintptr_t a = (uintptr_t)i0, b = (uintptr_t)o0;
        int overlap = b < a + total * pl->ds && a < b + pl->outlen;
        /* Exact alias of the own block: each chunk is read by its own final reduction only.
         * out == in with equal blocks: see the file comment. */
        pl->direct = !overlap || o0 == i0 + off_r * pl->ds || (o0 == i0 && total % (size_t)p == 0);
    }
}

size_t hoop__rs_ring_scratch(const hoop__call_t *c, const void *in, size_t total, const void *out)
{
    plan_t pl;
    plan(c, in, total, out, &pl);
    return (WINDOW + pl.nout) * pl.slot + (pl.direct ? 0 : align_up(pl.outlen)) + ALIGN;
}

/* Where message t sits in the schedule. */
static void decode(size_t t, int p, size_t m, size_t *s, size_t *k, size_t *gs)
{
    size_t per = (size_t)GROUP * (size_t)(p - 1);
    size_t g = t / per, rem = t % per;
    *gs = m - g * GROUP < GROUP ? m - g * GROUP : GROUP;
    *s = rem / *gs;
    *k = g * GROUP + rem % *gs;
}

/* Chunk k of block b: element offset into the buffer and length. */
static void chunk_of(size_t total, int p, size_t b, size_t k, size_t ce, size_t *off, size_t *len)
{
    size_t boff, blen;
    hoop__part(total, p, (int)b, &boff, &blen);
    size_t co = k * ce;
    *len = blen > co ? (blen - co < ce ? blen - co : ce) : 0;
    *off = *len > 0 ? boff + co : 0; /* empty chunks point at the base */
}

typedef struct {
    const hoop__call_t *c;
    const char *in;
    size_t total;
    plan_t pl;
    char *rslot, *oslot, *fin;
    size_t fin_off; /* element offset of block r, where fin starts */
    hoop__xfer_t rx[WINDOW], sx[WINDOW];
} ring_t;

/* Waits for message w both ways and reduces what arrived. */
static hoop_result_t complete(ring_t *g, size_t w)
{
    const hoop__call_t *c = g->c;
    int p = c->comm->size, r = c->comm->rank;
    hoop__xfer_t *xs[2] = {&g->rx[w % WINDOW], &g->sx[w % WINDOW]};
    hoop_result_t rc = hoop__xwait(c, xs, 2);
    if (rc != HOOP_OK) return rc;
    size_t s, k, gs, off, len, ds = g->pl.ds, up = (size_t)p;
    decode(w, p, g->pl.m, &s, &k, &gs);
    size_t rb = ((size_t)r + 2 * up - s - 2) % up;
    chunk_of(g->total, p, rb, k, g->pl.ce, &off, &len);
    if (len == 0) return HOOP_OK;
    const char *got = g->rslot + (w % WINDOW) * g->pl.slot;
    if (s + 2 < up) {
        hoop__mem_reduce(c, g->oslot + (w % GROUP) * g->pl.slot, got, g->in + off * ds, len);
    } else { /* rb == r: the result */
        char *dst = g->fin + (off - g->fin_off) * ds;
        hoop__mem_reduce(c, dst, got, g->in + off * ds, len);
        if (c->op == HOOP_AVG) hoop__mem_avg_finish(c, dst, len);
    }
    return HOOP_OK;
}

hoop_result_t hoop__rs_ring(const hoop__call_t *c, const void *in, size_t total, void *out,
                            void *scratch)
{
    int p = c->comm->size, r = c->comm->rank;
    ring_t g;
    g.c = c;
    g.in = in;
    g.total = total;
    plan(c, in, total, out, &g.pl);
    size_t ds = g.pl.ds, ce = g.pl.ce, m = g.pl.m, len_r;
    g.rslot = scratch;
    g.oslot = g.rslot + WINDOW * g.pl.slot;
    g.fin = g.pl.direct ? out : g.oslot + g.pl.nout * g.pl.slot;
    hoop__part(total, p, r, &g.fin_off, &len_r);
    size_t msgs = (size_t)(p - 1) * m, up = (size_t)p;
    int left = (r - 1 + p) % p, right = (r + 1) % p;
    hoop_result_t rc;
    size_t w = 0; /* messages below w are complete both ways and reduced */

    for (size_t t = 0; t < msgs; t++) {
        size_t s, k, gs, off, len;
        decode(t, p, m, &s, &k, &gs);
        size_t rb = ((size_t)r + 2 * up - s - 2) % up, sb = ((size_t)r + 2 * up - s - 1) % up;
        chunk_of(total, p, rb, k, ce, &off, &len);
        hoop__xrecv(c, &g.rx[t % WINDOW], left, g.rslot + (t % WINDOW) * g.pl.slot, len * ds);
        chunk_of(total, p, sb, k, ce, &off, &len);
        const char *src = g.in + off * ds;
        if (s > 0) {
            /* Forward the chunk reduced from message t - gs, once it is in. */
            for (; w <= t - gs; w++)
                if ((rc = complete(&g, w)) != HOOP_OK) return rc;
            src = g.oslot + ((t - gs) % GROUP) * g.pl.slot;
        }
        hoop__xsend(c, &g.sx[t % WINDOW], right, src, len * ds);
        for (; w + WINDOW <= t + 1; w++)
            if ((rc = complete(&g, w)) != HOOP_OK) return rc;
    }
    for (; w < msgs; w++)
        if ((rc = complete(&g, w)) != HOOP_OK) return rc;
    if (!g.pl.direct) hoop__mem_copy(c, out, g.fin, g.pl.outlen);
    return HOOP_OK;
}

hoop_result_t hoop__reduce_scatter_ring(hoop__call_t *c)
{
    hoop_comm_t *comm = c->comm;
    int p = comm->size;
    /* The entry point checked that these products fit. */
    size_t ds = hoop__dsize(c), n = c->count * ds, total = n * (size_t)p;
    char none = 0;
    const char *in = total > 0 ? c->sendbuf : &none;
    char *out = total > 0 ? c->recvbuf : &none;
    if (p == 1) {
        if (out != in && n > 0) hoop__mem_move(c, out, in, n);
        return HOOP_OK; /* AVG over one rank divides by 1 */
    }
    size_t need = hoop__rs_ring_scratch(c, in, total / ds, out);
    void *scratch = hoop__scratch(c, need);
    if (scratch == NULL) {
        hoop__comm_fail(comm, HOOP_ERR_NO_MEMORY,
                        "reduce_scatter: no memory for %zu bytes of "
                        "scratch",
                        need);
        return HOOP_ERR_NO_MEMORY;
    }
    return hoop__rs_ring(c, in, total / ds, out, scratch);
}
