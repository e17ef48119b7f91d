/*
 * Multi-process correctness test of the public API, run as every rank under hooprun:
 *
 *   hooprun -n N coll_test [--mode MODE] [--colls LIST] [--roots all|ends]
 *                          [--large-dtypes LIST|none] [--large-ops LIST] [--large-roots ends|last]
 *                          [--nreq K] [--late-rank R] [--device MODULE [--stream]
 *                          [--host-rank R] [--expect-path ipc|staged|ipc-by-host]] [--quick]
 *                          [--verbose]
 *
 * MODE: colls (default: every collective x dtype x op x root x count x in/out of place), split,
 * nonblocking, init-env, init-tcp, init-file, late, lines (every size around the shared area's
 * line boundaries).
 *
 * Every rank fills its inputs from a deterministic function of (rank, index, dtype, call number),
 * so every rank can compute every expected result on its own with a naive reference and compare bit
 * for bit. Inputs are chosen so that results are exact in every dtype whatever the reduction order:
 * small integers for SUM/AVG on floats, powers of two for PROD on floats, anything for integers
 * (the reference wraps around explicitly) and for MIN/MAX.
 *
 * --device MODULE: the collectives' buffers are device memory of that CUDA module (the test double
 * tests/cuda/double, or libhoop-cuda.so on a GPU): each call's inputs are filled on the host and
 * copied to device twins, the outputs copied back before they are checked.
 * --stream (with --device): every communicator's calls are ordered on one stream of the module
 * (hoop_comm_set_stream), and the inputs are copied to the device, and the outputs back, by
 * asynchronous copies on that stream, queued just before and just after each call; only then is
 * the stream waited for. The double delays every operation on a stream at random, so a call
 * that did not wait for its inputs, or a stream that did not wait for the call, gives wrong data.
 * --host-rank R (with --device): world rank R keeps host buffers, the others device buffers.
 * --expect-path ipc|staged: every all-reduce, reduce, broadcast, all-gather and reduce-scatter
 * with a count must (ipc) or must not (staged) have gone through the CUDA IPC path, as its
 * schedule's trace lines tell. ipc-by-host (with --fake-hosts and --host-rank): staged on the
 * fake host of the host rank, ipc on the others (each host of the hierarchical stages decides
 * alone).
 */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hoop.h"
#include "../../common/refcheck.h"
#include "../common/colls.h"
#include "../common/testing.h"
#include "../cuda/devbuf.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the reference encodes elements little-endian"
#endif

#define GUARD 16       /* sentinel elements after every receive buffer, to catch overruns */
#define SENTINEL 0xA5u /* byte pattern of buffers that must not be written */
#define MAX_SHOWN 12   /* mismatch lines printed per communicator */
#define LARGE_COUNT ((size_t)1048579) /* 1 MiB + 3 elements */
#define MAX_NREQ 256                  /* nonblocking calls outstanding at once, at most */

/* ---- dtypes, independent of the library's tables ---- */

typedef struct dt_info {
    const char *name;
    size_t size;
} dt_info_t;

static const dt_info_t DT[HOOP_DTYPE_COUNT] = {
    [HOOP_INT8] = {"int8", 1},       [HOOP_UINT8] = {"uint8", 1},
    [HOOP_INT32] = {"int32", 4},     [HOOP_UINT32] = {"uint32", 4},
    [HOOP_INT64] = {"int64", 8},     [HOOP_UINT64] = {"uint64", 8},
    [HOOP_FLOAT16] = {"float16", 2}, [HOOP_BFLOAT16] = {"bfloat16", 2},
    [HOOP_FLOAT32] = {"float32", 4}, [HOOP_FLOAT64] = {"float64", 8},
};

static const char *const OP_NAME[HOOP_OP_COUNT] = {"sum", "prod", "min", "max", "avg"};

/* ---- the collectives under test ---- */

typedef struct coll_info { /* by enum test_coll, whose names are test_coll_name */
    int has_op;
    int has_root;
    unsigned variants; /* bit 0: out of place, bit 1: in place */
} coll_info_t;

static const coll_info_t COLL[C_COUNT] = {
    [C_ALLREDUCE] = {1, 0, 3},      [C_BROADCAST] = {0, 1, 2}, [C_REDUCE] = {1, 1, 3},
    [C_ALLGATHER] = {0, 0, 3},      [C_GATHER] = {0, 1, 3},    [C_SCATTER] = {0, 1, 3},
    [C_REDUCE_SCATTER] = {1, 0, 3}, [C_ALLTOALL] = {0, 0, 3},  [C_BARRIER] = {0, 0, 1},
    [C_SENDRECV] = {0, 0, 1},
};

#define ALL_COLLS ((1u << C_COUNT) - 1)
#define ALL_DTYPES ((1u << HOOP_DTYPE_COUNT) - 1)
#define ALL_OPS ((1u << HOOP_OP_COUNT) - 1)
#define BIT(x) (1u << (x))

static uint64_t sentinel(size_t es) { return 0xA5A5A5A5A5A5A5A5ull & rc_width_mask(es); }

/* ---- inputs ---- */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* Seeds every input of `rank` in call `call`. */
static uint64_t gen_seed(uint64_t call, int rank, hoop_dtype_t dt)
{
    return mix64(call * 0x9e3779b97f4a7c15ull + (uint64_t)rank * 0x632be59bd9b4e019ull +
                 (uint64_t)dt);
}

/* The input element idx of the rank seeded `seed`, in a communicator of `size` ranks. `tiny` moves
 * float16/bfloat16 sums into the subnormal range, where averages over an even rank count produce
 * exact ties: the round-to-nearest-even of the library's conversions is then visible. */
static uint64_t gen(hoop_dtype_t dt, hoop_op_t op, int reducing, int size, uint64_t seed,
                    size_t idx, int tiny)
{
    static const double prod_vals[4] = {1.0, 2.0, -1.0, 0.5};
    const dt_info_t *t = &DT[dt];
    /* One cheap mixing round per element: the checks of large calls generate a lot of them. */
    uint64_t h = (seed ^ (uint64_t)idx) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    if (!reducing) return h & rc_width_mask(t->size); /* any bits, NaN payloads included */
    if (!rc_is_float(dt)) {
        /* Odd factors keep products from collapsing to zero. */
        if (op == HOOP_PROD && idx % 4 != 0) h |= 1;
        return h & rc_width_mask(t->size);
    }
    double v;
    switch (op) {
    case HOOP_SUM:
    case HOOP_AVG: {
        /* |partial sums| <= 256: exact in bfloat16 (8-bit significand) and everything wider. */
        int64_t m = 256 / size;
        v = (double)((int64_t)(h % (uint64_t)(2 * m + 1)) - m);
        /* Multiples of the smallest subnormal: sums stay exact (|sum| <= 256 steps). */
        if (tiny && dt == HOOP_FLOAT16) v *= 0x1p-24;
        if (tiny && dt == HOOP_BFLOAT16) v *= 0x1p-133;
        break;
    }
    case HOOP_PROD: v = prod_vals[h % 4]; break; /* |product| = 2^k with |k| <= size */
    default:
        v = (double)(int32_t)(uint32_t)(h >> 32) / 65536.0; /* never rounds to a zero */
        if (v == 0.0) v = 1.0;
        break;
    }
    return rc_fenc(dt, v);
}

/* ---- test context ---- */

typedef struct tctx {
    hoop_comm_t *comm;
    int rank, size;
    int world_rank;
    char label[48];
    char marker_dir[256]; /* shared directory for the barrier check ("" = no check) */
    uint64_t call;        /* calls made so far: part of every input */
    long checks, fails;
    int shown;
    int broken;     /* a call failed: the communicator cannot be trusted any more */
    int verbose;    /* print every call with its timings */
    long ipc_lines; /* --expect-path: trace lines of the CUDA IPC path so far */
} tctx_t;

