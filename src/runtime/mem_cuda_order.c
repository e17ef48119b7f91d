/* Stream-ordered calls on CUDA streams: the memory layer's hoop__mem_order_* (runtime.h). */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/mem_cuda.h"

/* ---- stream-ordered calls ----
 * A call ordered on a user's stream runs on the host, on a pinned copy of its buffers, so that
 * the stream's wait for its word depends on host work only. Were the call's copies and kernels
 * queued on the device instead, after the stream's wait was queued, they could land on a hardware
 * queue behind that wait (streams share CUDA_DEVICE_MAX_CONNECTIONS queues; one with 1) and
 * the wait would never end. At posting, on the user's stream: a copy of what the call reads into
 * the slot's buffer, then ev_in. When the call is queued: the wait for the word, the copy of what
 * it wrote back into the user's buffers, then ev_out. The engine runs the call on host memory
 * once ev_in is reached and sets the word when it ends. docs/cuda.md, "The mechanism". */

/* The user's streams may still be about to read a word or a buffer: wait until each slot's copy
 * out has passed (every call has ended by now, so its word is set) before they go. One timeout
 * for them all: a stream that never gets there holds up the others' slots too. */
void hoop__cuda_order_close(hoop_comm_t *c, struct hoop__cuda *st)
{
    int keep = 0;
    double start = hoop__now();
    for (int k = 0; k < st->nslots; k++) {
        order_slot_t *o = &st->slot[k];
        double left = c->timeout_s - (hoop__now() - start);
        int kept = o->out_queued && hoop__cuda_poll_event(st, o->ev_out, left > 0 ? left : 0) != 1;
        keep |= kept;
        if (o->ev_in != NULL) st->t->event_destroy(st->ctx, o->ev_in);
        if (o->ev_out != NULL) st->t->event_destroy(st->ctx, o->ev_out);
        /* A stream that never got there (its own earlier work hangs) could still copy from the
         * buffer: it is left allocated rather than freed under it. */
        if (o->buf != NULL && !kept) st->t->host_free(st->ctx, o->buf);
    }
    if (st->words != NULL && !keep) st->t->host_free(st->ctx, st->words);
}

/* Whether slot k may take a new call: its call ended and its copy out is done. Under mu. */
static int slot_free(struct hoop__cuda *st, int k)
{
    order_slot_t *o = &st->slot[k];
    if (o->busy || (o->out_owed && !o->out_queued)) return 0;
    if (o->out_queued && st->t->event_query(st->ctx, o->ev_out) != 1) return 0;
    o->out_owed = o->out_queued = 0;
    return 1;
}

/* A slot for a call that needs bytes of pinned buffer: a free one whose buffer is large enough,
 * else the free one with the largest, else a new one; -1 when none is free, -2 when events
 * cannot be made. Under mu. */
static int slot_take(struct hoop__cuda *st, size_t bytes)
{
    int best = -1;
    for (int k = 0; k < st->nslots; k++) {
        if (!slot_free(st, k)) continue;
        if (st->slot[k].cap >= bytes) {
            best = k;
            break;
        }
        if (best < 0 || st->slot[k].cap > st->slot[best].cap) best = k;
    }
    if (best < 0 && st->nslots < SLOTS) best = st->nslots++;
    if (best < 0) return -1;
    order_slot_t *o = &st->slot[best];
    if (o->ev_in == NULL) o->ev_in = st->t->event_create(st->ctx);
    if (o->ev_out == NULL) o->ev_out = st->t->event_create(st->ctx);
    if (o->ev_in == NULL || o->ev_out == NULL) return -2;
    return best;
}

/* Gives slot k a buffer of at least bytes: the old one is kept until the communicator goes (a
 * free of pinned memory waits for the whole device). Made at posting, before the call's own wait
 * is queued. Under mu. */
