/*
 * Hierarchical collectives, for communicators of H hosts with L ranks each (H, L >= 2): the slow
 * links between hosts carry only what they must. All-reduce here; all-gather and reduce-scatter,
 * the same stages without the third, reduce and broadcast at the end.
 *
 *   A. inside each host, a ring reduce-scatter over the L local ranks (the shared-memory links):
 *      local rank l ends with segment l+1 of the buffer (of L) reduced over its host;
 *   B. across hosts, a ring all-reduce of that segment over the H ranks of local index l, one ring
 *      per local index: every local rank drives its share of the network at once;
 *   C. inside each host, a ring all-gather of the L segments.
 *
 * A flat ring over the same ranks sends 2(p-1)/p of the buffer over every link, the host links
 * included, and at each host boundary a single rank's link carries all of it. Here each rank sends
 * 2(H-1)/(H L) of the buffer across hosts, so a host's traffic to the next host is 2(H-1)/H of the
 * buffer spread over L ranks (L connections), against 2(p-1)/p through one connection.
 *
 * Bits: every element is reduced once, by the chain of stage A (its host's ranks in ring order)
 * and then of stage B (the hosts in ring order), AVG finished by its owner in B, and then only
 * copied; so every rank ends with the same bits. Host order and local order come from the
 * communicator's ring (hosts in order of their lowest rank, each host's ranks ascending), which
 * every rank computed from the same published addresses.
 *
 * Each stage is the pipelined ring of allreduce_ring.c over a group of the communicator's ranks:
 * its transfers are the communicator's, so a lost peer, a timeout or an abort in any stage fails
 * the call on every rank as for the flat algorithms, and every message's header carries the call
 * (a rank that called something else is told).
 *
 * On CUDA device buffers, a host whose ranks all have them runs its stages inside the host over
 * CUDA IPC instead (local/ipc.c, ipc_try below), where the plan says to try (plan.c: ipc_stages),
 * on the same segments: the stages across hosts do not change, so each host decides for itself.
 */
#include <stdlib.h>

#include "collectives/coll.h"
#include "local/local.h"

#define STAGING_SLOTS 4

/* One ring over a group of ranks, on a region of the call's buffers. */
typedef struct gring {
    hoop__call_t *c;
    int p, r;        /* ranks in the group, this rank's position in it */
    int left, right; /* the neighbours, as ranks of the communicator */
    size_t es, n;    /* element size, elements in the region */
    int chunks;      /* chunks per segment */
    const uint8_t *in;
    uint8_t *out;
    int rs, ag;   /* run the reduce-scatter, the all-gather */
    int avg;      /* finish HOOP_AVG on the owned segment after the reduce-scatter */
    int trace_at; /* first step number in trace lines */
    const char *name;
    uint8_t *staging; /* gring_plan() bytes for the reduce-scatter's slots; NULL: the scratch */
    size_t slot_bytes;
    int window;
} gring_t;

static int mod(int a, int p) { return ((a % p) + p) % p; }

static void chunk_range(const gring_t *g, int s, int ch, size_t *off, size_t *len)
{
    size_t so, sl, co, cl;
    hoop__part(g->n, g->p, s, &so, &sl);
    hoop__part(sl, g->chunks, ch, &co, &cl);
    *off = (so + co) * g->es;
    *len = cl * g->es;
}

/* After the reduce-scatter, position r owns segment r+1; the all-gather passes owned ones on. */
static int rs_steps(const gring_t *g) { return g->rs ? g->p - 1 : 0; }
static int seg_sent(const gring_t *g, int k)
{
    int q = rs_steps(g);
    return k < q ? mod(g->r - k, g->p) : mod(g->r + 1 - (k - q), g->p);
}
static int seg_recv(const gring_t *g, int k)
{
    int q = rs_steps(g);
    return k < q ? mod(g->r - k - 1, g->p) : mod(g->r - (k - q), g->p);
}

/* Cuts the segments into chunks; returns the staging bytes the reduce-scatter needs (never 0). */
static size_t gring_plan(gring_t *g)
{
    size_t seg_max = (g->n + (size_t)g->p - 1) / (size_t)g->p;
    size_t chunk_elems = g->c->comm->agreed.chunk_bytes / g->es;
    if (chunk_elems == 0) chunk_elems = 1;
    size_t nch = (seg_max + chunk_elems - 1) / chunk_elems;
    g->chunks = nch == 0 ? 1 : (int)nch;
    g->slot_bytes = ((seg_max + (size_t)g->chunks - 1) / (size_t)g->chunks) * g->es;
    int units = ((g->rs ? g->p - 1 : 0) + (g->ag ? g->p - 1 : 0)) * g->chunks;
    g->window = STAGING_SLOTS < units ? STAGING_SLOTS : units;
    return g->rs ? g->slot_bytes * (size_t)g->window + 1 : 1;
}

