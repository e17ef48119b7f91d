/* Staging: transfers of device buffers through host memory. The transports read and write host
 * memory only, so a send of device memory is copied into a host buffer as it is posted and a
 * receive lands in one and is copied to its device buffer when a wait sees it done. The buffers
 * are the communicator's, kept between calls (pinned memory is slow to get) and reused; there
 * are as many as the most transfers a call had in flight at once. Under exec, like every
 * transfer. Pipelining these copies with the network on streams comes later. */
#include <stdlib.h>

#include "runtime/runtime.h"

typedef struct stage_buf {
    const hoop__xfer_t *x; /* the transfer it serves; NULL when free */
    void *host;
    size_t cap;
    hoop__mem_type_t mem; /* whose host_alloc made it */
    void *dst;            /* a receive: where its payload goes */
} stage_buf_t;

struct hoop__stage {
    stage_buf_t *b;
    int n, cap;
};

/* A free buffer of at least len bytes for x: the smallest that fits, else a free one regrown,
 * else a new one. NULL when out of memory. */
static stage_buf_t *take(hoop_comm_t *c, hoop__mem_type_t mem, size_t len)
{
    struct hoop__stage *st = c->stage;
    if (st == NULL && (st = c->stage = calloc(1, sizeof *st)) == NULL) return NULL;
    stage_buf_t *best = NULL, *spare = NULL;
    for (int i = 0; i < st->n; i++) {
        stage_buf_t *b = &st->b[i];
        if (b->x != NULL) continue;
        if (b->mem == mem && b->cap >= len && (best == NULL || b->cap < best->cap)) best = b;
        if (spare == NULL || b->cap > spare->cap) spare = b;
    }
    if (best != NULL) return best;
    if (spare == NULL) {
        if (st->n == st->cap) {
            int ncap = st->cap ? 2 * st->cap : 8;
            stage_buf_t *nb = realloc(st->b, (size_t)ncap * sizeof *nb);
            if (nb == NULL) return NULL;
            st->b = nb;
            st->cap = ncap;
        }
        spare = &st->b[st->n++];
        *spare = (stage_buf_t){0};
    }
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

int hoop__stage_post(const hoop__call_t *call, hoop__xfer_t *x)
{
    hoop_comm_t *c = call->comm;
    /* What the transport sees is host memory: the staging buffer, or for 0 bytes nothing at all
     * (the pointer may stay, it is never read or written). */
    x->mem = (hoop__mem_desc_t){.type = HOOP__MEM_HOST};
    if (x->len == 0) return 0;
    stage_buf_t *b = take(c, call->mem, x->len);
    if (b == NULL) {
        hoop__comm_fail(c, HOOP_ERR_NO_MEMORY,
                        "cannot allocate %zu bytes of host memory to stage a transfer of %s "
                        "memory on rank %d",
                        x->len, hoop__mem_ops(call->mem)->name, c->rank);
        complete_now(x, HOOP_ERR_NO_MEMORY);
        return -1;
    }
    if (x->dir == HOOP__XFER_SEND) {
        hoop__mem_copy(call, b->host, x->buf, x->len);
        hoop_result_t rc = hoop__mem_failed(c);
        if (rc != HOOP_OK) { /* the copy failed and said why */
            complete_now(x, rc);
            return -1;
        }
        b->dst = NULL;
    } else {
        b->dst = x->buf;
    }
    b->x = x;
    x->buf = b->host;
    return 0;
}

hoop_result_t hoop__stage_done(const hoop__call_t *call, hoop__xfer_t *const *xs, int n)
{
    hoop_comm_t *c = call->comm;
    struct hoop__stage *st = c->stage;
    if (st == NULL) return HOOP_OK;
    for (int i = 0; i < n; i++) {
        const hoop__xfer_t *x = xs[i];
        if (x == NULL || !x->done) continue;
        for (int k = 0; k < st->n; k++) {
            stage_buf_t *b = &st->b[k];
            if (b->x != x) continue;
            if (x->status == HOOP_OK && b->dst != NULL)
                hoop__mem_copy(call, b->dst, b->host, x->len);
            b->x = NULL;
            b->dst = NULL;
            break;
        }
    }
    return hoop__mem_failed(c);
}

void hoop__stage_free(hoop_comm_t *c)
{
    struct hoop__stage *st = c->stage;
    if (st == NULL) return;
    for (int i = 0; i < st->n; i++)
        if (st->b[i].host != NULL) hoop__mem_ops(st->b[i].mem)->host_free(c, st->b[i].host);
    free(st->b);
    free(st);
    c->stage = NULL;
}
