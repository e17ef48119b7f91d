/*
 * Rabenseifner's all-reduce: a reduce-scatter by recursive halving, then an all-gather by
 * recursive doubling, over q = 2^k ranks.
 *
 * The buffer is cut into q blocks. In reduce-scatter step j (distance d = 2^j, nearest first)
 * rank v keeps one half of the blocks it still holds (the lower half where bit j of v is 0),
 * sends the other half to v ^ d and folds what v ^ d sends of its own half into it; after k steps
 * it holds one block, reduced over all q ranks. The all-gather runs the steps backwards (farthest
 * first), each rank sending what it holds and receiving its partner's, so the held range doubles:
 *
 *   q = 4, blocks b0..b3
 *   RS, d = 1:  0 keeps b0 b1 (sends b2 b3 to 1)   1 keeps b2 b3   2 keeps b0 b1   3 keeps b2 b3
 *   RS, d = 2:  0 keeps b0                          1 keeps b2      2 keeps b1      3 keeps b3
 *   AG, d = 2:  0 holds b0 b1                       1 holds b2 b3   2 holds b0 b1   3 holds b2 b3
 *   AG, d = 1:  every rank holds b0..b3
 *
 * Cost: 2 log2(q) a + 2((q-1)/q) n b + ((q-1)/q) n c: the ring's bytes in log2 steps instead of
 * 2(q-1), so it sits between recursive doubling (log2(q) steps of the whole buffer) and the ring
 * (whose chunks pipeline, which this does not). With p not a power of two, q the largest power of
 * two below p and e = p - q, positions 0..2e-1 first fold in pairs (even into odd) as recursive
 * doubling does, and odd ones hand the result back at the end.
 *
 * Each block is folded by one rank at each step (the keeper, lower position's values first) and
 * then only copied, so every rank ends with the same bits. Positions are the ring's
 * (hoop__ring_rank): the nearest partners, which exchange the most, share a host where they can.
 */
#include "collectives/coll.h"

typedef struct {
    size_t n, es;
    int q;
} rab_t;

/* First element of block b (b == q: the end). */
static size_t blk(const rab_t *g, int b)
{
    if (b >= g->q) return g->n;
    size_t off, len;
    hoop__part(g->n, g->q, b, &off, &len);
    return off;
}

/* The rank at survivor position v. */
static int survivor_rank(const hoop_comm_t *comm, int v, int e)
{
    return hoop__ring_rank(comm, v < e ? v * 2 + 1 : v + e);
}

hoop_result_t hoop__allreduce_rabenseifner(hoop__call_t *c)
{
    hoop_comm_t *comm = c->comm;
    int p = comm->size, pos = hoop__ring_pos(comm);
    rab_t g = {.n = c->count, .es = hoop__dsize(c)};
    size_t bytes = g.n * g.es;
    uint8_t *buf = c->recvbuf, *tmp;
    hoop_result_t rc = hoop__allreduce_pow2_start(c, &tmp, &g.q);
    if (rc != HOOP_OK || tmp == NULL) return rc;
    int q = g.q, e = p - q, k = __builtin_ctz((unsigned)q);
    int v = pos >= 2 * e ? pos - e : pos % 2 ? pos / 2 : -1; /* survivor position, or folded */
    if (pos < 2 * e) {
        int partner = hoop__ring_rank(comm, pos % 2 ? pos - 1 : pos + 1);
        if (pos % 2 == 0) {
            HOOP__TRACE_STEP(c, 0, "rank %d folds: sends its buffer (%zu B) to rank %d", comm->rank,
                             bytes, partner);
            rc = hoop__sendrecv(c, partner, buf, bytes, -1, NULL, 0);
        } else {
            rc = hoop__sendrecv(c, -1, NULL, 0, partner, tmp, bytes);
            if (rc == HOOP_OK) hoop__mem_reduce(c, buf, tmp, buf, g.n);
            HOOP__TRACE_STEP(c, 0, "rank %d receives rank %d's buffer and reduces", comm->rank,
                             partner);
        }
        if (rc != HOOP_OK) return rc;
    }
    if (v >= 0) {
        int lo = 0, cnt = q; /* the blocks held: [lo, lo + cnt) */
        for (int j = 0; j < k; j++) {
            int d = 1 << j, vp = v ^ d, peer = survivor_rank(comm, vp, e);
            int half = cnt / 2;
            int keep = (v & d) ? lo + half : lo, give = (v & d) ? lo : lo + half;
            size_t ko = blk(&g, keep), kl = blk(&g, keep + half) - ko;
            size_t go = blk(&g, give), gl = blk(&g, give + half) - go;
            HOOP__TRACE_STEP(c, 1 + j,
                             "rank %d sends blocks %d-%d (%zu B) to rank %d, folds in its "
                             "blocks %d-%d",
                             comm->rank, give, give + half - 1, gl * g.es, peer, keep,
                             keep + half - 1);
            rc = hoop__sendrecv(c, peer, buf + go * g.es, gl * g.es, peer, tmp, kl * g.es);
            if (rc != HOOP_OK) return rc;
            uint8_t *mine = buf + ko * g.es;
            if (vp < v)
                hoop__mem_reduce(c, mine, tmp, mine, kl);
            else
                hoop__mem_reduce(c, mine, mine, tmp, kl);
            lo = keep;
            cnt = half;
        }
        if (c->op == HOOP_AVG) {
            size_t o = blk(&g, lo);
            hoop__mem_avg_finish(c, buf + o * g.es, blk(&g, lo + 1) - o);
        }
        for (int j = k - 1; j >= 0; j--) {
            int d = 1 << j, peer = survivor_rank(comm, v ^ d, e);
            int other = (v & d) ? lo - cnt : lo + cnt;
            size_t mo = blk(&g, lo), ml = blk(&g, lo + cnt) - mo;
            size_t oo = blk(&g, other), ol = blk(&g, other + cnt) - oo;
            HOOP__TRACE_STEP(c, 1 + k + (k - 1 - j),
                             "rank %d sends blocks %d-%d (%zu B) to rank %d and receives %d-%d",
                             comm->rank, lo, lo + cnt - 1, ml * g.es, peer, other, other + cnt - 1);
            rc = hoop__sendrecv(c, peer, buf + mo * g.es, ml * g.es, peer, buf + oo * g.es,
                                ol * g.es);
            if (rc != HOOP_OK) return rc;
            if (other < lo) lo = other;
            cnt *= 2;
        }
    }
    if (pos < 2 * e) {
        int partner = hoop__ring_rank(comm, pos % 2 ? pos - 1 : pos + 1);
        HOOP__TRACE_STEP(c, 1 + 2 * k, "rank %d %s the result (%zu B) %s rank %d", comm->rank,
                         pos % 2 ? "hands" : "receives", bytes, pos % 2 ? "to" : "from", partner);
        rc = pos % 2 ? hoop__sendrecv(c, partner, buf, bytes, -1, NULL, 0)
                     : hoop__sendrecv(c, -1, NULL, 0, partner, buf, bytes);
        if (rc != HOOP_OK) return rc;
    }
    return HOOP_OK;
}
