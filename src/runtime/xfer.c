/*
 * Transfers: what an algorithm posts to its peers and waits for. Each transfer carries the header
 * of its call (wire.h), which the receiving side compares with its own before a byte reaches the
 * caller's buffer. Runs under exec, on whichever thread the scheduler gave the call.
 */
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/runtime.h"

static void fill_hdr(const hoop__call_t *call, hoop__wire_hdr_t *h)
{
    hoop_comm_t *c = call->comm;
    memset(h, 0, sizeof(*h));
    h->kind = (uint8_t)call->kind;
    h->dtype = (uint8_t)call->dtype;
    h->op = (uint8_t)call->op;
    h->root = call->root;
    h->src = (uint32_t)c->rank;
    h->comm_id = c->id;
    h->seq = call->seq;
    h->count = call->count;
    h->algo = (uint8_t)call->algo;
    h->sched = c->sched;
}

void hoop__xsend(const hoop__call_t *call, hoop__xfer_t *x, int peer, const void *buf, size_t len)
{
    fill_hdr(call, &x->hdr);
    x->dir = HOOP__XFER_SEND;
    x->peer = peer;
    x->buf = (void *)buf;
    x->len = len;
    x->mem = (hoop__mem_desc_t){.type = call->mem};
    atomic_fetch_add_explicit(&call->comm->bytes_sent, len, memory_order_relaxed);
    atomic_fetch_add_explicit(&call->comm->messages_sent, 1, memory_order_relaxed);
    /* Staged: the stage posts a transfer of its own, or x failed. */
    if (call->mem != HOOP__MEM_HOST && hoop__stage_post(call, x) != 0) return;
    /* A host send goes after the staged sends still being copied out (a request's, posted
     * before), as the transports keep each peer's messages in posting order. */
    if (call->mem == HOOP__MEM_HOST && call->comm->stage != NULL) {
        hoop_result_t rc = hoop__stage_flush(call->comm);
        if (rc != HOOP_OK) {
            x->status = rc;
            x->done = 1;
            return;
        }
    }
    call->comm->tp_ops->post(call->comm->tp, x);
}

void hoop__xrecv(const hoop__call_t *call, hoop__xfer_t *x, int peer, void *buf, size_t len)
{
    fill_hdr(call, &x->hdr);
    x->hdr.src = (uint32_t)peer;
    x->dir = HOOP__XFER_RECV;
    x->peer = peer;
    x->buf = buf;
    x->len = len;
    x->mem = (hoop__mem_desc_t){.type = call->mem};
    atomic_fetch_add_explicit(&call->comm->bytes_received, len, memory_order_relaxed);
    atomic_fetch_add_explicit(&call->comm->messages_received, 1, memory_order_relaxed);
    /* Staged: the stage posts a transfer of its own, or x failed. */
    if (call->mem != HOOP__MEM_HOST && hoop__stage_post(call, x) != 0) return;
    call->comm->tp_ops->post(call->comm->tp, x);
}

void hoop__call_describe(const hoop__call_t *call, char *buf, size_t n)
{
    hoop__wire_hdr_t h;
    fill_hdr(call, &h);
    /* Both ends of a point-to-point message carry kind send on the wire; the receiver's own
     * call is a recv. */
    if (call->kind == HOOP__K_SEND && call->is_recv) {
        char d[128];
        hoop__wire_describe(&h, d, sizeof(d));
        snprintf(buf, n, "recv%s", d + strlen("send"));
        return;
    }
    hoop__wire_describe(&h, buf, n);
}

/* Turns a failed transfer into the communicator's error. The transport has usually reported the
 * cause already (a lost peer, a mismatched call, with its sentence); otherwise say which call and
 * which peer. */
static hoop_result_t xfer_failed(const hoop__call_t *call, const hoop__xfer_t *x)
{
    hoop_comm_t *c = call->comm;
    hoop_result_t aborted = (hoop_result_t)atomic_load(&c->aborted);
    if (aborted) return aborted;
    char mine[128];
    hoop__call_describe(call, mine, sizeof(mine));
    hoop__comm_fail(c, x->status, "%s (call #%llu) failed with rank %d: %s", mine,
                    (unsigned long long)call->seq, x->peer, hoop__error_string(x->status));
    return x->status;
}

/* Whether the communicator's failure fails call now. A point-to-point call fails at once; a
 * collective only when a failure was found here or came from a rank that had not finished it:
 * where every failure so far came in abort notices of peers that had, it goes on waiting for its
 * transfers, which a failed peer's transport fails, and which a healthy peer either completes or
 * fails as it aborts in turn (if it cannot end the call, it tells why); the timeout bounds it. */
static int fails_call(const hoop__call_t *call)
{
    return call->kind == HOOP__K_SEND || call->seq >= atomic_load(&call->comm->fail_from);
}

static void nap_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

