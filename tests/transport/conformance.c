/*
 * Transport conformance: the same cases against any transport's ops, in real processes.
 *
 *   conformance --transport NAME|auto [--sockets N] [--ring BYTES] [--cma BYTES]
 *               [--case NAME[,...]] [--skip NAME[,...]] [--time-scale F] [--seed S] [--verbose]
 *               [--list]
 *
 * NAME is a transport of the registry (transport/registry.h), auto the per-peer chooser over them.
 * For each case the parent forks its ranks (1 to 3). Each rank creates its instance with listen(),
 * sends the address up a pipe, reads every rank's address back and connects; then the case runs
 * and the rank exits with 0 on success. The parent kills the ranks of a case that outlive its
 * deadline and counts the case failed. Ranks share one anonymous page (the board) for flags and
 * timestamps that must not travel over the transport under test.
 *
 * Every received payload is checked against a pattern the receiver computes on its own from
 * (sender, receiver, sequence number), and the bytes past the end of every receive buffer must
 * stay untouched. --time-scale stretches every time limit (for valgrind).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/config.h"
#include "base/log.h"
#include "base/wire.h"
#include "transport/registry.h"
#include "transport/transport.h"
#include "../common/testing.h"

#define MAX_RANKS 3
#define ADDR_MAX 512
#define GUARD 64
#define GUARD_BYTE 0xA5
#define MIB (1024u * 1024u)

/* ---- options and shared state ---- */

typedef struct opts {
    const char *transport;
    const hoop__transport_ops_t *ops;
    int sockets;   /* 0: default */
    long ring;     /* -1: default */
    long cma;      /* -1: default */
    double scale;
    uint64_t seed;
    int verbose;
} opts_t;

enum {
    B_POSTED,      /* a rank has posted what the other waits on */
    B_STEP_DONE,   /* a rank finished the step the other waits for (bit per rank) */
    B_RELEASE,     /* the waiting rank may go on */
    B_T_EVENT,     /* monotonic ns of the fault (death, abort) */
    B_SENT_DONE,   /* the dying rank's send had completed before it died */
    B_FAILED,      /* a rank has failed: the others stop waiting for it */
    B_CONNECTED,   /* connect() has returned (bit per rank) */
    B_N = 16
};

typedef struct board {
    _Atomic int64_t v[B_N];
} board_t;

/* The first report() of a rank, and how many came. */
typedef struct rep {
    int n;
    hoop_result_t code;
    int peer;
    char msg[512];
} rep_t;

typedef struct ctx {
    const opts_t *o;
    int rank, size, variant;
    uint64_t comm_id;
    const hoop__transport_ops_t *ops;
    hoop__tp_t *tp;
    hoop__config_t cfg;
    hoop__log_t log;
    hoop__tp_params_t p;
    board_t *board;
    rep_t rep;
    char addr[ADDR_MAX];
    const char *cname;
} ctx_t;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void failf(const ctx_t *c, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void failf(const ctx_t *c, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "  FAIL [%s %s rank %d] line %d: %s\n", c->o->transport, c->cname, c->rank,
            line, msg);
    fflush(stderr);
    if (c->board != NULL) atomic_store(&c->board->v[B_FAILED], 1);
}

static void notef(const ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void notef(const ctx_t *c, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "  note [%s %s rank %d]: %s\n", c->o->transport, c->cname, c->rank, msg);
    fflush(stderr);
}

#define CHECK(c, cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failf((c), __LINE__, __VA_ARGS__);                                                     \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        if ((expr) != 0) return 1;                                                                 \
    } while (0)

static void on_report(void *ctx, hoop_result_t code, int peer, const char *msg)
{
    ctx_t *c = ctx;
    if (c->rep.n == 0) {
        c->rep.code = code;
        c->rep.peer = peer;
        snprintf(c->rep.msg, sizeof(c->rep.msg), "%s", msg != NULL ? msg : "(null)");
    }
    c->rep.n++;
    if (c->o->verbose)
        fprintf(stderr, "    report [%s rank %d]: %s, peer %d: %s\n", c->cname, c->rank,
                hoop_error_string(code), peer, msg != NULL ? msg : "(null)");
}

static double lim(const ctx_t *c, double s) { return s * c->o->scale; }

/* Waits (not through the transport) until board slot k has all bits of want, or the limit. */
static int board_wait(const ctx_t *c, int k, int64_t want, double limit_s)
{
    double end = now_s() + lim(c, limit_s);
    while ((atomic_load(&c->board->v[k]) & want) != want) {
        if (now_s() > end || atomic_load(&c->board->v[B_FAILED])) return -1;
        sleep_s(0.001);
    }
    return 0;
}

/* ---- payload patterns and headers ---- */

static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t seed_of(const ctx_t *c, int src, int dst, uint64_t seq)
{
    return mix(mix(c->o->seed ^ ((uint64_t)src << 48) ^ ((uint64_t)dst << 40)) ^ seq);
}

/* Word by word: both ends run on one host, so the byte order of a word needs no fixing. */
static void fill(void *buf, size_t len, uint64_t seed)
{
    uint8_t *b = buf;
    size_t w = 0;
    for (; (w + 1) * 8 <= len; w++) {
        uint64_t v = mix(seed + w);
        memcpy(b + w * 8, &v, 8);
    }
    if (w * 8 < len) {
        uint64_t v = mix(seed + w);
        memcpy(b + w * 8, &v, len - w * 8);
    }
}

/* Offset of the first byte that differs from the pattern, or -1. */
static long check_pattern(const void *buf, size_t len, uint64_t seed)
{
    const uint8_t *b = buf;
    for (size_t w = 0; w * 8 < len; w++) {
        uint64_t v = mix(seed + w), g = 0, e = 0;
        size_t n = len - w * 8 < 8 ? len - w * 8 : 8;
        memcpy(&g, b + w * 8, n);
        memcpy(&e, &v, n);
        if (g != e) {
            for (size_t i = 0; i < n; i++)
                if (((const uint8_t *)&g)[i] != ((const uint8_t *)&e)[i]) return (long)(w * 8 + i);
        }
    }
    return -1;
}

/* A receive buffer of len bytes plus a guard that must stay untouched. */
static uint8_t *rbuf_new(size_t len)
{
    uint8_t *b = malloc(len + GUARD);
    if (b != NULL) memset(b, GUARD_BYTE, len + GUARD);
    return b;
}

static int guard_ok(const uint8_t *b, size_t len)
{
    for (size_t i = 0; i < GUARD; i++)
        if (b[len + i] != GUARD_BYTE) return 0;
    return 1;
}

/* A header whose every field varies with i, so that a field lost on the way shows. Never the
 * abort kind, which a transport may treat as control. */
static hoop__wire_hdr_t mkhdr(const ctx_t *c, int src, uint64_t seq, uint64_t i, size_t len)
{
    hoop__wire_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.kind = (uint8_t)(1 + i % HOOP_K_SPLIT);
    h.dtype = (uint8_t)(i % HOOP_DTYPE_COUNT);
    h.op = (uint8_t)((i / 3) % HOOP_OP_COUNT);
    h.root = (int32_t)(i % 5) - 1;
    h.src = (uint32_t)src;
    h.comm_id = c->comm_id;
    h.seq = seq;
    h.count = 0x0123456789abcdefull ^ (i * 0x10001ull) ^ len;
    h.payload_len = len;
    return h;
}

static void xinit(hoop__xfer_t *x, int dir, int peer, const hoop__wire_hdr_t *h, void *buf,
                  size_t len)
{
    memset(x, 0, sizeof(*x));
    x->dir = dir;
    x->peer = peer;
    x->hdr = *h;
    x->hdr.payload_len = len;
    x->buf = buf;
    x->len = len;
}

/* Progresses until every transfer is done, or fails naming the ones that are not. */
static int drive(ctx_t *c, hoop__xfer_t *const *xs, int n, double limit_s, const char *what)
{
    double end = now_s() + lim(c, limit_s);
    for (;;) {
        int pending = 0;
        for (int i = 0; i < n; i++) pending += !xs[i]->done;
        if (pending == 0) return 0;
        if (atomic_load(&c->board->v[B_FAILED])) {
            fprintf(stderr, "  [%s %s rank %d] stopped waiting (%s): another rank failed\n",
                    c->o->transport, c->cname, c->rank, what);
            return 1;
        }
        if (now_s() > end) {
            for (int i = 0; i < n; i++)
                if (!xs[i]->done) {
                    failf(c, __LINE__, "%s: %d of %d transfer(s) not done after %.1f s; first: "
                          "%s of %zu bytes with rank %d, seq %" PRIu64, what, pending, n,
                          lim(c, limit_s), xs[i]->dir == HOOP_XFER_SEND ? "send" : "recv",
                          xs[i]->len, xs[i]->peer, xs[i]->hdr.seq);
                    break;
                }
            return 1;
        }
        c->ops->progress(c->tp, 50);
    }
}

static int drive1(ctx_t *c, hoop__xfer_t *x, double limit_s, const char *what)
{
    return drive(c, &x, 1, limit_s, what);
}

/* A completed receive: status, every header field, the payload and the guard. */
static int check_recv(ctx_t *c, const hoop__xfer_t *x, const hoop__wire_hdr_t *sent, uint64_t seed,
                      const char *what)
{
    CHECK(c, x->done, "%s: not done", what);
    CHECK(c, x->status == HOOP_OK, "%s (%zu bytes from rank %d): %s", what, x->len, x->peer,
          hoop_error_string(x->status));
    const hoop__wire_hdr_t *g = &x->got;
    CHECK(c, g->kind == sent->kind && g->dtype == sent->dtype && g->op == sent->op &&
                 g->root == sent->root && g->src == sent->src && g->comm_id == sent->comm_id &&
                 g->seq == sent->seq && g->count == sent->count &&
                 g->payload_len == sent->payload_len,
          "%s: header arrived as kind %d dtype %d op %d root %d src %u comm %" PRIx64 " seq %" PRIu64
          " count %" PRIx64 " len %" PRIu64 ", sent kind %d dtype %d op %d root %d src %u comm %"
          PRIx64 " seq %" PRIu64 " count %" PRIx64 " len %" PRIu64,
          what, g->kind, g->dtype, g->op, g->root, g->src, g->comm_id, g->seq, g->count,
          g->payload_len, sent->kind, sent->dtype, sent->op, sent->root, sent->src, sent->comm_id,
          sent->seq, sent->count, sent->payload_len);
    if (x->len > 0) {
        long bad = check_pattern(x->buf, x->len, seed);
        CHECK(c, bad < 0, "%s: payload of %zu bytes from rank %d differs at byte %ld", what, x->len,
              x->peer, bad);
        CHECK(c, guard_ok(x->buf, x->len), "%s: bytes written past the end of a %zu-byte receive",
              what, x->len);
    }
    return 0;
}

static int is_fail_code(hoop_result_t r) { return r == HOOP_ERR_PEER_LOST || r == HOOP_ERR_ABORTED; }

/* ---- cases ---- */

