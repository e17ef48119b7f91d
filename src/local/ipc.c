/*
 * Collectives of CUDA device buffers between ranks of one node through CUDA IPC, a one-host engine
 * (local.h): all-reduce, reduce, broadcast, all-gather and reduce-scatter (docs/cuda.md). The
 * planner gives it a call where the area's agreement step found that every rank's buffers are
 * device memory that may take it (auto), or where HOOP_ALGO=ipc names it. Also the hierarchical
 * collectives' stages inside one host (the end of this file), over a group of the ranks.
 *
 * Each rank has an area of device memory (HOOP_CUDA_IPC_BYTES, 32 MiB by default) that its peers
 * open once from its IPC handle and keep open; no user buffer is ever exported, so no cache can
 * outlive a buffer the application freed. Every call goes in chunks that fit the smallest area:
 *
 *   hello    every rank -> every rank: device buffers? host, pid, area size, the IPC handles
 *            of its area and of its events (under auto, at the first call that goes through
 *            only: the areas and events live as long as the communicator)
 *   put      this rank's part of the chunk into its area; every rank -> every rank: ready
 *   work     read the peers' areas, kernels reading peers' memory directly
 *   done     every rank -> every rank (no area is written again before every reader is done)
 *
 * All-reduce and reduce in two shots per chunk (the area's first half takes the input, the
 * second the segment this rank reduces): rank r reduces segment r from every area in rank order
 * (so every rank gets the same bits), one round of messages, then every rank (the root alone for
 * reduce) copies every segment from its reducer's area. Chunks of at most
 * HOOP_CUDA_IPC_ONESHOT_BYTES (256 KiB by default; the smallest of all ranks' applies) go in one
 * shot: every rank that needs the result reduces the whole chunk from every area, in rank order,
 * into its output: half the rounds, p times the reduction work, which small chunks can afford.
 * Broadcast: the root's chunk, read by every rank. All-gather: every rank's block, read by every
 * rank. Reduce-scatter: every rank's p pieces of the chunk; rank r reduces piece r of every area.
 *
 * The device work is never waited for step by step: a rank's copies and kernels queue on its IPC
 * stream, and each step ends by recording one of its IPC events there (READY after its put,
 * REDUCED after a two-shot reduction, DONE after its reads) before its message goes. A peer
 * that has the message makes its own stream wait for that event before it queues what depends
 * on it, and every put first waits for every peer's DONE (its area is read until then). The
 * messages are host messages of a few bytes; they only say that a record has been queued. An
 * event is recorded again only after a round in which each peer sent a message after queueing
 * its wait for the previous record, so no wait can miss the record it means. The host waits for
 * the stream once, at the end of the call. Works with several ranks on one GPU.
 *
 * A rank that cannot take part (host buffers, another host, an area it cannot allocate or a
 * peer's it cannot open) says so in its hello or in the first ready message, which every rank
 * sees alike: under HOOP_ALGO=ipc every rank fails the call with the same sentence (a call with
 * host buffers on every rank declines instead: HOOP__VERDICT_HOST, and the planner runs it as
 * under auto); under auto every rank declines (HOOP__VERDICT_NO_IPC) and the planner stages it,
 * this call and every later one (the engine's state says off). A call declines before its output
 * is written.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/proc.h"
#include "local/shm_coll.h"

typedef struct hello {
    uint8_t ok;
    uint8_t host_buffers; /* the call's buffers are host memory on this rank */
    uint8_t pad[6];
    uint64_t cap;
    uint64_t oneshot; /* HOOP_CUDA_IPC_ONESHOT_BYTES: the smallest of all ranks' is used */
    int64_t pid;      /* watched while the stream waits for this rank's events */
    char host[64];
    char why[176];
    unsigned char handle[HOOP__IPC_AREA_HANDLE];
    unsigned char events[HOOP__IPC_EVENTS][HOOP__IPC_HANDLE];
} hello_t;

enum { READY, REDUCED, DONE }; /* each rank's IPC events (runtime.h) */

/* The engine's state per communicator (hoop_comm.local->ipc). Used under exec. */
struct hoop__ipc_comm {
    /* Found unusable under auto: set by every rank at the same call, from what every rank said;
     * later calls stage. */
    int off;
    /* Under auto, every rank's hello from the first call that went through: later calls skip
     * that round. NULL before. */
    hello_t *hellos;
};

static struct hoop__ipc_comm *state(const hoop_comm_t *c)
{
    return c->local != NULL ? c->local->ipc : NULL;
}

/* The state, made at its first need. Without memory it fails the communicator: every rank decides
 * from its own copy whether to stage or to skip the hello round, so a rank that could not keep
 * what the others kept would run another schedule than theirs. */
