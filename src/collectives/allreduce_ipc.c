/*
 * All-reduce of CUDA device buffers between ranks of one node through CUDA IPC (HOOP_ALGO=ipc;
 * docs/cuda.md). Each rank has an area of device memory (HOOP_CUDA_IPC_BYTES, 32 MiB by
 * default) that its peers open once from its IPC handle and keep open; no user buffer is ever
 * exported, so no cache can outlive a buffer the application freed. The area's first half takes
 * this rank's input, the second half the segment it reduces. Two shots per chunk of half an
 * area (the smallest area of any rank):
 *
 *   step 0   every rank -> every rank: hello (device buffers? host, area size, IPC handle)
 *   step 1   copy this rank's chunk into its area; every rank -> every rank: ready
 *   step 2   rank r reduces segment r of the chunk from every rank's area, in rank order,
 *            kernels reading peers' memory directly; every rank -> every rank: reduced
 *   step 3   every rank copies segment q from rank q's area into its output, for every q;
 *            every rank -> every rank: read (the areas may be written again)
 *
 * Chunks of at most HOOP_CUDA_IPC_ONESHOT_BYTES (256 KiB by default; the smallest of all ranks'
 * applies) go in one shot instead: after step 1 every rank reduces the whole chunk from every
 * area, in rank order, into its own output, and one more round of messages ends it: half the
 * rounds, p times the reduction work, which small chunks can afford.
 *
 * The steps' messages are host messages of a few bytes; the device operations are complete
 * when they return (the module waits for them), so a message sent after them orders them
 * before what the peer does next, across processes. Every rank reduces one segment, so every
 * rank gets the same bits. Works with several ranks on one GPU.
 *
 * A rank that cannot take part (host buffers, another host, an area it cannot allocate or a
 * peer's it cannot open) says so in its hello or its ready message, and every rank fails the
 * call with the same sentence.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"

#define DEFAULT_AREA ((size_t)32 << 20)
#define DEFAULT_ONESHOT ((size_t)256 << 10)

typedef struct hello {
    uint8_t ok;
    uint8_t pad[7];
    uint64_t cap;
    uint64_t oneshot; /* HOOP_CUDA_IPC_ONESHOT_BYTES: the smallest of all ranks' is used */
    char host[64];
    char why[176];
    unsigned char handle[HOOP__IPC_HANDLE];
} hello_t;

/* Every rank sends len bytes of mine to every other and receives theirs at all + q * len (mine
 * copied to its own place). Host messages of call hc. */
static hoop_result_t exchange(const hoop__call_t *hc, const void *mine, void *all, size_t len)
{
    hoop_comm_t *c = hc->comm;
    int p = c->size, me = c->rank;
    memcpy((char *)all + (size_t)me * len, mine, len);
    if (p == 1) return HOOP_OK;
    hoop__xfer_t *x = malloc(2 * (size_t)p * sizeof *x);
    hoop__xfer_t **xs = malloc(2 * (size_t)p * sizeof *xs);
    if (x == NULL || xs == NULL) {
        free(x);
        free(xs);
        return HOOP_ERR_NO_MEMORY;
    }
    int n = 0;
    for (int q = 0; q < p; q++) {
        if (q == me) continue;
        hoop__xrecv(hc, &x[n], q, (char *)all + (size_t)q * len, len);
        xs[n] = &x[n];
        n++;
    }
    for (int q = 0; q < p; q++) {
        if (q == me) continue;
        hoop__xsend(hc, &x[n], q, mine, len);
        xs[n] = &x[n];
        n++;
    }
    hoop_result_t rc = hoop__xwait(hc, xs, n);
    free(x);
    free(xs);
    return rc;
}

/* The first rank whose message says it cannot go on fails the call, with the same sentence on
 * every rank. */