/* Both directions at once, odd lengths around every boundary (header size, page, striping and
 * single-copy thresholds); all posted together, then again one pair at a time, largest first. */
static const size_t exch_lens[] = {0, 1, 63, 64, 65, 4095, 4096 + 7, 65536, 262143, 262144,
                                   1 * MIB + 13};
#define NEXCH ((int)(sizeof(exch_lens) / sizeof(exch_lens[0])))

static int case_exchange(ctx_t *c)
{
    int me = c->rank, peer = 1 - me;
    hoop__xfer_t xs[NEXCH], xr[NEXCH];
    hoop__xfer_t *all[2 * NEXCH];
    uint8_t *sb[NEXCH], *rb[NEXCH];
    for (int round = 0; round < 2; round++) {
        uint64_t base = round == 0 ? (1ull << 40) : (1ull << 41);
        for (int i = 0; i < NEXCH; i++) {
            size_t len = exch_lens[i];
            uint64_t seq = base + (uint64_t)i;
            /* A zero-length transfer may come without a buffer at all. */
            sb[i] = len == 0 && i == 0 ? NULL : malloc(len + 1);
            rb[i] = len == 0 && i == 0 ? NULL : rbuf_new(len);
            CHECK(c, (sb[i] != NULL && rb[i] != NULL) || i == 0, "out of memory");
            if (sb[i] != NULL) fill(sb[i], len, seed_of(c, me, peer, seq));
            hoop__wire_hdr_t hs = mkhdr(c, me, seq, (uint64_t)i, len);
            hoop__wire_hdr_t hr = mkhdr(c, peer, seq, (uint64_t)i, len);
            xinit(&xs[i], HOOP_XFER_SEND, peer, &hs, sb[i], len);
            xinit(&xr[i], HOOP_XFER_RECV, peer, &hr, rb[i], len);
        }
        if (round == 0) {
            /* Rank 0 posts its receives first, rank 1 its sends. */
            for (int i = 0; i < NEXCH; i++) c->ops->post(c->tp, me == 0 ? &xr[i] : &xs[i]);
            for (int i = 0; i < NEXCH; i++) c->ops->post(c->tp, me == 0 ? &xs[i] : &xr[i]);
            for (int i = 0; i < NEXCH; i++) {
                all[2 * i] = &xs[i];
                all[2 * i + 1] = &xr[i];
            }
            TRY(drive(c, all, 2 * NEXCH, 20, "exchange, all posted at once"));
        } else {
            for (int i = NEXCH - 1; i >= 0; i--) {
                c->ops->post(c->tp, &xs[i]);
                c->ops->post(c->tp, &xr[i]);
                hoop__xfer_t *two[2] = {&xs[i], &xr[i]};
                TRY(drive(c, two, 2, 10, "exchange, one pair at a time"));
            }
        }
        for (int i = 0; i < NEXCH; i++) {
            char what[96];
            snprintf(what, sizeof(what), "exchange round %d, %zu bytes", round, exch_lens[i]);
            CHECK(c, xs[i].status == HOOP_OK, "%s: send failed: %s", what,
                  hoop_error_string(xs[i].status));
            hoop__wire_hdr_t sent = mkhdr(c, peer, base + (uint64_t)i, (uint64_t)i, exch_lens[i]);
            TRY(check_recv(c, &xr[i], &sent, seed_of(c, peer, me, base + (uint64_t)i), what));
            free(sb[i]);
            free(rb[i]);
        }
    }
    return 0;
}

/* 64 MiB + 3 from rank 0 to rank 1 and back. */
static int case_huge(ctx_t *c)
{
    const size_t len = 64 * (size_t)MIB + 3;
    int me = c->rank, peer = 1 - me;
    hoop__xfer_t x;
    if (me == 0) {
        uint8_t *out = malloc(len), *back = rbuf_new(len);
        CHECK(c, out != NULL && back != NULL, "out of memory");
        fill(out, len, seed_of(c, 0, 1, 1));
        hoop__wire_hdr_t h = mkhdr(c, 0, 1, 7, len);
        xinit(&x, HOOP_XFER_SEND, peer, &h, out, len);
        c->ops->post(c->tp, &x);
        TRY(drive1(c, &x, 30, "huge send"));
        CHECK(c, x.status == HOOP_OK, "huge send: %s", hoop_error_string(x.status));
        free(out);
        h = mkhdr(c, 1, 2, 8, len);
        xinit(&x, HOOP_XFER_RECV, peer, &h, back, len);
        c->ops->post(c->tp, &x);
        TRY(drive1(c, &x, 30, "huge receive of the echo"));
        /* The echo carries rank 0's own pattern, recomputed here rather than compared with a copy. */
        TRY(check_recv(c, &x, &h, seed_of(c, 0, 1, 1), "huge echo"));
        free(back);
    } else {
        uint8_t *in = rbuf_new(len);
        CHECK(c, in != NULL, "out of memory");
        hoop__wire_hdr_t h = mkhdr(c, 0, 1, 7, len);
        xinit(&x, HOOP_XFER_RECV, peer, &h, in, len);
        c->ops->post(c->tp, &x);
        TRY(drive1(c, &x, 30, "huge receive"));
        TRY(check_recv(c, &x, &h, seed_of(c, 0, 1, 1), "huge"));
        h = mkhdr(c, 1, 2, 8, len);
        xinit(&x, HOOP_XFER_SEND, peer, &h, in, len);
        c->ops->post(c->tp, &x);
        TRY(drive1(c, &x, 30, "huge echo send"));
        CHECK(c, x.status == HOOP_OK, "huge echo send: %s", hoop_error_string(x.status));
        free(in);
    }
    return 0;
}

/* 20,000 messages of 0..300 bytes each way, both directions flowing at once, with up to WS sends
 * and WR receives outstanding: each must match in order and complete in posting order. */
#define NSMALL 20000
#define SMALL_MAX 300
#define WS 48
#define WR 29

typedef struct slot {
    hoop__xfer_t x;
    long k;
    uint8_t buf[SMALL_MAX + GUARD];
} slot_t;

static size_t small_len(const ctx_t *c, int src, long k)
{
    return (size_t)(mix(seed_of(c, src, 1 - src, 0) ^ (uint64_t)k) % (SMALL_MAX + 1));
}

static int case_many(ctx_t *c)
{
    int me = c->rank, peer = 1 - me;
    slot_t *ss = calloc(WS, sizeof(slot_t)), *rs = calloc(WR, sizeof(slot_t));
    CHECK(c, ss != NULL && rs != NULL, "out of memory");
    long s_post = 0, s_done = 0, r_post = 0, r_done = 0;
    double end = now_s() + lim(c, 60);
    while (s_done < NSMALL || r_done < NSMALL) {
        while (s_post < NSMALL && s_post - s_done < WS) {
            slot_t *s = &ss[s_post % WS];
            size_t len = small_len(c, me, s_post);
            uint64_t seq = 1000 + (uint64_t)s_post;
            fill(s->buf, len, seed_of(c, me, peer, seq));
            hoop__wire_hdr_t h = mkhdr(c, me, seq, HOOP_K_SEND - 1, len);
            xinit(&s->x, HOOP_XFER_SEND, peer, &h, s->buf, len);
            s->k = s_post++;
            c->ops->post(c->tp, &s->x);
        }
        while (r_post < NSMALL && r_post - r_done < WR) {
            slot_t *s = &rs[r_post % WR];
            size_t len = small_len(c, peer, r_post);
            memset(s->buf, GUARD_BYTE, sizeof(s->buf));
            hoop__wire_hdr_t h = mkhdr(c, peer, 1000 + (uint64_t)r_post, HOOP_K_SEND - 1, len);
            xinit(&s->x, HOOP_XFER_RECV, peer, &h, s->buf, len);
            s->k = r_post++;
            c->ops->post(c->tp, &s->x);
        }
        c->ops->progress(c->tp, 10);
        while (s_done < s_post && ss[s_done % WS].x.done) {
            slot_t *s = &ss[s_done % WS];
            CHECK(c, s->x.status == HOOP_OK, "small send #%ld: %s", s->k,
                  hoop_error_string(s->x.status));
            s_done++;
        }
        for (long k = s_done + 1; k < s_post; k++)
            CHECK(c, !ss[k % WS].x.done, "small send #%ld completed before #%ld", k, s_done);
        while (r_done < r_post && rs[r_done % WR].x.done) {
            slot_t *s = &rs[r_done % WR];
            char what[64];
            snprintf(what, sizeof(what), "small message #%ld", s->k);
            hoop__wire_hdr_t sent = mkhdr(c, peer, 1000 + (uint64_t)s->k, HOOP_K_SEND - 1,
                                          small_len(c, peer, s->k));
            TRY(check_recv(c, &s->x, &sent, seed_of(c, peer, me, sent.seq), what));
            CHECK(c, guard_ok(s->buf, s->x.len), "%s: written past its end", what);
            r_done++;
        }
        for (long k = r_done + 1; k < r_post; k++)
            CHECK(c, !rs[k % WR].x.done, "small receive #%ld completed before #%ld", k, r_done);
        CHECK(c, now_s() < end, "many small: only %ld sends and %ld receives of %d done in %.0f s",
              s_done, r_done, NSMALL, lim(c, 60));
    }
    free(ss);
    free(rs);
    return 0;
}

/* Three ranks. Phase 1: rank 0 has a large send to and a receive from rank 1 outstanding, which
 * rank 1 will not serve until rank 2 says so, and rank 2 says so only after its own exchange with
 * rank 0 is through: one peer's stalled traffic must not hold up another's. Phase 2: every pair
 * exchanges in both directions at once. */
static const size_t three_a[] = {0, 77, 300000, 2 * MIB + 1};   /* 0 -> 2 */
static const size_t three_b[] = {5, 65536, 4 * MIB + 3, 1};     /* 2 -> 0 */
static const size_t three_all[] = {0, 13, 65537, 3 * MIB + 7};  /* every pair, phase 2 */
#define N3 4

static int post_set(ctx_t *c, hoop__xfer_t *x, uint8_t **bufs, int dir, int peer,
                    const size_t *lens, int n, uint64_t seq0)
{
    int me = c->rank;
    for (int i = 0; i < n; i++) {
        uint64_t seq = seq0 + (uint64_t)i;
        int src = dir == HOOP_XFER_SEND ? me : peer;
        bufs[i] = dir == HOOP_XFER_SEND ? malloc(lens[i] + 1) : rbuf_new(lens[i]);
        CHECK(c, bufs[i] != NULL, "out of memory");
        if (dir == HOOP_XFER_SEND) fill(bufs[i], lens[i], seed_of(c, me, peer, seq));
        hoop__wire_hdr_t h = mkhdr(c, src, seq, (uint64_t)(i + 3), lens[i]);
        xinit(&x[i], dir, peer, &h, bufs[i], lens[i]);
        c->ops->post(c->tp, &x[i]);
    }
    return 0;
}

