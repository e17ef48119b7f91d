/* Staging's copy streams: device buffers moved through host memory (stage.c, runtime.h). */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/mem_cuda.h"

/* ---- staging's copies ---- */

int hoop__cuda_stage_begin(const hoop__call_t *call)
{
    hoop_comm_t *c = call->comm;
    struct hoop__cuda *st = hoop__cuda_of(c);
    const hoop_cuda_module_t *t = st->t;
    int rc = 0;
    for (int d = 0; d < 2 && rc == 0; d++)
        if (st->copy_stream[d] == NULL && (st->copy_stream[d] = t->stream_create(st->ctx)) == NULL)
            rc = -1;
    if (rc == 0 && st->copy_gate == NULL && (st->copy_gate = t->event_create(st->ctx)) == NULL)
        rc = -1;
    /* The streams never wait for the legacy default stream by themselves (they are made
     * cudaStreamNonBlocking): without this a copy could read a send buffer before the
     * application's kernel wrote it, or write a receive buffer it still reads. */
    if (rc == 0) rc = t->event_record(st->ctx, st->copy_gate, NULL);
    for (int d = 0; d < 2 && rc == 0; d++)
        rc = t->stream_wait_event(st->ctx, st->copy_stream[d], st->copy_gate);
    hoop__cuda_check(c, st, rc, "staging stream");
    return rc;
}

int hoop__cuda_stage_copy(const hoop__call_t *call, int to_device, void *dst, const void *src,
                          size_t n, void **ev)
{
    hoop_comm_t *c = call->comm;
    struct hoop__cuda *st = hoop__cuda_of(c);
    const hoop_cuda_module_t *t = st->t;
    void *s = st->copy_stream[to_device != 0];
    int rc = 0;
    if (*ev == NULL && (*ev = t->event_create(st->ctx)) == NULL) rc = -1;
    if (rc == 0) rc = t->copy_async(st->ctx, dst, src, n, s);
    if (rc == 0) rc = t->event_record(st->ctx, *ev, s);
    hoop__cuda_check(c, st, rc, "copy");
    return rc;
}

int hoop__cuda_stage_query(hoop_comm_t *c, void *ev)
{
    struct hoop__cuda *st = hoop__cuda_of(c);
    int q = st->t->event_query(st->ctx, ev);
    if (q < 0) hoop__cuda_check(c, st, -1, "copy");
    return q < 0 ? -1 : q != 0;
}

int hoop__cuda_stage_drain(hoop_comm_t *c, double seconds)
{
    struct hoop__cuda *st = hoop__cuda_of(c);
    if (st == NULL || st->copy_gate == NULL) return 1;
    double start = hoop__now();
    for (int d = 0; d < 2; d++) {
        if (st->copy_stream[d] == NULL) continue;
        if (st->t->event_record(st->ctx, st->copy_gate, st->copy_stream[d]) != 0) return -1;
        double left = seconds - (hoop__now() - start);
        int q = hoop__cuda_poll_event(st, st->copy_gate, left > 0 ? left : 0);
        if (q != 1) {
            st->copy_stuck = 1;
            return q;
        }
    }
    return 1;
}

void hoop__cuda_stage_event_free(hoop_comm_t *c, void *ev)
{
    struct hoop__cuda *st = hoop__cuda_of(c);
    st->t->event_destroy(st->ctx, ev);
}