static hoop_result_t gring_run(gring_t *g)
{
    hoop__call_t *c = g->c;
    if (g->p == 1) {
        if (g->rs && g->in != g->out) hoop__mem_copy(c, g->out, g->in, g->n * g->es);
        if (g->avg) hoop__mem_avg_finish(c, g->out, g->n);
        return HOOP_OK;
    }
    size_t need = gring_plan(g), slot_bytes = g->slot_bytes;
    int q = rs_steps(g);
    int steps = q + (g->ag ? g->p - 1 : 0);
    int units = steps * g->chunks;
    int window = g->window;
    uint8_t *staging = !g->rs ? NULL : g->staging != NULL ? g->staging : hoop__scratch(c, need);
    hoop__xfer_t *sends = malloc(sizeof(hoop__xfer_t) * (size_t)units);
    hoop__xfer_t *recvs = malloc(sizeof(hoop__xfer_t) * (size_t)units);
    if ((g->rs && staging == NULL) || sends == NULL || recvs == NULL) {
        free(sends);
        free(recvs);
        return HOOP_ERR_NO_MEMORY;
    }
    size_t off, len;
    /* Unit u = k * chunks + ch: reduce-scatter chunks land in staging slots, others in place. */
#define POST_RECV(u)                                                                               \
    do {                                                                                           \
        int k_ = (u) / g->chunks, ch_ = (u) % g->chunks;                                           \
        chunk_range(g, seg_recv(g, k_), ch_, &off, &len);                                          \
        void *dst_ = k_ < q ? staging + (size_t)((u) % window) * slot_bytes : g->out + off;        \
        hoop__xrecv(c, &recvs[u], g->left, dst_, len);                                             \
    } while (0)

    for (int u = 0; u < window; u++) POST_RECV(u);
    const uint8_t *first = g->rs ? g->in : g->out;
    for (int ch = 0; ch < g->chunks; ch++) {
        chunk_range(g, seg_sent(g, 0), ch, &off, &len);
        HOOP__TRACE_STEP(c, g->trace_at, "%s: rank %d sends segment %d chunk %d (%zu B) to rank %d",
                         g->name, c->comm->rank, seg_sent(g, 0), ch, len, g->right);
        hoop__xsend(c, &sends[ch], g->right, first + off, len);
    }
    hoop_result_t rc = HOOP_OK;
    for (int u = 0; u < units && rc == HOOP_OK; u++) {
        int k = u / g->chunks, ch = u % g->chunks;
        rc = hoop__xwait1(c, &recvs[u]);
        if (rc != HOOP_OK) break;
        chunk_range(g, seg_recv(g, k), ch, &off, &len);
        if (k < q) {
            /* Incoming partial first, own contribution second: a fixed order on every rank. */
            const uint8_t *slot = staging + (size_t)(u % window) * slot_bytes;
            hoop__mem_reduce(c, g->out + off, slot, g->in + off, len / g->es);
            if (k == q - 1 && g->avg) hoop__mem_avg_finish(c, g->out + off, len / g->es);
        }
        HOOP__TRACE_STEP(c, g->trace_at + k,
                         "%s: rank %d receives segment %d chunk %d (%zu B) from rank %d%s", g->name,
                         c->comm->rank, seg_recv(g, k), ch, len, g->left,
                         k < q ? " and reduces it with its own" : "");
        if (u + window < units) POST_RECV(u + window);
        if (k + 1 < steps) {
            size_t so, sl;
            chunk_range(g, seg_sent(g, k + 1), ch, &so, &sl);
            HOOP__TRACE_STEP(c, g->trace_at + k + 1,
                             "%s: rank %d sends segment %d chunk %d (%zu B) to rank %d", g->name,
                             c->comm->rank, seg_sent(g, k + 1), ch, sl, g->right);
            hoop__xsend(c, &sends[(k + 1) * g->chunks + ch], g->right, g->out + so, sl);
        }
    }
#undef POST_RECV
    for (int u = 0; u < units && rc == HOOP_OK; u++) rc = hoop__xwait1(c, &sends[u]);
    free(sends);
    free(recvs);
    return rc;
}