static int check_set(ctx_t *c, hoop__xfer_t *x, uint8_t **bufs, int dir, int peer,
                     const size_t *lens, int n, uint64_t seq0, const char *what)
{
    for (int i = 0; i < n; i++) {
        uint64_t seq = seq0 + (uint64_t)i;
        char w[96];
        snprintf(w, sizeof(w), "%s, %zu bytes %s rank %d", what, lens[i],
                 dir == HOOP_XFER_SEND ? "to" : "from", peer);
        if (dir == HOOP_XFER_SEND) {
            CHECK(c, x[i].done && x[i].status == HOOP_OK, "%s: %s", w,
                  x[i].done ? hoop_error_string(x[i].status) : "not done");
        } else {
            hoop__wire_hdr_t sent = mkhdr(c, peer, seq, (uint64_t)(i + 3), lens[i]);
            TRY(check_recv(c, &x[i], &sent, seed_of(c, peer, c->rank, seq), w));
        }
        free(bufs[i]);
    }
    return 0;
}

static int case_three(ctx_t *c)
{
    int me = c->rank;
    const size_t big01 = 12 * (size_t)MIB + 1, big10 = 1 * MIB + 5;
    hoop__xfer_t xa[N3], xb[N3], s01, r10, go;
    uint8_t *ba[N3], *bb[N3], *b01 = NULL, *b10 = NULL, gobuf[16 + GUARD];
    if (me == 0) {
        b01 = malloc(big01);
        b10 = rbuf_new(big10);
        CHECK(c, b01 != NULL && b10 != NULL, "out of memory");
        fill(b01, big01, seed_of(c, 0, 1, 1));
        hoop__wire_hdr_t h = mkhdr(c, 0, 1, 1, big01);
        xinit(&s01, HOOP_XFER_SEND, 1, &h, b01, big01);
        h = mkhdr(c, 1, 2, 2, big10);
        xinit(&r10, HOOP_XFER_RECV, 1, &h, b10, big10);
        c->ops->post(c->tp, &s01);
        c->ops->post(c->tp, &r10);
        TRY(post_set(c, xa, ba, HOOP_XFER_SEND, 2, three_a, N3, 10));
        TRY(post_set(c, xb, bb, HOOP_XFER_RECV, 2, three_b, N3, 20));
        hoop__xfer_t *with2[2 * N3];
        for (int i = 0; i < N3; i++) {
            with2[i] = &xa[i];
            with2[N3 + i] = &xb[i];
        }
        TRY(drive(c, with2, 2 * N3, 20, "exchange with rank 2 while rank 1 holds back"));
        CHECK(c, !r10.done, "the receive from rank 1 completed before rank 1 sent anything");
        TRY(check_set(c, xa, ba, HOOP_XFER_SEND, 2, three_a, N3, 10, "phase 1"));
        TRY(check_set(c, xb, bb, HOOP_XFER_RECV, 2, three_b, N3, 20, "phase 1"));
        hoop__xfer_t *with1[2] = {&s01, &r10};
        TRY(drive(c, with1, 2, 30, "the held-back exchange with rank 1"));
        CHECK(c, s01.status == HOOP_OK, "send to rank 1: %s", hoop_error_string(s01.status));
        h = mkhdr(c, 1, 2, 2, big10);
        TRY(check_recv(c, &r10, &h, seed_of(c, 1, 0, 2), "phase 1, from rank 1"));
        free(b01);
        free(b10);
    } else if (me == 2) {
        TRY(post_set(c, xb, bb, HOOP_XFER_SEND, 0, three_b, N3, 20));
        TRY(post_set(c, xa, ba, HOOP_XFER_RECV, 0, three_a, N3, 10));
        hoop__xfer_t *with0[2 * N3];
        for (int i = 0; i < N3; i++) {
            with0[i] = &xa[i];
            with0[N3 + i] = &xb[i];
        }
        TRY(drive(c, with0, 2 * N3, 20, "exchange with rank 0"));
        TRY(check_set(c, xb, bb, HOOP_XFER_SEND, 0, three_b, N3, 20, "phase 1"));
        TRY(check_set(c, xa, ba, HOOP_XFER_RECV, 0, three_a, N3, 10, "phase 1"));
        fill(gobuf, 16, seed_of(c, 2, 1, 30));
        hoop__wire_hdr_t h = mkhdr(c, 2, 30, 4, 16);
        xinit(&go, HOOP_XFER_SEND, 1, &h, gobuf, 16);
        c->ops->post(c->tp, &go);
        TRY(drive1(c, &go, 10, "the go-ahead to rank 1"));
        CHECK(c, go.status == HOOP_OK, "go-ahead: %s", hoop_error_string(go.status));
    } else {
        memset(gobuf, GUARD_BYTE, sizeof(gobuf));
        hoop__wire_hdr_t h = mkhdr(c, 2, 30, 4, 16);
        xinit(&go, HOOP_XFER_RECV, 2, &h, gobuf, 16);
        c->ops->post(c->tp, &go);
        TRY(drive1(c, &go, 30, "the go-ahead from rank 2"));
        TRY(check_recv(c, &go, &h, seed_of(c, 2, 1, 30), "go-ahead"));
        b01 = rbuf_new(big01);
        b10 = malloc(big10);
        CHECK(c, b01 != NULL && b10 != NULL, "out of memory");
        fill(b10, big10, seed_of(c, 1, 0, 2));
        h = mkhdr(c, 0, 1, 1, big01);
        xinit(&s01, HOOP_XFER_RECV, 0, &h, b01, big01);
        hoop__wire_hdr_t h2 = mkhdr(c, 1, 2, 2, big10);
        xinit(&r10, HOOP_XFER_SEND, 0, &h2, b10, big10);
        c->ops->post(c->tp, &s01);
        c->ops->post(c->tp, &r10);
        hoop__xfer_t *with0[2] = {&s01, &r10};
        TRY(drive(c, with0, 2, 30, "the held-back exchange with rank 0"));
        TRY(check_recv(c, &s01, &h, seed_of(c, 0, 1, 1), "phase 1, from rank 0"));
        CHECK(c, r10.status == HOOP_OK, "send to rank 0: %s", hoop_error_string(r10.status));
        free(b01);
        free(b10);
    }

    /* Phase 2: all pairs at once; the posting order differs from rank to rank. */
    hoop__xfer_t xs[MAX_RANKS][N3], xr[MAX_RANKS][N3];
    uint8_t *bs[MAX_RANKS][N3], *br[MAX_RANKS][N3];
    hoop__xfer_t *all[2 * MAX_RANKS * N3];
    int n = 0;
    for (int d = 1; d < c->size; d++) {
        int q = (me + (me == 1 ? c->size - d : d)) % c->size;
        if (me == 2) {
            TRY(post_set(c, xr[q], br[q], HOOP_XFER_RECV, q, three_all, N3, 100));
            TRY(post_set(c, xs[q], bs[q], HOOP_XFER_SEND, q, three_all, N3, 100));
        } else {
            TRY(post_set(c, xs[q], bs[q], HOOP_XFER_SEND, q, three_all, N3, 100));
            TRY(post_set(c, xr[q], br[q], HOOP_XFER_RECV, q, three_all, N3, 100));
        }
        for (int i = 0; i < N3; i++) {
            all[n++] = &xs[q][i];
            all[n++] = &xr[q][i];
        }
    }
    TRY(drive(c, all, n, 30, "all pairs at once"));
    for (int q = 0; q < c->size; q++) {
        if (q == me) continue;
        TRY(check_set(c, xs[q], bs[q], HOOP_XFER_SEND, q, three_all, N3, 100, "all pairs"));
        TRY(check_set(c, xr[q], br[q], HOOP_XFER_RECV, q, three_all, N3, 100, "all pairs"));
    }
    return 0;
}

/* Rank 1 expects another call than rank 0 makes: its receive fails with HOOP_ERR_MISMATCH, got
 * holds what arrived, and the report names both calls. Rank 0 then learns that rank 1 is gone. */
enum { MM_SEQ, MM_KIND, MM_COUNT, MM_LEN, MM_N };
static const char *const mm_name[] = {"seq", "kind", "count", "length"};

static int case_mismatch(ctx_t *c)
{
    hoop__wire_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.kind = HOOP_K_BROADCAST;
    h.dtype = HOOP_FLOAT32;
    h.root = 0;
    h.src = 0;
    h.comm_id = c->comm_id;
    h.seq = 7;
    h.count = 10;
    size_t len = 40;
    if (c->rank == 0) {
        uint8_t out[40], in[8 + GUARD];
        fill(out, len, seed_of(c, 0, 1, 7));
        hoop__xfer_t x, y;
        xinit(&x, HOOP_XFER_SEND, 1, &h, out, len);
        c->ops->post(c->tp, &x);
        TRY(drive1(c, &x, 10, "the send that rank 1 does not expect"));
        CHECK(c, x.status == HOOP_OK, "send: %s", hoop_error_string(x.status));
        hoop__wire_hdr_t hy = mkhdr(c, 1, 8, 1, 8);
        memset(in, GUARD_BYTE, sizeof(in));
        xinit(&y, HOOP_XFER_RECV, 1, &hy, in, 8);
        c->ops->post(c->tp, &y);
        TRY(drive1(c, &y, 5, "a receive from rank 1 after it failed on a mismatch"));
        /* A disagreement stays one on the rank that is told of it. */
        CHECK(c, is_fail_code(y.status) || y.status == HOOP_ERR_MISMATCH,
              "receive from the failed rank 1: %s, expected %s, %s or %s",
              hoop_error_string(y.status), hoop_error_string(HOOP_ERR_MISMATCH),
              hoop_error_string(HOOP_ERR_PEER_LOST), hoop_error_string(HOOP_ERR_ABORTED));
        CHECK(c, c->rep.n > 0 && c->rep.peer == 1 && strstr(c->rep.msg, "rank 1") != NULL,
              "report should name rank 1: %d report(s), peer %d, \"%s\"", c->rep.n, c->rep.peer,
              c->rep.msg);
        return 0;
    }
    hoop__wire_hdr_t e = h;
    size_t elen = len;
    const char *theirs = "rank 0 called broadcast(count=10, float32, root=0) as call #7";
    const char *mine = NULL;
    switch (c->variant) {
    case MM_SEQ:
        e.seq = 8;
        mine = "rank 1 called broadcast(count=10, float32, root=0) as call #8";
        break;
    case MM_KIND:
        e.kind = HOOP_K_ALLGATHER;
        e.root = -1;
        mine = "rank 1 called allgather(count=10, float32) as call #7";
        break;
    case MM_COUNT:
        e.count = 12;
        mine = "rank 1 called broadcast(count=12, float32, root=0) as call #7";
        break;
    default:
        elen = 44;
        theirs = "rank 0 sent 40 bytes where 44 were expected in broadcast(count=10, float32, "
                 "root=0)";
        break;
    }
    uint8_t *in = rbuf_new(elen);
    CHECK(c, in != NULL, "out of memory");
    hoop__xfer_t x;
    xinit(&x, HOOP_XFER_RECV, 0, &e, in, elen);
    c->ops->post(c->tp, &x);
    TRY(drive1(c, &x, 10, "the mismatched receive"));
    CHECK(c, x.status == HOOP_ERR_MISMATCH, "mismatched %s: status %s, expected %s",
          mm_name[c->variant], hoop_error_string(x.status), hoop_error_string(HOOP_ERR_MISMATCH));
    CHECK(c, x.got.kind == h.kind && x.got.seq == h.seq && x.got.count == h.count &&
                 x.got.payload_len == len && x.got.comm_id == h.comm_id,
          "got should hold the header that arrived: kind %d seq %" PRIu64 " count %" PRIu64
          " len %" PRIu64, x.got.kind, x.got.seq, x.got.count, x.got.payload_len);
    CHECK(c, guard_ok(in, elen), "bytes written past the end of the receive buffer");
    CHECK(c, c->rep.n > 0, "report() was not called");
    CHECK(c, c->rep.code == HOOP_ERR_MISMATCH && c->rep.peer == 0,
          "report: %s for peer %d, expected %s for peer 0", hoop_error_string(c->rep.code),
          c->rep.peer, hoop_error_string(HOOP_ERR_MISMATCH));
    CHECK(c, strstr(c->rep.msg, theirs) != NULL && (mine == NULL || strstr(c->rep.msg, mine)),
          "report \"%s\" should contain \"%s\"%s%s", c->rep.msg, theirs, mine ? " and " : "",
          mine ? mine : "");
    /* The pair is out of step now: a later receive from rank 0 must fail, not wait. */
    hoop__wire_hdr_t hz = mkhdr(c, 0, 9, 2, 8);
    uint8_t z[8 + GUARD];
    hoop__xfer_t y;
    xinit(&y, HOOP_XFER_RECV, 0, &hz, z, 8);
    c->ops->post(c->tp, &y);
    TRY(drive1(c, &y, 2, "a receive after the mismatch"));
    CHECK(c, y.status != HOOP_OK, "a receive after the mismatch succeeded");
    free(in);
    return 0;
}

