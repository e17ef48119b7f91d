/* Staging: transfers of device buffers through host memory. The transports read and write host
 * memory only, so a send of device memory is copied into a host buffer before the transport gets
 * it, and a receive lands in one and is copied to its device buffer. The buffers are the
 * communicator's, kept between calls (pinned memory is slow to get) and reused; there are as many
 * as the most transfers a call had in flight at once. Under exec, like every transfer.
 *
 * A collective's transfers are pipelined: the copies run on the communicator's copy streams
 * (mem_cuda_stage.c, one per direction: CUDA is the one memory type staged) while the network moves
 * other transfers. The transport is given
 * a transfer of the stage's own (tx), never the algorithm's (x), which is done only when the
 * stage says so:
 *
 *   send:    the device-to-host copy is queued with an event      (COPY_OUT)
 *            -> once the event is reached, tx goes to the transport (WIRE)
 *            -> tx done: x done
 *   receive: tx goes to the transport at once                      (WIRE)
 *            -> tx done: the host-to-device copy is queued with an event (COPY_IN)
 *            -> once the event is reached: x done
 *
 * Sends go to the transport in the order they were posted (a queue), which keeps the transports'
 * order of messages to each peer; they are copied on one stream, so they are ready in that order
 * anyway. Waits move all of this along (hoop__stage_progress, from hoop__xwait), whichever
 * transfers they wait for: the sends of the next step leave while the algorithm waits for a
 * receive.
 *
 * Point-to-point requests (p2p) go the same way, but each transfer belongs to its request, not to
 * a call that waits for it: the scheduler's reap moves them along (hoop__stage_reap) as it looks
 * for requests to complete, a later call never abandons them, and an abort completes them with
 * its code. Their copy streams are ordered after the request's stream as each is posted. */
#include <stdlib.h>
#include <time.h>

#include "runtime/runtime.h"

enum { FREE, COPY_OUT, WIRE, COPY_IN };

typedef struct stage_buf {
    int state;
    int p2p;         /* x is a point-to-point request's */
    hoop__xfer_t *x; /* the transfer it serves; NULL when free or abandoned (see abandon) */
    uint64_t seq;    /* the call of x (collectives) */
    hoop__xfer_t tx; /* what the transport is given */
    void *ev;        /* the event of its copies, kept with the buffer */
    void *host;
    size_t cap;
    hoop__mem_type_t mem;   /* whose host_alloc made it */
    void *dst;              /* a receive: where its payload goes */
    struct stage_buf *next; /* COPY_OUT: the next send in posting order */
} stage_buf_t;

struct hoop__stage {
    /* Each buffer on its own: the transport keeps a pointer to tx while it has it. */
    stage_buf_t **b;
    int n, cap;
    stage_buf_t *head, *tail; /* sends not yet given to the transport, in posting order */
    int began;                /* the copy streams were ordered after call seq's stream */
    uint64_t seq;
    int busy; /* copies in flight, as the last round saw */
};

/* A free buffer of at least len bytes: the smallest that fits, else a free one regrown, else a new
 * one; for 0 bytes any free one, host memory or not. NULL when out of memory. */
static stage_buf_t *take(hoop_comm_t *c, hoop__mem_type_t mem, size_t len)
{
    struct hoop__stage *st = c->stage;
    if (st == NULL && (st = c->stage = calloc(1, sizeof *st)) == NULL) return NULL;
    stage_buf_t *best = NULL, *spare = NULL;
    for (int i = 0; i < st->n; i++) {
        stage_buf_t *b = st->b[i];
        if (b->state != FREE) continue;
        if (len == 0) return b;
        if (b->mem == mem && b->cap >= len && (best == NULL || b->cap < best->cap)) best = b;
        if (spare == NULL || b->cap > spare->cap) spare = b;
    }
    if (best != NULL) return best;
    if (spare == NULL) {
        if (st->n == st->cap) {
            int ncap = st->cap ? 2 * st->cap : 8;
            stage_buf_t **nb = realloc(st->b, (size_t)ncap * sizeof *nb);
            if (nb == NULL) return NULL;
            st->b = nb;
            st->cap = ncap;
        }
        if ((spare = calloc(1, sizeof *spare)) == NULL) return NULL;
        st->b[st->n++] = spare;
    }
    if (len == 0) return spare;
    /* Powers of two from 64 KiB: a few sizes serve every chunk of a call. */
    size_t want = 64 << 10;
    while (want < len && want <= SIZE_MAX / 2) want *= 2;
    if (want < len) want = len;
    const hoop__mem_ops_t *mo = hoop__mem_ops(mem);
    void *p = mo->host_alloc(c, want);
    if (p == NULL) return NULL;
    if (spare->host != NULL) hoop__mem_ops(spare->mem)->host_free(c, spare->host);
    spare->host = p;
    spare->cap = want;
    spare->mem = mem;
    return spare;
}