static struct hoop__ipc_comm *state_made(hoop_comm_t *c)
{
    struct hoop__local *l = hoop__local_of(c);
    if (l != NULL && l->ipc == NULL) l->ipc = calloc(1, sizeof(*l->ipc));
    if (l == NULL || l->ipc == NULL) {
        hoop__comm_fail(c, HOOP_ERR_NO_MEMORY, "CUDA IPC: out of memory");
        return NULL;
    }
    return l->ipc;
}

static int is_off(const hoop_comm_t *c)
{
    const struct hoop__ipc_comm *s = state(c);
    return s != NULL && s->off;
}

/* One call's session: the areas every rank opened, and the rounds' buffers. */
typedef struct ipc {
    const hoop__call_t *call;
    hoop__call_t hc; /* the rounds' messages: host memory, named ipc on the wire and in traces */
    /* The group's ranks of the communicator in group order; NULL: all, 0..p-1. A group is a host
     * of the hierarchical collectives (the end of this file). */
    const int *ranks;
    int p, me, automatic;
    size_t es;
    size_t half;    /* bytes in each half of the smallest area, a multiple of 256 */
    size_t oneshot; /* chunks of at most this many bytes reduce in one shot */
    void *area;
    unsigned char **areas; /* rank q's area as mapped here */
    hello_t *h, *ready, st;
    uint8_t *flags;
    int rounds; /* rounds of messages so far: the first after hello carries the areas' state */
    int began;  /* device work queued on the IPC stream: the end waits for it */
    double next_look; /* watch: when the peers' processes are looked at next */
    /* RAN while the call goes on; what every rank found where it declined (refuse). */
    hoop__verdict_t verdict;
} ipc_t;

/* Member q of the group, as a rank of the communicator. */
static int peer(const ipc_t *x, int q) { return x->ranks != NULL ? x->ranks[q] : q; }

/* Whether the call goes on here: no error, and no rank has declined. */
static int going(const ipc_t *x, hoop_result_t rc)
{
    return rc == HOOP_OK && x->verdict == HOOP__VERDICT_RAN;
}

static int has(hoop__kind_t k)
{
    return k == HOOP__K_ALLREDUCE || k == HOOP__K_REDUCE || k == HOOP__K_BROADCAST ||
           k == HOOP__K_ALLGATHER || k == HOOP__K_REDUCE_SCATTER;
}

int hoop__ipc_may(const hoop__call_t *c)
{
    return c->mem == HOOP__MEM_CUDA && !is_off(c->comm) && c->count > 0 && has(c->kind);
}

/* Every rank sends len bytes of mine to every other and receives theirs at all + q * len (mine
 * copied to its own place). */
static hoop_result_t exchange(ipc_t *x, const void *mine, void *all, size_t len)
{
    hoop_comm_t *c = x->hc.comm;
    int p = x->p, me = x->me;
    memcpy((char *)all + (size_t)me * len, mine, len);
    if (p == 1) return HOOP_OK;
    hoop__xfer_t *xf = malloc(2 * (size_t)p * sizeof *xf);
    hoop__xfer_t **xs = malloc(2 * (size_t)p * sizeof *xs);
    if (xf == NULL || xs == NULL) {
        free(xf);
        free(xs);
        hoop__comm_fail(c, HOOP_ERR_NO_MEMORY, "CUDA IPC round: out of memory");
        return HOOP_ERR_NO_MEMORY;
    }
    int n = 0;
    for (int q = 0; q < p; q++) {
        if (q == me) continue;
        hoop__xrecv(&x->hc, &xf[n], peer(x, q), (char *)all + (size_t)q * len, len);
        xs[n] = &xf[n];
        n++;
    }
    for (int q = 0; q < p; q++) {
        if (q == me) continue;
        hoop__xsend(&x->hc, &xf[n], peer(x, q), mine, len);
        xs[n] = &xf[n];
        n++;
    }
    hoop_result_t rc = hoop__xwait(&x->hc, xs, n);
    free(xf);
    free(xs);
    return rc;
}

/* The first rank whose message says it cannot go on: under auto every rank declines (and stops
 * trying), under HOOP_ALGO=ipc every rank fails the call, with the same sentence. */