/* Rank 0 dies (exit, or SIGKILL) in the middle of a large send while rank 1 waits on receives
 * from it: rank 1 must fail within 2 s, naming rank 0. */
static int case_peer_exit(ctx_t *c)
{
    const size_t big = 16 * (size_t)MIB, second = 1 * (size_t)MIB;
    if (c->rank == 0) {
        uint8_t *out = malloc(big), *in = malloc(big);
        CHECK(c, out != NULL && in != NULL, "out of memory");
        fill(out, big, seed_of(c, 0, 1, 1));
        hoop__xfer_t x, y;
        hoop__wire_hdr_t h = mkhdr(c, 0, 1, 1, big);
        xinit(&x, HOOP_XFER_SEND, 1, &h, out, big);
        h = mkhdr(c, 1, 3, 3, big);
        xinit(&y, HOOP_XFER_RECV, 1, &h, in, big);
        CHECK(c, board_wait(c, B_POSTED, 1, 10) == 0, "rank 1 never posted");
        c->ops->post(c->tp, &x);
        c->ops->post(c->tp, &y);
        double until = now_s() + 0.003;
        while (now_s() < until && !x.done) c->ops->progress(c->tp, 0);
        atomic_store(&c->board->v[B_SENT_DONE], x.done);
        atomic_store(&c->board->v[B_T_EVENT], now_ns());
        if (c->variant == 0) _exit(0);
        raise(SIGKILL);
        return 1;
    }
    uint8_t *a = rbuf_new(big), *b = rbuf_new(second), *s = malloc(big);
    CHECK(c, a != NULL && b != NULL && s != NULL, "out of memory");
    fill(s, big, seed_of(c, 1, 0, 3));
    hoop__xfer_t xa, xb, xs;
    hoop__wire_hdr_t ha = mkhdr(c, 0, 1, 1, big), hb = mkhdr(c, 0, 2, 2, second);
    hoop__wire_hdr_t hs = mkhdr(c, 1, 3, 3, big);
    xinit(&xa, HOOP_XFER_RECV, 0, &ha, a, big);
    xinit(&xb, HOOP_XFER_RECV, 0, &hb, b, second);
    xinit(&xs, HOOP_XFER_SEND, 0, &hs, s, big);
    c->ops->post(c->tp, &xa);
    c->ops->post(c->tp, &xb);
    c->ops->post(c->tp, &xs);
    atomic_store(&c->board->v[B_POSTED], 1);
    hoop__xfer_t *all[3] = {&xa, &xb, &xs};
    double end = now_s() + lim(c, 15), t_b = 0;
    while (!(xa.done && xb.done && xs.done) && now_s() < end) {
        c->ops->progress(c->tp, 50);
        if (xb.done && t_b == 0) t_b = now_s();
    }
    TRY(drive(c, all, 3, 0, "transfers with the rank that died"));
    if (t_b == 0) t_b = now_s();
    int64_t t_dead = atomic_load(&c->board->v[B_T_EVENT]);
    CHECK(c, t_dead != 0, "transfers ended before rank 0 died");
    double late = t_b - (double)t_dead * 1e-9;
    CHECK(c, is_fail_code(xb.status), "the receive rank 0 never sent: %s, expected %s or %s",
          hoop_error_string(xb.status), hoop_error_string(HOOP_ERR_PEER_LOST),
          hoop_error_string(HOOP_ERR_ABORTED));
    CHECK(c, late < lim(c, 2.0), "failed %.2f s after rank 0 died (at most 2 s)", late);
    if (xa.status == HOOP_OK) {
        /* It got through before the end: then it must be whole. */
        TRY(check_recv(c, &xa, &ha, seed_of(c, 0, 1, 1), "the large message before the exit"));
    } else {
        CHECK(c, is_fail_code(xa.status), "the interrupted receive: %s",
              hoop_error_string(xa.status));
    }
    CHECK(c, xs.status == HOOP_OK || is_fail_code(xs.status), "the send to the dead rank: %s",
          hoop_error_string(xs.status));
    CHECK(c, c->rep.n > 0 && c->rep.peer == 0 && strstr(c->rep.msg, "rank 0") != NULL,
          "report should name rank 0: %d report(s), peer %d, \"%s\"", c->rep.n, c->rep.peer,
          c->rep.msg);
    if (c->o->verbose)
        notef(c, "failed %.3f s after the death; large send %s before it; large receive %s; "
              "report: %s", late, atomic_load(&c->board->v[B_SENT_DONE]) ? "done" : "not done",
              hoop_error_string(xa.status), c->rep.msg);
    /* Later transfers to the dead rank fail too, without waiting. */
    hoop__xfer_t z;
    hoop__wire_hdr_t hz = mkhdr(c, 1, 4, 4, 8);
    xinit(&z, HOOP_XFER_SEND, 0, &hz, s, 8);
    c->ops->post(c->tp, &z);
    TRY(drive1(c, &z, 1, "a send posted after the peer died"));
    CHECK(c, z.status != HOOP_OK, "a send to the dead rank succeeded");
    free(a);
    free(b);
    free(s);
    return 0;
}

/* Rank 0 sends one last message and closes its instance while rank 1 waits on a second one;
 * rank 0's process stays: rank 1 gets the message that was sent, then fails within 2 s. */
static int case_peer_close(ctx_t *c)
{
    uint8_t b[100 + GUARD];
    hoop__wire_hdr_t h1 = mkhdr(c, 0, 1, 1, 100);
    if (c->rank == 0) {
        CHECK(c, board_wait(c, B_POSTED, 1, 10) == 0, "rank 1 never posted");
        fill(b, 100, seed_of(c, 0, 1, 1));
        hoop__xfer_t x;
        xinit(&x, HOOP_XFER_SEND, 1, &h1, b, 100);
        c->ops->post(c->tp, &x);
        TRY(drive1(c, &x, 10, "the last send"));
        CHECK(c, x.status == HOOP_OK, "the last send: %s", hoop_error_string(x.status));
        sleep_s(0.1);
        atomic_store(&c->board->v[B_T_EVENT], now_ns());
        c->ops->close(c->tp);
        c->tp = NULL;
        CHECK(c, board_wait(c, B_RELEASE, 1, 10) == 0, "rank 1 did not finish");
        return 0;
    }
    const size_t len = MIB;
    uint8_t *r = rbuf_new(len);
    CHECK(c, r != NULL, "out of memory");
    memset(b, GUARD_BYTE, sizeof(b));
    hoop__xfer_t x1, x2;
    hoop__wire_hdr_t h2 = mkhdr(c, 0, 2, 2, len);
    xinit(&x1, HOOP_XFER_RECV, 0, &h1, b, 100);
    xinit(&x2, HOOP_XFER_RECV, 0, &h2, r, len);
    c->ops->post(c->tp, &x1);
    c->ops->post(c->tp, &x2);
    atomic_store(&c->board->v[B_POSTED], 1);
    double end = now_s() + lim(c, 5);
    while (!x2.done && now_s() < end) c->ops->progress(c->tp, 100);
    double t_fail = now_s();
    atomic_store(&c->board->v[B_RELEASE], 1);
    TRY(check_recv(c, &x1, &h1, seed_of(c, 0, 1, 1), "the message sent before close()"));
    CHECK(c, x2.done, "still waiting %.0f s after rank 0 closed", lim(c, 5));
    double late = t_fail - (double)atomic_load(&c->board->v[B_T_EVENT]) * 1e-9;
    CHECK(c, is_fail_code(x2.status), "receive from the closed rank: %s",
          hoop_error_string(x2.status));
    CHECK(c, late < lim(c, 2.0), "failed %.2f s after rank 0 closed (at most 2 s)", late);
    CHECK(c, c->rep.n > 0 && c->rep.peer == 0 && strstr(c->rep.msg, "rank 0") != NULL,
          "report should name rank 0: %d report(s), peer %d, \"%s\"", c->rep.n, c->rep.peer,
          c->rep.msg);
    free(r);
    return 0;
}

/* Rank 1 aborts with a reason while rank 0 sleeps waiting on it: rank 0 fails within 2 s with
 * HOOP_ERR_ABORTED and "rank 1 aborted: reason text". Rank 1 stays alive without progressing, so
 * the reason has to travel, not the exit. */