static hoop_result_t refuse(const hoop__call_t *call, const hello_t *h)
{
    hoop_comm_t *c = call->comm;
    for (int q = 0; q < c->size; q++)
        if (!h[q].ok) {
            hoop__comm_fail(c, HOOP_ERR_UNSUPPORTED,
                            "allreduce (call #%llu) over CUDA IPC (HOOP_ALGO=ipc): rank %d %.176s",
                            (unsigned long long)call->seq, q, h[q].why);
            return HOOP_ERR_UNSUPPORTED;
        }
    for (int q = 1; q < c->size; q++)
        if (strcmp(h[q].host, h[0].host) != 0) {
            hoop__comm_fail(c, HOOP_ERR_UNSUPPORTED,
                            "allreduce (call #%llu) over CUDA IPC (HOOP_ALGO=ipc): rank %d is on "
                            "host %.64s and rank 0 on %.64s: CUDA IPC needs every rank on one node",
                            (unsigned long long)call->seq, q, h[q].host, h[0].host);
            return HOOP_ERR_UNSUPPORTED;
        }
    return HOOP_OK;
}

static size_t env_bytes(const char *name, size_t dflt, size_t least)
{
    const char *v = getenv(name);
    char *end;
    unsigned long long b = v != NULL ? strtoull(v, &end, 0) : 0;
    if (v == NULL || end == v || *end != '\0' || b < least) return dflt;
    return (size_t)b;
}