static hoop_result_t refuse(ipc_t *x, const hello_t *h)
{
    const hoop__call_t *call = x->call;
    hoop_comm_t *c = call->comm;
    char why[400] = "";
    for (int q = 0; q < x->p && why[0] == '\0'; q++)
        if (!h[q].ok) snprintf(why, sizeof why, "rank %d %.176s", peer(x, q), h[q].why);
    for (int q = 1; q < x->p && why[0] == '\0'; q++)
        if (strcmp(h[q].host, h[0].host) != 0)
            snprintf(why, sizeof why,
                     "rank %d is on host %.64s and rank %d on %.64s: CUDA IPC needs every rank on "
                     "one node",
                     peer(x, q), h[q].host, peer(x, 0), h[0].host);
    if (why[0] == '\0') return HOOP_OK;
    int all_host = 1;
    for (int q = 0; q < x->p; q++) all_host &= h[q].host_buffers;
    if (all_host) {
        x->verdict = HOOP__VERDICT_HOST; /* HOOP_ALGO=ipc: host calls run as under auto */
        return HOOP_OK;
    }
    if (x->automatic) {
        struct hoop__ipc_comm *s = state_made(c);
        if (s == NULL) return HOOP_ERR_NO_MEMORY;
        s->off = 1;
        HOOP__INFO(&c->log, "%s (call #%llu): CUDA IPC not used from now on, staging instead: %s",
                   hoop__kind_name(call->kind), (unsigned long long)call->seq, why);
        x->verdict = HOOP__VERDICT_NO_IPC;
        return HOOP_OK;
    }
    hoop__comm_fail(c, HOOP_ERR_UNSUPPORTED, "%s (call #%llu) over CUDA IPC (HOOP_ALGO=ipc): %s",
                    hoop__kind_name(call->kind), (unsigned long long)call->seq, why);
    return HOOP_ERR_UNSUPPORTED;
}

static void ipc_free(ipc_t *x)
{
    free(x->h);
    free(x->ready);
    free(x->areas);
    free(x->flags);
}

/* The hello round, and every rank's area opened (its state said in the first round after), for
 * the group ranks[0..p-1] (NULL: every rank) in which this rank is member me. */
static hoop_result_t ipc_open(ipc_t *x, const hoop__call_t *call, int automatic, const int *ranks,
                              int p, int me)
{
    hoop_comm_t *c = call->comm;
    memset(x, 0, sizeof *x);
    x->call = call;
    x->hc = *call;
    x->hc.mem = HOOP__MEM_HOST;
    x->hc.algo = HOOP__ALGO_IPC;
    x->ranks = ranks;
    x->p = p;
    x->me = me;
    x->automatic = automatic;
    x->es = hoop__dsize(call);
    x->h = malloc((size_t)x->p * sizeof *x->h);
    x->ready = malloc((size_t)x->p * sizeof *x->ready);
    x->areas = calloc((size_t)x->p, sizeof *x->areas);
    x->flags = malloc((size_t)x->p);
    if (x->h == NULL || x->ready == NULL || x->areas == NULL || x->flags == NULL) {
        hoop__comm_fail(c, HOOP_ERR_NO_MEMORY, "CUDA IPC: out of memory");
        return HOOP_ERR_NO_MEMORY;
    }

    hello_t mine;
    memset(&mine, 0, sizeof mine);
    mine.oneshot = c->cfg.cuda_ipc_oneshot_bytes;
    mine.pid = getpid();
    snprintf(mine.host, sizeof mine.host, "%s", c->host);
    size_t cap = 0;
    if (call->count == 0) {
        mine.ok = 1; /* nothing to move: no area needed (the headers still compare the calls) */
    } else if (call->mem != HOOP__MEM_CUDA) {
        mine.host_buffers = call->mem == HOOP__MEM_HOST;
        snprintf(mine.why, sizeof mine.why,
                 "has host buffers: the CUDA IPC path needs device buffers on every rank");
    } else if (hoop__cuda_ipc_area(c, c->cfg.cuda_ipc_bytes, &x->area, &cap, mine.handle, mine.why,
                                   sizeof mine.why) == 0 &&
               hoop__cuda_ipc_events(c, mine.events, mine.why, sizeof mine.why) == 0) {
        mine.ok = 1;
        mine.cap = cap;
    }
    hoop_result_t rc = HOOP_OK;
    const struct hoop__ipc_comm *s = state(c);
    const hello_t *kept = automatic && s != NULL ? s->hellos : NULL;
    int cached = kept != NULL && mine.ok;
    if (ranks != NULL) {
        /* The hierarchical stages have no area step to say what every rank of the host has:
         * a round of one byte does (0 host buffers, 1 device buffers that cannot take part, 2
         * ready), and every rank of the host decides alike from it. */
        x->flags[me] = mine.ok ? 2 : mine.host_buffers ? 0 : 1;
        x->hc.algo = call->algo; /* the call's algorithm, as its other stages' messages say */
        HOOP__TRACE_STEP(&x->hc, 0, "rank %d says what its buffers are to its host's ranks",
                         c->rank);
        if ((rc = exchange(x, &x->flags[me], x->flags, 1)) != HOOP_OK) return rc;
        int hosts = 0;
        for (int q = 0; q < p; q++) {
            hosts += x->flags[q] == 0;
            if (cached) cached = x->flags[q] == 2 && kept[peer(x, q)].ok;
        }
        if (hosts > 0) { /* this call only */
            x->verdict = hosts == p ? HOOP__VERDICT_HOST : HOOP__VERDICT_MIXED;
            return HOOP_OK;
        }
    }
    if (cached) {
        /* Every rank's hello is what it was at the first call that went through: the areas
         * and events live as long as the communicator, and the first area step (or the round
         * above) said that every rank has device buffers. */
        for (int q = 0; q < p; q++) x->h[q] = kept[peer(x, q)];
        HOOP__TRACE_STEP(&x->hc, 0, "rank %d has every rank's hello from an earlier call", c->rank);
    } else {
        HOOP__TRACE_STEP(&x->hc, 0, "rank %d sends its hello (%s) to every rank", c->rank,
                         mine.ok ? "device buffers" : "cannot take part");
        rc = exchange(x, &mine, x->h, sizeof mine);
        if (rc == HOOP_OK) rc = refuse(x, x->h);
        if (!going(x, rc)) return rc;
    }
    /* Every rank's area, opened once (hoop__cuda_ipc_peer keeps it); chunks fit the smallest. */
    x->half = SIZE_MAX;
    x->oneshot = SIZE_MAX;
    x->st.ok = 1;
    for (int q = 0; q < x->p && call->count > 0; q++) {
        if (x->h[q].cap / 2 < x->half) x->half = (size_t)x->h[q].cap / 2;
        if (x->h[q].oneshot < x->oneshot) x->oneshot = (size_t)x->h[q].oneshot;
        if (q == x->me) {
            x->areas[q] = x->area;
            continue;
        }
        x->areas[q] = hoop__cuda_ipc_peer(c, peer(x, q), x->h[q].handle, x->st.why,
                                          sizeof x->st.why);
        if (x->areas[q] == NULL || hoop__cuda_ipc_peer_events(c, peer(x, q), x->h[q].events,
                                                              x->st.why, sizeof x->st.why) != 0)
            x->st.ok = 0;
    }
    x->half = x->half / 256 * 256; /* segments keep the kernels' alignment */
    if (call->count > 0 && x->st.ok) {
        hoop__cuda_ipc_begin(call);
        x->began = 1;
    }
    return HOOP_OK;
}

