/*
 * Soak: a long random sequence of calls, every result checked bit for bit.
 *
 *   hooprun -n N soak [--calls K] [--seed S] [--max-count C] [--transport T] [--verbose]
 *
 * Every rank draws the same sequence from the shared seed: collective (or send/recv, barrier),
 * dtype, op, root, count (0, 1, primes, powers of two and their neighbours, anything up to C,
 * default 65537), in place or not, NULL for the buffers a non-root does not use, blocking or a
 * batch of up to four nonblocking calls waited in random order, and for all-reduce the algorithm.
 * Each rank computes every rank's input itself and checks its outputs against the independent
 * reference of common/refcheck, element by element, together with guard elements after every
 * output, the send buffers (unchanged) and a non-root's receive buffer (untouched).
 *
 * Inputs keep results exact whatever the reduction order: small integers for float sums and
 * averages, powers of two for float products, anything for integers (the reference wraps) and for
 * min/max. A transport the library does not accept (HOOP_TRANSPORT) skips the test (exit 77).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hoop.h"
#include "../../common/refcheck.h"
#include "../common/colls.h"
#include "../common/testing.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the reference encodes elements little-endian"
#endif

#define GUARD 8
#define SENT_BYTE 0xA5
#define MAX_BATCH 4
#define MAX_SHOWN 10

static const char *const ALGO[] = {"auto", "ring", "rd", "ps", "ps-sharded", "rabenseifner"};

/* Element sizes and names of our own, not the library's. */
static const size_t ES[HOOP_DTYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
static const char *const DTN[HOOP_DTYPE_COUNT] = {"int8",    "uint8",  "int32",   "uint32",
                                                  "int64",   "uint64", "float16", "bfloat16",
                                                  "float32", "float64"};
static const char *const OPN[HOOP_OP_COUNT] = {"sum", "prod", "min", "max", "avg"};

typedef struct call {
    uint64_t no; /* position in the sequence */
    int kind, root, inplace, null_unused, shift, algo;
    hoop_dtype_t dt;
    hoop_op_t op;
    size_t n, es;
    uint64_t seed;
    unsigned char *a, *b; /* send buffer (out of place) and receive buffer, guards included */
    size_t a_elems, b_elems;
    const void *sarg;
    void *rarg;
    hoop_request_t *rq[2];
} call_t;

typedef struct soak {
    hoop_comm_t *c;
    int me, p;
    uint64_t rng;
    size_t max_count;
    long wrong, shown, calls, elements, per_kind[C_COUNT], nonblocking, inplace;
    int verbose;
} soak_t;

static uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    return x ^ (x >> 33);
}

static uint64_t draw(soak_t *s) { return mix(s->rng += 0x9e3779b97f4a7c15ull); }

static int reducing(int kind)
{
    return kind == C_ALLREDUCE || kind == C_REDUCE || kind == C_REDUCE_SCATTER;
}

/* Element idx of rank q's input to call k, raw bits. */
static uint64_t input(const soak_t *s, const call_t *k, int q, size_t idx)
{
    uint64_t h = mix(k->seed ^ ((uint64_t)(q + 1) * 0xd1b54a32d192ed03ull) ^
                     (idx * 0xaef17502108ef2d9ull));
    uint64_t mask = rc_width_mask(k->es);
    if (!reducing(k->kind)) return h & mask; /* any bits, NaN payloads included */
    if (!rc_is_float(k->dt)) {
        if (k->op == HOOP_PROD && (h >> 60) != 0) h |= 1; /* mostly odd: products rarely vanish */
        return h & mask;
    }
    double v;
    switch (k->op) {
    case HOOP_SUM:
    case HOOP_AVG: {
        /* Every partial sum within +-256: exact even in bfloat16. */
        int64_t m = 256 / s->p;
        v = (double)((int64_t)(h % (uint64_t)(2 * m + 1)) - m);
        break;
    }
    case HOOP_PROD: {
        static const double f[4] = {1.0, 2.0, -1.0, 0.5};
        v = f[h & 3];
        break;
    }
    default:
        v = (double)(int32_t)(h >> 32) / 65536.0; /* never zero after rounding: no +-0 ties */
        if (v == 0.0) v = 0.25;
        break;
    }
    return rc_fenc(k->dt, v);
}

static uint64_t reduced(const soak_t *s, const call_t *k, size_t idx)
{
    rc_acc_t acc = {0};
    for (int q = 0; q < s->p; q++) rc_acc_add(&acc, k->dt, k->es, k->op, input(s, k, q, idx));
    return rc_acc_result(&acc, k->dt, k->es, k->op, s->p);
}