static int case_abort(ctx_t *c)
{
    const char *reason = "reason text";
    if (c->rank == 1) {
        /* The receive for rank 0's send, never progressed: abort() must fail it. */
        const size_t slen = 8 * (size_t)MIB;
        uint8_t *q = rbuf_new(slen);
        CHECK(c, q != NULL, "out of memory");
        hoop__xfer_t x, y;
        hoop__wire_hdr_t h = mkhdr(c, 0, 2, 2, slen);
        xinit(&x, HOOP_XFER_RECV, 0, &h, q, slen);
        c->ops->post(c->tp, &x);
        CHECK(c, board_wait(c, B_POSTED, 1, 10) == 0, "rank 0 never posted");
        sleep_s(0.1); /* rank 0 is asleep in progress() by now */
        atomic_store(&c->board->v[B_T_EVENT], now_ns());
        c->ops->abort(c->tp, HOOP_ERR_ABORTED, reason);
        CHECK(c, x.done && x.status == HOOP_ERR_ABORTED,
              "a queued receive after abort(): %s, expected %s at once",
              x.done ? hoop_error_string(x.status) : "not done",
              hoop_error_string(HOOP_ERR_ABORTED));
        c->ops->abort(c->tp, HOOP_ERR_TIMEOUT, "a second reason");
        h = mkhdr(c, 1, 1, 1, 16);
        xinit(&y, HOOP_XFER_SEND, 0, &h, q, 16);
        c->ops->post(c->tp, &y);
        CHECK(c, y.done && y.status == HOOP_ERR_ABORTED,
              "a send posted after abort(): %s, expected %s at once",
              y.done ? hoop_error_string(y.status) : "not done",
              hoop_error_string(HOOP_ERR_ABORTED));
        CHECK(c, board_wait(c, B_RELEASE, 1, 10) == 0, "rank 0 did not finish");
        free(q);
        return 0;
    }
    const size_t rlen = MIB, slen = 8 * (size_t)MIB;
    uint8_t *r = rbuf_new(rlen), *s = malloc(slen);
    CHECK(c, r != NULL && s != NULL, "out of memory");
    fill(s, slen, seed_of(c, 0, 1, 2));
    hoop__xfer_t xr, xs;
    hoop__wire_hdr_t hr = mkhdr(c, 1, 1, 1, rlen), hs = mkhdr(c, 0, 2, 2, slen);
    xinit(&xr, HOOP_XFER_RECV, 1, &hr, r, rlen);
    xinit(&xs, HOOP_XFER_SEND, 1, &hs, s, slen);
    c->ops->post(c->tp, &xr);
    c->ops->post(c->tp, &xs);
    atomic_store(&c->board->v[B_POSTED], 1);
    double end = now_s() + lim(c, 10), t_fail = 0;
    while (!xr.done && now_s() < end) c->ops->progress(c->tp, 1000);
    t_fail = now_s();
    atomic_store(&c->board->v[B_RELEASE], 1);
    CHECK(c, xr.done, "the receive from the aborted rank is still waiting after %.0f s",
          lim(c, 10));
    int64_t t_ab = atomic_load(&c->board->v[B_T_EVENT]);
    double late = t_fail - (double)t_ab * 1e-9;
    CHECK(c, t_ab != 0, "the receive ended before rank 1 aborted: %s",
          hoop_error_string(xr.status));
    CHECK(c, late < lim(c, 2.0), "failed %.2f s after rank 1 aborted (at most 2 s)", late);
    CHECK(c, c->rep.n > 0 && c->rep.peer == 1, "report: %d call(s), peer %d, expected peer 1",
          c->rep.n, c->rep.peer);
    CHECK(c, xr.status == HOOP_ERR_ABORTED, "receive from the aborting rank: %s, expected %s",
          hoop_error_string(xr.status), hoop_error_string(HOOP_ERR_ABORTED));
    CHECK(c, c->rep.code == HOOP_ERR_ABORTED, "report code %s, expected %s",
          hoop_error_string(c->rep.code), hoop_error_string(HOOP_ERR_ABORTED));
    CHECK(c, strstr(c->rep.msg, "rank 1 aborted: reason text") != NULL,
          "report \"%s\" should contain \"rank 1 aborted: reason text\"", c->rep.msg);
    hoop__xfer_t *xsp = &xs;
    TRY(drive(c, &xsp, 1, 2, "the send to the aborted rank"));
    free(r);
    free(s);
    return 0;
}

/* Connecting to a rank that never shows up, or to a bad address: a clear error within the
 * deadline, and transfers on the failed instance complete at once with an error. */
static int try_connect(ctx_t *c, int me, const char *peer_addr, hoop_result_t want,
                       const char *want_text, double deadline_s, const char *what)
{
    memset(&c->rep, 0, sizeof(c->rep));
    c->p.rank = me;
    c->p.size = 2;
    char own[ADDR_MAX];
    hoop__tp_t *tp = NULL;
    hoop_result_t rc = c->ops->listen(&c->p, &tp, own, sizeof(own));
    CHECK(c, rc == HOOP_OK && tp != NULL, "%s: listen: %s", what, hoop_error_string(rc));
    const char *addrs[2];
    addrs[me] = own;
    addrs[1 - me] = peer_addr;
    double t0 = now_s();
    rc = c->ops->connect(tp, addrs, t0 + deadline_s);
    double dt = now_s() - t0;
    if (rc != want || dt > deadline_s + lim(c, 1.0) || c->rep.n == 0 ||
        strstr(c->rep.msg, want_text) == NULL) {
        failf(c, __LINE__, "%s: connect returned %s after %.2f s (expected %s within %.1f s), "
              "report: %d call(s), \"%s\" (expected to contain \"%s\")", what,
              hoop_error_string(rc), dt, hoop_error_string(want), deadline_s, c->rep.n,
              c->rep.msg, want_text);
        c->ops->close(tp);
        return 1;
    }
    uint8_t b[8 + GUARD];
    hoop__xfer_t x;
    hoop__wire_hdr_t h = mkhdr(c, 1 - me, 1, 1, 8);
    xinit(&x, HOOP_XFER_RECV, 1 - me, &h, b, 8);
    c->ops->post(c->tp = tp, &x);
    int r = drive1(c, &x, 1, "a receive on an instance that failed to connect");
    c->tp = NULL;
    if (r == 0 && x.status == HOOP_OK) {
        failf(c, __LINE__, "%s: a receive after the failed connect succeeded", what);
        r = 1;
    }
    c->ops->close(tp);
    if (c->o->verbose) notef(c, "%s: %s in %.2f s: %s", what, hoop_error_string(want), dt, c->rep.msg);
    return r;
}

/* A loopback port that nobody listens on (bound, then closed). */
static int dead_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(a);
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &sl) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

/* The pid of a process that has exited and been reaped. */
static int dead_pid(void)
{
    pid_t p = fork();
    if (p == 0) _exit(0);
    if (p > 0) waitpid(p, NULL, 0);
    return (int)p;
}

/* An address that connect() must refuse, as rank me of 2, and what it must say. */
typedef struct bad_addr {
    char addr[ADDR_MAX];
    int me;
    hoop_result_t code;
    const char *text;  /* the report contains it */
    double deadline_s;
    const char *what;
} bad_addr_t;

#define BAD_MAX 8

static int tcp_bad_addrs(ctx_t *c, bad_addr_t *bad, int *n)
{
    int port = dead_port();
    CHECK(c, port > 0, "no free loopback port");
    bad_addr_t b[] = {
        {"", 1, HOOP_ERR_TIMEOUT, "rank 0", 0.5, "connect to a closed port"},
        {"", 0, HOOP_ERR_TIMEOUT, "1", 0.5, "wait for a rank that never connects"},
        {"not-an-address", 1, HOOP_ERR_INTERNAL, "rank 0", 1.0, "a malformed address"},
        {"127.0.0.1:99999", 1, HOOP_ERR_INTERNAL, "rank 0", 1.0, "a port out of range"},
    };
    snprintf(b[0].addr, ADDR_MAX, "127.0.0.1:%d", port);
    snprintf(b[1].addr, ADDR_MAX, "127.0.0.1:%d", port);
    *n = (int)(sizeof(b) / sizeof(b[0]));
    memcpy(bad, b, sizeof(b));
    return 0;
}

static int shm_bad_addrs(ctx_t *c, bad_addr_t *bad, int *n)
{
    /* Our own address gives the segment length a peer's must have. */
    char own[ADDR_MAX];
    hoop__tp_t *tp = NULL;
    c->p.rank = 0;
    c->p.size = 2;
    const hoop__transport_ops_t *shm = hoop__tp_registry[hoop__tp_find("shm")].ops;
    CHECK(c, shm->listen(&c->p, &tp, own, sizeof(own)) == HOOP_OK, "shm listen");
    shm->close(tp);
    int pid, fd;
    uint64_t nonce;
    size_t len;
    CHECK(c, sscanf(own, "%d:%d:%" SCNx64 ":%zu", &pid, &fd, &nonce, &len) == 4,
          "unexpected shm address \"%s\"", own);
    /* Left open: the process ends with the case. */
    int memfd = memfd_create("not-a-segment", MFD_CLOEXEC);
    CHECK(c, memfd >= 0 && ftruncate(memfd, (off_t)len) == 0, "memfd: %s", strerror(errno));
    bad_addr_t b[] = {
        {"garbage", 1, HOOP_ERR_INTERNAL, "rank 0", 1.0, "a malformed address"},
        {"", 1, HOOP_ERR_PEER_LOST, "lost rank 0", 1.0, "the pid of an exited process"},
        {"", 1, HOOP_ERR_INTERNAL, "not rank 0's", 1.0, "a memfd that is not a segment"},
        {"", 1, HOOP_ERR_SYSTEM, "rank 0", 1.0, "an fd that is not open"},
        {"", 1, HOOP_ERR_INTERNAL, "rank 0", 1.0, "a segment of another length"},
    };
    snprintf(b[1].addr, ADDR_MAX, "%d:%d:%016" PRIx64 ":%zu", dead_pid(), 3, nonce, len);
    snprintf(b[2].addr, ADDR_MAX, "%d:%d:%016" PRIx64 ":%zu", (int)getpid(), memfd, nonce, len);
    snprintf(b[3].addr, ADDR_MAX, "%d:%d:%016" PRIx64 ":%zu", (int)getpid(), 1000, nonce, len);
    snprintf(b[4].addr, ADDR_MAX, "%d:%d:%016" PRIx64 ":%zu", (int)getpid(), memfd, nonce, len + 4096);
    *n = (int)(sizeof(b) / sizeof(b[0]));
    memcpy(bad, b, sizeof(b));
    return 0;
}

/* The bad addresses this suite knows for the transport of a registry row (*n = 0 for one it does
 * not: its own parser goes untested here). */
static int bad_addrs(ctx_t *c, const char *name, bad_addr_t *bad, int *n)
{
    *n = 0;
    if (strcmp(name, "tcp") == 0) return tcp_bad_addrs(c, bad, n);
    if (strcmp(name, "shm") == 0) return shm_bad_addrs(c, bad, n);
    return 0;
}

/* Through mux, every row's bad addresses as the only part of an address on this host, so that
 * mux must give the peer that row; a malformed address; and another host, where the first row
 * that reaches another host is chosen whatever the others publish. */