static hoop_result_t ipc_round(ipc_t *x);

/* The stream waits for peer q's latest record of event which (every peer's but this rank's
 * when q < 0). */
static void wait_for(ipc_t *x, int q, int which)
{
    if (!x->st.ok) return;
    for (int r = 0; r < x->p; r++)
        if (r != x->me && (q < 0 || r == q)) hoop__cuda_ipc_wait(x->call, peer(x, r), which);
}

/* The end of a step: this rank's event which recorded after its work, then a round. */
static hoop_result_t step_end(ipc_t *x, int which)
{
    if (x->st.ok) hoop__cuda_ipc_record(x->call, which);
    return ipc_round(x);
}

/* This rank's part of a chunk into its area, once no peer reads the area any more. */
static void put(ipc_t *x, size_t at, const void *src, size_t n)
{
    if (!x->st.ok || n == 0) return;
    hoop__cuda_ipc_copy(x->call, (unsigned char *)x->area + at, src, n);
}

/* A round of messages after this rank's device operations: the first one also says whether
 * every rank opened every area (and fails or declines alike everywhere where one did not). */
static hoop_result_t ipc_round(ipc_t *x)
{
    hoop_result_t rc = hoop__mem_failed(x->hc.comm);
    if (rc != HOOP_OK) return rc;
    if (x->rounds++ == 0) {
        rc = exchange(x, &x->st, x->ready, sizeof x->st);
        return rc == HOOP_OK ? refuse(x, x->ready) : rc;
    }
    x->flags[x->me] = 1;
    return exchange(x, &x->flags[x->me], x->flags, 1);
}

/* out = every area's n elements at off, reduced in rank order (the average finished). */
static void reduce_all(ipc_t *x, void *out, size_t off, size_t n)
{
    const hoop__call_t *call = x->call;
    if (n == 0) return;
    if (x->p == 1)
        hoop__cuda_ipc_copy(call, out, x->areas[0] + off, n * x->es);
    else
        hoop__cuda_ipc_reduce(call, out, x->areas[0] + off, x->areas[1] + off, n);
    for (int q = 2; q < x->p; q++) hoop__cuda_ipc_reduce(call, out, out, x->areas[q] + off, n);
    /* In a host's stage of the hierarchical collectives the owner across hosts finishes it. */
    if (call->op == HOOP_AVG && x->ranks == NULL) hoop__cuda_ipc_avg(call, out, n);
}