static uint64_t sentinel(size_t es) { return 0xA5A5A5A5A5A5A5A5ull & rc_width_mask(es); }

static void describe(const call_t *k, char *out, size_t len)
{
    snprintf(out, len, "call %" PRIu64 " %s %s %s count %zu root %d%s%s%s%s", k->no,
             test_coll_name[k->kind], DTN[k->dt], reducing(k->kind) ? OPN[k->op] : "-", k->n,
             k->root, k->inplace ? " in-place" : "", k->null_unused ? " null-unused" : "",
             k->kind == C_ALLREDUCE ? " algo " : "", k->kind == C_ALLREDUCE ? ALGO[k->algo] : "");
}

static void wrong(soak_t *s, const call_t *k, const char *what, size_t i, uint64_t got,
                  uint64_t want)
{
    s->wrong++;
    if (s->shown++ >= MAX_SHOWN) return;
    char d[200];
    describe(k, d, sizeof d);
    printf("rank %d: FAIL %s: %s element %zu is %#" PRIx64 ", want %#" PRIx64 "\n", s->me, d, what,
           i, got, want);
    fflush(stdout);
}

/* Draws the next call and prepares its buffers. Returns 0 when out of memory. */
static int draw_call(soak_t *s, call_t *k, uint64_t no)
{
    static const size_t primes[] = {2,   3,    5,    7,    13,   31,    61,    127,   251,
                                    509, 1021, 2039, 4093, 8191, 16381, 32749, 65521, 65537};
    int p = s->p, me = s->me;
    memset(k, 0, sizeof *k);
    k->no = no;
    k->seed = draw(s);
    k->kind = (int)(draw(s) % C_COUNT);
    k->dt = (hoop_dtype_t)(draw(s) % HOOP_DTYPE_COUNT);
    k->op = (hoop_op_t)(draw(s) % HOOP_OP_COUNT);
    k->es = ES[k->dt];
    k->root = (int)(draw(s) % (uint64_t)p);
    k->inplace = (int)(draw(s) & 1);
    k->null_unused = (int)(draw(s) & 1);
    k->shift = 1 + (int)(draw(s) % (uint64_t)(p > 1 ? p - 1 : 1));
    k->algo = (int)(draw(s) % (sizeof ALGO / sizeof ALGO[0]));
    size_t mx = s->max_count;
    switch (draw(s) % 8) {
    case 0: k->n = 0; break;
    case 1: k->n = 1; break;
    case 2:
    case 3: {
        size_t np = 0;
        while (np < sizeof primes / sizeof primes[0] && primes[np] <= mx) np++;
        k->n = np ? primes[draw(s) % np] : mx;
        break;
    }
    case 4: {
        size_t pw = (size_t)1 << (draw(s) % 17);
        k->n = pw + (size_t)(draw(s) % 3) - 1;
        if (k->n > mx) k->n = mx;
        break;
    }
    default: k->n = (size_t)(draw(s) % (mx + 1)); break;
    }
    if (k->kind == C_BARRIER) return 1;

    size_t n = k->n, es = k->es, pn = (size_t)p * n;
    int root_me = me == k->root;
    size_t in_elems = 0, out_elems = 0; /* sizes of the send and receive buffers */
    switch (k->kind) {
    case C_ALLREDUCE:
    case C_REDUCE:
    case C_BROADCAST:
    case C_SENDRECV: in_elems = out_elems = n; break;
    case C_ALLGATHER:
    case C_GATHER:
        in_elems = n;
        out_elems = pn;
        break;
    case C_SCATTER:
        in_elems = pn;
        out_elems = n;
        break;
    case C_REDUCE_SCATTER:
        in_elems = pn;
        out_elems = n;
        break;
    case C_ALLTOALL: in_elems = out_elems = pn; break;
    }
    if (k->kind == C_BROADCAST || k->kind == C_SENDRECV) k->inplace = k->kind == C_BROADCAST;
    /* The buffer a non-root never uses: gather's and reduce's receive, scatter's send. */
    int unused_out = !root_me && (k->kind == C_GATHER || k->kind == C_REDUCE);
    int unused_in = !root_me && k->kind == C_SCATTER;
    if (!(k->null_unused && (unused_out || unused_in))) k->null_unused = 0;

    if (k->inplace) {
        /* One buffer, sized for the larger side; in-place layouts as hoop.h defines them. */
        size_t big = in_elems > out_elems ? in_elems : out_elems;
        k->b_elems = big + GUARD;
        k->b = malloc(k->b_elems * es);
        if (k->b == NULL) return 0;
        memset(k->b, SENT_BYTE, k->b_elems * es);
        k->sarg = k->rarg = k->b;
        switch (k->kind) {
        case C_BROADCAST:
            if (root_me)
                for (size_t i = 0; i < n; i++) rc_st(k->b, i, es, input(s, k, me, i));
            break;
        case C_ALLGATHER:
        case C_GATHER:
            for (size_t i = 0; i < n; i++) rc_st(k->b, (size_t)me * n + i, es, input(s, k, me, i));
            k->sarg = k->b + (size_t)me * n * es;
            if (!root_me && k->kind == C_GATHER) k->rarg = k->null_unused ? NULL : k->b;
            break;
        case C_SCATTER:
            if (root_me) {
                for (size_t i = 0; i < pn; i++) rc_st(k->b, i, es, input(s, k, me, i));
                k->rarg = k->b + (size_t)me * n * es;
            } else {
                k->sarg = k->null_unused ? NULL
                                         : k->b; /* in place only means something at the root */
            }
            break;
        default:
            for (size_t i = 0; i < in_elems; i++) rc_st(k->b, i, es, input(s, k, me, i));
            break;
        }
        return 1;
    }
    k->a_elems = in_elems;
    k->b_elems = out_elems + GUARD;
    k->a = malloc(in_elems * es + 1);
    k->b = malloc(k->b_elems * es);
    if (k->a == NULL || k->b == NULL) return 0;
    memset(k->b, SENT_BYTE, k->b_elems * es);
    for (size_t i = 0; i < in_elems; i++)
        rc_st(k->a, i, es, unused_in ? sentinel(es) : input(s, k, me, i));
    k->sarg = unused_in && k->null_unused ? NULL : k->a;
    k->rarg = unused_out && k->null_unused ? NULL : k->b;
    return 1;
}