hoop_result_t hoop__allreduce_ipc(hoop__call_t *call)
{
    hoop_comm_t *c = call->comm;
    int p = c->size, me = c->rank;
    size_t es = hoop__dsize(call), n = call->count;
    hoop__call_t hc = *call; /* the steps' messages: host memory */
    hc.mem = HOOP__MEM_HOST;

    hello_t mine;
    memset(&mine, 0, sizeof mine);
    mine.oneshot = env_bytes("HOOP_CUDA_IPC_ONESHOT_BYTES", DEFAULT_ONESHOT, 0);
    snprintf(mine.host, sizeof mine.host, "%s", c->host);
    void *area = NULL;
    size_t cap = 0;
    if (n == 0) {
        mine.ok = 1; /* nothing to move: no area needed (the headers still compare the calls) */
    } else if (call->mem != HOOP__MEM_CUDA) {
        snprintf(mine.why, sizeof mine.why,
                 "has host buffers: the CUDA IPC path needs device buffers on every rank");
    } else if (hoop__cuda_ipc_area(c, env_bytes("HOOP_CUDA_IPC_BYTES", DEFAULT_AREA, 8192), &area,
                                   &cap, mine.handle, mine.why, sizeof mine.why) == 0) {
        mine.ok = 1;
        mine.cap = cap;
    }
    hello_t *h = malloc((size_t)p * sizeof *h);
    hello_t *ready = malloc((size_t)p * sizeof *ready);
    unsigned char **areas = calloc((size_t)p, sizeof *areas);
    uint8_t *flags = malloc((size_t)p);
    if (h == NULL || ready == NULL || areas == NULL || flags == NULL) {
        free(h);
        free(ready);
        free(areas);
        free(flags);
        return HOOP_ERR_NO_MEMORY;
    }
    HOOP__TRACE_STEP(call, 0, "rank %d sends its hello (%s) to every rank", me,
                     mine.ok ? "device buffers" : "cannot take part");
    hoop_result_t rc = exchange(&hc, &mine, h, sizeof mine);
    if (rc == HOOP_OK) rc = refuse(call, h);
    /* Every rank's area, opened once (hoop__cuda_ipc_peer keeps it); the chunk is half of the
     * smallest. */
    size_t half = SIZE_MAX, oneshot = SIZE_MAX;
    hello_t st;
    memset(&st, 0, sizeof st);
    st.ok = 1;
    if (rc == HOOP_OK) {
        for (int q = 0; q < p && n > 0; q++) {
            if (h[q].cap / 2 < half) half = (size_t)h[q].cap / 2;
            if (h[q].oneshot < oneshot) oneshot = (size_t)h[q].oneshot;
            areas[q] = q == me ? area
                               : hoop__cuda_ipc_peer(c, q, h[q].handle, st.why, sizeof st.why);
            if (areas[q] == NULL) st.ok = 0;
        }
        half = half / 256 * 256; /* segments keep the kernels' alignment */
    }
    size_t chunk = half / es;
    size_t nch = n == 0 ? 0 : (n + chunk - 1) / chunk;
    const char *in = call->sendbuf;
    char *out = call->recvbuf;
    for (size_t k = 0; k < nch && rc == HOOP_OK; k++) {
        size_t off = k * chunk, len = n - off < chunk ? n - off : chunk;
        /* step 1: this rank's chunk into its area; then every rank's is there */
        if (st.ok) hoop__mem_copy(call, area, in + off * es, len * es);
        rc = hoop__mem_failed(c);
        if (rc != HOOP_OK) break;
        HOOP__TRACE_STEP(call, 1, "chunk %zu (%zu B) in rank %d's area", k, len * es, me);
        if (k == 0) { /* the first says whether every rank opened every area */
            rc = exchange(&hc, &st, ready, sizeof st);
            if (rc == HOOP_OK) rc = refuse(call, ready);
        } else {
            flags[me] = 1;
            rc = exchange(&hc, &flags[me], flags, 1);
        }
        if (rc != HOOP_OK) break;
        size_t soff, slen;
        if (len * es <= oneshot) {
            /* one shot: every rank reduces the whole chunk from every area, in rank order (the
             * same bits everywhere), straight into its output; then nobody reads the areas */
            char *o = out + off * es;
            if (p == 1)
                hoop__mem_copy(call, o, areas[0], len * es);
            else
                hoop__mem_reduce(call, o, areas[0], areas[1], len);
            for (int q = 2; q < p; q++) hoop__mem_reduce(call, o, o, areas[q], len);
            if (call->op == HOOP_AVG) hoop__mem_avg_finish(call, o, len);
            HOOP__TRACE_STEP(call, 2, "rank %d reduces chunk %zu (one shot)", me, k);
            rc = hoop__mem_failed(c);
            if (rc == HOOP_OK) rc = exchange(&hc, &flags[me], flags, 1);
            continue;
        }
        /* step 2: segment me, from every area in rank order, into the second half of mine */
        hoop__part(len, p, me, &soff, &slen);
        unsigned char *res = (unsigned char *)area + half + soff * es;
        if (slen > 0) {
            if (p == 1)
                hoop__mem_copy(call, res, areas[0] + soff * es, slen * es);
            else
                hoop__mem_reduce(call, res, areas[0] + soff * es, areas[1] + soff * es, slen);
            for (int q = 2; q < p; q++)
                hoop__mem_reduce(call, res, res, areas[q] + soff * es, slen);
            if (call->op == HOOP_AVG) hoop__mem_avg_finish(call, res, slen);
        }
        HOOP__TRACE_STEP(call, 2, "rank %d reduces segment %d (%zu B) of chunk %zu", me, me,
                         slen * es, k);
        rc = hoop__mem_failed(c);
        if (rc == HOOP_OK) rc = exchange(&hc, &flags[me], flags, 1);
        if (rc != HOOP_OK) break;
        /* step 3: every segment from its reducer's area */
        for (int q = 0; q < p; q++) {
            hoop__part(len, p, q, &soff, &slen);
            if (slen > 0)
                hoop__mem_copy(call, out + (off + soff) * es, areas[q] + half + soff * es,
                               slen * es);
        }
        HOOP__TRACE_STEP(call, 3, "rank %d gathers chunk %zu", me, k);
        rc = hoop__mem_failed(c);
        if (rc == HOOP_OK) rc = exchange(&hc, &flags[me], flags, 1);
    }
    free(h);
    free(ready);
    free(areas);
    free(flags);
    return rc;
}