/* All-reduce (root < 0) and reduce. */
static hoop_result_t reduce_chunks(ipc_t *x, int root)
{
    const hoop__call_t *call = x->call;
    size_t es = x->es, n = call->count, chunk = x->half / es;
    int me = x->me, p = x->p, gets = root < 0 || root == me;
    const char *in = call->sendbuf != NULL ? call->sendbuf : call->recvbuf;
    char *out = call->recvbuf;
    hoop_result_t rc = HOOP_OK;
    for (size_t off = 0; off < n && going(x, rc); off += chunk) {
        size_t len = n - off < chunk ? n - off : chunk;
        wait_for(x, -1, DONE);
        put(x, 0, in + off * es, len * es);
        HOOP__TRACE_STEP(&x->hc, 1, "chunk at %zu (%zu B) in rank %d's area", off, len * es, me);
        if (!going(x, rc = step_end(x, READY))) break;
        wait_for(x, -1, READY);
        if (len * es <= x->oneshot) {
            /* one shot: straight into the output, in rank order (the same bits everywhere) */
            if (gets) reduce_all(x, out + off * es, 0, len);
            HOOP__TRACE_STEP(&x->hc, 2, "rank %d reduces the chunk (one shot)", me);
            rc = step_end(x, DONE);
            continue;
        }
        size_t soff, slen;
        hoop__part(len, p, me, &soff, &slen);
        reduce_all(x, (unsigned char *)x->area + x->half + soff * es, soff * es, slen);
        HOOP__TRACE_STEP(&x->hc, 2, "rank %d reduces segment %d (%zu B)", me, me, slen * es);
        if (!going(x, rc = step_end(x, REDUCED))) break;
        if (gets) wait_for(x, -1, REDUCED);
        for (int q = 0; q < p && gets; q++) {
            hoop__part(len, p, q, &soff, &slen);
            if (slen > 0)
                hoop__cuda_ipc_copy(call, out + (off + soff) * es,
                                    x->areas[q] + x->half + soff * es, slen * es);
        }
        HOOP__TRACE_STEP(&x->hc, 3, "rank %d gathers the chunk", me);
        rc = step_end(x, DONE);
    }
    return rc;
}

/* Broadcast of n bytes from group member root: its chunks (of src), each read from its area by
 * every other member into buf (the root's own buf too where src is another buffer). */
static hoop_result_t broadcast_bytes(ipc_t *x, int root, unsigned char *buf,
                                     const unsigned char *src, size_t n, const char *what)
{
    const hoop__call_t *call = x->call;
    size_t cap = 2 * x->half;
    int me = x->me;
    hoop_result_t rc = HOOP_OK;
    for (size_t off = 0; off < n && going(x, rc); off += cap) {
        size_t len = n - off < cap ? n - off : cap;
        if (me == root) {
            wait_for(x, -1, DONE);
            put(x, 0, src + off, len);
        }
        HOOP__TRACE_STEP(&x->hc, 1, "%sbytes at %zu (%zu B) in rank %d's area", what, off, len,
                         peer(x, root));
        if (!going(x, rc = step_end(x, READY))) break; /* the first may decline */
        if (me != root) {
            wait_for(x, root, READY);
            hoop__cuda_ipc_copy(call, buf + off, x->areas[root], len);
        } else if (src != buf) {
            hoop__cuda_ipc_copy(call, buf + off, x->area, len);
        }
        HOOP__TRACE_STEP(&x->hc, 2, "%srank %d reads them", what, call->comm->rank);
        rc = step_end(x, DONE);
    }
    return rc;
}

static hoop_result_t broadcast_chunks(ipc_t *x)
{
    const hoop__call_t *call = x->call;
    unsigned char *buf = call->recvbuf;
    const unsigned char *src = x->me == call->root && call->sendbuf != NULL
                                   ? (const unsigned char *)call->sendbuf
                                   : buf;
    return broadcast_bytes(x, call->root, buf, src, call->count * x->es, "");
}

/* All-gather: every rank's block of n bytes, read by every rank from its area. */
static hoop_result_t allgather_chunks(ipc_t *x)
{
    const hoop__call_t *call = x->call;
    size_t n = call->count * x->es, cap = 2 * x->half;
    int me = x->me, p = x->p;
    unsigned char *out = call->recvbuf, *own = out + (size_t)me * n;
    const unsigned char *in = call->sendbuf;
    hoop_result_t rc = HOOP_OK;
    for (size_t off = 0; off < n && going(x, rc); off += cap) {
        size_t len = n - off < cap ? n - off : cap;
        wait_for(x, -1, DONE);
        put(x, 0, in + off, len);
        HOOP__TRACE_STEP(&x->hc, 1, "block bytes at %zu (%zu B) in rank %d's area", off, len, me);
        if (!going(x, rc = step_end(x, READY))) break;
        /* In place when sendbuf lies anywhere in recvbuf: the own block is moved first (as the
         * ring's), and read from there; only once the first round said every rank goes on, so
         * that a fallback finds the input untouched. */
        if (off == 0 && own != in) hoop__cuda_ipc_move(call, own, in, n);
        in = own;
        wait_for(x, -1, READY);
        for (int q = 0; q < p; q++)
            if (q != me) hoop__cuda_ipc_copy(call, out + (size_t)q * n + off, x->areas[q], len);
        HOOP__TRACE_STEP(&x->hc, 2, "rank %d reads every block", me);
        rc = step_end(x, DONE);
    }
    return rc;
}