static hoop_result_t post(soak_t *s, call_t *k, int nb)
{
    hoop_comm_t *c = s->c;
    int p = s->p, me = s->me;
    hoop_request_t **q = nb ? &k->rq[0] : NULL;
    size_t n = k->n;
    hoop_dtype_t dt = k->dt;
    switch (k->kind) {
    case C_ALLREDUCE: {
        hoop_result_t rc = hoop_comm_set_algo(c, ALGO[k->algo]);
        if (rc != HOOP_OK) return rc;
        return nb ? hoop_iallreduce(c, k->sarg, k->rarg, n, dt, k->op, q)
                  : hoop_allreduce(c, k->sarg, k->rarg, n, dt, k->op);
    }
    case C_BROADCAST:
        return nb ? hoop_ibroadcast(c, k->rarg, n, dt, k->root, q)
                  : hoop_broadcast(c, k->rarg, n, dt, k->root);
    case C_REDUCE:
        return nb ? hoop_ireduce(c, k->sarg, k->rarg, n, dt, k->op, k->root, q)
                  : hoop_reduce(c, k->sarg, k->rarg, n, dt, k->op, k->root);
    case C_ALLGATHER:
        return nb ? hoop_iallgather(c, k->sarg, k->rarg, n, dt, q)
                  : hoop_allgather(c, k->sarg, k->rarg, n, dt);
    case C_GATHER:
        return nb ? hoop_igather(c, k->sarg, k->rarg, n, dt, k->root, q)
                  : hoop_gather(c, k->sarg, k->rarg, n, dt, k->root);
    case C_SCATTER:
        return nb ? hoop_iscatter(c, k->sarg, k->rarg, n, dt, k->root, q)
                  : hoop_scatter(c, k->sarg, k->rarg, n, dt, k->root);
    case C_REDUCE_SCATTER:
        return nb ? hoop_ireduce_scatter(c, k->sarg, k->rarg, n, dt, k->op, q)
                  : hoop_reduce_scatter(c, k->sarg, k->rarg, n, dt, k->op);
    case C_ALLTOALL:
        return nb ? hoop_ialltoall(c, k->sarg, k->rarg, n, dt, q)
                  : hoop_alltoall(c, k->sarg, k->rarg, n, dt);
    case C_BARRIER: return nb ? hoop_ibarrier(c, q) : hoop_barrier(c);
    case C_SENDRECV: {
        if (p == 1) return HOOP_OK; /* no other rank to talk to */
        int to = (me + k->shift) % p, from = (me + p - k->shift) % p;
        if (nb) {
            hoop_result_t rc = hoop_irecv(c, k->rarg, n, dt, from, &k->rq[0]);
            return rc != HOOP_OK ? rc : hoop_isend(c, k->sarg, n, dt, to, &k->rq[1]);
        }
        /* Blocking: in each cycle of the shift, its lowest rank sends first, the rest receive
         * first, so a send never waits on a rank that is itself sending. */
        int g = p, b2 = k->shift;
        while (b2 != 0) {
            int t = g % b2;
            g = b2;
            b2 = t;
        }
        hoop_result_t rc;
        if (me < g) {
            rc = hoop_send(c, k->sarg, n, dt, to);
            return rc != HOOP_OK ? rc : hoop_recv(c, k->rarg, n, dt, from);
        }
        rc = hoop_recv(c, k->rarg, n, dt, from);
        return rc != HOOP_OK ? rc : hoop_send(c, k->sarg, n, dt, to);
    }
    }
    return HOOP_ERR_INTERNAL;
}

