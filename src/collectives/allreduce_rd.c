/*
 * Recursive-doubling all-reduce, for small messages.
 *
 * With p a power of two, at round k rank r exchanges its whole buffer with r ^ 2^k and reduces:
 *
 *   round 0:  0<->1  2<->3  4<->5  6<->7
 *   round 1:  0<->2  1<->3  4<->6  5<->7
 *   round 2:  0<->4  1<->5  2<->6  3<->7
 *
 * Otherwise, with q the largest power of two below p and e = p - q, ranks 0..2e-1 first fold in
 * pairs (even sends to odd), the q survivors run the rounds above, and odd ranks hand the result
 * back to their even partner.  Cost: log2(p) * (a + n b + n c) (+ 2(a + n b) when p is not a power
 * of two): fewest steps, which is what counts when a dominates.
 *
 * Both partners of a round combine the same two values in the same order (lower group first), so
 * every rank ends with the same bits.
 */
#include "collectives/coll.h"

hoop_result_t hoop__allreduce_pow2_start(hoop__call_t *c, uint8_t **tmp, int *q)
{
    int p = c->comm->size;
    size_t bytes = c->count * hoop__dsize(c);
    *tmp = NULL;
    if (c->sendbuf != c->recvbuf) hoop__mem_copy(c, c->recvbuf, c->sendbuf, bytes);
    if (p == 1) return HOOP_OK;
    if ((*tmp = hoop__scratch(c, bytes)) == NULL) return HOOP_ERR_NO_MEMORY;
    for (*q = 1; *q * 2 <= p;) *q *= 2;
    return HOOP_OK;
}

hoop_result_t hoop__allreduce_rd(hoop__call_t *c)
{
    hoop_comm_t *comm = c->comm;
    int p = comm->size, r = comm->rank, q;
    size_t n = c->count, bytes = n * hoop__dsize(c);
    uint8_t *buf = c->recvbuf, *tmp;
    hoop_result_t rc = hoop__allreduce_pow2_start(c, &tmp, &q);
    if (rc != HOOP_OK || tmp == NULL) return rc;
    int e = p - q;
    int vr; /* rank among the q survivors, -1 when folded away */
    if (r < 2 * e) {
        if (r % 2 == 0) {
            HOOP__TRACE_STEP(c, 0, "rank %d folds: sends its buffer (%zu B) to rank %d", r, bytes,
                             r + 1);
            rc = hoop__sendrecv(c, r + 1, buf, bytes, -1, NULL, 0);
            if (rc != HOOP_OK) return rc;
            vr = -1;
        } else {
            rc = hoop__sendrecv(c, -1, NULL, 0, r - 1, tmp, bytes);
            if (rc != HOOP_OK) return rc;
            hoop__mem_reduce(c, buf, tmp, buf, n);
            HOOP__TRACE_STEP(c, 0, "rank %d receives rank %d's buffer and reduces", r, r - 1);
            vr = r / 2;
        }
    } else {
        vr = r - e;
    }
    if (vr >= 0) {
        for (int mask = 1; mask < q; mask <<= 1) {
            int vpeer = vr ^ mask;
            int peer = vpeer < e ? vpeer * 2 + 1 : vpeer + e;
            HOOP__TRACE_STEP(c, 1 + __builtin_ctz((unsigned)mask),
                             "rank %d exchanges its buffer (%zu B) with rank %d and reduces", r,
                             bytes, peer);
            rc = hoop__sendrecv(c, peer, buf, bytes, peer, tmp, bytes);
            if (rc != HOOP_OK) return rc;
            if (vpeer < vr)
                hoop__mem_reduce(c, buf, tmp, buf, n);
            else
                hoop__mem_reduce(c, buf, buf, tmp, n);
        }
    }
    if (r < 2 * e) {
        int last = 1 + __builtin_ctz((unsigned)q);
        if (r % 2)
            HOOP__TRACE_STEP(c, last, "rank %d hands the result (%zu B) back to rank %d", r, bytes,
                             r - 1);
        else
            HOOP__TRACE_STEP(c, last, "rank %d receives the result from rank %d", r, r + 1);
        rc = r % 2 ? hoop__sendrecv(c, r - 1, buf, bytes, -1, NULL, 0)
                   : hoop__sendrecv(c, -1, NULL, 0, r + 1, buf, bytes);
        if (rc != HOOP_OK) return rc;
    }
    if (c->op == HOOP_AVG) hoop__mem_avg_finish(c, buf, n);
    return HOOP_OK;
}