hoop_result_t hoop__xwait(const hoop__call_t *call, hoop__xfer_t *const *xs, int n)
{
    hoop_comm_t *c = call->comm;
    double start = 0, deadline = 0;
    int last_done = -1;
    uint64_t last_moved = 0;
    unsigned polls = 0, spin_polls = c->spin_s > 0 ? UINT_MAX : 0;
    int staged = call->mem != HOOP__MEM_HOST, copying = 0;
    for (;;) {
        /* Staged transfers move on: sends leave once copied to host memory, receives are done
         * once copied to the device (stage.c). A copy that completes is progress. */
        if (staged) {
            int moved = hoop__stage_progress(call, &copying);
            if (moved < 0) {
                hoop_result_t rc = hoop__mem_failed(c);
                c->tp_ops->abort(c->tp, rc, c->fatal_msg);
                return rc;
            }
            if (moved) deadline = 0;
        }
        int ndone = 0;
        for (int i = 0; i < n; i++) {
            if (xs[i] == NULL || xs[i]->done) {
                ndone++;
                if (xs[i] != NULL && xs[i]->status != HOOP_OK) {
                    hoop_result_t rc = xfer_failed(call, xs[i]);
                    c->tp_ops->abort(c->tp, (hoop_result_t)atomic_load(&c->aborted), c->fatal_msg);
                    return rc;
                }
            }
        }
        if (ndone == n) return HOOP_OK;
        hoop_result_t ab = (hoop_result_t)atomic_load(&c->aborted);
        if (ab && fails_call(call)) {
            c->tp_ops->abort(c->tp, ab, c->fatal_msg);
            return ab;
        }
        /* Reading the clock costs as much as a poll: while spinning, look at it every 32nd round
         * only; a wait that progresses restarts its deadline. */
        if (ndone != last_done) {
            last_done = ndone;
            deadline = 0;
        }
        if ((++polls & 31) != 0 && polls < spin_polls) {
            c->tp_ops->progress(c->tp, 0);
            if (c->inflight != NULL || c->held != NULL) c->reap(c);
            continue;
        }
        double now = hoop__now();
        if (start == 0) start = now;
        /* So do bytes moving with the peers waited on (a long transfer that keeps moving never
         * times out), counted on every partial read or write: their sum changes when some did. */
        if (c->tp_ops->moved != NULL) {
            uint64_t m = 0;
            for (int i = 0; i < n; i++)
                if (xs[i] != NULL && !xs[i]->done) m += c->tp_ops->moved(c->tp, xs[i]->peer);
            if (m != last_moved) {
                last_moved = m;
                deadline = 0;
            }
        }
        if (deadline == 0) {
            deadline = now + c->timeout_s;
        } else if (now >= deadline) {
            char mine[128], peers[128] = "";
            size_t o = 0;
            for (int i = 0; i < n && o + 12 < sizeof(peers); i++)
                if (xs[i] != NULL && !xs[i]->done)
                    o += (size_t)snprintf(peers + o, sizeof(peers) - o, "%s%d", o ? "," : "",
                                          xs[i]->peer);
            hoop__call_describe(call, mine, sizeof(mine));
            hoop__comm_fail(c, HOOP_ERR_TIMEOUT,
                            "%s (call #%llu) timed out after %.1f s waiting for rank(s) %s", mine,
                            (unsigned long long)call->seq, c->timeout_s, peers);
            c->tp_ops->abort(c->tp, HOOP_ERR_TIMEOUT, c->fatal_msg);
            return HOOP_ERR_TIMEOUT;
        }
        int ms = now - start < c->spin_s ? 0 : 100;
        if (ms && now - start < c->yield_s) {
            ms = 0;
            sched_yield();
        }
        if (ms) spin_polls = 0;
        /* Copies in flight end without the transport knowing: look again soon, not in 100 ms. */
        if (ms && copying) {
            ms = 0;
            nap_us(20);
        }
        c->tp_ops->progress(c->tp, ms);
        if (c->inflight != NULL || c->held != NULL) c->reap(c);
    }
}

hoop_result_t hoop__xwait1(const hoop__call_t *call, hoop__xfer_t *x)
{
    return hoop__xwait(call, &x, 1);
}

hoop_result_t hoop__sendrecv(const hoop__call_t *call, int to, const void *sbuf, size_t slen,
                             int from, void *rbuf, size_t rlen)
{
    hoop__xfer_t s, r;
    hoop__xfer_t *xs[2] = {NULL, NULL};
    if (from >= 0) {
        hoop__xrecv(call, &r, from, rbuf, rlen);
        xs[0] = &r;
    }
    if (to >= 0) {
        hoop__xsend(call, &s, to, sbuf, slen);
        xs[1] = &s;
    }
    return hoop__xwait(call, xs, 2);
}

hoop_result_t hoop__root_exchange(const hoop__call_t *call, int dir, char *base, size_t n)
{
    hoop_comm_t *c = call->comm;
    int p = c->size;
    size_t xbytes = (size_t)p * sizeof(hoop__xfer_t), pbytes = (size_t)p * sizeof(hoop__xfer_t *);
    /* The transfers are host structures: in the scratch space only when that is host memory. */
    int host = call->mem == HOOP__MEM_HOST;
    char *s = host ? hoop__scratch(call, xbytes + pbytes) : malloc(xbytes + pbytes);
    if (s == NULL) {
        hoop__comm_fail(c, HOOP_ERR_NO_MEMORY, "%s: no memory for %d transfers",
                        hoop__kind_name(call->kind), p);
        return HOOP_ERR_NO_MEMORY;
    }
    hoop__xfer_t *xs = (hoop__xfer_t *)(void *)s;
    hoop__xfer_t **ptrs = (hoop__xfer_t **)(void *)(s + xbytes);
    char none = 0; /* a valid address for empty blocks */
    for (int i = 0; i < p; i++) {
        ptrs[i] = NULL;
        if (i == c->rank) continue;
        char *block = n > 0 ? base + (size_t)i * n : &none;
        if (dir == HOOP__XFER_RECV)
            hoop__xrecv(call, &xs[i], i, block, n);
        else
            hoop__xsend(call, &xs[i], i, block, n);
        ptrs[i] = &xs[i];
    }
    hoop_result_t rc = hoop__xwait(call, ptrs, p);
    if (!host) free(s);
    return rc;
}
