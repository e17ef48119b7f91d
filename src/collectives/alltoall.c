/*
 * All-to-all, pairwise exchange: n bytes per pair; block j of rank i's sendbuf ends as block i of
 * rank j's recvbuf.
 *
 *   own block: copied locally
 *   step k = 1 .. p-1: rank r sends block (r + k) % p to rank (r + k) % p and receives block
 *                      (r - k + p) % p from rank (r - k + p) % p, both at once
 *
 * Every rank sends and receives exactly one block per step, so no link carries two streams.
 * Cost: (p - 1) * (alpha + n*beta). When the buffers overlap (in place), the input is first copied
 * to scratch: + p*n bytes of memory traffic.
 */
#include "collectives/coll.h"

hoop_result_t hoop__alltoall_pairwise(hoop__call_t *c)
{
    hoop_comm_t *comm = c->comm;
    int p = comm->size, r = comm->rank;
    /* The entry point checked that these products fit. */
    size_t ds = hoop__dsize(c), n = c->count * ds, total = n * (size_t)p;
    char none = 0;
    const char *in = c->sendbuf;
    char *out = c->recvbuf;
    if (total == 0) {
        /* Still one empty message per pair, so that a rank whose count differs is reported. */
        in = &none;
        out = &none;
    } else {
        uintptr_t a = (uintptr_t)in, b = (uintptr_t)out;
        if (a < b + total && b < a + total) {
            char *s = hoop__scratch(c, total);
            if (s == NULL) {
                hoop__comm_fail(comm, HOOP_ERR_NO_MEMORY, "alltoall: no memory for %zu bytes",
                                total);
                return HOOP_ERR_NO_MEMORY;
            }
            hoop__mem_copy(c, s, in, total);
            in = s;
        }
        hoop__mem_copy(c, out + (size_t)r * n, in + (size_t)r * n, n);
    }
    for (int k = 1; k < p; k++) {
        int to = (r + k) % p, from = (r - k + p) % p;
        hoop_result_t rc = hoop__sendrecv(c, to, in + (size_t)to * n, n, from,
                                          out + (size_t)from * n, n);
        if (rc != HOOP_OK) return rc;
    }
    return HOOP_OK;
}