/* Compares buf[first, first+count) with want(i); counts and shows what differs. */
#define EXPECT_RANGE(s, k, what, buf, first, count, want_expr)                                     \
    do {                                                                                           \
        for (size_t i = 0; i < (count); i++) {                                                     \
            uint64_t got_ = rc_ld((buf), (first) + i, (k)->es), want_ = (want_expr);               \
            if (got_ != want_) wrong((s), (k), (what), (first) + i, got_, want_);                  \
        }                                                                                          \
        (s)->elements += (long)(count);                                                            \
    } while (0)

static void check(soak_t *s, const call_t *k)
{
    int p = s->p, me = s->me, root_me = me == k->root;
    size_t n = k->n, pn = (size_t)p * n, es = k->es;
    const unsigned char *b = k->b;
    uint64_t sent = sentinel(es);
    if (k->kind == C_BARRIER) return;
    switch (k->kind) {
    case C_ALLREDUCE: EXPECT_RANGE(s, k, "result", b, 0, n, reduced(s, k, i)); break;
    case C_REDUCE:
        if (root_me)
            EXPECT_RANGE(s, k, "result", b, 0, n, reduced(s, k, i));
        else if (!k->inplace && k->rarg != NULL)
            EXPECT_RANGE(s, k, "unused recvbuf", b, 0, n, sent);
        break;
    case C_BROADCAST: EXPECT_RANGE(s, k, "result", b, 0, n, input(s, k, k->root, i)); break;
    case C_ALLGATHER:
        EXPECT_RANGE(s, k, "result", b, 0, pn, input(s, k, (int)(i / n), i % n));
        break;
    case C_GATHER:
        if (root_me)
            EXPECT_RANGE(s, k, "result", b, 0, pn, input(s, k, (int)(i / n), i % n));
        else if (!k->inplace && k->rarg != NULL)
            EXPECT_RANGE(s, k, "unused recvbuf", b, 0, pn, sent);
        break;
    case C_SCATTER:
        if (k->inplace && root_me) /* the whole send buffer, its own block included, unchanged */
            EXPECT_RANGE(s, k, "in-place buffer", b, 0, pn, input(s, k, me, i));
        else
            EXPECT_RANGE(s, k, "result", b, 0, n, input(s, k, k->root, (size_t)me * n + i));
        break;
    case C_REDUCE_SCATTER:
        EXPECT_RANGE(s, k, "result", b, 0, n, reduced(s, k, (size_t)me * n + i));
        break;
    case C_ALLTOALL:
        EXPECT_RANGE(s, k, "result", b, 0, pn, input(s, k, (int)(i / n), (size_t)me * n + i % n));
        break;
    case C_SENDRECV:
        if (p > 1) EXPECT_RANGE(s, k, "result", b, 0, n, input(s, k, (me + p - k->shift) % p, i));
        break;
    }
    /* Nothing written past the end. */
    if (b != NULL) EXPECT_RANGE(s, k, "guard", b, k->b_elems - GUARD, (size_t)GUARD, sent);
    /* Send buffers are read-only. */
    if (!k->inplace && k->a != NULL && !(k->kind == C_SCATTER && !root_me))
        EXPECT_RANGE(s, k, "sendbuf", k->a, 0, k->a_elems, input(s, k, me, i));
}

static void release(call_t *k)
{
    free(k->a);
    free(k->b);
    k->a = k->b = NULL;
}