static void check(tctx_t *t, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void check(tctx_t *t, int ok, const char *fmt, ...)
{
    t->checks++;
    if (ok) return;
    t->fails++;
    if (t->shown >= MAX_SHOWN) return;
    t->shown++;
    va_list ap;
    va_start(ap, fmt);
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    printf("%s: FAIL %s\n", t->label, line);
    fflush(stdout);
}

/* --expect-path: which path the device calls of the collectives that have a CUDA IPC path must
 * take (EXPECT_IPC or EXPECT_STAGED), told by the schedule's trace lines; 0: not checked. */
enum { EXPECT_IPC = 1, EXPECT_STAGED = 2 };
static int g_expect;

static void count_ipc_lines(void *ctx, const char *line)
{
    tctx_t *t = ctx;
    /* data put in an area: by the IPC path, or by the hierarchical stages inside a host */
    if (strstr(line, " ipc step 1: ") != NULL || strstr(line, " step 1: over CUDA IPC") != NULL)
        t->ipc_lines++;
}

/* A context for comm; a child of parent (a split) shares its marker directory and verbosity. */
static void ctx_init(tctx_t *t, hoop_comm_t *comm, int world_rank, const char *label,
                     const tctx_t *parent)
{
    memset(t, 0, sizeof *t);
    t->comm = comm;
    t->rank = hoop_comm_rank(comm);
    t->size = hoop_comm_size(comm);
    t->world_rank = world_rank;
    snprintf(t->label, sizeof t->label, "%s", label);
    if (parent) {
        memcpy(t->marker_dir, parent->marker_dir, sizeof t->marker_dir);
        t->verbose = parent->verbose;
    }
    if (g_expect && comm != NULL) hoop_comm_set_trace(comm, count_ipc_lines, t);
}

/* ---- one call ---- */

typedef struct tcase {
    int coll;
    hoop_dtype_t dt;
    hoop_op_t op;
    size_t count;
    int root; /* -1 when the collective has none */
    int inplace;
    int null_unused; /* non-roots pass NULL for the buffer they do not use */
    uint64_t call;
    size_t es;
    unsigned char *sbuf, *rbuf; /* owned */
    size_t s_elems;
    /* The region checked after the call: rbuf, or sbuf for an in-place scatter at the root. */
    unsigned char *obuf;
    size_t o_elems;
    const void *sarg;
    void *rarg;
    hoop_request_t *req[2];
    uint64_t *seeds;              /* per rank of the communicator */
    unsigned char *dsbuf, *dobuf; /* --device: the twins of sbuf and obuf */
} tcase_t;

static int g_device;   /* --device: buffers in device memory (devbuf.h) */
static void *g_stream; /* --stream: the stream every communicator's calls are ordered on */

/* --stream: comm's device calls are ordered on the test's stream. */
static void use_stream(hoop_comm_t *comm)
{
    if (g_stream != NULL && comm != NULL) hoop_comm_set_stream(comm, g_stream);
}

static void describe(const tcase_t *tc, char *out, size_t len)
{
    snprintf(out, len, "call %" PRIu64 " %s %s %s count %zu root %d %s%s", tc->call,
             test_coll_name[tc->coll], DT[tc->dt].name,
             COLL[tc->coll].has_op ? OP_NAME[tc->op] : "-", tc->count, tc->root,
             tc->inplace ? "in-place" : "out-of-place", tc->null_unused ? " null-unused" : "");
}

static uint64_t inval(const tctx_t *t, const tcase_t *tc, int rank, size_t idx)
{
    return gen(tc->dt, tc->op, COLL[tc->coll].has_op, t->size, tc->seeds[rank], idx,
               (int)(tc->call & 1));
}

static uint64_t reduce_ref(const tctx_t *t, const tcase_t *tc, size_t idx)
{
    rc_acc_t a = {0};
    size_t es = DT[tc->dt].size;
    for (int q = 0; q < t->size; q++) rc_acc_add(&a, tc->dt, es, tc->op, inval(t, tc, q, idx));
    return rc_acc_result(&a, tc->dt, es, tc->op, t->size);
}

static unsigned char *alloc_elems(size_t n, size_t es)
{
    size_t bytes = n * es;
    unsigned char *p = malloc(bytes ? bytes : 1);
    if (p) memset(p, SENTINEL, bytes);
    return p;
}

static void fill_input(const tctx_t *t, const tcase_t *tc, unsigned char *buf, size_t first,
                       size_t n, size_t idx0)
{
    for (size_t i = 0; i < n; i++) rc_st(buf, first + i, tc->es, inval(t, tc, t->rank, idx0 + i));
}

static void barrier_marker(const tctx_t *t, const tcase_t *tc, int rank, char *out, size_t len)
{
    snprintf(out, len, "%s/%s.%" PRIu64 ".%d", t->marker_dir, t->label, tc->call, rank);
}

/* Allocates and fills the buffers of tc; returns 0 when out of memory. */
static int tcase_prepare_host(tctx_t *t, tcase_t *tc)
{
    int n = t->size, r = t->rank;
    size_t c = tc->count, nc = (size_t)n * c, es = DT[tc->dt].size;
    int nonroot = COLL[tc->coll].has_root && r != tc->root;
    tc->es = es;
    tc->sbuf = tc->rbuf = tc->obuf = NULL;
    tc->req[0] = tc->req[1] = NULL;
    tc->seeds = malloc((size_t)n * sizeof *tc->seeds);
    if (!tc->seeds) return 0;
    for (int q = 0; q < n; q++) tc->seeds[q] = gen_seed(tc->call, q, tc->dt);
    switch (tc->coll) {
    case C_ALLREDUCE:
    case C_REDUCE:
    case C_REDUCE_SCATTER:
    case C_ALLTOALL: {
        size_t in = (tc->coll == C_REDUCE_SCATTER || tc->coll == C_ALLTOALL) ? nc : c;
        size_t out = tc->coll == C_REDUCE_SCATTER ? c : in;
        if (tc->inplace) {
            tc->rbuf = alloc_elems(in + GUARD, es);
            if (!tc->rbuf) return 0;
            fill_input(t, tc, tc->rbuf, 0, in, 0);
            tc->sarg = tc->rarg = tc->rbuf;
            tc->o_elems = in + GUARD;
        } else {
            tc->sbuf = alloc_elems(in, es);
            tc->s_elems = in;
            if (!tc->sbuf) return 0;
            fill_input(t, tc, tc->sbuf, 0, in, 0);
            tc->sarg = tc->sbuf;
            if (!(tc->null_unused && nonroot)) {
                tc->rbuf = alloc_elems(out + GUARD, es);
                if (!tc->rbuf) return 0;
                tc->o_elems = out + GUARD;
            }
            tc->rarg = tc->rbuf;
        }
        tc->obuf = tc->rbuf;
        return 1;
    }
    case C_BROADCAST:
        tc->rbuf = alloc_elems(c + GUARD, es);
        if (!tc->rbuf) return 0;
        if (r == tc->root) fill_input(t, tc, tc->rbuf, 0, c, 0);
        tc->sarg = tc->rarg = tc->obuf = tc->rbuf;
        tc->o_elems = c + GUARD;
        return 1;
    case C_ALLGATHER:
    case C_GATHER:
        if (tc->inplace) {
            tc->rbuf = alloc_elems(nc + GUARD, es);
            if (!tc->rbuf) return 0;
            fill_input(t, tc, tc->rbuf, (size_t)r * c, c, 0);
            tc->sarg = tc->rbuf + (size_t)r * c * es; /* NCCL's in-place convention */
            tc->o_elems = nc + GUARD;
        } else {
            tc->sbuf = alloc_elems(c, es);
            tc->s_elems = c;
            if (!tc->sbuf) return 0;
            fill_input(t, tc, tc->sbuf, 0, c, 0);
            tc->sarg = tc->sbuf;
            if (!(tc->null_unused && nonroot)) {
                tc->rbuf = alloc_elems(nc + GUARD, es);
                if (!tc->rbuf) return 0;
                tc->o_elems = nc + GUARD;
            }
        }
        tc->rarg = tc->obuf = tc->rbuf;
        return 1;
    case C_SCATTER:
        if (!nonroot && tc->inplace) {
            /* The root receives its own block in place: recvbuf = sendbuf + root * count. */
            tc->sbuf = alloc_elems(nc + GUARD, es);
            if (!tc->sbuf) return 0;
            fill_input(t, tc, tc->sbuf, 0, nc, 0);
            tc->sarg = tc->sbuf;
            tc->rarg = tc->sbuf + (size_t)tc->root * c * es;
            tc->obuf = tc->sbuf;
            tc->o_elems = nc + GUARD;
            tc->sbuf = NULL; /* checked as the output region; freed through obuf */
            return 1;
        }
        if (!(tc->null_unused && nonroot)) {
            tc->sbuf = alloc_elems(nc, es); /* a non-root's stays all sentinel */
            tc->s_elems = nc;
            if (!tc->sbuf) return 0;
            if (!nonroot) fill_input(t, tc, tc->sbuf, 0, nc, 0);
        }
        tc->sarg = tc->sbuf;
        tc->rbuf = alloc_elems(c + GUARD, es);
        if (!tc->rbuf) return 0;
        tc->rarg = tc->obuf = tc->rbuf;
        tc->o_elems = c + GUARD;
        return 1;
    case C_SENDRECV:
        tc->sbuf = alloc_elems(c, es);
        tc->s_elems = c;
        tc->rbuf = alloc_elems(c + GUARD, es);
        if (!tc->sbuf || !tc->rbuf) return 0;
        fill_input(t, tc, tc->sbuf, 0, c, 0);
        tc->sarg = tc->sbuf;
        tc->rarg = tc->obuf = tc->rbuf;
        tc->o_elems = c + GUARD;
        return 1;
    case C_BARRIER:
        if (t->marker_dir[0]) {
            /* The last rank arrives late: no rank may leave before its marker exists. */
            if (r == n - 1 && n > 1) {
                struct timespec ts = {0, 100 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
            char path[512];
            barrier_marker(t, tc, r, path, sizeof path);
            FILE *f = fopen(path, "w");
            if (f) fclose(f);
            check(t, f != NULL, "cannot create barrier marker %s: %s", path, strerror(errno));
        }
        return 1;
    default: return 0;
    }
}

/* The device address of host address p inside sbuf or obuf (rbuf is NULL or obuf). */
static void *twin(const tcase_t *tc, const void *p)
{
    const unsigned char *q = p;
    if (q == NULL) return NULL;
    if (tc->obuf && q >= tc->obuf && q <= tc->obuf + tc->o_elems * tc->es)
        return tc->dobuf + (q - tc->obuf);
    if (tc->sbuf && q >= tc->sbuf && q <= tc->sbuf + tc->s_elems * tc->es)
        return tc->dsbuf + (q - tc->sbuf);
    return (void *)p;
}

static int tcase_prepare(tctx_t *t, tcase_t *tc)
{
    tc->dsbuf = tc->dobuf = NULL;
    if (!tcase_prepare_host(t, tc)) return 0;
    if (!g_device || tc->coll == C_BARRIER) return 1;
    /* Sentinels and guards travel too: the device copy is checked whole when it comes back. */
    if (tc->sbuf) {
        tc->dsbuf = devbuf_alloc(tc->s_elems * tc->es);
        if (g_stream)
            devbuf_copy_async(tc->dsbuf, tc->sbuf, tc->s_elems * tc->es, g_stream);
        else
            devbuf_copy(tc->dsbuf, tc->sbuf, tc->s_elems * tc->es);
    }
    if (tc->obuf) {
        tc->dobuf = devbuf_alloc(tc->o_elems * tc->es);
        if (g_stream)
            devbuf_copy_async(tc->dobuf, tc->obuf, tc->o_elems * tc->es, g_stream);
        else
            devbuf_copy(tc->dobuf, tc->obuf, tc->o_elems * tc->es);
    }
    tc->sarg = twin(tc, tc->sarg);
    tc->rarg = twin(tc, tc->rarg);
    return 1;
}

/* --device: what the call left in device memory, back into the host buffers checked. */
static void tcase_from_device(tcase_t *tc)
{
    if (g_stream) { /* queued after the call on its stream; then the stream is waited for */
        if (tc->dsbuf) devbuf_copy_async(tc->sbuf, tc->dsbuf, tc->s_elems * tc->es, g_stream);
        if (tc->dobuf) devbuf_copy_async(tc->obuf, tc->dobuf, tc->o_elems * tc->es, g_stream);
        if (tc->dsbuf || tc->dobuf) devbuf_sync(g_stream);
        return;
    }
    if (tc->dsbuf) devbuf_copy(tc->sbuf, tc->dsbuf, tc->s_elems * tc->es);
    if (tc->dobuf) devbuf_copy(tc->obuf, tc->dobuf, tc->o_elems * tc->es);
}

static void tcase_free(tcase_t *tc)
{
    devbuf_free(tc->dsbuf);
    devbuf_free(tc->dobuf);
    tc->dsbuf = tc->dobuf = NULL;
    if (tc->obuf != tc->rbuf) free(tc->obuf);
    free(tc->sbuf);
    free(tc->rbuf);
    free(tc->seeds);
    tc->sbuf = tc->rbuf = tc->obuf = NULL;
    tc->seeds = NULL;
}

static hoop_result_t post_nb(tctx_t *t, tcase_t *tc)
{
    hoop_comm_t *c = t->comm;
    int n = t->size, r = t->rank;
    switch (tc->coll) {
    case C_ALLREDUCE:
        return hoop_iallreduce(c, tc->sarg, tc->rarg, tc->count, tc->dt, tc->op, &tc->req[0]);
    case C_BROADCAST: return hoop_ibroadcast(c, tc->rarg, tc->count, tc->dt, tc->root, &tc->req[0]);
    case C_REDUCE:
        return hoop_ireduce(c, tc->sarg, tc->rarg, tc->count, tc->dt, tc->op, tc->root,
                            &tc->req[0]);
    case C_ALLGATHER: return hoop_iallgather(c, tc->sarg, tc->rarg, tc->count, tc->dt, &tc->req[0]);
    case C_GATHER:
        return hoop_igather(c, tc->sarg, tc->rarg, tc->count, tc->dt, tc->root, &tc->req[0]);
    case C_SCATTER:
        return hoop_iscatter(c, tc->sarg, tc->rarg, tc->count, tc->dt, tc->root, &tc->req[0]);
    case C_REDUCE_SCATTER:
        return hoop_ireduce_scatter(c, tc->sarg, tc->rarg, tc->count, tc->dt, tc->op, &tc->req[0]);
    case C_ALLTOALL: return hoop_ialltoall(c, tc->sarg, tc->rarg, tc->count, tc->dt, &tc->req[0]);
    case C_BARRIER: return hoop_ibarrier(c, &tc->req[0]);
    case C_SENDRECV: {
        /* On a stream, each call starts after the one before it has ended, as NCCL's outside a
         * group: a ring of receives posted first would wait for itself. Even ranks send first. */
        int send_first = g_stream != NULL && r % 2 == 0;
        hoop_result_t e = HOOP_OK;
        if (send_first) e = hoop_isend(c, tc->sarg, tc->count, tc->dt, (r + 1) % n, &tc->req[1]);
        if (e == HOOP_OK)
            e = hoop_irecv(c, tc->rarg, tc->count, tc->dt, (r + n - 1) % n, &tc->req[0]);
        if (e != HOOP_OK || send_first) return e;
        return hoop_isend(c, tc->sarg, tc->count, tc->dt, (r + 1) % n, &tc->req[1]);
    }
    default: return HOOP_ERR_INTERNAL;
    }
}

static hoop_result_t tcase_wait(tcase_t *tc)
{
    hoop_result_t res = HOOP_OK;
    for (int i = 0; i < 2; i++) {
        if (!tc->req[i]) continue;
        hoop_result_t e = hoop_wait(tc->req[i]);
        tc->req[i] = NULL;
        if (res == HOOP_OK) res = e;
    }
    return res;
}

static hoop_result_t post_blocking(tctx_t *t, tcase_t *tc)
{
    hoop_comm_t *c = t->comm;
    int n = t->size, r = t->rank;
    switch (tc->coll) {
    case C_ALLREDUCE: return hoop_allreduce(c, tc->sarg, tc->rarg, tc->count, tc->dt, tc->op);
    case C_BROADCAST: return hoop_broadcast(c, tc->rarg, tc->count, tc->dt, tc->root);
    case C_REDUCE: return hoop_reduce(c, tc->sarg, tc->rarg, tc->count, tc->dt, tc->op, tc->root);
    case C_ALLGATHER: return hoop_allgather(c, tc->sarg, tc->rarg, tc->count, tc->dt);
    case C_GATHER: return hoop_gather(c, tc->sarg, tc->rarg, tc->count, tc->dt, tc->root);
    case C_SCATTER: return hoop_scatter(c, tc->sarg, tc->rarg, tc->count, tc->dt, tc->root);
    case C_REDUCE_SCATTER:
        return hoop_reduce_scatter(c, tc->sarg, tc->rarg, tc->count, tc->dt, tc->op);
    case C_ALLTOALL: return hoop_alltoall(c, tc->sarg, tc->rarg, tc->count, tc->dt);
    case C_BARRIER: return hoop_barrier(c);
    case C_SENDRECV: {
        /* Even ranks send first, odd ranks receive first: no cycle of blocked senders. */
        int to = (r + 1) % n, from = (r + n - 1) % n;
        hoop_result_t e;
        if (r % 2 == 0) {
            e = hoop_send(c, tc->sarg, tc->count, tc->dt, to);
            if (e == HOOP_OK) e = hoop_recv(c, tc->rarg, tc->count, tc->dt, from);
        } else {
            e = hoop_recv(c, tc->rarg, tc->count, tc->dt, from);
            if (e == HOOP_OK) e = hoop_send(c, tc->sarg, tc->count, tc->dt, to);
        }
        return e;
    }
    default: return HOOP_ERR_INTERNAL;
    }
}

/* Expected raw bits of element i = blk * count + off of the checked region; 0 when the element is
 * unspecified. */
static int out_expect(const tctx_t *t, const tcase_t *tc, size_t i, size_t blk, size_t off,
                      uint64_t *v)
{
    int n = t->size, r = t->rank, root = tc->root;
    size_t c = tc->count, nc = (size_t)n * c;
    *v = sentinel(tc->es);
    switch (tc->coll) {
    case C_ALLREDUCE:
        if (i < c) *v = reduce_ref(t, tc, i);
        return 1;
    case C_REDUCE:
        if (r == root) {
            if (i < c) *v = reduce_ref(t, tc, i);
        } else if (tc->inplace && i < c) {
            *v = inval(t, tc, r, i); /* a non-root's buffer is its input and stays so */
        }
        return 1;
    case C_REDUCE_SCATTER:
        if (i < c)
            *v = reduce_ref(t, tc, (size_t)r * c + i);
        else if (tc->inplace && i < nc)
            return 0; /* the rest of an in-place input is scratch */
        return 1;
    case C_BROADCAST:
        if (i < c) *v = inval(t, tc, root, i);
        return 1;
    case C_ALLGATHER:
        if (i < nc) *v = inval(t, tc, (int)blk, off);
        return 1;
    case C_GATHER:
        if (i < nc && (r == root || (tc->inplace && blk == (size_t)r)))
            *v = inval(t, tc, (int)blk, off);
        return 1;
    case C_SCATTER:
        if (r == root && tc->inplace) {
            if (i < nc) *v = inval(t, tc, root, i);
        } else if (i < c) {
            *v = inval(t, tc, root, (size_t)r * c + i);
        }
        return 1;
    case C_ALLTOALL:
        if (i < nc) *v = inval(t, tc, (int)blk, (size_t)r * c + off);
        return 1;
    case C_SENDRECV:
        if (i < c) *v = inval(t, tc, (r + n - 1) % n, i);
        return 1;
    default: return 0;
    }
}

/* What the separate send buffer must still hold after the call. */
static uint64_t send_expect(const tctx_t *t, const tcase_t *tc, size_t i)
{
    if (tc->coll == C_SCATTER && t->rank != tc->root) return sentinel(tc->es);
    return inval(t, tc, t->rank, i);
}

static void show_value(const tcase_t *tc, uint64_t raw, char *out, size_t len)
{
    const dt_info_t *d = &DT[tc->dt];
    if (rc_is_float(tc->dt))
        snprintf(out, len, "0x%0*" PRIx64 " (%.9g)", (int)(2 * d->size), raw, rc_fdec(tc->dt, raw));
    else if (rc_is_signed_int(tc->dt))
        snprintf(out, len, "0x%0*" PRIx64 " (%" PRId64 ")", (int)(2 * d->size), raw,
                 rc_sign_extend(raw, d->size));
    else
        snprintf(out, len, "0x%0*" PRIx64 " (%" PRIu64 ")", (int)(2 * d->size), raw, raw);
}

/* Compares a region element by element; reports the first few differences. */
static void check_region(tctx_t *t, const tcase_t *tc, const char *what, const unsigned char *buf,
                         size_t n, int is_send)
{
    long wrong = 0;
    char desc[200];
    describe(tc, desc, sizeof desc);
    size_t blk = 0, off = 0; /* i = blk * count + off, kept without dividing */
    for (size_t i = 0; i < n; i++, off++) {
        if (off == tc->count) {
            off = 0;
            blk++;
        }
        uint64_t want;
        if (is_send)
            want = send_expect(t, tc, i);
        else if (!out_expect(t, tc, i, blk, off, &want))
            continue;
        uint64_t got = rc_ld(buf, i, tc->es);
        if (got == want) continue;
        if (wrong < 3 && t->shown < MAX_SHOWN) {
            char g[64], w[64];
            show_value(tc, got, g, sizeof g);
            show_value(tc, want, w, sizeof w);
            t->shown++;
            printf("%s: MISMATCH %s: %s index %zu%s: got %s expected %s\n", t->label, desc, what, i,
                   (!is_send && i >= n - GUARD) ? " (guard)" : "", g, w);
        }
        wrong++;
    }
    t->checks++;
    if (wrong) {
        t->fails++;
        if (t->shown < MAX_SHOWN) {
            t->shown++;
            printf("%s: FAIL %s: %s has %ld wrong element(s) of %zu\n", t->label, desc, what, wrong,
                   n);
        }
        fflush(stdout);
    }
}

static void tcase_verify(tctx_t *t, tcase_t *tc)
{
    tcase_from_device(tc);
    if (tc->coll == C_BARRIER) {
        if (!t->marker_dir[0]) return;
        for (int q = 0; q < t->size; q++) {
            char path[512];
            struct stat sb;
            barrier_marker(t, tc, q, path, sizeof path);
            check(t, stat(path, &sb) == 0,
                  "call %" PRIu64 " barrier returned before rank %d arrived", tc->call, q);
        }
        return;
    }
    if (tc->obuf) check_region(t, tc, "recvbuf", tc->obuf, tc->o_elems, 0);
    if (tc->sbuf) check_region(t, tc, "sendbuf", tc->sbuf, tc->s_elems, 1);
}

static void call_failed(tctx_t *t, const tcase_t *tc, const char *how, hoop_result_t e)
{
    char desc[200];
    describe(tc, desc, sizeof desc);
    t->checks++;
    t->fails++;
    t->broken = 1;
    printf("%s: FAIL %s: %s returned %s: %s\n", t->label, desc, how, hoop_error_string(e),
           hoop_comm_last_error(t->comm));
    fflush(stdout);
}

/* Runs one blocking call and checks it. Returns 0 once the communicator is broken. */
static int run_case(tctx_t *t, tcase_t *tc)
{
    if (t->broken) return 0;
    tc->call = t->call++;
    if (!tcase_prepare(t, tc)) {
        tcase_free(tc);
        check(t, 0, "out of memory preparing call %" PRIu64, tc->call);
        t->broken = 1;
        return 0;
    }
    long ipc0 = t->ipc_lines;
    double t0 = now_s();
    hoop_result_t e = post_blocking(t, tc);
    double t1 = now_s();
    if (e != HOOP_OK)
        call_failed(t, tc, "the call", e);
    else
        tcase_verify(t, tc);
    int has_ipc = tc->coll == C_ALLREDUCE || tc->coll == C_REDUCE || tc->coll == C_BROADCAST ||
                  tc->coll == C_ALLGATHER || tc->coll == C_REDUCE_SCATTER;
    if (e == HOOP_OK && g_expect && has_ipc && tc->count > 0) {
        char desc[200];
        describe(tc, desc, sizeof desc);
        check(t, (t->ipc_lines > ipc0) == (g_expect == EXPECT_IPC), "%s took the %s path", desc,
              t->ipc_lines > ipc0 ? "CUDA IPC" : "staged");
    }
    if (t->verbose) {
        char desc[200];
        describe(tc, desc, sizeof desc);
        printf("%s: %s: call %.3f ms, check %.3f ms\n", t->label, desc, (t1 - t0) * 1e3,
               (now_s() - t1) * 1e3);
    }
    tcase_free(tc);
    return !t->broken;
}

/* ---- suites ---- */

typedef struct suite {
    unsigned colls, dtypes, ops;
    const size_t *counts;
    int ncounts;
    int roots; /* ROOTS_* */
    int null_unused;
} suite_t;

enum {
    ROOTS_ENDS, /* 0 and n-1 */
    ROOTS_ALL,  /* every root up to 4 ranks, then 0, 1, n/2 and n-1 */
    ROOTS_LAST  /* n-1 */
};

static int roots_of(const tctx_t *t, int mode, int *roots)
{
    int n = t->size, k = 0;
    int cand[4] = {0, 1, n / 2, n - 1}, ncand = 4;
    if (mode == ROOTS_ALL && n <= 4) {
        for (int i = 0; i < n; i++) roots[k++] = i;
        return k;
    }
    if (mode == ROOTS_ENDS) {
        cand[1] = n - 1;
        ncand = 2;
    } else if (mode == ROOTS_LAST) {
        cand[0] = n - 1;
        ncand = 1;
    }
    for (int i = 0; i < ncand; i++) {
        int dup = 0;
        for (int j = 0; j < k; j++) dup |= roots[j] == cand[i];
        if (!dup && cand[i] < n) roots[k++] = cand[i];
    }
    return k;
}

static void run_suite(tctx_t *t, const suite_t *s)
{
    int roots[4], nroots = roots_of(t, s->roots, roots);
    for (int coll = 0; coll < C_COUNT && !t->broken; coll++) {
        if (!(s->colls & BIT(coll))) continue;
        if (coll == C_SENDRECV && t->size < 2) continue; /* a ring needs another rank */
        const coll_info_t *ci = &COLL[coll];
        if (coll == C_BARRIER) {
            for (int k = 0; k < 3; k++) {
                tcase_t tc = {.coll = C_BARRIER, .dt = HOOP_UINT8, .root = -1};
                if (!run_case(t, &tc)) return;
            }
            continue;
        }
        for (int dt = 0; dt < HOOP_DTYPE_COUNT; dt++) {
            if (!(s->dtypes & BIT(dt))) continue;
            for (int op = 0; op < HOOP_OP_COUNT; op++) {
                if (ci->has_op ? !(s->ops & BIT(op)) : op != 0) continue;
                for (int ki = 0; ki < s->ncounts; ki++) {
                    for (int ri = 0; ri < (ci->has_root ? nroots : 1); ri++) {
                        for (int ip = 0; ip < 2; ip++) {
                            if (!(ci->variants & BIT(ip))) continue;
                            tcase_t tc = {.coll = coll,
                                          .dt = (hoop_dtype_t)dt,
                                          .op = (hoop_op_t)op,
                                          .count = s->counts[ki],
                                          .root = ci->has_root ? roots[ri] : -1,
                                          .inplace = ip};
                            if (!run_case(t, &tc)) return;
                            /* Non-roots may pass NULL for the buffer they do not use. */
                            if (s->null_unused && !ip &&
                                (coll == C_REDUCE || coll == C_GATHER || coll == C_SCATTER)) {
                                tc.null_unused = 1;
                                if (!run_case(t, &tc)) return;
                            }
                        }
                    }
                }
            }
        }
    }
}

/* Many nonblocking calls outstanding at once; waited from two threads, in reverse order. */
typedef struct waiter {
    tcase_t *cases;
    int ncases, parity;
    hoop_result_t res[MAX_NREQ];
} waiter_t;

static void *wait_cases(void *arg)
{
    waiter_t *w = arg;
    for (int i = w->ncases - 1; i >= 0; i--)
        if (i % 2 == w->parity) w->res[i] = tcase_wait(&w->cases[i]);
    return NULL;
}

static void run_nonblocking(tctx_t *t, int nreq)
{
    static const int colls[] = {C_ALLREDUCE, C_BROADCAST,      C_REDUCE,   C_ALLGATHER, C_GATHER,
                                C_SCATTER,   C_REDUCE_SCATTER, C_ALLTOALL, C_BARRIER,   C_SENDRECV};
    static const size_t counts[] = {0, 1, 7, 100, 1031, 4099};
    const int ncolls = (int)(sizeof colls / sizeof colls[0]);
    tcase_t *cases = calloc((size_t)nreq, sizeof *cases);
    waiter_t *w = calloc(2, sizeof *w);
    if (!cases || !w) {
        check(t, 0, "out of memory");
        free(cases);
        free(w);
        return;
    }
    int posted = 0;
    for (int i = 0; i < nreq && !t->broken; i++) {
        tcase_t *tc = &cases[i];
        tc->coll = colls[i % ncolls];
        if (tc->coll == C_SENDRECV && t->size < 2) tc->coll = C_ALLREDUCE;
        tc->dt = (hoop_dtype_t)((i / ncolls + 3 * i) % HOOP_DTYPE_COUNT);
        tc->op = (hoop_op_t)((i / 3) % HOOP_OP_COUNT);
        tc->count = counts[(i / 2) % 6];
        tc->root = COLL[tc->coll].has_root ? (i / ncolls) % t->size : -1;
        tc->inplace = (COLL[tc->coll].variants == 2) ||
                      ((COLL[tc->coll].variants & 2) && (i / ncolls) % 2);
        tc->call = t->call++;
        if (!tcase_prepare(t, tc)) {
            check(t, 0, "out of memory preparing call %" PRIu64, tc->call);
            t->broken = 1;
            break;
        }
        hoop_result_t e = post_nb(t, tc);
        if (e != HOOP_OK) {
            call_failed(t, tc, "posting", e);
            break;
        }
        posted = i + 1;
    }
    /* hoop_test must eventually report the first request done without anyone waiting. */
    if (posted > 0 && cases[0].req[0]) {
        int done = 0;
        double waited = 0;
        while (!done && waited < 30.0) {
            hoop_result_t e = hoop_test(cases[0].req[0], &done);
            if (e != HOOP_OK) {
                check(t, 0, "hoop_test returned %s", hoop_error_string(e));
                break;
            }
            if (!done) {
                struct timespec ts = {0, 1000 * 1000};
                nanosleep(&ts, NULL);
                waited += 0.001;
            }
        }
        check(t, done, "hoop_test never reported the first request done");
    }
    if (!t->broken) {
        /* A blocking call queues behind the outstanding ones. */
        tcase_t b = {
            .coll = C_ALLREDUCE, .dt = HOOP_FLOAT32, .op = HOOP_SUM, .count = 1031, .root = -1};
        run_case(t, &b);
    }
    for (int p = 0; p < 2; p++) {
        w[p].cases = cases;
        w[p].ncases = posted;
        w[p].parity = p;
    }
    pthread_t th;
    int threaded = pthread_create(&th, NULL, wait_cases, &w[1]) == 0;
    wait_cases(&w[0]);
    if (threaded)
        pthread_join(th, NULL);
    else
        wait_cases(&w[1]);
    for (int i = 0; i < posted; i++) {
        hoop_result_t e = w[i % 2].res[i];
        if (e != HOOP_OK)
            call_failed(t, &cases[i], "hoop_wait", e);
        else
            tcase_verify(t, &cases[i]);
    }
    for (int i = 0; i < nreq; i++) {
        tcase_wait(&cases[i]); /* requests posted before a failed one */
        tcase_free(&cases[i]);
    }
    free(cases);
    free(w);
}

/* Arguments that are wrong on their own fail locally and leave the communicator usable. */
static void run_invalid_args(tctx_t *t)
{
    hoop_comm_t *c = t->comm;
    int n = t->size;
    float a[4] = {1, 2, 3, 4}, b[4];
    struct {
        const char *what;
        hoop_result_t got;
    } cases[] = {
        {"allreduce with a bad dtype", hoop_allreduce(c, a, b, 4, HOOP_DTYPE_COUNT, HOOP_SUM)},
        {"allreduce with a bad op", hoop_allreduce(c, a, b, 4, HOOP_FLOAT32, HOOP_OP_COUNT)},
        {"allreduce with a NULL sendbuf", hoop_allreduce(c, NULL, b, 4, HOOP_FLOAT32, HOOP_SUM)},
        {"allreduce with a NULL communicator",
         hoop_allreduce(NULL, a, b, 4, HOOP_FLOAT32, HOOP_SUM)},
        {"broadcast to root = size", hoop_broadcast(c, a, 4, HOOP_FLOAT32, n)},
        {"reduce to root = -1", hoop_reduce(c, a, b, 4, HOOP_FLOAT32, HOOP_SUM, -1)},
        {"send to peer = size", hoop_send(c, a, 4, HOOP_FLOAT32, n)},
        {"recv from peer = -1", hoop_recv(c, b, 4, HOOP_FLOAT32, -1)},
        {"timeout of -1 s", hoop_comm_set_timeout(c, -1.0)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check(t, cases[i].got == HOOP_ERR_INVALID_ARGUMENT, "%s returned %s, not %s", cases[i].what,
              hoop_error_string(cases[i].got), hoop_error_string(HOOP_ERR_INVALID_ARGUMENT));
    }
    const char *le = hoop_comm_last_error(c);
    check(t, le != NULL && le[0] != '\0', "no last-error detail after a failed call");
    hoop_request_t *req = NULL;
    hoop_result_t e = hoop_iallreduce(c, a, b, 4, HOOP_FLOAT32, HOOP_OP_COUNT, &req);
    check(t, e == HOOP_ERR_INVALID_ARGUMENT, "iallreduce with a bad op returned %s",
          hoop_error_string(e));
    if (req) hoop_wait(req);

    for (int i = 0; i <= (int)HOOP_ERR_INTERNAL + 1; i++) {
        const char *s = hoop_error_string((hoop_result_t)i);
        check(t, s != NULL && s[0] != '\0', "hoop_error_string(%d) is empty", i);
    }
    for (int d = 0; d < HOOP_DTYPE_COUNT; d++) {
        check(t, hoop_dtype_size((hoop_dtype_t)d) == DT[d].size, "hoop_dtype_size(%s) = %zu",
              DT[d].name, hoop_dtype_size((hoop_dtype_t)d));
        const char *s = hoop_dtype_name((hoop_dtype_t)d);
        check(t, s != NULL && s[0] != '\0', "hoop_dtype_name(%d) is empty", d);
    }
    check(t, hoop_dtype_size(HOOP_DTYPE_COUNT) == 0, "hoop_dtype_size of a bad dtype is not 0");
    check(t, hoop_dtype_name(HOOP_DTYPE_COUNT) != NULL, "hoop_dtype_name of a bad dtype is NULL");
    check(t, hoop_op_name(HOOP_OP_COUNT) != NULL, "hoop_op_name of a bad op is NULL");
    const char *v = hoop_version();
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", HOOP_VERSION_MAJOR, HOOP_VERSION_MINOR,
             HOOP_VERSION_PATCH);
    check(t, v != NULL && strncmp(v, want, strlen(want)) == 0,
          "hoop_version() = %s, header says %s", v ? v : "(null)", want);
}

/* The reference converters against known values, so that a wrong converter cannot hide a bug. */
static void run_selftest(tctx_t *t)
{
    static const struct {
        float f;
        uint16_t h, bf;
    } known[] = {
        {1.0f, 0x3c00, 0x3f80},           {-2.0f, 0xc000, 0xc000},
        {65504.0f, 0x7bff, 0x4780},       {65520.0f, 0x7c00, 0x4780},
        {0x1p-24f, 0x0001, 0x3380},       {0x1p-25f, 0x0000, 0x3300},
        {0x1.8p-25f, 0x0001, 0x3340},     {0x1p-14f, 0x0400, 0x3880},
        {1.0009765625f, 0x3c01, 0x3f80},  {1.00048828125f, 0x3c00, 0x3f80},
        {1.00146484375f, 0x3c02, 0x3f80}, {1.00390625f, 0x3c04, 0x3f80},
        {1.01171875f, 0x3c0c, 0x3f82},    {0.333333343f, 0x3555, 0x3eab},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        check(t, rc_float_to_half(known[i].f) == known[i].h,
              "rc_float_to_half(%a) = 0x%04x, want 0x%04x", (double)known[i].f,
              rc_float_to_half(known[i].f), known[i].h);
        check(t, rc_float_to_bf16(known[i].f) == known[i].bf,
              "rc_float_to_bf16(%a) = 0x%04x, want 0x%04x", (double)known[i].f,
              rc_float_to_bf16(known[i].f), known[i].bf);
    }
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        int nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (!nan && rc_float_to_half(rc_half_to_float((uint16_t)h)) != h) bad++;
        int bnan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
        if (!bnan && rc_float_to_bf16(rc_bf16_to_float((uint16_t)h)) != h) bad++;
    }
    check(t, bad == 0, "%d float16/bfloat16 values do not round-trip", bad);
    check(t, rc_half_to_float(0x3555) == 0.333251953125f, "rc_half_to_float(0x3555)");
}

static void summary(const tctx_t *t, long checks, long fails)
{
    printf("rank %d: %ld checks passed, %ld failed\n", t->world_rank, checks - fails, fails);
    fflush(stdout);
}

/* A directory every rank of the communicator sees, made by rank 0 and broadcast. */
static int shared_dir(tctx_t *t, char *dir, size_t len)
{
    char buf[256] = {0};
    if (t->rank == 0) {
        const char *tmp = getenv("TMPDIR");
        snprintf(buf, sizeof buf, "%s/hoop-mp-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
        if (!mkdtemp(buf)) buf[0] = '\0';
    }
    hoop_result_t e = hoop_broadcast(t->comm, buf, sizeof buf, HOOP_UINT8, 0);
    buf[sizeof buf - 1] = '\0';
    check(t, e == HOOP_OK, "broadcast of the scratch directory: %s: %s", hoop_error_string(e),
          hoop_comm_last_error(t->comm));
    if (e != HOOP_OK) {
        t->broken = 1;
        return 0;
    }
    snprintf(dir, len, "%s", buf);
    return buf[0] != '\0';
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void remove_tree(const char *path)
{
    if (path[0]) nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Open file descriptors of this process; -1 if unknown. */
static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

/* ---- modes ---- */

typedef struct opts {
    const char *mode;
    unsigned colls; /* colls mode: the collectives to run */
    unsigned large_dtypes, large_ops;
    int large_roots;
    int roots;
    int nreq;
    int late_rank;
    int quick;
    int verbose;
} opts_t;

static const size_t SMALL_COUNTS[] = {0, 1, 7, 1031};
static const size_t LARGE_COUNTS[] = {LARGE_COUNT};

static void run_colls(tctx_t *t, const opts_t *o)
{
    run_selftest(t);
    run_invalid_args(t);
    suite_t full = {o->colls, ALL_DTYPES, ALL_OPS, SMALL_COUNTS, 4, o->roots, 1};
    if (o->quick) {
        full.dtypes = BIT(HOOP_FLOAT32) | BIT(HOOP_INT8) | BIT(HOOP_FLOAT16);
        full.roots = ROOTS_ENDS;
    }
    run_suite(t, &full);
    if (o->large_dtypes && o->large_ops) {
        suite_t big = {o->colls & ~BIT(C_BARRIER),
                       o->large_dtypes,
                       o->large_ops,
                       LARGE_COUNTS,
                       1,
                       o->large_roots,
                       0};
        run_suite(t, &big);
    }
}

/* Every payload size around the shared area's line boundaries (24 bytes in the step's line, then
 * 56 per payload line, to 248; above, the payload follows the lines): uint8 at every byte count
 * from 0 to 300, float64 from 20 to 40 elements (160 to 320 bytes), every collective that puts
 * payloads in the area, both placements, roots 0 and n-1; then the sizes around auto's choice of
 * the ring for a 2-rank all-gather. */
static void run_lines(tctx_t *t)
{
    static size_t bytes[301], f64[21];
    for (size_t i = 0; i <= 300; i++) bytes[i] = i;
    for (size_t i = 0; i <= 20; i++) f64[i] = 20 + i;
    unsigned colls = BIT(C_ALLREDUCE) | BIT(C_BROADCAST) | BIT(C_ALLGATHER) | BIT(C_REDUCE) |
                     BIT(C_REDUCE_SCATTER);
    suite_t u8 = {colls, BIT(HOOP_UINT8), BIT(HOOP_SUM) | BIT(HOOP_MAX), bytes, 301, ROOTS_ENDS, 0};
    suite_t d = {colls, BIT(HOOP_FLOAT64), BIT(HOOP_SUM) | BIT(HOOP_AVG), f64, 21, ROOTS_ENDS, 0};
    run_suite(t, &u8);
    run_suite(t, &d);
    /* Around the sizes where auto takes the ring rather than the area for a 2-rank all-gather
     * (32 to 256 KiB per rank). */
    static const size_t ag_bytes[] = {32767, 32768, 100003, 262144, 262145};
    suite_t ag = {BIT(C_ALLGATHER), BIT(HOOP_UINT8), BIT(HOOP_SUM), ag_bytes, 5, ROOTS_ENDS, 0};
    run_suite(t, &ag);
    /* And that auto does take the ring there: its messages count in hoop_comm_stats, the area's
     * steps do not. Only where auto may use the area (2 ranks, no algorithm or transport forced
     * other than shm). */
    const char *algo = getenv("HOOP_ALGO"), *tp = getenv("HOOP_TRANSPORT");
    if (t->size != 2 || (algo != NULL && strcmp(algo, "auto") != 0) ||
        (tp != NULL && strcmp(tp, "auto") != 0 && strcmp(tp, "shm") != 0))
        return;
    uint8_t *in = malloc(262145), *out = malloc(2 * 262145);
    for (size_t i = 0; i < 5 && in != NULL && out != NULL; i++) {
        size_t n = ag_bytes[i];
        int ring = n >= 32768 && n <= 262144;
        memset(in, t->rank + 1, n);
        hoop_stats_t a, b;
        hoop_comm_stats(t->comm, &a);
        hoop_result_t e = hoop_allgather(t->comm, in, out, n, HOOP_UINT8);
        hoop_comm_stats(t->comm, &b);
        check(t, e == HOOP_OK, "allgather of %zu bytes: %s", n, hoop_error_string(e));
        check(t, (b.messages_sent > a.messages_sent) == ring,
              "allgather of %zu bytes per rank sent %llu messages: want %s", n,
              (unsigned long long)(b.messages_sent - a.messages_sent),
              ring ? "the ring's" : "none (the area)");
        check(t, out[0] == 1 && out[2 * n - 1] == 2, "allgather of %zu bytes: wrong ends", n);
    }
    free(in);
    free(out);
}

typedef struct thread_job {
    tctx_t *t;
    suite_t suite;
} thread_job_t;

static void *suite_thread(void *arg)
{
    thread_job_t *j = arg;
    run_suite(j->t, &j->suite);
    return NULL;
}

static hoop_comm_t *split_checked(tctx_t *t, int color, int key, int want_rank, int want_size,
                                  const char *what)
{
    hoop_comm_t *nc = NULL;
    hoop_result_t e = hoop_comm_split(t->comm, color, key, &nc);
    check(t, e == HOOP_OK, "split %s: %s: %s", what, hoop_error_string(e),
          hoop_comm_last_error(t->comm));
    use_stream(nc);
    if (e != HOOP_OK) {
        t->broken = 1;
        return NULL;
    }
    if (want_size == 0) {
        check(t, nc == NULL, "split %s: a rank with color HOOP_SPLIT_NONE got a communicator",
              what);
        if (nc) hoop_comm_destroy(nc);
        return NULL;
    }
    check(t, nc != NULL, "split %s: no communicator", what);
    if (!nc) return NULL;
    check(t, hoop_comm_rank(nc) == want_rank && hoop_comm_size(nc) == want_size,
          "split %s: rank %d of %d, want %d of %d", what, hoop_comm_rank(nc), hoop_comm_size(nc),
          want_rank, want_size);
    return nc;
}

static void run_split(tctx_t *world, const opts_t *o)
{
    int n = world->size, r = world->rank;
    static const size_t counts[] = {0, 1, 7, 1031, 70001};
    suite_t s = {ALL_COLLS,
                 BIT(HOOP_FLOAT32) | BIT(HOOP_INT32) | BIT(HOOP_FLOAT16) | BIT(HOOP_UINT8),
                 ALL_OPS,
                 counts,
                 o->quick ? 4 : 5,
                 ROOTS_ENDS,
                 0};

    /* Even and odd ranks; one group in reverse order; all but the last rank; a split of a split. */
    hoop_comm_t *eo = split_checked(world, r % 2, r, r / 2, r % 2 ? n / 2 : (n + 1) / 2,
                                    "even/odd");
    hoop_comm_t *rev = split_checked(world, 0, n - 1 - r, n - 1 - r, n, "reversed");
    int excluded = n > 1 && r == n - 1;
    hoop_comm_t *most = split_checked(world, excluded ? HOOP_SPLIT_NONE : 3, 0, r,
                                      excluded ? 0 : (n > 1 ? n - 1 : 1), "all but the last");
    if (world->broken || !eo || !rev || (!most && !excluded)) {
        if (eo) hoop_comm_destroy(eo);
        if (rev) hoop_comm_destroy(rev);
        if (most) hoop_comm_destroy(most);
        world->broken = 1;
        return;
    }
    tctx_t tev, trev, tmost, tnest;
    char label[48];
    snprintf(label, sizeof label, "split-%s", r % 2 ? "odd" : "even");
    ctx_init(&tev, eo, r, label, world);
    ctx_init(&trev, rev, r, "split-reversed", world);
    int rr = n - 1 - r;
    snprintf(label, sizeof label, "split-nested-%d", rr % 2);
    hoop_comm_t *nest = split_checked(&trev, rr % 2, 0, rr / 2, rr % 2 ? n / 2 : (n + 1) / 2,
                                      "nested");
    if (!nest) {
        world->broken = 1;
        hoop_comm_destroy(eo);
        hoop_comm_destroy(rev);
        if (most) hoop_comm_destroy(most);
        return;
    }
    ctx_init(&tnest, nest, r, label, world);
    if (most) ctx_init(&tmost, most, r, "split-most", world);

    /* Collectives on different communicators at the same time, from different threads. */
    thread_job_t jobs[3] = {{&tev, s}, {&trev, s}, {&tnest, s}};
    pthread_t th[3];
    int started[3];
    for (int i = 0; i < 3; i++)
        started[i] = pthread_create(&th[i], NULL, suite_thread, &jobs[i]) == 0;
    suite_t ws = s;
    ws.dtypes = BIT(HOOP_FLOAT64) | BIT(HOOP_INT8);
    run_suite(world, &ws);
    if (most) run_suite(&tmost, &s);
    for (int i = 0; i < 3; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else
            suite_thread(&jobs[i]);
    }

    /* Nonblocking calls on two communicators interleaved on one thread. */
    if (!world->broken && !tev.broken) {
        tcase_t a = {
            .coll = C_ALLREDUCE, .dt = HOOP_INT64, .op = HOOP_SUM, .count = 5000, .root = -1};
        tcase_t b = {.coll = C_ALLGATHER, .dt = HOOP_FLOAT32, .count = 3000, .root = -1};
        a.call = world->call++;
        b.call = tev.call++;
        if (tcase_prepare(world, &a) && tcase_prepare(&tev, &b)) {
            hoop_result_t ea = post_nb(world, &a), eb = post_nb(&tev, &b);
            hoop_result_t wb = tcase_wait(&b), wa = tcase_wait(&a);
            if (ea != HOOP_OK || wa != HOOP_OK)
                call_failed(world, &a, "interleaved", ea != HOOP_OK ? ea : wa);
            else
                tcase_verify(world, &a);
            if (eb != HOOP_OK || wb != HOOP_OK)
                call_failed(&tev, &b, "interleaved", eb != HOOP_OK ? eb : wb);
            else
                tcase_verify(&tev, &b);
        }
        tcase_free(&a);
        tcase_free(&b);
    }

    tctx_t *subs[4] = {&tev, &trev, &tnest, most ? &tmost : NULL};
    for (int i = 0; i < 4; i++) {
        if (!subs[i]) continue;
        world->checks += subs[i]->checks;
        world->fails += subs[i]->fails;
        world->broken |= subs[i]->broken;
        hoop_result_t e = hoop_comm_destroy(subs[i]->comm);
        check(world, e == HOOP_OK, "destroying %s: %s", subs[i]->label, hoop_error_string(e));
    }
    /* The parent keeps working once its children are gone. */
    suite_t after = {BIT(C_ALLREDUCE) | BIT(C_BARRIER),
                     BIT(HOOP_FLOAT32),
                     BIT(HOOP_SUM),
                     counts + 2,
                     2,
                     ROOTS_ENDS,
                     0};
    run_suite(world, &after);

    /* Splitting and destroying again and again leaks no descriptors (sockets, wake-up fds). */
    int fds0 = count_fds();
    for (int k = 0; k < 20 && !world->broken; k++) {
        hoop_comm_t *sc = split_checked(world, r % 2, -r, (r % 2 ? n / 2 : (n + 1) / 2) - 1 - r / 2,
                                        r % 2 ? n / 2 : (n + 1) / 2, "repeated");
        if (!sc) break;
        tctx_t ts;
        ctx_init(&ts, sc, r, "split-repeated", world);
        suite_t one = {
            BIT(C_ALLREDUCE), BIT(HOOP_INT32), BIT(HOOP_SUM), counts + 3, 1, ROOTS_ENDS, 0};
        run_suite(&ts, &one);
        world->checks += ts.checks;
        world->fails += ts.fails;
        world->broken |= ts.broken;
        hoop_comm_destroy(sc);
    }
    int fds1 = count_fds();
    check(world, fds0 < 0 || fds1 <= fds0, "%d descriptors open before 20 splits, %d after", fds0,
          fds1);
}

static void small_suite(tctx_t *t)
{
    static const size_t counts[] = {1, 7, 1031};
    suite_t s = {ALL_COLLS,
                 BIT(HOOP_FLOAT32) | BIT(HOOP_INT64) | BIT(HOOP_BFLOAT16),
                 BIT(HOOP_SUM) | BIT(HOOP_MAX) | BIT(HOOP_AVG),
                 counts,
                 3,
                 ROOTS_ENDS,
                 0};
    run_suite(t, &s);
}

static int env_int(const char *name, int def)
{
    const char *v = getenv(name);
    return v && v[0] ? atoi(v) : def;
}

static void usage(void)
{
    fprintf(
        stderr,
        "usage: coll_test [--mode colls|split|nonblocking|init-env|init-tcp|init-file|late|lines]\n"
        "                 [--colls LIST] [--roots all|ends] [--large-dtypes LIST|none]\n"
        "                 [--large-ops LIST] [--large-roots ends|last] [--nreq K]\n"
        "                 [--late-rank R] [--fake-hosts K] [--device MODULE [--stream]\n"
        "                 [--host-rank R] [--expect-path ipc|staged|ipc-by-host]] [--quick] "
        "[--verbose]\n");
}

static const char *dt_name(int i) { return DT[i].name; }
static const char *op_name(int i) { return OP_NAME[i]; }
static const char *coll_name(int i) { return test_coll_name[i]; }

/* A comma-separated list of names (or "none") into a bit mask; -1 if a name is unknown. */
static int parse_names(const char *list, const char *(*name)(int), int n, unsigned *mask)
{
    *mask = 0;
    if (!strcmp(list, "none")) return 0;
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        int found = -1;
        for (int i = 0; i < n; i++)
            if (strlen(name(i)) == len && !strncmp(name(i), p, len)) found = i;
        if (found < 0) return -1;
        *mask |= BIT(found);
        p += len + (p[len] == ',');
    }
    return 0;
}

static int parse_int_arg(const char *s, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* Returns 0 when every argument was understood. */
static int parse_opts(int argc, char **argv, opts_t *o)
{
    int by_host = 0, fake_hosts = 0, host_rank = -1; /* --expect-path ipc-by-host */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--quick")) {
            o->quick = 1;
            continue;
        }
        if (!strcmp(a, "--verbose")) {
            o->verbose = 1;
            continue;
        }
        if (!strcmp(a, "--stream")) {
            if (!g_device) {
                fprintf(stderr, "coll_test: --stream comes after --device\n");
                return -1;
            }
            g_stream = devbuf_stream();
            continue;
        }
        if (i + 1 >= argc) return -1;
        const char *v = argv[++i];
        int bad;
        if (!strcmp(a, "--mode")) {
            o->mode = v;
            bad = 0;
        } else if (!strcmp(a, "--colls")) {
            bad = parse_names(v, coll_name, C_COUNT, &o->colls);
        } else if (!strcmp(a, "--large-dtypes")) {
            bad = parse_names(v, dt_name, HOOP_DTYPE_COUNT, &o->large_dtypes);
        } else if (!strcmp(a, "--large-ops")) {
            bad = parse_names(v, op_name, HOOP_OP_COUNT, &o->large_ops);
        } else if (!strcmp(a, "--large-roots")) {
            bad = strcmp(v, "ends") && strcmp(v, "last");
            o->large_roots = strcmp(v, "ends") ? ROOTS_LAST : ROOTS_ENDS;
        } else if (!strcmp(a, "--roots")) {
            bad = strcmp(v, "ends") && strcmp(v, "all");
            o->roots = strcmp(v, "ends") ? ROOTS_ALL : ROOTS_ENDS;
        } else if (!strcmp(a, "--nreq")) {
            bad = parse_int_arg(v, 1, MAX_NREQ, &o->nreq);
        } else if (!strcmp(a, "--late-rank")) {
            bad = parse_int_arg(v, 0, 1 << 20, &o->late_rank);
        } else if (!strcmp(a, "--device")) {
            char err[512];
            bad = devbuf_open(v, err, sizeof err);
            if (bad) fprintf(stderr, "coll_test: --device %s: %s\n", v, err);
            g_device = !bad;

        } else if (!strcmp(a, "--host-rank")) {
            /* Mixed ranks: this world rank keeps its buffers in host memory (after --device). */
            int hr;
            bad = !g_device || parse_int_arg(v, 0, 1 << 20, &hr);
            if (!bad) host_rank = hr;
            if (!bad && hr == env_int("RANK", -1)) {
                g_device = 0;
                g_stream = NULL;
            }
        } else if (!strcmp(a, "--expect-path")) {
            by_host = !strcmp(v, "ipc-by-host");
            bad = strcmp(v, "ipc") && strcmp(v, "staged") && !by_host;
            g_expect = !strcmp(v, "staged") ? EXPECT_STAGED : EXPECT_IPC;
        } else if (!strcmp(a, "--fake-hosts")) {
            /* Rank r claims host r % K: shared memory inside a fake host, TCP across, and a ring
             * that has to be reordered to keep each host's ranks together. */
            int k;
            bad = parse_int_arg(v, 1, 1 << 20, &k);
            if (!bad) fake_hosts = k;
            if (!bad) {
                char id[32];
                snprintf(id, sizeof(id), "fake-host-%d", env_int("RANK", 0) % k);
                setenv("HOOP_HOSTID", id, 1);
            }
        } else {
            bad = 1;
        }
        if (bad) {
            fprintf(stderr, "coll_test: bad argument: %s %s\n", a, v);
            return -1;
        }
    }
    if (by_host) {
        if (fake_hosts == 0 || host_rank < 0) {
            fprintf(stderr, "coll_test: --expect-path ipc-by-host needs --fake-hosts and "
                            "--host-rank\n");
            return -1;
        }
        int me = env_int("RANK", 0);
        g_expect = me % fake_hosts == host_rank % fake_hosts ? EXPECT_STAGED : EXPECT_IPC;
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o = {.mode = "colls",
                .colls = ALL_COLLS,
                .large_dtypes = BIT(HOOP_FLOAT32) | BIT(HOOP_FLOAT16) | BIT(HOOP_INT8) |
                                BIT(HOOP_FLOAT64),
                .large_ops = BIT(HOOP_SUM) | BIT(HOOP_MAX),
                .large_roots = ROOTS_ENDS,
                .roots = ROOTS_ALL,
                .nreq = 100,
                .late_rank = -1};
    if (parse_opts(argc, argv, &o) != 0) {
        usage();
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);

    int env_rank = env_int("RANK", -1), env_size = env_int("WORLD_SIZE", -1);
    const char *modes[] = {"colls",    "split",     "nonblocking", "init-env",
                           "init-tcp", "init-file", "late",        "lines"};
    int known = 0;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) known |= !strcmp(o.mode, modes[i]);
    if (!known || env_rank < 0 || env_size < 1) {
        if (!known)
            usage();
        else
            fprintf(stderr, "coll_test: RANK and WORLD_SIZE must be set (run it under hooprun)\n");
        return 2;
    }

    hoop_comm_t *comm = NULL;
    hoop_result_t e;
    char file_path[512] = "";
    double t0 = now_s();
    if (!strcmp(o.mode, "init-tcp") || !strcmp(o.mode, "init-file")) {
        /* Explicit rank and size, with nothing left in the environment to fall back on. */
        char method[600];
        const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
        if (!addr || !port) {
            fprintf(stderr, "coll_test: MASTER_ADDR and MASTER_PORT must be set\n");
            return 2;
        }
        if (!strcmp(o.mode, "init-tcp")) {
            snprintf(method, sizeof method, "tcp://%s:%s", addr, port);
        } else {
            /* Fresh for this launch: the launcher's pid and port are shared by every rank. */
            const char *tmp = getenv("TMPDIR");
            snprintf(file_path, sizeof file_path, "%s/hoop-mp-file-%s-%ld",
                     tmp && tmp[0] ? tmp : "/tmp", port, (long)getppid());
            snprintf(method, sizeof method, "file://%s", file_path);
        }
        static const char *const vars[] = {"MASTER_ADDR", "MASTER_PORT", "RANK",
                                           "WORLD_SIZE",  "LOCAL_RANK",  "LOCAL_WORLD_SIZE"};
        for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
        e = hoop_init(&comm, method, env_rank, env_size);
    } else if (!strcmp(o.mode, "init-env")) {
        e = hoop_init(&comm, "env://", -1, -1);
    } else if (!strcmp(o.mode, "late")) {
        int late = o.late_rank < 0 ? env_size - 1 : o.late_rank;
        if (env_rank == late) sleep(3);
        e = hoop_init_from_env(&comm);
    } else {
        e = hoop_init(&comm, NULL, -1, -1);
    }
    if (e != HOOP_OK || !comm) {
        printf("rank %d: FAIL hoop_init (%s): %s\n", env_rank, o.mode, hoop_error_string(e));
        printf("rank %d: 0 checks passed, 1 failed\n", env_rank);
        return 1;
    }

    use_stream(comm);
    tctx_t world;
    ctx_init(&world, comm, env_rank, "world", NULL);
    world.verbose = o.verbose;
    check(&world, world.rank == env_rank && world.size == env_size,
          "hoop_comm_rank/size = %d/%d, want %d/%d", world.rank, world.size, env_rank, env_size);
    if (!strcmp(o.mode, "late"))
        check(&world,
              now_s() - t0 >=
                  (env_rank == (o.late_rank < 0 ? env_size - 1 : o.late_rank) ? 3.0 : 2.5),
              "hoop_init returned after %.2f s, before the late rank joined", now_s() - t0);
    if (shared_dir(&world, world.marker_dir, sizeof world.marker_dir) || !world.broken) {
        if (!strcmp(o.mode, "colls"))
            run_colls(&world, &o);
        else if (!strcmp(o.mode, "split"))
            run_split(&world, &o);
        else if (!strcmp(o.mode, "nonblocking"))
            run_nonblocking(&world, o.nreq);
        else if (!strcmp(o.mode, "lines"))
            run_lines(&world);
        else
            small_suite(&world);
    }

    /* Everyone is done with the shared files before rank 0 removes them. */
    if (!world.broken) {
        e = hoop_barrier(comm);
        check(&world, e == HOOP_OK, "final barrier: %s: %s", hoop_error_string(e),
              hoop_comm_last_error(comm));
    }
    if (world.rank == 0 && !world.broken) {
        remove_tree(world.marker_dir);
        struct stat sb;
        if (world.marker_dir[0] && stat(world.marker_dir, &sb) == 0)
            printf("rank 0: warning: could not remove %s\n", world.marker_dir);
        if (file_path[0]) {
            char d[600];
            snprintf(d, sizeof d, "%s.d", file_path);
            remove_tree(d);
            remove(file_path);
        }
    }
    /* A failing rank's exit brings the job down: nobody leaves while rank 0 cleans up. */
    if (!world.broken) {
        e = hoop_barrier(comm);
        check(&world, e == HOOP_OK, "barrier after the cleanup: %s: %s", hoop_error_string(e),
              hoop_comm_last_error(comm));
    }
    e = hoop_comm_destroy(comm);
    check(&world, e == HOOP_OK, "hoop_comm_destroy: %s", hoop_error_string(e));
    summary(&world, world.checks, world.fails);
    return world.fails ? 1 : 0;
}