static void complete_now(hoop__xfer_t *x, hoop_result_t code)
{
    x->status = code;
    x->done = 1;
}

/* b's transfer is over: x (if its call still waits) takes tx's outcome, or code when not OK. */
static void finish(stage_buf_t *b, hoop_result_t code)
{
    if (b->x != NULL) {
        b->x->got = b->tx.got;
        complete_now(b->x, code != HOOP_OK ? code : b->tx.status);
    }
    b->x = NULL;
    b->dst = NULL;
    b->state = FREE;
}

/* Sends whose copy is done go to the transport, in posting order; a send of an ended call is
 * dropped (the transport never had it). 1 if one went, 0 if none, -1 if an event failed. */
static int pump(hoop_comm_t *c)
{
    struct hoop__stage *st = c->stage;
    int moved = 0;
    while (st->head != NULL) {
        stage_buf_t *b = st->head;
        if (b->tx.len > 0) {
            int q = hoop__cuda_stage_query(c, b->ev);
            if (q < 0) return -1;
            if (q == 0) break;
        }
        st->head = b->next;
        if (st->head == NULL) st->tail = NULL;
        b->next = NULL;
        moved = 1;
        if (b->x == NULL) {
            b->state = FREE;
            continue;
        }
        b->state = WIRE;
        c->tp_ops->post(c->tp, &b->tx);
    }
    return moved;
}

/* Transfers of a call that ended without waiting for them, or of an aborted communicator (whose
 * waits return without them, and whose algorithms return at once), are no one's now: their
 * buffers go free once the device and the transport are done with them. A request's transfer is
 * its own until an abort, which completes it with the abort's code (its reap ends it then). */
static void abandon(hoop_comm_t *c, uint64_t seq)
{
    struct hoop__stage *st = c->stage;
    hoop_result_t ab = (hoop_result_t)atomic_load(&c->aborted);
    for (int i = 0; i < st->n; i++) {
        stage_buf_t *b = st->b[i];
        if (b->state == FREE || b->x == NULL || (!ab && (b->p2p || b->seq == seq))) continue;
        if (b->p2p) complete_now(b->x, ab);
        b->x = NULL;
    }
}

int hoop__stage_post(const hoop__call_t *call, hoop__xfer_t *x)
{
    hoop_comm_t *c = call->comm;
    int p2p = call->kind == HOOP__K_SEND;
    /* What the transport sees is host memory: the staging buffer, or for 0 bytes nothing at all
     * (the pointer may stay, it is never read or written). A send of 0 bytes still waits for the
     * sends before it. */
    x->mem = (hoop__mem_desc_t){.type = HOOP__MEM_HOST};
    struct hoop__stage *st = c->stage;
    if (x->len == 0 && (x->dir == HOOP__XFER_RECV || st == NULL || st->head == NULL)) return 0;
    stage_buf_t *b = take(c, call->mem, x->len);
    if (b == NULL) {
        hoop__comm_fail(c, HOOP_ERR_NO_MEMORY,
                        "cannot allocate %zu bytes of host memory to stage a transfer of %s "
                        "memory on rank %d",
                        x->len, hoop__mem_ops(call->mem)->name, c->rank);
        complete_now(x, HOOP_ERR_NO_MEMORY);
        return -1;
    }
    st = c->stage;
    hoop_result_t ab = (hoop_result_t)atomic_load(&c->aborted);
    if (ab) { /* what the transport would do with it */
        complete_now(x, ab);
        return -1;
    }
    /* The copy streams start after what the call's stream had queued when the call began, as its
     * synchronous operations do; a request's, after what its stream had when it was posted. */
    if (p2p && x->len > 0) {
        if (hoop__cuda_stage_begin(call) != 0) {
            complete_now(x, HOOP_ERR_SYSTEM);
            return -1;
        }
    } else if (!p2p && (!st->began || st->seq != call->seq)) {
        abandon(c, call->seq);
        if (hoop__cuda_stage_begin(call) != 0) {
            complete_now(x, HOOP_ERR_SYSTEM);
            return -1;
        }
        st->began = 1;
        st->seq = call->seq;
    }
    b->tx = *x;
    b->tx.buf = x->len > 0 ? b->host : x->buf;
    b->tx.done = 0;
    b->tx.status = HOOP_OK;
    b->x = x;
    b->p2p = p2p;
    b->seq = call->seq;
    x->done = 0;
    if (x->dir == HOOP__XFER_SEND) {
        if (x->len > 0 && hoop__cuda_stage_copy(call, 0, b->host, x->buf, x->len, &b->ev) != 0) {
            b->x = NULL;
            complete_now(x, HOOP_ERR_SYSTEM);
            return -1;
        }
        b->state = COPY_OUT;
        b->next = NULL;
        if (st->tail != NULL)
            st->tail->next = b;
        else
            st->head = b;
        st->tail = b;
        if (pump(c) < 0) return 1; /* x fails at its wait */
    } else {
        b->dst = x->buf;
        b->state = WIRE;
        c->tp_ops->post(c->tp, &b->tx);
    }
    return 1;
}