static int noconnect_mux(ctx_t *c)
{
    char own[ADDR_MAX], key[40], addr[ADDR_MAX];
    hoop__tp_t *tp = NULL;
    c->p.rank = 0;
    c->p.size = 2;
    CHECK(c, c->ops->listen(&c->p, &tp, own, sizeof(own)) == HOOP_OK, "listen");
    c->ops->close(tp);
    c->ops->host_key(own, key, sizeof(key));
    CHECK(c, key[0] != '\0', "no host identity in \"%s\"", own);
    TRY(try_connect(c, 1, "garbage", HOOP_ERR_INTERNAL, "rank 0", 1.0, "a malformed address"));
    static bad_addr_t bad[HOOP_TP_ROWS_MAX][BAD_MAX];
    int nbad[HOOP_TP_ROWS_MAX], far = -1;
    const char *parts[HOOP_TP_ROWS_MAX] = {NULL};
    for (int t = 0; t < hoop__tp_registry_n; t++) {
        TRY(bad_addrs(c, hoop__tp_registry[t].name, bad[t], &nbad[t]));
        for (int i = 0; i < nbad[t]; i++) {
            const char *one[HOOP_TP_ROWS_MAX] = {NULL};
            one[t] = bad[t][i].addr;
            CHECK(c, hoop__mux_addr(key, one, addr, sizeof(addr)) == 0, "address too long");
            TRY(try_connect(c, bad[t][i].me, addr, bad[t][i].code, bad[t][i].text,
                            bad[t][i].deadline_s, bad[t][i].what));
        }
        hoop__tp_pub_t me = {key, "-"}, other = {"0000000000005eed", "-"};
        if (nbad[t] > 0) parts[t] = bad[t][0].addr;
        if (far < 0 && nbad[t] > 0 && hoop__tp_registry[t].reaches(&me, &other)) far = t;
    }
    if (far < 0) return 0;
    CHECK(c, bad[far][0].me == 1, "the first bad address of %s is not for rank 1",
          hoop__tp_registry[far].name);
    CHECK(c, hoop__mux_addr("0000000000005eed", parts, addr, sizeof(addr)) == 0, "address too long");
    char what[96];
    snprintf(what, sizeof(what), "another host, through %s: %s", hoop__tp_registry[far].name,
             bad[far][0].what);
    return try_connect(c, 1, addr, bad[far][0].code, bad[far][0].text, bad[far][0].deadline_s, what);
}

static int case_noconnect(ctx_t *c)
{
    if (c->ops == &hoop__mux_transport) return noconnect_mux(c);
    bad_addr_t bad[BAD_MAX];
    int n;
    TRY(bad_addrs(c, c->ops->name, bad, &n));
    if (n == 0) notef(c, "no bad addresses known for %s", c->ops->name);
    for (int i = 0; i < n; i++)
        TRY(try_connect(c, bad[i].me, bad[i].addr, bad[i].code, bad[i].text, bad[i].deadline_s,
                        bad[i].what));
    return 0;
}

/* wake() from another thread ends a progress(5000) soon; a wake() just before progress() is
 * not lost. */
typedef struct waker {
    ctx_t *c;
    double delay;
    _Atomic int64_t at;
} waker_t;

static void *waker_main(void *arg)
{
    waker_t *w = arg;
    sleep_s(w->delay);
    atomic_store(&w->at, now_ns());
    w->c->ops->wake(w->c->tp);
    return NULL;
}

static int wake_round(ctx_t *c, double delay, const char *what)
{
    waker_t w = {.c = c, .delay = delay};
    atomic_store(&w.at, 0);
    pthread_t th;
    CHECK(c, pthread_create(&th, NULL, waker_main, &w) == 0, "pthread_create");
    double t0 = now_s();
    int calls = 0;
    while (atomic_load(&w.at) == 0 && now_s() - t0 < lim(c, 10)) {
        c->ops->progress(c->tp, 5000);
        calls++;
    }
    double t_end = now_s();
    pthread_join(th, NULL);
    int64_t at = atomic_load(&w.at);
    CHECK(c, at != 0, "%s: the waker never ran", what);
    double late = t_end - (double)at * 1e-9;
    CHECK(c, late < lim(c, 1.0), "%s: progress(5000) returned %.2f s after wake()", what, late);
    if (c->o->verbose)
        notef(c, "%s: returned %.1f ms after wake() (%d progress call(s))", what, late * 1e3, calls);
    return 0;
}

/* A wake() that comes just before progress() goes to sleep must still end that sleep: a thread
 * that posts work and then wakes the progressing one cannot know how far it has got. */
static int case_wake_pending(ctx_t *c)
{
    if (c->rank == 1) return board_wait(c, B_STEP_DONE, 1, 30) == 0 ? 0 : 1;
    uint8_t b[32 + GUARD];
    hoop__xfer_t x;
    hoop__wire_hdr_t h = mkhdr(c, 1, 1, 1, 32);
    xinit(&x, HOOP_XFER_RECV, 1, &h, b, 32);
    for (int posted = 0; posted < 2; posted++) {
        if (posted) c->ops->post(c->tp, &x);
        for (int i = 0; i < 3; i++) {
            c->ops->wake(c->tp);
            double t0 = now_s();
            c->ops->progress(c->tp, 2000);
            double dt = now_s() - t0;
            CHECK(c, dt < lim(c, 1.0), "progress(2000) right after wake() slept %.2f s with %s: "
                  "the wake-up was lost", dt, posted ? "a receive waiting" : "nothing posted");
        }
    }
    atomic_store(&c->board->v[B_STEP_DONE], 1);
    return 0;
}

static int case_wake(ctx_t *c)
{
    if (c->rank == 1) {
        CHECK(c, board_wait(c, B_STEP_DONE, 1, 30) == 0, "rank 0 did not finish its wake tests");
        uint8_t b[32];
        fill(b, 32, seed_of(c, 1, 0, 1));
        hoop__xfer_t x;
        hoop__wire_hdr_t h = mkhdr(c, 1, 1, 1, 32);
        xinit(&x, HOOP_XFER_SEND, 0, &h, b, 32);
        c->ops->post(c->tp, &x);
        TRY(drive1(c, &x, 10, "send after the wake tests"));
        CHECK(c, x.status == HOOP_OK, "send: %s", hoop_error_string(x.status));
        return 0;
    }
    TRY(wake_round(c, 0.1, "nothing posted"));
    uint8_t b[32 + GUARD];
    memset(b, GUARD_BYTE, sizeof(b));
    hoop__xfer_t x;
    hoop__wire_hdr_t h = mkhdr(c, 1, 1, 1, 32);
    xinit(&x, HOOP_XFER_RECV, 1, &h, b, 32);
    c->ops->post(c->tp, &x);
    for (int i = 0; i < 3; i++) TRY(wake_round(c, 0.05 + 0.05 * i, "a receive waiting"));
    CHECK(c, !x.done, "the receive completed before rank 1 sent");
    atomic_store(&c->board->v[B_STEP_DONE], 1);
    TRY(drive1(c, &x, 10, "receive after the wake tests"));
    TRY(check_recv(c, &x, &h, seed_of(c, 1, 0, 1), "after the wake tests"));
    return 0;
}

/* progress(t) with nothing to do sleeps: at most about t, and without burning the CPU. The case
 * runs with shm_spin_us = 0. */
static int idle_round(ctx_t *c, const char *what)
{
    const int t_ms = 200;
    double wall0 = now_s(), cpu0 = cpu_s(), worst = 0;
    int calls = 0;
    while (now_s() - wall0 < 0.6) {
        double t = now_s();
        c->ops->progress(c->tp, t_ms);
        t = now_s() - t;
        worst = t > worst ? t : worst;
        calls++;
    }
    double wall = now_s() - wall0, cpu = cpu_s() - cpu0;
    CHECK(c, worst < t_ms * 1e-3 + lim(c, 0.25), "%s: progress(%d) took %.0f ms", what, t_ms,
          worst * 1e3);
    CHECK(c, cpu < 0.1 * wall + lim(c, 0.03), "%s: %.0f ms of CPU in %.0f ms of progress(%d) "
          "(%d calls): it spins", what, cpu * 1e3, wall * 1e3, t_ms, calls);
    if (c->o->verbose)
        notef(c, "%s: %d call(s) in %.0f ms, longest %.0f ms, CPU %.1f ms", what, calls,
              wall * 1e3, worst * 1e3, cpu * 1e3);
    return 0;
}

static int case_idle(ctx_t *c)
{
    int me = c->rank, peer = 1 - me;
    double t0 = now_s();
    for (int i = 0; i < 100; i++) c->ops->progress(c->tp, 0);
    double dt = now_s() - t0;
    CHECK(c, dt < lim(c, 0.2), "100 calls of progress(0) took %.0f ms", dt * 1e3);
    TRY(idle_round(c, "nothing posted"));
    uint8_t in[100 + GUARD], out[100];
    memset(in, GUARD_BYTE, sizeof(in));
    fill(out, 100, seed_of(c, me, peer, 1));
    hoop__xfer_t r, s;
    hoop__wire_hdr_t hr = mkhdr(c, peer, 1, 1, 100), hs = mkhdr(c, me, 1, 1, 100);
    xinit(&r, HOOP_XFER_RECV, peer, &hr, in, 100);
    xinit(&s, HOOP_XFER_SEND, peer, &hs, out, 100);
    c->ops->post(c->tp, &r);
    TRY(idle_round(c, "a receive waiting"));
    CHECK(c, !r.done, "the receive completed before the peer sent");
    atomic_fetch_or(&c->board->v[B_STEP_DONE], 1 << me);
    CHECK(c, board_wait(c, B_STEP_DONE, 3, 10) == 0, "the peer did not finish");
    c->ops->post(c->tp, &s);
    hoop__xfer_t *both[2] = {&r, &s};
    TRY(drive(c, both, 2, 10, "the exchange after idling"));
    CHECK(c, s.status == HOOP_OK, "send: %s", hoop_error_string(s.status));
    TRY(check_recv(c, &r, &hr, seed_of(c, peer, me, 1), "after idling"));
    return 0;
}

/* close() with transfers still queued (large and small, both directions, some half moved):
 * no crash, no leak. Then instances that never connected, and one closed after abort(). */