static int failed_call(soak_t *s, const call_t *k, hoop_result_t rc)
{
    char d[200];
    describe(k, d, sizeof d);
    printf("rank %d: FAIL %s: %s: %s\n", s->me, d, hoop_error_string(rc),
           hoop_comm_last_error(s->c));
    fflush(stdout);
    return 1;
}

int main(int argc, char **argv)
{
    long ncalls = 10000;
    uint64_t seed = 20261129;
    soak_t s = {.max_count = 65537};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--verbose") == 0)
            s.verbose = 1;
        else if (v == NULL)
            goto usage;
        else if (strcmp(a, "--calls") == 0)
            ncalls = atol(argv[++i]);
        else if (strcmp(a, "--seed") == 0)
            seed = strtoull(argv[++i], NULL, 10);
        else if (strcmp(a, "--max-count") == 0)
            s.max_count = (size_t)strtoull(argv[++i], NULL, 10);
        else if (strcmp(a, "--transport") == 0)
            setenv("HOOP_TRANSPORT", argv[++i], 1);
        else
            goto usage;
    }
    if (ncalls < 0 || s.max_count == 0) goto usage;

    int init = test_init_from_env(&s.c, "hoop_init");
    if (init != 0) return init;
    hoop_result_t rc;
    s.me = hoop_comm_rank(s.c);
    s.p = hoop_comm_size(s.c);
    s.rng = seed;
    double t0 = now_s();
    int broken = 0;
    call_t batch[MAX_BATCH];
    for (long no = 0; no < ncalls && !broken;) {
        /* Half the time one blocking call, otherwise a batch of nonblocking ones. */
        int nb = (int)(draw(&s) & 1);
        int m = nb ? 1 + (int)(draw(&s) % MAX_BATCH) : 1;
        if (m > ncalls - no) m = (int)(ncalls - no);
        int order = (int)(draw(&s) % 2); /* wait in posting order or in reverse */
        int made = 0;
        for (; made < m; made++) {
            if (!draw_call(&s, &batch[made], (uint64_t)(no + made))) {
                printf("rank %d: FAIL out of memory\n", s.me);
                broken = 1;
                break;
            }
            rc = post(&s, &batch[made], nb);
            if (rc != HOOP_OK) {
                broken = failed_call(&s, &batch[made], rc);
                made++;
                break;
            }
        }
        for (int j = 0; j < made && nb; j++) {
            call_t *k = &batch[order ? made - 1 - j : j];
            for (int r = 0; r < 2; r++) {
                if (k->rq[r] == NULL) continue;
                hoop_result_t w = hoop_wait(k->rq[r]);
                k->rq[r] = NULL;
                if (w != HOOP_OK && !broken) broken = failed_call(&s, k, w);
            }
        }
        for (int j = 0; j < made; j++) {
            if (!broken) {
                check(&s, &batch[j]);
                s.calls++;
                s.per_kind[batch[j].kind]++;
                s.nonblocking += nb;
                s.inplace += batch[j].inplace;
            }
            release(&batch[j]);
        }
        no += m;
        if (s.verbose && s.me == 0 && no % 1000 < (long)m)
            printf("%ld calls, %.1f s\n", no, now_s() - t0);
    }
    double dt = now_s() - t0;
    hoop_stats_t st = {0};
    hoop_comm_stats(s.c, &st);
    hoop_comm_destroy(s.c);
    if (s.me == 0 || s.wrong > 0 || broken) {
        printf("rank %d of %d: %ld calls (", s.me, s.p, s.calls);
        for (int k = 0; k < C_COUNT; k++)
            printf("%s%s %ld", k ? ", " : "", test_coll_name[k], s.per_kind[k]);
        printf("), %ld nonblocking, %ld in place; %ld elements checked, %ld wrong; %.1f MB sent; "
               "%.1f s\n",
               s.nonblocking, s.inplace, s.elements, s.wrong, (double)st.bytes_sent / 1e6, dt);
        printf("FIGURES soak ranks=%d seed=%" PRIu64 " calls=%ld elements=%ld wrong=%ld "
               "mb_sent=%.1f seconds=%.1f%s\n",
               s.p, seed, s.calls, s.elements, s.wrong, (double)st.bytes_sent / 1e6, dt,
               broken ? " BROKEN" : "");
    }
    return s.wrong > 0 || broken;
usage:
    fprintf(stderr, "usage: hooprun -n N soak [--calls K] [--seed S] [--max-count C] "
                    "[--transport T] [--verbose]\n");
    return 2;
}