/* The layout the plan chose this for (plan.c); never otherwise. */
static int fits(const hoop_comm_t *c) { return c->nhosts >= 2 && c->local_size >= 2; }

/* The rank at host h, local index l (both taken modulo their counts). */
static int at(const hoop_comm_t *c, int h, int l)
{
    int L = c->local_size;
    return hoop__ring_rank(c, mod(h, c->nhosts) * L + mod(l, L));
}

/* Every stage runs on one of this rank's two rings: HOST_RING, the L ranks of its host in local
 * order, or CROSS_RING, the H ranks of its local index, one on each host in host order. */
enum { HOST_RING, CROSS_RING };
enum { RS = 1, AG = 2 }; /* a stage's parts: its reduce-scatter, its all-gather */

/* A stage on ring which over n elements (in and out are the caller's to set): its parts, the
 * first step number of its trace lines, its name. The reduce-scatter across hosts is the last
 * fold of every element, so its owner finishes HOOP_AVG there. */
static gring_t ring(hoop__call_t *c, int which, int parts, size_t n, int trace_at, const char *name)
{
    hoop_comm_t *comm = c->comm;
    int L = comm->local_size, pos = hoop__ring_pos(comm), h = pos / L, l = pos % L;
    int across = which == CROSS_RING;
    return (gring_t){.c = c,
                     .p = across ? comm->nhosts : L,
                     .r = across ? h : l,
                     .left = across ? at(comm, h - 1, l) : at(comm, h, l - 1),
                     .right = across ? at(comm, h + 1, l) : at(comm, h, l + 1),
                     .es = hoop__dsize(c),
                     .n = n,
                     .rs = (parts & RS) != 0,
                     .ag = (parts & AG) != 0,
                     .avg = across && (parts & RS) && c->op == HOOP_AVG,
                     .trace_at = trace_at,
                     .name = name};
}

/*
 * A CUDA IPC session for the stages inside this host (local/ipc.c), where the plan says to try
 * (plan.c) and every rank of the host has device buffers: each host decides for itself, since
 * the stages across hosts are the same either way; the session's opening round among the host's
 * ranks says what each has. *ix is NULL where the host's ring stages run; *local (the host's ranks
 * in local order) is the caller's to free, with the session.
 */
static hoop_result_t ipc_try(hoop__call_t *c, int **local, hoop__ipc_hier_t **ix)
{
    hoop_comm_t *comm = c->comm;
    int L = comm->local_size, pos = hoop__ring_pos(comm);
    *ix = NULL;
    *local = malloc((size_t)L * sizeof **local);
    if (*local == NULL) return HOOP_ERR_NO_MEMORY;
    for (int i = 0; i < L; i++) (*local)[i] = at(comm, pos / L, i);
    if (!c->plan.ipc_stages) return HOOP_OK;
    return hoop__ipc_hier_open(c, *local, L, pos % L, ix);
}

/* A first IPC stage that declined at its first round: the session ends, the ring stage runs. */
static int ipc_declined(hoop_result_t *rc, hoop__ipc_hier_t **ix)
{
    if (*rc != HOOP_OK || !hoop__ipc_hier_declined(*ix)) return 0;
    hoop__ipc_hier_close(*ix, rc);
    *ix = NULL;
    return *rc == HOOP_OK;
}

/* The end of a call that may have had an IPC session. */
static hoop_result_t ipc_done(hoop_result_t rc, int *local, hoop__ipc_hier_t *ix)
{
    hoop__ipc_hier_close(ix, &rc);
    free(local);
    return rc;
}

