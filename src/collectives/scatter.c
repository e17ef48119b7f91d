/*
 * Scatter of n bytes per rank from root: sendbuf (root only) holds p blocks, block i for rank i.
 *
 *   root: posts the p - 1 sends at once, each straight from its block; copies its own block last
 *   rank i != root: one receive of n bytes into recvbuf
 *
 * Cost at the root: alpha + (p - 1)*n*beta. The root's own copy waits for the sends so that an
 * in-place recvbuf (anywhere inside sendbuf) is not written while a send still reads it.
 */
#include "collectives/coll.h"

hoop_result_t hoop__scatter(hoop__call_t *c)
{
    hoop_comm_t *comm = c->comm;
    int p = comm->size, r = comm->rank;
    /* The entry point checked that this product fits. */
    size_t ds = hoop__dsize(c), n = c->count * ds;
    char none = 0;
    if (r != c->root) {
        hoop__xfer_t x;
        hoop__xrecv(c, &x, c->root, n > 0 ? c->recvbuf : &none, n);
        return hoop__xwait1(c, &x);
    }

    const char *in = c->sendbuf;
    if (p > 1) {
        hoop_result_t rc = hoop__root_exchange(c, HOOP__XFER_SEND, (char *)in, n);
        if (rc != HOOP_OK) return rc;
    }
    if (n > 0 && (char *)c->recvbuf != in + (size_t)r * n)
        hoop__mem_move(c, c->recvbuf, in + (size_t)r * n, n);
    return HOOP_OK;
}