static int slot_buffer(struct hoop__cuda *st, order_slot_t *o, size_t bytes)
{
    if (o->cap >= bytes) return 0;
    size_t cap = o->cap * 2 > bytes ? o->cap * 2 : bytes;
    if (cap < 4096) cap = 4096;
    char *b = st->t->host_alloc(st->ctx, cap);
    if (b == NULL) return -1;
    if (o->buf != NULL) st->t->host_free(st->ctx, o->buf);
    o->buf = b;
    o->cap = cap;
    return 0;
}

/* The stream's capture, refused before anything is queued on it. */
static hoop_result_t refuse_capture(hoop_comm_t *c, struct hoop__cuda *st, void *stream,
                                    const char *fn)
{
    int cap = st->t->stream_capturing(st->ctx, stream);
    if (cap == 0) return HOOP_OK;
    if (cap < 0)
        return hoop__comm_error(c, HOOP_ERR_UNSUPPORTED,
                                "%s: cannot tell whether stream %p is being captured into a CUDA "
                                "graph: %s",
                                fn, stream, st->t->error(st->ctx));
    return hoop__comm_error(c, HOOP_ERR_UNSUPPORTED,
                            "%s: stream %p is being captured into a CUDA graph, and hoop's "
                            "stream-ordered calls cannot be captured: their work runs on the "
                            "host, which a replay of the graph would not run again. Call it "
                            "outside the captured region (torch.compile: a mode other than "
                            "\"reduce-overhead\", or keep the collective out of the graph)",
                            fn, stream);
}

hoop_result_t hoop__mem_order_post(hoop_comm_t *c, hoop__call_t *call, void *stream, const char *fn)
{
    struct hoop__cuda *st = hoop__cuda_of(c);
    const hoop_cuda_module_t *t = st->t;
    hoop_result_t rc = refuse_capture(c, st, stream, fn);
    if (rc != HOOP_OK) return rc;
    size_t rd, wr;
    hoop__call_extents(call, &rd, &wr);
    /* The buffer's layout keeps the call's own: what it reads and writes, where the two overlap
     * (in place), one range at the same offsets. */
    uintptr_t s = (uintptr_t)call->sendbuf, r = (uintptr_t)call->recvbuf;
    int overlap = (rd > 0 && wr > 0 && s < r + wr && r < s + rd) || (s == r && s != 0);
    uintptr_t lo = overlap ? (s < r ? s : r) : 0;
    size_t span = overlap ? (s + rd > r + wr ? s + rd : r + wr) - lo : 0;
    size_t s_off = overlap ? s - lo : 0, r_off = overlap ? r - lo : (rd + 255) / 256 * 256;
    size_t bytes = overlap ? span : r_off + wr;
    double start = hoop__now();
    pthread_mutex_lock(&st->mu);
    if (st->words == NULL) {
        st->words = t->host_alloc(st->ctx, SLOTS * sizeof(uint32_t));
        if (st->words != NULL) memset(st->words, 0, SLOTS * sizeof(uint32_t));
    }
    int k = st->words != NULL ? slot_take(st, bytes) : -2;
    while (k == -1) { /* SLOTS calls in flight: the oldest ends soon, on the progress thread */
        if (st->ndeferred >= SLOTS) {
            /* Every slot is held by this group until its end, which only this thread can
             * reach: none would come free. */
            pthread_mutex_unlock(&st->mu);
            return hoop__comm_error(c, HOOP_ERR_UNSUPPORTED,
                                    "%s: a group (hoop_group_start) holds at most %d "
                                    "stream-ordered calls until hoop_group_end, and this would be "
                                    "one more: end the group first",
                                    fn, SLOTS);
        }
        pthread_mutex_unlock(&st->mu);
        if (hoop__now() - start > c->timeout_s)
            return hoop__comm_error(c, HOOP_ERR_TIMEOUT,
                                    "%s: %d stream-ordered calls were in flight and none ended "
                                    "within %.1f s",
                                    fn, SLOTS, c->timeout_s);
        hoop__cuda_pause_us(50);
        pthread_mutex_lock(&st->mu);
        k = slot_take(st, bytes);
    }
    order_slot_t *o = k >= 0 ? &st->slot[k] : NULL;
    if (o == NULL || slot_buffer(st, o, bytes) != 0) {
        pthread_mutex_unlock(&st->mu);
        return hoop__comm_error(c, HOOP_ERR_SYSTEM,
                                "%s: cannot set up the stream ordering on rank %d: %s", fn, c->rank,
                                t->error(st->ctx));
    }
    o->busy = 1;
    o->out_owed = 1;
    o->out_queued = 0;
    o->since = 0;
    o->value = __atomic_load_n(&st->words[k], __ATOMIC_RELAXED) + 1;
    o->stream = stream;
    o->dev_out = wr > 0 ? call->recvbuf : NULL;
    o->out_off = r_off;
    o->out_len = wr;
    /* What the call reads, once the stream's earlier work wrote it (all of an in-place span: the
     * call may keep what it does not write). */
    int e = 0;
    if (overlap && rd > 0)
        e = t->copy_async(st->ctx, o->buf, (const void *)lo, span, stream);
    else if (rd > 0)
        e = t->copy_async(st->ctx, o->buf + s_off, call->sendbuf, rd, stream);
    if (e == 0) e = t->event_record(st->ctx, o->ev_in, stream);
    if (e != 0) o->out_owed = o->busy = 0;
    pthread_mutex_unlock(&st->mu);
    if (e != 0) {
        return hoop__comm_error(c, HOOP_ERR_SYSTEM,
                                "%s: cannot order the call on stream %p on rank %d: %s", fn, stream,
                                c->rank, t->error(st->ctx));
    }
    call->order = k + 1;
    call->mem = HOOP__MEM_HOST;
    if (call->sendbuf != NULL) call->sendbuf = o->buf + s_off;
    if (call->recvbuf != NULL) call->recvbuf = o->buf + r_off;
    return HOOP_OK;
}