static int case_close(ctx_t *c)
{
    int me = c->rank, peer = 1 - me;
    enum { NB = 4, NS = 40 };
    const size_t big = 2 * (size_t)MIB;
    hoop__xfer_t xb[2 * NB], xsm[NS];
    uint8_t *bufs[2 * NB], small[NS][64];
    for (int i = 0; i < 2 * NB; i++) {
        bufs[i] = malloc(big);
        CHECK(c, bufs[i] != NULL, "out of memory");
        memset(bufs[i], i, big);
        int send = (i % 2) == me;
        /* Receives expect other sequence numbers than the peer sends: nothing finishes cleanly. */
        hoop__wire_hdr_t h = mkhdr(c, send ? me : peer, (uint64_t)(send ? i : 100 + i), 1, big);
        xinit(&xb[i], send ? HOOP_XFER_SEND : HOOP_XFER_RECV, peer, &h, bufs[i], big);
        c->ops->post(c->tp, &xb[i]);
    }
    for (int i = 0; i < NS; i++) {
        hoop__wire_hdr_t h = mkhdr(c, me, 500 + (uint64_t)i, 1, 64);
        xinit(&xsm[i], HOOP_XFER_SEND, peer, &h, small[i], 64);
        memset(small[i], i, 64);
        c->ops->post(c->tp, &xsm[i]);
    }
    for (int i = 0; i < 20; i++) c->ops->progress(c->tp, 0);
    atomic_fetch_or(&c->board->v[B_STEP_DONE], 1 << me);
    CHECK(c, board_wait(c, B_STEP_DONE, 3, 10) == 0, "the peer did not get here");
    c->ops->close(c->tp);
    c->tp = NULL;
    for (int i = 0; i < 2 * NB; i++) free(bufs[i]);

    /* Listen only, never connected. */
    char addr[ADDR_MAX];
    hoop__tp_t *tp = NULL;
    CHECK(c, c->ops->listen(&c->p, &tp, addr, sizeof(addr)) == HOOP_OK, "listen");
    c->ops->close(tp);
    /* Listen, a transfer posted before any connect, abort, close. */
    tp = NULL;
    CHECK(c, c->ops->listen(&c->p, &tp, addr, sizeof(addr)) == HOOP_OK, "listen");
    uint8_t b[8];
    hoop__xfer_t x;
    hoop__wire_hdr_t h = mkhdr(c, peer, 1, 1, 8);
    xinit(&x, HOOP_XFER_RECV, peer, &h, b, 8);
    c->ops->post(tp, &x);
    c->ops->abort(tp, HOOP_ERR_ABORTED, "closing");
    CHECK(c, x.done && x.status != HOOP_OK, "a receive posted before connect survived abort()");
    c->ops->close(tp);
    return 0;
}

/* One 16-byte exchange with the other rank, numbered seq: the instance still works. With
 * registered set, both buffers are registered first (reg()) and the transfers carry the handles. */
static int exchange_ok(ctx_t *c, uint64_t seq, const char *what, int registered)
{
    const hoop__transport_ops_t *ops = c->ops;
    int me = c->rank, peer = 1 - me;
    uint8_t in[16 + GUARD], out[16];
    void *rin = NULL, *rout = NULL;
    if (registered)
        CHECK(c, ops->reg(c->tp, in, sizeof(in), HOOP__MEM_HOST, &rin) == HOOP_OK &&
                     ops->reg(c->tp, out, sizeof(out), HOOP__MEM_HOST, &rout) == HOOP_OK,
              "reg: %s", c->rep.msg);
    memset(in, GUARD_BYTE, sizeof(in));
    fill(out, 16, seed_of(c, me, peer, seq));
    hoop__xfer_t r, s;
    hoop__wire_hdr_t hr = mkhdr(c, peer, seq, seq, 16), hs = mkhdr(c, me, seq, seq, 16);
    xinit(&r, HOOP_XFER_RECV, peer, &hr, in, 16);
    xinit(&s, HOOP_XFER_SEND, peer, &hs, out, 16);
    r.mem.reg = rin;
    s.mem.reg = rout;
    ops->post(c->tp, &s);
    ops->post(c->tp, &r);
    hoop__xfer_t *both[2] = {&r, &s};
    char w[96];
    snprintf(w, sizeof(w), "an exchange %s", what);
    TRY(drive(c, both, 2, 10, w));
    CHECK(c, s.status == HOOP_OK, "send %s: %s", what, hoop_error_string(s.status));
    TRY(check_recv(c, &r, &hr, seed_of(c, peer, me, seq), what));
    if (registered) {
        ops->dereg(c->tp, rin);
        ops->dereg(c->tp, rout);
    }
    return 0;
}

/* Transfers to no valid peer (-1, size, itself) complete with an error instead of waiting. */
static int case_badpeer(ctx_t *c)
{
    int me = c->rank;
    const int bad[3] = {-1, c->size, me};
    static const char *const name[3] = {"-1", "size", "itself"};
    for (int i = 0; i < 3; i++) {
        for (int dir = HOOP_XFER_SEND; dir <= HOOP_XFER_RECV; dir++) {
            uint8_t b[16];
            memset(b, 0, sizeof(b));
            hoop__xfer_t x;
            hoop__wire_hdr_t h = mkhdr(c, me, 1, 1, 16);
            xinit(&x, dir, bad[i], &h, b, 16);
            c->ops->post(c->tp, &x);
            char what[80];
            snprintf(what, sizeof(what), "a %s to peer %s", dir == HOOP_XFER_SEND ? "send" : "receive",
                     name[i]);
            TRY(drive1(c, &x, 1, what));
            CHECK(c, x.status != HOOP_OK, "%s succeeded", what);
        }
    }
    return exchange_ok(c, 2, "after the bad posts", 0);
}

/* A memory type no transport of the registry takes (one outside the enumeration where every
 * type is taken by some transport). */
static int untaken_type(void)
{
    for (int t = 0; t < HOOP__MEM_COUNT; t++) {
        int taken = 0;
        for (int i = 0; i < hoop__tp_registry_n; i++)
            taken |= (hoop__tp_registry[i].ops->caps & HOOP_TP_MEM(t)) != 0;
        if (!taken) return t;
    }
    return HOOP__MEM_COUNT;
}

/* Memory the transport cannot take: a send or receive of it completes at once with an error and a
 * sentence naming the type and the peer, and the instance goes on working. A memory type that is
 * none fails as an invalid argument. Where the transport registers memory, transfers of
 * registered buffers go through. */
static int case_memory(ctx_t *c)
{
    const hoop__transport_ops_t *ops = c->ops;
    CHECK(c, ops->caps & HOOP_TP_MEM(HOOP__MEM_HOST), "%s does not take host memory", ops->name);
    CHECK(c, (ops->reg == NULL) == (ops->dereg == NULL), "reg() and dereg() come together");
    CHECK(c, !(ops->caps & HOOP_TP_WANTS_REG) || ops->reg != NULL,
          "the caps ask for registration but there is no reg()");
    int me = c->rank, peer = 1 - me;
    const int types[2] = {untaken_type(), HOOP__MEM_COUNT + 3};
    for (int i = 0; i < 2; i++) {
        int known = types[i] < HOOP__MEM_COUNT;
        hoop_result_t want = known ? HOOP_ERR_UNSUPPORTED : HOOP_ERR_INVALID_ARGUMENT;
        char text[64], peer_s[24];
        if (known) snprintf(text, sizeof(text), "cannot move %s memory", hoop__mem_type_name(types[i]));
        else snprintf(text, sizeof(text), "memory type %d, which does not exist", types[i]);
        snprintf(peer_s, sizeof(peer_s), "rank %d", peer);
        for (int dir = HOOP_XFER_SEND; dir <= HOOP_XFER_RECV; dir++) {
            uint8_t b[16] = {0};
            hoop__xfer_t x;
            hoop__wire_hdr_t h = mkhdr(c, dir == HOOP_XFER_SEND ? me : peer, 1, 1, 16);
            xinit(&x, dir, peer, &h, b, 16);
            x.mem.type = (hoop__mem_type_t)types[i];
            memset(&c->rep, 0, sizeof(c->rep));
            ops->post(c->tp, &x);
            CHECK(c, x.done && x.status == want, "a %s of memory type %d: %s, expected %s at once",
                  dir == HOOP_XFER_SEND ? "send" : "receive", types[i],
                  x.done ? hoop_error_string(x.status) : "not done", hoop_error_string(want));
            CHECK(c, c->rep.n > 0 && c->rep.code == want && strstr(c->rep.msg, text) != NULL &&
                         strstr(c->rep.msg, peer_s) != NULL,
                  "report: %d call(s), %s, \"%s\" (expected %s, \"%s\" and \"%s\")", c->rep.n,
                  hoop_error_string(c->rep.code), c->rep.msg, hoop_error_string(want), text, peer_s);
        }
    }
    TRY(exchange_ok(c, 2, "after the refused posts", 0));
    if (ops->reg != NULL) TRY(exchange_ok(c, 3, "of registered buffers", 1));
    return 0;
}

/* Rank 1 calls connect() 0.3 s after rank 0, and rank 0 closes and exits as soon as its
 * connect() returns: connect() means connected both ways, so rank 1's must still succeed. */
static int case_late(ctx_t *c)
{
    (void)c;
    return 0;
}

/* ---- the driver ---- */

typedef struct case_def {
    const char *name;
    int (*fn)(ctx_t *);
    int ranks;
    int variants;
    int connect;      /* 0: the case sets up its own instances */
    int dies;         /* this rank ends by _exit(0) or SIGKILL on purpose */
    int spin0;        /* run with shm_spin_us = 0 */
    double limit_s;
    int late;         /* rank 1 connects late, and the ranks do not wait for each other after */
} case_def_t;

static const case_def_t cases[] = {
    {"exchange", case_exchange, 2, 1, 1, -1, 0, 60, 0},
    {"huge", case_huge, 2, 1, 1, -1, 0, 90, 0},
    {"many-small", case_many, 2, 1, 1, -1, 0, 90, 0},
    {"three-ranks", case_three, 3, 1, 1, -1, 0, 90, 0},
    {"mismatch", case_mismatch, 2, MM_N, 1, -1, 0, 30, 0},
    {"peer-exit", case_peer_exit, 2, 2, 1, 0, 0, 30, 0},
    {"peer-close", case_peer_close, 2, 1, 1, -1, 0, 30, 0},
    {"abort", case_abort, 2, 1, 1, -1, 0, 30, 0},
    {"no-peer", case_noconnect, 1, 1, 0, -1, 0, 60, 0},
    {"wake", case_wake, 2, 1, 1, -1, 0, 40, 0},
    {"wake-pending", case_wake_pending, 2, 1, 1, -1, 0, 30, 0},
    {"idle", case_idle, 2, 1, 1, -1, 1, 30, 0},
    {"close-queued", case_close, 2, 1, 1, -1, 0, 30, 0},
    {"bad-peer", case_badpeer, 2, 1, 1, -1, 0, 30, 0},
    {"memory", case_memory, 2, 1, 1, -1, 0, 30, 0},
    {"late-connect", case_late, 2, 1, 1, -1, 0, 30, 1},
};
#define NCASES ((int)(sizeof(cases) / sizeof(cases[0])))

static const char *variant_name(const case_def_t *cd, int v)
{
    if (cd->fn == case_mismatch) return mm_name[v];
    if (cd->fn == case_peer_exit) return v == 0 ? "exit" : "sigkill";
    return NULL;
}

static int read_full(int fd, void *buf, size_t n, double deadline)
{
    size_t got = 0;
    while (got < n) {
        double left = deadline - now_s();
        if (left <= 0) return -1;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int rc = poll(&pf, 1, (int)(left * 1000) + 1);
        if (rc < 0 && errno == EINTR) continue;
        if (rc <= 0) return -1;
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            return -1;
        }
        got += (size_t)r;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = write(fd, (const char *)buf + done, n - done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        done += (size_t)r;
    }
    return 0;
}