/* Reduce-scatter: every rank's input is p blocks of count elements; rank r gets block r reduced.
 * Per chunk, each rank puts its p pieces in its area; rank r reduces piece r of every area. */
static hoop_result_t reduce_scatter_chunks(ipc_t *x)
{
    const hoop__call_t *call = x->call;
    size_t es = x->es, n = call->count;
    int me = x->me, p = x->p;
    size_t piece = 2 * x->half / (size_t)p; /* bytes */
    if (piece >= 256) piece = piece / 256 * 256;
    size_t chunk = piece / es;
    const char *in = call->sendbuf;
    char *out = call->recvbuf, *res = out;
    /* In place (out == in, or NCCL's out == in + me * n) each chunk's result lands on input
     * already put; any other overlap takes the result in scratch space, copied at the end. */
    size_t nb = n * es, tb = nb * (size_t)p;
    if (out != in && out != in + (size_t)me * nb && out < in + tb && in < out + nb) {
        res = hoop__scratch(call, nb);
        if (res == NULL) return HOOP_ERR_NO_MEMORY;
    }
    hoop_result_t rc = HOOP_OK;
    for (size_t off = 0; off < n && going(x, rc); off += chunk) {
        size_t len = n - off < chunk ? n - off : chunk;
        wait_for(x, -1, DONE);
        for (int q = 0; q < p; q++)
            put(x, (size_t)q * piece, in + ((size_t)q * n + off) * es, len * es);
        HOOP__TRACE_STEP(&x->hc, 1, "pieces at %zu (%zu B each) in rank %d's area", off, len * es,
                         me);
        if (!going(x, rc = step_end(x, READY))) break;
        wait_for(x, -1, READY);
        reduce_all(x, res + off * es, (size_t)me * piece, len);
        HOOP__TRACE_STEP(&x->hc, 2, "rank %d reduces piece %d", me, me);
        rc = step_end(x, DONE);
    }
    if (going(x, rc) && res != out) hoop__cuda_ipc_copy(call, out, res, nb);
    return rc;
}

/* Every rank's hello, kept by its rank in the communicator for the calls after a call that went
 * through (the areas and events live as long as the communicator). */
static hoop_result_t keep_hellos(ipc_t *x)
{
    hoop_comm_t *c = x->call->comm;
    struct hoop__ipc_comm *s = state_made(c);
    if (s == NULL) return HOOP_ERR_NO_MEMORY;
    if (s->hellos == NULL && (s->hellos = calloc((size_t)c->size, sizeof *x->h)) == NULL) {
        hoop__comm_fail(c, HOOP_ERR_NO_MEMORY, "CUDA IPC: out of memory");
        return HOOP_ERR_NO_MEMORY;
    }
    for (int q = 0; q < x->p; q++) s->hellos[peer(x, q)] = x->h[q];
    return HOOP_OK;
}

/* While the host waits for the stream, which may wait for a peer's event: the transport's
 * progress (abort notices), and the peers' processes (ranks of one host), every 10 ms. */
static int watch(void *arg)
{
    ipc_t *x = arg;
    hoop_comm_t *c = x->call->comm;
    c->tp_ops->progress(c->tp, 0);
    double now = hoop__now();
    if (now < x->next_look) return atomic_load(&c->aborted) != 0;
    x->next_look = now + 0.01;
    for (int q = 0; q < x->p; q++)
        if (q != x->me && hoop__process_gone((pid_t)x->h[q].pid)) {
            hoop__comm_fail(c, HOOP_ERR_PEER_LOST,
                            "lost rank %d (its process %lld exited) while %s (call #%llu) over "
                            "CUDA IPC waited for its device work",
                            peer(x, q), (long long)x->h[q].pid, hoop__kind_name(x->call->kind),
                            (unsigned long long)x->call->seq);
            return 1;
        }
    return atomic_load(&c->aborted) != 0;
}

/* The engine's run (local.h). automatic: a rank that cannot take part makes every rank decline;
 * otherwise (HOOP_ALGO=ipc) every rank fails the call, unless every rank has host buffers. */
