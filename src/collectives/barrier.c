/*
 * Barrier: dissemination (Hensgen, Finkel, Manber).
 *
 *   round k = 0 .. ceil(log2 p) - 1, d = 2^k:
 *       rank r sends an empty message to (r + d) % p and receives one from (r - d + p) % p
 *
 * After round k, rank r has heard (directly or through earlier rounds) from the 2^(k+1) - 1 ranks
 * before it, so after the last round every rank knows that all p ranks have entered.
 * Works for any p, not only powers of two. Cost: ceil(log2 p) * alpha; no data moves.
 */
#include "collectives/coll.h"

hoop_result_t hoop__barrier_dissemination(hoop__call_t *c)
{
    int p = c->comm->size, r = c->comm->rank;
    char none = 0; /* zero-length messages still need a valid address */
    for (long d = 1; d < p; d <<= 1) {
        int to = (int)((r + d) % p), from = (int)((r - d + p) % p);
        hoop_result_t rc = hoop__sendrecv(c, to, &none, 0, from, &none, 0);
        if (rc != HOOP_OK) return rc;
    }
    return HOOP_OK;
}