static void make_cfg(const opts_t *o, const case_def_t *cd, hoop__config_t *cfg)
{
    hoop__config_defaults(cfg);
    snprintf(cfg->transport, sizeof(cfg->transport), "%s", o->transport);
    if (o->sockets > 0) cfg->sockets_per_peer = o->sockets;
    if (o->ring >= 0) cfg->shm_ring_bytes = (size_t)o->ring;
    if (o->cma >= 0) cfg->shm_cma_bytes = (size_t)o->cma;
    if (cd->spin0) cfg->shm_spin_us = 0;
    if (o->verbose) cfg->log_level = HOOP_LOG_INFO;
}

static int rank_main(const opts_t *o, const case_def_t *cd, int variant, int rank, board_t *board,
                     int up, int down, uint64_t comm_id)
{
    static ctx_t c; /* static: the report callback must not see a dead frame, ever */
    memset(&c, 0, sizeof(c));
    c.o = o;
    c.rank = rank;
    c.size = cd->ranks;
    c.variant = variant;
    c.comm_id = comm_id;
    c.ops = o->ops;
    c.board = board;
    c.cname = cd->name;
    make_cfg(o, cd, &c.cfg);
    hoop__log_open(&c.log, c.cfg.log_level, "", rank);
    c.p.rank = rank;
    c.p.size = cd->ranks;
    c.p.comm_id = comm_id;
    c.p.cfg = &c.cfg;
    c.p.log = &c.log;
    c.p.route_hint = "127.0.0.1";
    c.p.report = on_report;
    c.p.report_ctx = &c;
    int rc = 1;
    if (!cd->connect) {
        rc = cd->fn(&c);
        hoop__log_close(&c.log);
        return rc;
    }
    hoop_result_t r = c.ops->listen(&c.p, &c.tp, c.addr, sizeof(c.addr));
    if (r != HOOP_OK) {
        failf(&c, __LINE__, "listen: %s: %s", hoop_error_string(r), c.rep.msg);
        goto out;
    }
    char table[MAX_RANKS][ADDR_MAX];
    if (write_full(up, c.addr, ADDR_MAX) != 0 ||
        read_full(down, table, (size_t)cd->ranks * ADDR_MAX, now_s() + lim(&c, 20)) != 0) {
        failf(&c, __LINE__, "address exchange through the parent failed");
        goto out;
    }
    const char *addrs[MAX_RANKS];
    for (int i = 0; i < cd->ranks; i++) addrs[i] = table[i];
    if (cd->late && rank == 1) sleep_s(0.3);
    r = c.ops->connect(c.tp, addrs, now_s() + lim(&c, 20));
    if (r != HOOP_OK) {
        failf(&c, __LINE__, "connect: %s: %s", hoop_error_string(r), c.rep.msg);
        goto out;
    }
    /* Every case starts with all ranks connected: what connect() itself promises about that is
     * the late-connect case's business. */
    atomic_fetch_or(&board->v[B_CONNECTED], 1 << rank);
    if (!cd->late && board_wait(&c, B_CONNECTED, (1 << cd->ranks) - 1, 20) != 0) {
        failf(&c, __LINE__, "the other ranks did not connect");
        goto out;
    }
    memset(&c.rep, 0, sizeof(c.rep));
    rc = cd->fn(&c);
out:
    if (c.tp != NULL) c.ops->close(c.tp);
    hoop__log_close(&c.log);
    return rc;
}

static int run_one(const opts_t *o, const case_def_t *cd, int variant, int index)
{
    int n = cd->ranks;
    board_t *board = mmap(NULL, sizeof(board_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                          -1, 0);
    if (board == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memset(board, 0, sizeof(*board));
    uint64_t comm_id = mix(o->seed ^ ((uint64_t)index << 8) ^ (uint64_t)variant) | 1;
    int up[MAX_RANKS][2], down[MAX_RANKS][2];
    pid_t pids[MAX_RANKS];
    for (int i = 0; i < n; i++) {
        if (pipe2(up[i], O_CLOEXEC) != 0 || pipe2(down[i], O_CLOEXEC) != 0) {
            perror("pipe");
            return 1;
        }
    }
    fflush(stdout);
    fflush(stderr);
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        if (pids[i] < 0) {
            perror("fork");
            for (int k = 0; k < i; k++) kill(pids[k], SIGKILL);
            return 1;
        }
        if (pids[i] == 0) {
            for (int k = 0; k < n; k++) {
                if (k != i) {
                    close(up[k][1]);
                    close(down[k][0]);
                }
                close(up[k][0]);
                close(down[k][1]);
            }
            int rc = rank_main(o, cd, variant, i, board, up[i][1], down[i][0], comm_id);
            /* exit(), not _exit(): the leak checkers run at exit. */
            exit(rc == 0 ? 0 : 1);
        }
    }
    for (int i = 0; i < n; i++) {
        close(up[i][1]);
        close(down[i][0]);
    }
    double deadline = t0 + cd->limit_s * o->scale;
    int failed = 0;
    if (cd->connect) {
        char table[MAX_RANKS][ADDR_MAX];
        for (int i = 0; i < n && !failed; i++) {
            if (read_full(up[i][0], table[i], ADDR_MAX, deadline) != 0) {
                fprintf(stderr, "  FAIL [%s %s]: rank %d sent no address\n", o->transport, cd->name,
                        i);
                failed = 1;
            }
        }
        for (int i = 0; i < n && !failed; i++)
            if (write_full(down[i][1], table, (size_t)n * ADDR_MAX) != 0) failed = 1;
    }
    for (int i = 0; i < n; i++) {
        close(up[i][0]);
        close(down[i][1]);
    }
    int left = n, status[MAX_RANKS], done[MAX_RANKS] = {0};
    while (left > 0) {
        for (int i = 0; i < n; i++) {
            if (done[i]) continue;
            pid_t r = waitpid(pids[i], &status[i], WNOHANG);
            if (r == pids[i]) {
                done[i] = 1;
                left--;
                int ok = WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0;
                if (i == cd->dies) ok = 1;
                /* The others get a moment to report what they saw, not the whole limit. */
                if (!ok && now_s() + 5 * o->scale < deadline) deadline = now_s() + 5 * o->scale;
            }
        }
        if (left == 0) break;
        if (failed || now_s() > deadline) {
            if (!failed)
                fprintf(stderr, "  FAIL [%s %s]: still running after %.0f s: killed\n", o->transport,
                        cd->name, cd->limit_s * o->scale);
            failed = 1;
            for (int i = 0; i < n; i++)
                if (!done[i]) kill(pids[i], SIGKILL);
            for (int i = 0; i < n; i++)
                if (!done[i]) waitpid(pids[i], &status[i], 0);
            for (int i = 0; i < n; i++) done[i] = 1;
            break;
        }
        sleep_s(0.002);
    }
    for (int i = 0; i < n && !failed; i++) {
        int st = status[i];
        int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        /* The rank that dies on purpose: any exit status (a leak checker may set one for the
         * buffers it abandons), or SIGKILL. */
        if (i == cd->dies && (WIFEXITED(st) || (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)))
            ok = 1;
        if (!ok) {
            failed = 1;
            if (WIFSIGNALED(st))
                fprintf(stderr, "  FAIL [%s %s]: rank %d killed by signal %d\n", o->transport,
                        cd->name, i, WTERMSIG(st));
        }
    }
    const char *vn = variant_name(cd, variant);
    printf("%s %s %s%s%s (%.2f s)\n", failed ? "FAIL" : "ok  ", o->transport, cd->name,
           vn ? "/" : "", vn ? vn : "", now_s() - t0);
    fflush(stdout);
    munmap(board, sizeof(*board));
    return failed;
}

static void usage(void)
{
    fprintf(stderr, "usage: conformance --transport ");
    for (int t = 0; t < hoop__tp_registry_n; t++) fprintf(stderr, "%s|", hoop__tp_registry[t].name);
    fprintf(stderr, "auto [--sockets N] [--ring BYTES] [--cma BYTES]\n       [--case NAME[,...]] "
            "[--skip NAME[,...]] [--time-scale F] [--seed S] [--verbose] [--list]\n");
}

static int selected(const char *list, const char *name)
{
    if (list == NULL) return 1;
    size_t n = strlen(name);
    for (const char *p = list; *p != '\0';) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == n && strncmp(p, name, n) == 0) return 1;
        if (e == NULL) break;
        p = e + 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o = {.transport = NULL, .ring = -1, .cma = -1, .scale = 1.0, .seed = 0x600d5eed};
    const char *only = NULL, *skip = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(a, "--list") == 0) {
            for (int k = 0; k < NCASES; k++) printf("%s\n", cases[k].name);
            return 0;
        } else if (strcmp(a, "--verbose") == 0) {
            o.verbose = 1;
            continue;
        } else if (v == NULL) {
            usage();
            return 2;
        }
        i++;
        if (strcmp(a, "--transport") == 0) {
            o.transport = v;
        } else if (strcmp(a, "--sockets") == 0) {
            o.sockets = (int)strtol(v, &end, 10);
            if (*end != '\0' || o.sockets < 1 || o.sockets > 16) return usage(), 2;
        } else if (strcmp(a, "--ring") == 0) {
            o.ring = strtol(v, &end, 10);
            if (*end != '\0' || o.ring < 4096 || (o.ring & (o.ring - 1)) != 0) return usage(), 2;
        } else if (strcmp(a, "--cma") == 0) {
            o.cma = strtol(v, &end, 10);
            if (*end != '\0' || o.cma < 0) return usage(), 2;
        } else if (strcmp(a, "--case") == 0) {
            only = v;
        } else if (strcmp(a, "--skip") == 0) {
            skip = v;
        } else if (strcmp(a, "--time-scale") == 0) {
            o.scale = strtod(v, &end);
            if (*end != '\0' || !(o.scale >= 1.0)) return usage(), 2;
        } else if (strcmp(a, "--seed") == 0) {
            o.seed = strtoull(v, &end, 0);
            if (*end != '\0') return usage(), 2;
        } else {
            usage();
            return 2;
        }
    }
    if (o.transport == NULL) return usage(), 2;
    int row = hoop__tp_find(o.transport);
    if (row >= 0) o.ops = hoop__tp_registry[row].ops;
    else if (strcmp(o.transport, "auto") == 0) o.ops = &hoop__mux_transport;
    else return usage(), 2;
    /* A dead peer must not take the test down with it. */
    signal(SIGPIPE, SIG_IGN);

    int failed = 0, ran = 0;
    double t0 = now_s();
    for (int k = 0; k < NCASES; k++) {
        if (!selected(only, cases[k].name) || (skip != NULL && selected(skip, cases[k].name)))
            continue;
        for (int v = 0; v < cases[k].variants; v++) {
            failed += run_one(&o, &cases[k], v, k);
            ran++;
        }
    }
    if (ran == 0) {
        fprintf(stderr, "no case selected (see --list)\n");
        return 2;
    }
    printf("%s: %d of %d run(s) passed in %.1f s\n", o.transport, ran - failed, ran, now_s() - t0);
    return failed ? 1 : 0;
}