static hoop_result_t ipc_run(hoop__call_t *call, int automatic, hoop__verdict_t *v)
{
    ipc_t x;
    hoop_result_t rc = ipc_open(&x, call, automatic, NULL, call->comm->size, call->comm->rank);
    if (going(&x, rc) && call->count > 0 && x.half / x.es < (size_t)x.p) {
        /* every rank decides alike: the smallest area and the element size are agreed */
        hoop__comm_fail(call->comm, HOOP_ERR_UNSUPPORTED,
                        "%s over CUDA IPC: areas of %zu B are too small for %d ranks' elements",
                        hoop__kind_name(call->kind), 2 * x.half, x.p);
        rc = HOOP_ERR_UNSUPPORTED;
    }
    if (going(&x, rc) && call->count > 0) {
        switch (call->kind) {
        case HOOP__K_ALLREDUCE: rc = reduce_chunks(&x, -1); break;
        case HOOP__K_REDUCE: rc = reduce_chunks(&x, call->root); break;
        case HOOP__K_BROADCAST: rc = broadcast_chunks(&x); break;
        case HOOP__K_ALLGATHER: rc = allgather_chunks(&x); break;
        case HOOP__K_REDUCE_SCATTER: rc = reduce_scatter_chunks(&x); break;
        default: rc = HOOP_ERR_INTERNAL; break;
        }
    }
    /* Whatever happened, nothing of the call may still run on the device once it returns; and
     * once the last round is through, nothing of the peers' either that reads this rank's area
     * (which goes with the communicator): the stream waits for their last DONE first. */
    if (x.began) {
        if (going(&x, rc)) wait_for(&x, -1, DONE);
        hoop_result_t end = hoop__cuda_ipc_end(call, watch, &x);
        if (going(&x, rc)) rc = end;
    }
    /* Every rank gets here going at the same call, or declined, or the communicator is
     * aborted. */
    if (going(&x, rc) && automatic && call->count > 0) rc = keep_hellos(&x);
    *v = x.verdict;
    ipc_free(&x);
    return rc;
}

static hoop_result_t run(hoop__call_t *call, hoop__verdict_t *v)
{
    return ipc_run(call, call->plan.forced != HOOP__ALGO_IPC, v);
}

const hoop__engine_ops_t hoop__local_ipc = {.name = "ipc", .has = has, .run = run};

void hoop__ipc_close(hoop_comm_t *c)
{
    struct hoop__ipc_comm *s = state(c);
    if (s == NULL) return;
    free(s->hellos);
    free(s);
    c->local->ipc = NULL;
}

/*
 * The hierarchical collectives' stages inside one host (hier.c) over CUDA IPC among the L ranks
 * of one host, where every one of them has device buffers; the stages across hosts stay
 * hier.c's rings, staged through host memory. A stage works on n elements cut into hier.c's L
 * segments (local index i owns segment i+1), so the ranks of other hosts see the same stages
 * across whichever way this host ran its own, and each host decides alone (its ranks alike, from
 * the round of ipc_open).
 *
 *   reduce-scatter  per chunk: every rank puts its piece of each segment into its area (L
 *      pieces); rank i reduces piece i+1 of every area, in local order, into its segment of the
 *      output (no AVG finish: the owner across hosts does it). The stream is drained at the
 *      end, since what follows (a staged stage across hosts) reads that segment.
 *   all-gather  per chunk: every rank puts its piece of its own segment; every rank reads every
 *      peer's. Drained at the end too (copies out of scratch may follow).
 *   broadcast  the flat broadcast's chunks from the host's rank that got the buffer across
 *      hosts (ended by the call's end).
 *
 * Bits: each host's partial sum of a segment is made by one rank and the hosts' partials are
 * chained across hosts, then only copied: every rank of every host ends with the same bits.
 */
struct hoop__ipc_hier {
    ipc_t x;
    int own; /* the segment this rank reduces or holds */
};

void hoop__ipc_hier_close(hoop__ipc_hier_t *hx, hoop_result_t *rc)
{
    if (hx == NULL) return;
    ipc_t *x = &hx->x;
    if (x->began) {
        if (going(x, *rc)) wait_for(x, -1, DONE);
        hoop_result_t end = hoop__cuda_ipc_end(x->call, watch, x);
        if (going(x, *rc)) *rc = end;
    }
    if (going(x, *rc) && x->automatic) *rc = keep_hellos(x);
    ipc_free(x);
    free(hx);
}

int hoop__ipc_hier_declined(const hoop__ipc_hier_t *hx)
{
    return hx->x.verdict != HOOP__VERDICT_RAN;
}

hoop_result_t hoop__ipc_hier_open(const hoop__call_t *call, const int *local, int L, int l,
                                  hoop__ipc_hier_t **out)
{
    *out = NULL;
    if (is_off(call->comm) || call->count == 0) return HOOP_OK;
    hoop__ipc_hier_t *hx = calloc(1, sizeof *hx);
    if (hx == NULL) {
        hoop__comm_fail(call->comm, HOOP_ERR_NO_MEMORY, "CUDA IPC: out of memory");
        return HOOP_ERR_NO_MEMORY;
    }
    hoop_result_t rc = ipc_open(&hx->x, call, 1, local, L, l);
    /* Every rank of the host decides alike: the smallest area and the element size agree. */
    if (going(&hx->x, rc) && 2 * hx->x.half / (size_t)L < hx->x.es)
        hx->x.verdict = HOOP__VERDICT_NO_IPC;
    if (!going(&hx->x, rc)) {
        hoop__ipc_hier_close(hx, &rc); /* nothing was read from any area yet */
        return rc;
    }
    hx->own = (l + 1) % L;
    *out = hx;
    return HOOP_OK;
}

