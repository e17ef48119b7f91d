/*
 * Gather of n bytes per rank to root: recvbuf (root only) holds p blocks, block i from rank i.
 *
 *   root: copies its own block, then posts the p - 1 receives at once, each straight into its block
 *   rank i != root: one send of its n bytes to root
 *
 * Cost at the root: alpha + (p - 1)*n*beta (its link is the bottleneck; the transport interleaves
 * the incoming streams). In place when sendbuf already lies anywhere in recvbuf: the own block is
 * moved first, before any receive can overwrite it.
 */
#include "collectives/coll.h"

hoop_result_t hoop__gather(hoop__call_t *c)
{
    hoop_comm_t *comm = c->comm;
    int p = comm->size, r = comm->rank;
    /* The entry point checked that this product fits. */
    size_t ds = hoop__dsize(c), n = c->count * ds;
    char none = 0;
    if (r != c->root) {
        hoop__xfer_t x;
        hoop__xsend(c, &x, c->root, n > 0 ? c->sendbuf : &none, n);
        return hoop__xwait1(c, &x);
    }

    char *out = c->recvbuf;
    if (n > 0 && out + (size_t)r * n != (const char *)c->sendbuf)
        hoop__mem_move(c, out + (size_t)r * n, c->sendbuf, n);
    if (p == 1) return HOOP_OK;

    return hoop__root_exchange(c, HOOP__XFER_RECV, out, n);
}