hoop_result_t hoop__allreduce_hier(hoop__call_t *c)
{
    hoop_comm_t *comm = c->comm;
    if (!fits(comm)) return HOOP_ERR_INTERNAL; /* plan.c never asks */
    int L = comm->local_size, H = comm->nhosts, l = hoop__ring_pos(comm) % L;
    size_t es = hoop__dsize(c);
    gring_t a = ring(c, HOST_RING, RS, c->count, 0, "host reduce-scatter");
    a.in = c->sendbuf;
    a.out = c->recvbuf;
    /* Stages A and C over CUDA IPC where every rank of this host has device buffers. */
    int *local;
    hoop__ipc_hier_t *ix;
    hoop_result_t rc = ipc_try(c, &local, &ix);
    if (rc == HOOP_OK && ix != NULL) {
        rc = hoop__ipc_hier_reduce_scatter(ix, c->sendbuf != NULL ? c->sendbuf : c->recvbuf,
                                           c->recvbuf, c->count);
        if (ipc_declined(&rc, &ix)) rc = gring_run(&a);
    } else if (rc == HOOP_OK) {
        rc = gring_run(&a);
    }
    if (rc != HOOP_OK) return ipc_done(rc, local, ix);

    size_t so, sl;
    hoop__part(c->count, L, mod(l + 1, L), &so, &sl);
    uint8_t *seg = (uint8_t *)c->recvbuf + so * es;
    gring_t b = ring(c, CROSS_RING, RS | AG, sl, L - 1, "cross-host all-reduce");
    b.in = b.out = seg;
    rc = gring_run(&b);
    if (rc == HOOP_OK && ix != NULL) {
        rc = hoop__ipc_hier_allgather(ix, c->recvbuf, c->count);
    } else if (rc == HOOP_OK) {
        gring_t g = a;
        g.in = c->recvbuf;
        g.rs = 0;
        g.ag = 1;
        g.trace_at = L - 1 + 2 * (H - 1);
        g.name = "host all-gather";
        rc = gring_run(&g);
    }
    return ipc_done(rc, local, ix);
}

/* All-gather and reduce-scatter work in a scratch copy of the p blocks laid out by (local index,
 * host) so that each stage's blocks are contiguous: block (h, l) at slot spos(h, l), in the order
 * the rings' segments take (position r owns segment r+1). */
static size_t spos(const hoop_comm_t *c, int h, int l)
{
    return (size_t)mod(l + 1, c->local_size) * (size_t)c->nhosts + (size_t)mod(h + 1, c->nhosts);
}

/* All-gather: across hosts among the ranks of each local index (each gets its index's H blocks),
 * then inside each host (each gets the L sets). Each host sends (H-1)/H of the result across, over
 * L connections, where the flat ring sends (p-1)/p through one. */
hoop_result_t hoop__allgather_hier(hoop__call_t *c)
{
    hoop_comm_t *comm = c->comm;
    if (!fits(comm)) return HOOP_ERR_INTERNAL;
    int L = comm->local_size, H = comm->nhosts, pos = hoop__ring_pos(comm), p = comm->size;
    int h = pos / L, l = pos % L;
    size_t es = hoop__dsize(c), m = c->count, blk = m * es;
    /* Scratch of at least one byte: count 0 still runs both stages' (empty) messages. */
    uint8_t *s = hoop__scratch(c, blk * (size_t)p + 1);
    if (s == NULL) return HOOP_ERR_NO_MEMORY;
    int *local;
    hoop__ipc_hier_t *ix;
    hoop_result_t rc = ipc_try(c, &local, &ix);
    if (rc != HOOP_OK) return ipc_done(rc, local, ix);
    if (blk > 0) hoop__mem_copy(c, s + spos(comm, h, l) * blk, c->sendbuf, blk);
    uint8_t *mine = s + (size_t)mod(l + 1, L) * (size_t)H * blk;
    gring_t b = ring(c, CROSS_RING, AG, (size_t)H * m, 0, "cross-host all-gather");
    b.in = b.out = mine;
    rc = gring_run(&b);
    if (rc != HOOP_OK) return ipc_done(rc, local, ix);
    gring_t a = ring(c, HOST_RING, AG, (size_t)p * m, H - 1, "host all-gather");
    a.in = a.out = s;
    if (ix != NULL) {
        rc = hoop__ipc_hier_allgather(ix, s, (size_t)p * m);
        if (ipc_declined(&rc, &ix)) rc = gring_run(&a);
    } else {
        rc = gring_run(&a);
    }
    if (rc != HOOP_OK) return ipc_done(rc, local, ix);
    for (int hh = 0; hh < H && blk > 0; hh++)
        for (int ll = 0; ll < L; ll++)
            hoop__mem_copy(c, (uint8_t *)c->recvbuf + (size_t)at(comm, hh, ll) * blk,
                           s + spos(comm, hh, ll) * blk, blk);
    return ipc_done(HOOP_OK, local, ix);
}

/* Reduce-scatter: inside each host (local rank l gets the host's sum of the blocks of every rank
 * of index l), then across hosts among the ranks of each index (each gets its own block). Every
 * block is reduced by one chain, AVG finished by its owner. */