/* Elements of a segment of len elements in the chunk at off (0 past its end). */
static size_t in_chunk(size_t len, size_t off, size_t chunk)
{
    return off >= len ? 0 : len - off < chunk ? len - off : chunk;
}

/* The stage is done on the device: what follows reads its output. */
static hoop_result_t drain(ipc_t *x)
{
    return x->began ? hoop__cuda_ipc_end(x->call, watch, x) : HOOP_OK;
}

hoop_result_t hoop__ipc_hier_reduce_scatter(hoop__ipc_hier_t *hx, const void *inp, void *outp,
                                            size_t n)
{
    ipc_t *x = &hx->x;
    const hoop__call_t *call = x->call;
    size_t es = x->es, piece = 2 * x->half / (size_t)x->p;
    if (piece >= 256) piece = piece / 256 * 256;
    size_t chunk = piece / es, so, sl, oo, ol, longest;
    hoop__part(n, x->p, 0, &so, &longest); /* the first segment is the longest */
    hoop__part(n, x->p, hx->own, &oo, &ol);
    const char *in = inp;
    char *out = outp;
    hoop_result_t rc = HOOP_OK;
    for (size_t off = 0; off < longest && going(x, rc); off += chunk) {
        wait_for(x, -1, DONE);
        for (int s = 0; s < x->p; s++) {
            hoop__part(n, x->p, s, &so, &sl);
            size_t k = in_chunk(sl, off, chunk);
            if (k > 0) put(x, (size_t)s * piece, in + (so + off) * es, k * es);
        }
        HOOP__TRACE_STEP(&x->hc, 1,
                         "over CUDA IPC, host reduce-scatter: pieces at %zu in rank %d's area", off,
                         call->comm->rank);
        if (!going(x, rc = step_end(x, READY))) break; /* the first may decline */
        wait_for(x, -1, READY);
        size_t k = in_chunk(ol, off, chunk);
        if (k > 0) reduce_all(x, out + (oo + off) * es, (size_t)hx->own * piece, k);
        HOOP__TRACE_STEP(&x->hc, 2,
                         "over CUDA IPC, host reduce-scatter: rank %d reduces segment %d",
                         call->comm->rank, hx->own);
        rc = step_end(x, DONE);
    }
    return going(x, rc) ? drain(x) : rc;
}

hoop_result_t hoop__ipc_hier_allgather(hoop__ipc_hier_t *hx, void *bufp, size_t n)
{
    ipc_t *x = &hx->x;
    const hoop__call_t *call = x->call;
    size_t es = x->es, chunk = 2 * x->half / es, so, sl, oo, ol, longest;
    hoop__part(n, x->p, 0, &so, &longest);
    hoop__part(n, x->p, hx->own, &oo, &ol);
    char *buf = bufp;
    if (x->st.ok) hoop__cuda_ipc_begin(call); /* after the work before, on the call's stream */
    hoop_result_t rc = HOOP_OK;
    for (size_t off = 0; off < longest && going(x, rc); off += chunk) {
        wait_for(x, -1, DONE);
        size_t k = in_chunk(ol, off, chunk);
        if (k > 0) put(x, 0, buf + (oo + off) * es, k * es);
        HOOP__TRACE_STEP(&x->hc, 1,
                         "over CUDA IPC, host all-gather: segment %d at %zu in rank %d's area",
                         hx->own, off, call->comm->rank);
        if (!going(x, rc = step_end(x, READY))) break; /* the first may decline */
        wait_for(x, -1, READY);
        for (int q = 0; q < x->p; q++) {
            hoop__part(n, x->p, (q + 1) % x->p, &so, &sl);
            size_t kq = in_chunk(sl, off, chunk);
            if (q != x->me && kq > 0)
                hoop__cuda_ipc_copy(call, buf + (so + off) * es, x->areas[q], kq * es);
        }
        HOOP__TRACE_STEP(&x->hc, 2, "over CUDA IPC, host all-gather: rank %d reads every segment",
                         call->comm->rank);
        rc = step_end(x, DONE);
    }
    return going(x, rc) ? drain(x) : rc;
}

hoop_result_t hoop__ipc_hier_broadcast(hoop__ipc_hier_t *hx, void *buf, size_t n, int root)
{
    ipc_t *x = &hx->x;
    if (x->st.ok) hoop__cuda_ipc_begin(x->call); /* after the stage across hosts */
    return broadcast_bytes(x, root, buf, buf, n, "over CUDA IPC, host broadcast: ");
}