/* The stream's wait for slot k's word, the copy out and ev_out. Under mu. */
static int queue_out(struct hoop__cuda *st, int k)
{
    order_slot_t *o = &st->slot[k];
    const hoop_cuda_module_t *t = st->t;
    int e = t->stream_wait_word(st->ctx, o->stream, &st->words[k], o->value);
    if (e == 0 && o->out_len > 0)
        e = t->copy_async(st->ctx, o->dev_out, o->buf + o->out_off, o->out_len, o->stream);
    if (e == 0) e = t->event_record(st->ctx, o->ev_out, o->stream);
    /* Queued or not, the slot is reusable once ev_out says so (a failure is the
     * communicator's, which goes). */
    o->out_queued = e == 0;
    if (e != 0) o->out_owed = 0;
    return e;
}

hoop_result_t hoop__mem_order_queued(hoop_comm_t *c, const hoop__call_t *call, const char *fn)
{
    struct hoop__cuda *st = hoop__cuda_of(c);
    int k = call->order - 1;
    pthread_mutex_lock(&st->mu);
    int e = 0;
    if (c->group > 0) {
        /* In a group, no call waits for another of the group: the stream's waits come at its
         * end, after every call's copy in (a receive before a send on one stream would
         * otherwise hold the send until the receive is done, on every rank of a ring). */
        if (st->ndeferred == st->capdeferred) {
            int ncap = st->capdeferred ? 2 * st->capdeferred : 16;
            int *nd = realloc(st->deferred, (size_t)ncap * sizeof *nd);
            if (nd == NULL) {
                pthread_mutex_unlock(&st->mu);
                hoop__comm_fail(c, HOOP_ERR_NO_MEMORY, "%s: out of memory", fn);
                return HOOP_ERR_NO_MEMORY;
            }
            st->deferred = nd;
            st->capdeferred = ncap;
        }
        st->deferred[st->ndeferred++] = k;
    } else {
        e = queue_out(st, k);
    }
    pthread_mutex_unlock(&st->mu);
    /* The call is queued: a stream that does not wait for it would run ahead of its result, so
     * the communicator fails, and every rank learns why. */
    if (e != 0) {
        hoop__comm_fail(c, HOOP_ERR_SYSTEM,
                        "%s: cannot make stream %p wait for the call on rank %d: %s", fn,
                        st->slot[k].stream, c->rank, st->t->error(st->ctx));
        return HOOP_ERR_SYSTEM;
    }
    return HOOP_OK;
}