hoop_result_t hoop__reduce_scatter_hier(hoop__call_t *c)
{
    hoop_comm_t *comm = c->comm;
    if (!fits(comm)) return HOOP_ERR_INTERNAL;
    int L = comm->local_size, H = comm->nhosts, pos = hoop__ring_pos(comm), p = comm->size;
    int h = pos / L, l = pos % L;
    size_t es = hoop__dsize(c), m = c->count, blk = m * es;
    gring_t a = ring(c, HOST_RING, RS, (size_t)p * m, 0, "host reduce-scatter");
    gring_t b = ring(c, CROSS_RING, RS, (size_t)H * m, L - 1, "cross-host reduce-scatter");
    size_t na = gring_plan(&a), nb = gring_plan(&b), stage = na > nb ? na : nb;
    uint8_t *s = hoop__scratch(c, blk * (size_t)p + stage);
    if (s == NULL) return HOOP_ERR_NO_MEMORY;
    int *local;
    hoop__ipc_hier_t *ix;
    hoop_result_t rc = ipc_try(c, &local, &ix);
    if (rc != HOOP_OK) return ipc_done(rc, local, ix);
    for (int hh = 0; hh < H && blk > 0; hh++)
        for (int ll = 0; ll < L; ll++)
            hoop__mem_copy(c, s + spos(comm, hh, ll) * blk,
                           (const uint8_t *)c->sendbuf + (size_t)at(comm, hh, ll) * blk, blk);
    a.in = a.out = s;
    a.staging = b.staging = s + blk * (size_t)p;
    if (ix != NULL) {
        rc = hoop__ipc_hier_reduce_scatter(ix, s, s, (size_t)p * m);
        if (ipc_declined(&rc, &ix)) rc = gring_run(&a);
    } else {
        rc = gring_run(&a);
    }
    if (rc != HOOP_OK) return ipc_done(rc, local, ix);
    uint8_t *mine = s + (size_t)mod(l + 1, L) * (size_t)H * blk;
    b.in = b.out = mine;
    if ((rc = gring_run(&b)) != HOOP_OK) return ipc_done(rc, local, ix);
    if (blk > 0) hoop__mem_copy(c, c->recvbuf, s + spos(comm, h, l) * blk, blk);
    return ipc_done(HOOP_OK, local, ix);
}

/* Reduce (auto: where the flat one would leave its binomial tree): the all-reduce's first two
 * stages without the cross-host all-gather (each rank ends with 1/p of the result, reduced over
 * every rank), then every rank sends its piece to the root. The root's host receives 2(H-1)/H of
 * the buffer across (half in the reduce-scatter, half in the gather), where the flat ring's
 * reduce-scatter and gather bring in (p-1)/p + (p-L)/p. Non-roots work in scratch (their recvbuf
 * may be NULL); the root in its recvbuf. */
