/* The CUDA IPC path's areas, events and stream (src/local/ipc.c, runtime.h). */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/mem_cuda.h"

/* ---- CUDA IPC ---- */

int hoop__cuda_ipc_area(hoop_comm_t *c, size_t want, void **area, size_t *cap, void *handle,
                        char *err, size_t errlen)
{
    struct hoop__cuda *st = hoop__cuda_of(c);
    if (st->ipc_area == NULL) {
        st->ipc_area = st->t->ipc_alloc(st->ctx, want, st->ipc_handle);
        if (st->ipc_area == NULL) {
            snprintf(err, errlen, "cannot allocate its %zu-byte CUDA IPC area: %s", want,
                     st->t->error(st->ctx));
            return -1;
        }
        st->ipc_cap = want;
    }
    *area = st->ipc_area;
    *cap = st->ipc_cap;
    memcpy(handle, st->ipc_handle, HOOP__CUDA_IPC_HANDLE);
    return 0;
}

static int peers_made(hoop_comm_t *c, struct hoop__cuda *st, char *err, size_t errlen)
{
    if (st->peer == NULL && (st->peer = calloc((size_t)c->size, sizeof *st->peer)) == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

void *hoop__cuda_ipc_peer(hoop_comm_t *c, int peer, const void *handle, char *err, size_t errlen)
{
    struct hoop__cuda *st = hoop__cuda_of(c);
    if (peers_made(c, st, err, errlen) != 0) return NULL;
    if (st->peer[peer].p != NULL) {
        if (memcmp(st->peer[peer].handle, handle, HOOP__CUDA_IPC_HANDLE) == 0)
            return st->peer[peer].p;
        st->t->ipc_close(st->ctx, st->peer[peer].p);
        st->peer[peer].p = NULL;
    }
    void *p = st->t->ipc_open(st->ctx, handle);
    if (p == NULL) {
        snprintf(err, errlen, "cannot open rank %d's CUDA IPC area: %s", peer,
                 st->t->error(st->ctx));
        return NULL;
    }
    st->peer[peer].p = p;
    memcpy(st->peer[peer].handle, handle, HOOP__CUDA_IPC_HANDLE);
    return p;
}

int hoop__cuda_ipc_events(hoop_comm_t *c, void *handles, char *err, size_t errlen)
{
    struct hoop__cuda *st = hoop__cuda_of(c);
    for (int k = 0; k < HOOP__IPC_EVENTS; k++)
        if (st->ipc_ev[k] == NULL &&
            (st->ipc_ev[k] = st->t->ipc_event_create(st->ctx, st->ipc_ev_handle[k])) == NULL) {
            snprintf(err, errlen, "cannot make its CUDA IPC events: %s", st->t->error(st->ctx));
            return -1;
        }
    memcpy(handles, st->ipc_ev_handle, sizeof st->ipc_ev_handle);
    return 0;
}

int hoop__cuda_ipc_peer_events(hoop_comm_t *c, int peer, const void *handles, char *err,
                               size_t errlen)
{
    struct hoop__cuda *st = hoop__cuda_of(c);
    if (peers_made(c, st, err, errlen) != 0) return -1;
    for (int k = 0; k < HOOP__IPC_EVENTS; k++) {
        const unsigned char *h = (const unsigned char *)handles + k * HOOP__CUDA_IPC_HANDLE;
        if (st->peer[peer].ev[k] != NULL) {
            if (memcmp(st->peer[peer].ev_handle[k], h, HOOP__CUDA_IPC_HANDLE) == 0) continue;
            st->t->event_destroy(st->ctx, st->peer[peer].ev[k]);
        }
        st->peer[peer].ev[k] = st->t->ipc_event_open(st->ctx, h);
        if (st->peer[peer].ev[k] == NULL) {
            snprintf(err, errlen, "cannot open rank %d's CUDA IPC events: %s", peer,
                     st->t->error(st->ctx));
            return -1;
        }
        memcpy(st->peer[peer].ev_handle[k], h, HOOP__CUDA_IPC_HANDLE);
    }
    return 0;
}

void hoop__cuda_ipc_begin(const hoop__call_t *call)
{
    hoop_comm_t *c = call->comm;
    struct hoop__cuda *st = hoop__cuda_of(c);
    const hoop_cuda_module_t *t = st->t;
    int rc = 0;
    if (st->ipc_stream == NULL && (st->ipc_stream = t->stream_create(st->ctx)) == NULL) rc = -1;
    if (rc == 0 && st->ipc_gate == NULL && (st->ipc_gate = t->event_create(st->ctx)) == NULL)
        rc = -1;
    if (rc == 0 && st->ipc_fin == NULL && (st->ipc_fin = t->event_create(st->ctx)) == NULL) rc = -1;
    /* The stream never waits for the legacy default stream by itself: without this a copy
     * could read an input before the application's kernel wrote it. */
    if (rc == 0) rc = t->event_record(st->ctx, st->ipc_gate, NULL);
    if (rc == 0) rc = t->stream_wait_event(st->ctx, st->ipc_stream, st->ipc_gate);
    hoop__cuda_check(c, st, rc, "IPC stream");
}

void hoop__cuda_ipc_copy(const hoop__call_t *call, void *dst, const void *src, size_t n)
{
    struct hoop__cuda *st = hoop__cuda_of(call->comm);
    if (n > 0 && dst != src)
        hoop__cuda_check(call->comm, st, st->t->copy_async(st->ctx, dst, src, n, st->ipc_stream),
                         "copy");
}

void hoop__cuda_ipc_move(const hoop__call_t *call, void *dst, const void *src, size_t n)
{
    struct hoop__cuda *st = hoop__cuda_of(call->comm);
    /* Synchronous, after the stream's queued work: overlapping ranges need the module's
     * temporary. */
    hoop__cuda_check(call->comm, st, st->t->move(st->ctx, dst, src, n, st->ipc_stream), "copy");
}

void hoop__cuda_ipc_reduce(const hoop__call_t *call, void *out, const void *a, const void *b,
                           size_t count)
{
    struct hoop__cuda *st = hoop__cuda_of(call->comm);
    hoop__cuda_check(
        call->comm, st,
        st->t->reduce_async(st->ctx, out, a, b, count, call->dtype, call->op, st->ipc_stream),
        "reduction");
}

void hoop__cuda_ipc_avg(const hoop__call_t *call, void *buf, size_t count)
{
    struct hoop__cuda *st = hoop__cuda_of(call->comm);
    hoop__cuda_check(
        call->comm, st,
        st->t->avg_finish_async(st->ctx, buf, count, call->dtype, call->comm->size, st->ipc_stream),
        "average");
}

void hoop__cuda_ipc_record(const hoop__call_t *call, int which)
{
    struct hoop__cuda *st = hoop__cuda_of(call->comm);
    hoop__cuda_check(call->comm, st,
                     st->t->event_record(st->ctx, st->ipc_ev[which], st->ipc_stream), "IPC event");
}

void hoop__cuda_ipc_wait(const hoop__call_t *call, int peer, int which)
{
    struct hoop__cuda *st = hoop__cuda_of(call->comm);
    hoop__cuda_check(call->comm, st,
                     st->t->stream_wait_event(st->ctx, st->ipc_stream, st->peer[peer].ev[which]),
                     "IPC event wait");
}

hoop_result_t hoop__cuda_ipc_end(const hoop__call_t *call, int (*watch)(void *), void *arg)
{
    hoop_comm_t *c = call->comm;
    struct hoop__cuda *st = hoop__cuda_of(c);
    if (st->ipc_stream == NULL || st->ipc_fin == NULL) return hoop__mem_failed(c);
    if (st->t->event_record(st->ctx, st->ipc_fin, st->ipc_stream) != 0) {
        hoop__cuda_check(c, st, -1, "IPC event");
        return HOOP_ERR_SYSTEM;
    }
    /* The stream may wait for an event that a dead peer never records: watch says so (and
     * fails the communicator), as does an abort. Then the call ends and the stream is left
     * (a failed call's buffers are undefined, as for any failed call). */
    double start = hoop__now(), next_watch = start;
    for (unsigned i = 0;; i++) {
        int q = st->t->event_query(st->ctx, st->ipc_fin);
        if (q == 1) return hoop__mem_failed(c);
        if (q < 0) {
            hoop__cuda_check(c, st, -1, "IPC event");
            return HOOP_ERR_SYSTEM;
        }
        double now = hoop__now();
        if (atomic_load(&c->aborted) || (now >= next_watch && watch(arg) != 0))
            return (hoop_result_t)atomic_load(&c->aborted);
        if (now >= next_watch) next_watch = now + 0.001;
        if (now - start > c->timeout_s) {
            char what[128];
            hoop__call_describe(call, what, sizeof what);
            hoop__comm_fail(c, HOOP_ERR_TIMEOUT,
                            "%s (call #%llu) over CUDA IPC on rank %d: its device work did not "
                            "finish within %.1f s",
                            what, (unsigned long long)call->seq, c->rank, c->timeout_s);
            return HOOP_ERR_TIMEOUT;
        }
        if (i > 64) hoop__cuda_pause_us(20); /* short waits spin, long ones sleep */
    }
}