/* One round over every staged transfer (see hoop__stage_progress). */
static int advance(hoop_comm_t *c, const hoop__call_t *call)
{
    struct hoop__stage *st = c->stage;
    int moved = pump(c), failed = moved < 0, busy = 0;
    for (int i = 0; i < st->n; i++) {
        stage_buf_t *b = st->b[i];
        if (b->state == WIRE && b->tx.done) {
            if (b->tx.dir == HOOP__XFER_SEND || b->tx.status != HOOP_OK || b->x == NULL) {
                finish(b, HOOP_OK);
            } else if (hoop__cuda_stage_copy(call, 1, b->dst, b->host, b->tx.len, &b->ev) != 0) {
                finish(b, HOOP_ERR_SYSTEM);
                failed = 1;
            } else {
                b->state = COPY_IN;
            }
            moved = 1;
        }
        if (b->state == COPY_IN) {
            int q = hoop__cuda_stage_query(c, b->ev);
            if (q != 0) {
                finish(b, q > 0 ? HOOP_OK : HOOP_ERR_SYSTEM);
                failed |= q < 0;
                moved = 1;
            }
        }
        busy |= b->state == COPY_OUT || b->state == COPY_IN;
    }
    st->busy = busy;
    return failed ? -1 : moved;
}

int hoop__stage_progress(const hoop__call_t *call, int *busy)
{
    hoop_comm_t *c = call->comm;
    struct hoop__stage *st = c->stage;
    *busy = 0;
    if (st == NULL) return 0;
    if ((call->kind != HOOP__K_SEND && st->seq != call->seq) || atomic_load(&c->aborted))
        abandon(c, call->seq);
    int moved = advance(c, call);
    *busy = st->busy;
    return moved;
}

void hoop__stage_reap(hoop_comm_t *c)
{
    struct hoop__stage *st = c->stage;
    if (st == NULL) return;
    /* The copies need only the communicator; a call stands for it. */
    const hoop__call_t call = {.comm = c, .kind = HOOP__K_SEND, .mem = HOOP__MEM_CUDA};
    if (atomic_load(&c->aborted)) abandon(c, st->seq);
    /* A failed copy aborts the communicator: every request still staged ends with it. */
    if (advance(c, &call) < 0) abandon(c, st->seq);
}

int hoop__stage_busy(const hoop_comm_t *c) { return c->stage != NULL && c->stage->busy; }

hoop_result_t hoop__stage_flush(hoop_comm_t *c)
{
    struct hoop__stage *st = c->stage;
    double deadline = 0;
    while (st != NULL && st->head != NULL) {
        if (pump(c) < 0) return hoop__mem_failed(c);
        if (st->head == NULL) break;
        hoop_result_t ab = (hoop_result_t)atomic_load(&c->aborted);
        if (ab) return ab;
        double now = hoop__now();
        if (deadline == 0) {
            deadline = now + c->timeout_s;
        } else if (now > deadline) {
            hoop__comm_fail(c, HOOP_ERR_TIMEOUT,
                            "staged sends on rank %d were not copied to host memory within %.1f s",
                            c->rank, c->timeout_s);
            return HOOP_ERR_TIMEOUT;
        }
        struct timespec ts = {0, 20 * 1000};
        nanosleep(&ts, NULL);
    }
    return HOOP_OK;
}

void hoop__stage_free(hoop_comm_t *c)
{
    struct hoop__stage *st = c->stage;
    if (st == NULL) return;
    /* The transport is gone; copies may still be queued (a call that failed): their host memory
     * and events stay allocated unless the copy streams finish within the timeout. */
    int idle = 1;
    for (int i = 0; i < st->n; i++)
        if (st->b[i]->ev != NULL) idle = 0;
    if (!idle) idle = hoop__cuda_stage_drain(c, c->timeout_s) == 1;
    for (int i = 0; i < st->n; i++) {
        stage_buf_t *b = st->b[i];
        if (idle && b->host != NULL) hoop__mem_ops(b->mem)->host_free(c, b->host);
        if (idle && b->ev != NULL) hoop__cuda_stage_event_free(c, b->ev);
        free(b);
    }
    free(st->b);
    free(st);
    c->stage = NULL;
}