hoop_result_t hoop__mem_group_end(hoop_comm_t *c)
{
    struct hoop__cuda *st = hoop__cuda_of(c);
    if (st == NULL) return HOOP_OK;
    pthread_mutex_lock(&st->mu);
    int rc = 0;
    for (int i = 0; i < st->ndeferred; i++) {
        int r = queue_out(st, st->deferred[i]);
        if (r != 0 && rc == 0) rc = r;
    }
    st->ndeferred = 0;
    pthread_mutex_unlock(&st->mu);
    if (rc != 0) {
        hoop__comm_fail(c, HOOP_ERR_SYSTEM,
                        "hoop_group_end: cannot make a stream wait for the group's calls on rank "
                        "%d: %s",
                        c->rank, st->t->error(st->ctx));
        return HOOP_ERR_SYSTEM;
    }
    return HOOP_OK;
}

int hoop__mem_order_ready(const hoop__call_t *call)
{
    hoop_comm_t *c = call->comm;
    struct hoop__cuda *st = hoop__cuda_of(c);
    order_slot_t *o = &st->slot[call->order - 1];
    if (st->t->event_query(st->ctx, o->ev_in) != 0) return 1; /* reached, or an error to report */
    double now = hoop__now();
    if (o->since == 0) o->since = now;
    return now - o->since > c->timeout_s; /* then hoop__mem_order_start says so */
}

hoop_result_t hoop__mem_order_start(const hoop__call_t *call)
{
    hoop_comm_t *c = call->comm;
    struct hoop__cuda *st = hoop__cuda_of(c);
    order_slot_t *o = &st->slot[call->order - 1];
    double left = c->timeout_s - (o->since > 0 ? hoop__now() - o->since : 0);
    int q = hoop__cuda_poll_event(st, o->ev_in, left > 0 ? left : 0);
    if (q == 1) return HOOP_OK;
    char what[128];
    hoop__call_describe(call, what, sizeof what);
    if (q == 0)
        hoop__comm_fail(c, HOOP_ERR_TIMEOUT,
                        "%s (call #%llu) on rank %d: the work queued on its stream before it did "
                        "not finish within %.1f s",
                        what, (unsigned long long)call->seq, c->rank, c->timeout_s);
    else
        hoop__comm_fail(c, HOOP_ERR_SYSTEM, "%s (call #%llu) on rank %d: CUDA event: %s", what,
                        (unsigned long long)call->seq, c->rank, st->t->error(st->ctx));
    return (hoop_result_t)atomic_load(&c->aborted);
}

/* Sets the call's word, so that its stream moves on, and frees its slot; cancelled: the call was
 * never queued, so no copy back is owed. */
static void order_release(hoop__call_t *call, int cancelled)
{
    if (call->order == 0) return;
    struct hoop__cuda *st = hoop__cuda_of(call->comm);
    pthread_mutex_lock(&st->mu);
    order_slot_t *o = &st->slot[call->order - 1];
    /* Ended: the call's results are in the slot's buffer, for the stream's copy back. */
    __atomic_store_n(&st->words[call->order - 1], o->value, __ATOMIC_RELEASE);
    o->busy = 0;
    if (cancelled && !o->out_queued) o->out_owed = 0;
    pthread_mutex_unlock(&st->mu);
    call->order = 0;
}

void hoop__mem_order_end(hoop__call_t *call) { order_release(call, 0); }

void hoop__mem_order_cancel(hoop__call_t *call) { order_release(call, 1); }