hoop_result_t hoop__reduce_hier(hoop__call_t *c)
{
    hoop_comm_t *comm = c->comm;
    if (!fits(comm)) return HOOP_ERR_INTERNAL;
    int L = comm->local_size, H = comm->nhosts, l = hoop__ring_pos(comm) % L;
    int root = c->root, is_root = comm->rank == root;
    size_t es = hoop__dsize(c), n = c->count;
    gring_t a = ring(c, HOST_RING, RS, n, 0, "host reduce-scatter");
    a.in = c->sendbuf;
    size_t so, sl;
    hoop__part(n, L, mod(l + 1, L), &so, &sl);
    gring_t b = ring(c, CROSS_RING, RS, sl, L - 1, "cross-host reduce-scatter");
    size_t na = gring_plan(&a), nb = gring_plan(&b), stage = na > nb ? na : nb;
    size_t work = is_root ? 0 : n * es;
    uint8_t *s = hoop__scratch(c, work + stage);
    hoop__xfer_t *xs = malloc(sizeof(hoop__xfer_t) * (size_t)comm->size);
    if (s == NULL || xs == NULL) {
        free(xs);
        return HOOP_ERR_NO_MEMORY;
    }
    uint8_t *out = is_root ? (uint8_t *)c->recvbuf : s;
    a.out = out;
    a.staging = b.staging = s + work;
    int *local;
    hoop__ipc_hier_t *ix;
    hoop_result_t rc = ipc_try(c, &local, &ix);
    if (rc == HOOP_OK && ix != NULL) {
        rc = hoop__ipc_hier_reduce_scatter(ix, c->sendbuf, out, n);
        if (ipc_declined(&rc, &ix)) rc = gring_run(&a);
    } else if (rc == HOOP_OK) {
        rc = gring_run(&a);
    }
    if (rc == HOOP_OK) {
        b.in = b.out = out + so * es;
        rc = gring_run(&b);
    }
    if (rc == HOOP_OK) {
        /* Rank (hh, ll) owns piece (hh+1) of segment (ll+1): the gather to the root. */
        int nx = 0;
        for (int hh = 0; hh < H; hh++)
            for (int ll = 0; ll < L; ll++) {
                int peer = at(comm, hh, ll);
                /* The root receives every other rank's piece (its own is in place); the others
                 * send their own. */
                if (is_root ? peer == root : peer != comm->rank) continue;
                size_t o1, l1, o2, l2;
                hoop__part(n, L, mod(ll + 1, L), &o1, &l1);
                hoop__part(l1, H, mod(hh + 1, H), &o2, &l2);
                uint8_t *piece = out + (o1 + o2) * es;
                if (is_root)
                    hoop__xrecv(c, &xs[nx++], peer, piece, l2 * es);
                else
                    hoop__xsend(c, &xs[nx++], root, piece, l2 * es);
            }
        if (is_root)
            HOOP__TRACE_STEP(c, L + H - 2, "gather: rank %d receives a piece from each of %d ranks",
                             comm->rank, nx);
        else
            HOOP__TRACE_STEP(c, L + H - 2, "gather: rank %d sends its piece to rank %d", comm->rank,
                             root);
        for (int i = 0; i < nx && rc == HOOP_OK; i++) rc = hoop__xwait1(c, &xs[i]);
    }
    free(xs);
    return ipc_done(rc, local, ix);
}

/* Broadcast (HOOP_ALGO=hier, or ipc on several hosts; auto keeps the flat chain, which already
 * brings the buffer into each host once): the pipelined chain across hosts among the ranks of
 * the root's local index, from the root's host on, then inside each host from that rank: over
 * CUDA IPC where the host's ranks all have device buffers, else along the host's ranks in local
 * order. Only copies: every rank ends with the root's bytes. */
hoop_result_t hoop__broadcast_hier(hoop__call_t *c)
{
    hoop_comm_t *comm = c->comm;
    if (!fits(comm)) return HOOP_ERR_INTERNAL;
    int L = comm->local_size, H = comm->nhosts, pos = hoop__ring_pos(comm);
    int h = pos / L, l = pos % L, rpos = 0;
    while (hoop__ring_rank(comm, rpos) != c->root) rpos++;
    int root_h = rpos / L, l0 = rpos % L;
    size_t n = c->count * hoop__dsize(c);
    if (comm->rank == c->root && c->sendbuf != NULL && c->sendbuf != c->recvbuf && n > 0)
        hoop__mem_move(c, c->recvbuf, c->sendbuf, n);
    int *local;
    hoop__ipc_hier_t *ix;
    hoop_result_t rc = ipc_try(c, &local, &ix);
    /* The chains' neighbours (-1: none): across hosts from the root's host on, then inside each
     * host from local index l0 on. */
    int xprev = h == root_h ? -1 : at(comm, h - 1, l0),
        xnext = mod(h + 1, H) == root_h ? -1 : at(comm, h + 1, l0);
    int hprev = l == l0 ? -1 : at(comm, h, l - 1),
        hnext = mod(l + 1, L) == l0 ? -1 : at(comm, h, l + 1);
    if (rc == HOOP_OK && l == l0) {
        HOOP__TRACE_STEP(c, 0, "cross-host broadcast: rank %d from rank %d on to rank %d",
                         comm->rank, xprev, xnext);
        rc = hoop__broadcast_chain(c, c->recvbuf, n, xprev, xnext);
    }
    if (rc == HOOP_OK && ix != NULL) {
        rc = hoop__ipc_hier_broadcast(ix, c->recvbuf, n, l0);
        if (!ipc_declined(&rc, &ix)) return ipc_done(rc, local, ix);
    }
    if (rc == HOOP_OK) {
        HOOP__TRACE_STEP(c, 1, "host broadcast: rank %d from rank %d on to rank %d", comm->rank,
                         hprev, hnext);
        rc = hoop__broadcast_chain(c, c->recvbuf, n, hprev, hnext);
    }
    return ipc_done(rc, local, ix);
}
