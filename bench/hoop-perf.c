/*
 * hoop-perf: bandwidth and correctness of hoop's collectives, printed in the layout of nccl-tests
 * (same columns, same size and bus-bandwidth conventions) so that the numbers read the same way.
 *
 *   hooprun -n 4 hoop-perf [COLLECTIVE] [-b min] [-e max] [-f factor | -i step] [-n iters] ...
 *
 * `hoop-perf -h` explains every option and column. Each collective is one row of COLLS below: how
 * its counts relate to the size column, its bus factor, how to run it, what every rank sends and
 * what every rank must receive. Inputs are chosen so that every expected value is exact in every
 * dtype whatever order the library reduces in, and the expected values are computed here, element
 * by element, without the library.
 *
 * --model fits the alpha-beta-gamma cost model (latency, seconds per byte moved, seconds per byte
 * reduced) and sets the predicted all-reduce times of four algorithms beside the measured one.
 * --explain runs one traced all-reduce and prints every rank's schedule and traffic.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hoop.h"
#include "bench_util.h"
#include "../common/refcheck.h"

#define SENTINEL_BYTE 0xA5
#define TRACE_BYTES (64 * 1024)      /* trace text kept per rank by --explain */
#define MODEL_LARGE_BYTES (4u << 20) /* ping-pong and reduction size behind beta and gamma */

/* Any integer value in the dtype (wrapping) or a double that the float dtype holds exactly. */
static uint64_t encode(hoop_dtype_t dt, size_t es, int64_t v)
{
    return rc_is_float(dt) ? rc_fenc(dt, (double)v) : (uint64_t)v & rc_width_mask(es);
}

/*
 * Input element i of `rank`: small integers for SUM/AVG (|sum| <= 256, exact even in bfloat16),
 * powers of two for PROD on floats (|product| = 2^k, k <= n), anything for MIN/MAX.
 */
static uint64_t input(hoop_dtype_t dt, size_t es, hoop_op_t op, int n, int rank, size_t i)
{
    uint64_t h = (uint64_t)i * 2654435761u + (uint64_t)rank * 40503u + 12345u;
    switch (op) {
    case HOOP_SUM:
    case HOOP_AVG: {
        int64_t m = 256 / n;
        return encode(dt, es, (int64_t)(h % (uint64_t)(2 * m + 1)) - m);
    }
    case HOOP_PROD: {
        static const double fvals[4] = {1.0, 2.0, -1.0, 0.5};
        static const int64_t ivals[4] = {1, 2, -1, 3};
        size_t pick = (size_t)((h >> 3) % 4);
        return rc_is_float(dt) ? rc_fenc(dt, fvals[pick]) : encode(dt, es, ivals[pick]);
    }
    default: return encode(dt, es, (int64_t)((h >> 5) % 2001) - 1000);
    }
}

/* The naive reference: reduce every rank's input element, wrapping integers explicitly. */
static uint64_t reduce_ref(hoop_dtype_t dt, size_t es, hoop_op_t op, int n, size_t i)
{
    rc_acc_t a = {0};
    for (int q = 0; q < n; q++) rc_acc_add(&a, dt, es, op, input(dt, es, op, n, q, i));
    return rc_acc_result(&a, dt, es, op, n);
}

/* ---- the collectives ---- */

/* How the count passed to the call relates to the buffers (nccl-tests' conventions). */
typedef enum {
    CK_SAME,     /* send and receive `count` elements: allreduce, broadcast, reduce, sendrecv */
    CK_GATHER,   /* send count, receive ranks * count: allgather, gather */
    CK_SCATTER,  /* send ranks * count, receive count: scatter, reducescatter */
    CK_ALLTOALL, /* count per peer: send and receive ranks * count */
    CK_NONE      /* no data: barrier */
} count_kind_t;

enum {
    F_OP = 1,            /* takes a reduction op */
    F_ROOT = 2,          /* takes a root */
    F_ROOT_SENDS = 4,    /* only the root's send buffer holds input */
    F_ROOT_RECEIVES = 8, /* only the root's receive buffer holds a result */
    F_NO_INPLACE = 16    /* no in-place form: the in-place columns read N/A */
};

/* One call as the run, input and expect functions see it. */
typedef struct call {
    hoop_comm_t *comm;
    void *s, *r;
    size_t count, es;
    hoop_dtype_t dt;
    hoop_op_t op;
    int root, rank, size;
} call_t;

typedef struct coll {
    const char *name;
    count_kind_t counts;
    unsigned flags;
    double (*bus_factor)(int n); /* NULL: no bandwidth, time only */
    /* Blocking when reqs is NULL; otherwise posts and appends its requests at reqs[*nreqs]. */
    hoop_result_t (*run)(const call_t *k, hoop_request_t **reqs, int *nreqs);
    void (*prep)(const call_t *k); /* untimed set-up once the input is in place; may be NULL */
    /* Send element i of `rank`, and the receive element i that `rank` must end with. */
    uint64_t (*in)(const call_t *k, int rank, size_t i);
    uint64_t (*expect)(const call_t *k, int rank, size_t i);
} coll_t;

static size_t kind_count(count_kind_t ck, size_t bytes, size_t es, int n)
{
    if (ck == CK_NONE) return 0;
    return ck == CK_SAME ? bytes / es : bytes / es / (size_t)n;
}

static size_t kind_send(count_kind_t ck, size_t count, int n)
{
    if (ck == CK_NONE) return 0;
    return ck == CK_SCATTER || ck == CK_ALLTOALL ? count * (size_t)n : count;
}

static size_t kind_recv(count_kind_t ck, size_t count, int n)
{
    if (ck == CK_NONE) return 0;
    return ck == CK_GATHER || ck == CK_ALLTOALL ? count * (size_t)n : count;
}

/* In place, both buffers live in the receive buffer, at these element offsets (as nccl-tests). */
static size_t kind_send_offset(count_kind_t ck, size_t count, int rank)
{
    return ck == CK_GATHER ? count * (size_t)rank : 0;
}

static size_t kind_recv_offset(count_kind_t ck, size_t count, int rank)
{
    return ck == CK_SCATTER ? count * (size_t)rank : 0;
}

static double bus_allreduce(int n) { return 2.0 * (n - 1) / n; }
static double bus_spread(int n) { return (double)(n - 1) / n; }
static double bus_one(int n)
{
    (void)n;
    return 1.0;
}

/* Counts a posted request, so that the caller waits for it. */
static hoop_result_t posted(hoop_result_t e, int *nreqs)
{
    if (e == HOOP_OK) ++*nreqs;
    return e;
}

static hoop_result_t allreduce_run(const call_t *k, hoop_request_t **reqs, int *nreqs)
{
    return reqs
               ? posted(hoop_iallreduce(k->comm, k->s, k->r, k->count, k->dt, k->op, &reqs[*nreqs]),
                        nreqs)
               : hoop_allreduce(k->comm, k->s, k->r, k->count, k->dt, k->op);
}

static hoop_result_t broadcast_run(const call_t *k, hoop_request_t **reqs, int *nreqs)
{
    return reqs ? posted(hoop_ibroadcast(k->comm, k->r, k->count, k->dt, k->root, &reqs[*nreqs]),
                         nreqs)
                : hoop_broadcast(k->comm, k->r, k->count, k->dt, k->root);
}

/* hoop_broadcast works in place: out of place, the root's input is copied to its receive buffer
 * first, outside the timing (the copy is not what is being measured). */
static void broadcast_prep(const call_t *k)
{
    if (k->rank == k->root && k->s != k->r && k->count > 0) memcpy(k->r, k->s, k->count * k->es);
}

static hoop_result_t reduce_run(const call_t *k, hoop_request_t **reqs, int *nreqs)
{
    return reqs ? posted(hoop_ireduce(k->comm, k->s, k->r, k->count, k->dt, k->op, k->root,
                                      &reqs[*nreqs]),
                         nreqs)
                : hoop_reduce(k->comm, k->s, k->r, k->count, k->dt, k->op, k->root);
}

static hoop_result_t allgather_run(const call_t *k, hoop_request_t **reqs, int *nreqs)
{
    return reqs
               ? posted(hoop_iallgather(k->comm, k->s, k->r, k->count, k->dt, &reqs[*nreqs]), nreqs)
               : hoop_allgather(k->comm, k->s, k->r, k->count, k->dt);
}

static hoop_result_t gather_run(const call_t *k, hoop_request_t **reqs, int *nreqs)
{
    return reqs ? posted(hoop_igather(k->comm, k->s, k->r, k->count, k->dt, k->root, &reqs[*nreqs]),
                         nreqs)
                : hoop_gather(k->comm, k->s, k->r, k->count, k->dt, k->root);
}

static hoop_result_t scatter_run(const call_t *k, hoop_request_t **reqs, int *nreqs)
{
    return reqs
               ? posted(hoop_iscatter(k->comm, k->s, k->r, k->count, k->dt, k->root, &reqs[*nreqs]),
                        nreqs)
               : hoop_scatter(k->comm, k->s, k->r, k->count, k->dt, k->root);
}

static hoop_result_t reducescatter_run(const call_t *k, hoop_request_t **reqs, int *nreqs)
{
    return reqs ? posted(hoop_ireduce_scatter(k->comm, k->s, k->r, k->count, k->dt, k->op,
                                              &reqs[*nreqs]),
                         nreqs)
                : hoop_reduce_scatter(k->comm, k->s, k->r, k->count, k->dt, k->op);
}

static hoop_result_t alltoall_run(const call_t *k, hoop_request_t **reqs, int *nreqs)
{
    return reqs ? posted(hoop_ialltoall(k->comm, k->s, k->r, k->count, k->dt, &reqs[*nreqs]), nreqs)
                : hoop_alltoall(k->comm, k->s, k->r, k->count, k->dt);
}

/* Every rank sends to the next and receives from the previous at once, as nccl-tests' sendrecv. */
static hoop_result_t sendrecv_run(const call_t *k, hoop_request_t **reqs, int *nreqs)
{
    hoop_request_t *mine[2], **q = reqs ? &reqs[*nreqs] : mine;
    int to = (k->rank + 1) % k->size, from = (k->rank - 1 + k->size) % k->size;
    hoop_result_t e = hoop_isend(k->comm, k->s, k->count, k->dt, to, &q[0]);
    if (e != HOOP_OK) return e;
    hoop_result_t e2 = hoop_irecv(k->comm, k->r, k->count, k->dt, from, &q[1]);
    if (reqs) {
        *nreqs += e2 == HOOP_OK ? 2 : 1;
        return e2;
    }
    hoop_result_t w2 = e2 == HOOP_OK ? hoop_wait(q[1]) : e2, w1 = hoop_wait(q[0]);
    return w2 != HOOP_OK ? w2 : w1;
}

static hoop_result_t barrier_run(const call_t *k, hoop_request_t **reqs, int *nreqs)
{
    return reqs ? posted(hoop_ibarrier(k->comm, &reqs[*nreqs]), nreqs) : hoop_barrier(k->comm);
}

/* A value of `who` (a rank, or a (source, destination) pair for all-to-all) at index i. */
static uint64_t value_of(const call_t *k, int who, size_t i)
{
    return input(k->dt, k->es, HOOP_MAX, k->size, who, i);
}

static uint64_t reduce_in(const call_t *k, int rank, size_t i)
{
    return input(k->dt, k->es, k->op, k->size, rank, i);
}

static uint64_t reduced_expect(const call_t *k, int rank, size_t i)
{
    (void)rank;
    return reduce_ref(k->dt, k->es, k->op, k->size, i);
}

static uint64_t rs_expect(const call_t *k, int rank, size_t i)
{
    return reduce_ref(k->dt, k->es, k->op, k->size, (size_t)rank * k->count + i);
}

static uint64_t own_value(const call_t *k, int rank, size_t i) { return value_of(k, rank, i); }

static uint64_t root_value(const call_t *k, int rank, size_t i)
{
    (void)rank;
    return value_of(k, k->root, i);
}

/* Block b of a ranks * count buffer holds rank b's values. */
static uint64_t blocks_value(const call_t *k, int rank, size_t j)
{
    (void)rank;
    return value_of(k, (int)(j / k->count), j % k->count);
}

static uint64_t alltoall_in(const call_t *k, int rank, size_t j)
{
    return value_of(k, rank * k->size + (int)(j / k->count), j % k->count);
}

static uint64_t alltoall_expect(const call_t *k, int rank, size_t j)
{
    return value_of(k, (int)(j / k->count) * k->size + rank, j % k->count);
}

static uint64_t prev_value(const call_t *k, int rank, size_t i)
{
    return value_of(k, (rank - 1 + k->size) % k->size, i);
}

static const coll_t COLLS[] = {
    {"allreduce", CK_SAME, F_OP, bus_allreduce, allreduce_run, NULL, reduce_in, reduced_expect},
    {"broadcast", CK_SAME, F_ROOT | F_ROOT_SENDS, bus_one, broadcast_run, broadcast_prep, own_value,
     root_value},
    {"reduce", CK_SAME, F_OP | F_ROOT | F_ROOT_RECEIVES, bus_one, reduce_run, NULL, reduce_in,
     reduced_expect},
    {"allgather", CK_GATHER, 0, bus_spread, allgather_run, NULL, own_value, blocks_value},
    {"gather", CK_GATHER, F_ROOT | F_ROOT_RECEIVES, bus_spread, gather_run, NULL, own_value,
     blocks_value},
    {"scatter", CK_SCATTER, F_ROOT | F_ROOT_SENDS, bus_spread, scatter_run, NULL, blocks_value,
     own_value},
    {"reducescatter", CK_SCATTER, F_OP, bus_spread, reducescatter_run, NULL, reduce_in, rs_expect},
    {"alltoall", CK_ALLTOALL, 0, bus_spread, alltoall_run, NULL, alltoall_in, alltoall_expect},
    {"sendrecv", CK_SAME, F_NO_INPLACE, bus_one, sendrecv_run, NULL, own_value, prev_value},
    {"barrier", CK_NONE, F_NO_INPLACE, NULL, barrier_run, NULL, NULL, NULL},
};
#define NCOLLS (sizeof COLLS / sizeof COLLS[0])

/* By name; underscores are ignored so that nccl-tests' names (all_reduce, reduce_scatter) work. */
static const coll_t *find_coll(const char *name)
{
    char flat[32];
    size_t n = 0;
    for (const char *p = name; *p && n + 1 < sizeof flat; p++)
        if (*p != '_') flat[n++] = *p;
    flat[n] = '\0';
    for (size_t i = 0; i < NCOLLS; i++)
        if (!strcmp(flat, COLLS[i].name)) return &COLLS[i];
    return NULL;
}

/* ---- the benchmark ---- */

typedef struct variant {
    int ran, has_bw, checked;
    double us, algbw, busbw;
    uint64_t wrong;
} variant_t;

typedef struct row {
    const char *algo;
    size_t size, count;
    int dt, op, root; /* -1: none */
    variant_t v[2];   /* out of place, in place */
} row_t;

typedef struct bench {
    hoop_comm_t *comm;
    int rank, size;
    const coll_t *coll;
    size_t minb, maxb, factor, step; /* factor > 1: multiply, else add step */
    int iters, warmup, check, blocking, average;
    int warm_each; /* also warm up before every timed row, as the OSU benchmarks do */
    unsigned dtypes, ops; /* bit masks */
    int root;             /* -1: every rank in turn */
    const char *algo, *transport;
    const char *json_path, *csv_path;
    FILE *json, *csv;
    unsigned char *sbuf, *rbuf, *ebuf;
    hoop_request_t **reqs;
    row_t *rows; /* rank 0 keeps them for --json / --csv */
    size_t nrows, rows_cap;
    double bw_sum;
    int bw_count;
    uint64_t wrong_total;
    int model;                 /* --model: out of place only, rows printed with the predictions */
    double alpha, beta, gamma; /* --model: s, s/B, s/B */
} bench_t;

static void print_model_row(const bench_t *b, const row_t *row); /* --model */

static void fail_call(const bench_t *b, const char *what, hoop_result_t e)
{
    fprintf(stderr, "hoop-perf: rank %d: %s failed: %s: %s\n", b->rank, what, hoop_error_string(e),
            hoop_comm_last_error(b->comm));
    fflush(stderr);
}

static int checked(const bench_t *b, const char *what, hoop_result_t e)
{
    if (e != HOOP_OK) fail_call(b, what, e);
    return e == HOOP_OK;
}

static call_t make_call(const bench_t *b, hoop_dtype_t dt, hoop_op_t op, int root, size_t count)
{
    call_t k = {.comm = b->comm,
                .count = count,
                .es = hoop_dtype_size(dt),
                .dt = dt,
                .op = op,
                .root = root,
                .rank = b->rank,
                .size = b->size};
    return k;
}

/* Points the call at the buffers of one variant: in place, both live in the receive buffer. */
static void place(const bench_t *b, const coll_t *co, call_t *k, int inplace)
{
    if (!inplace) {
        k->s = b->sbuf;
        k->r = b->rbuf;
        return;
    }
    k->s = b->rbuf + kind_send_offset(co->counts, k->count, k->rank) * k->es;
    k->r = b->rbuf + kind_recv_offset(co->counts, k->count, k->rank) * k->es;
}

static int rank_sends(const coll_t *co, const call_t *k)
{
    return co->in && (!(co->flags & F_ROOT_SENDS) || k->rank == k->root);
}

static int rank_receives(const coll_t *co, const call_t *k)
{
    return co->expect && (!(co->flags & F_ROOT_RECEIVES) || k->rank == k->root);
}

static void fill_input(const coll_t *co, const call_t *k)
{
    if (rank_sends(co, k)) {
        size_t n = kind_send(co->counts, k->count, k->size);
        for (size_t i = 0; i < n; i++) rc_st(k->s, i, k->es, co->in(k, k->rank, i));
    }
    if (co->prep) co->prep(k);
}

/* Runs the call iters times: all posted at once and then waited for (-z 0), blocking with a
 * barrier after each (nccl-tests' -z 1), or blocking back to back (-z 2, as MPI benchmarks call
 * theirs). Returns 0 on failure. */
static int run_batch(const bench_t *b, const coll_t *co, const call_t *k, int iters)
{
    if (b->blocking) {
        for (int i = 0; i < iters; i++)
            if (!checked(b, co->name, co->run(k, NULL, NULL)) ||
                (b->blocking == 1 && !checked(b, "barrier", hoop_barrier(b->comm))))
                return 0;
        return 1;
    }
    int nreqs = 0, ok = 1;
    for (int i = 0; i < iters && ok; i++) ok = checked(b, co->name, co->run(k, b->reqs, &nreqs));
    for (int i = 0; i < nreqs; i++) {
        hoop_result_t e = hoop_wait(b->reqs[i]);
        if (ok) ok = checked(b, "hoop_wait", e);
    }
    return ok;
}

/* Times one variant; when checking, runs it once more on fresh inputs over a receive buffer
 * filled with a sentinel and counts the elements that differ from b->ebuf. */
static int run_variant(bench_t *b, const coll_t *co, call_t *k, int inplace, variant_t *v)
{
    place(b, co, k, inplace);
    fill_input(co, k);
    if (b->warm_each && b->warmup > 0 && !run_batch(b, co, k, b->warmup)) return 0;
    if (!checked(b, "barrier", hoop_barrier(b->comm))) return 0;
    double t0 = now_s();
    if (!run_batch(b, co, k, b->iters)) return 0;
    v->us = (now_s() - t0) / b->iters * 1e6;
    v->ran = 1;
    if (!b->check || !co->expect) return 1;

    size_t ns = kind_send(co->counts, k->count, k->size),
           nr = kind_recv(co->counts, k->count, k->size);
    memset(b->rbuf, SENTINEL_BYTE, (ns > nr ? ns : nr) * k->es);
    fill_input(co, k);
    if (!checked(b, co->name, co->run(k, NULL, NULL))) return 0;
    v->checked = 1;
    if (rank_receives(co, k))
        for (size_t i = 0; i < nr; i++)
            if (rc_ld(k->r, i, k->es) != rc_ld(b->ebuf, i, k->es)) v->wrong++;
    return 1;
}

/* Combines the ranks' times as -a asks and sums their wrong elements. */
static int combine(bench_t *b, row_t *row)
{
    double t[2] = {row->v[0].us, row->v[1].us};
    uint64_t w[2] = {row->v[0].wrong, row->v[1].wrong};
    /* -a 1, 2, 3: mean, min, max over ranks; -a 0 broadcasts rank 0's instead */
    static const hoop_op_t time_ops[4] = {HOOP_SUM, HOOP_AVG, HOOP_MIN, HOOP_MAX};
    hoop_result_t e = b->average == 0
                          ? hoop_broadcast(b->comm, t, 2, HOOP_FLOAT64, 0)
                          : hoop_allreduce(b->comm, t, t, 2, HOOP_FLOAT64, time_ops[b->average]);
    if (e == HOOP_OK) e = hoop_allreduce(b->comm, w, w, 2, HOOP_UINT64, HOOP_SUM);
    if (!checked(b, "combining the ranks' results", e)) return 0;
    for (int ip = 0; ip < 2; ip++) {
        variant_t *v = &row->v[ip];
        v->us = t[ip];
        v->wrong = w[ip];
        if (!v->ran || !b->coll->bus_factor) continue;
        v->has_bw = 1;
        v->algbw = v->us > 0 ? (double)row->size / 1e9 / (v->us * 1e-6) : 0.0;
        v->busbw = v->algbw * b->coll->bus_factor(b->size);
        b->bw_sum += v->busbw;
        b->bw_count++;
    }
    b->wrong_total += w[0] + w[1];
    return 1;
}

static void print_row(const row_t *row)
{
    char root[16];
    snprintf(root, sizeof root, "%d", row->root);
    printf("%12zu  %12zu  %8s  %6s  %6s", row->size, row->count,
           row->dt >= 0 ? hoop_dtype_name((hoop_dtype_t)row->dt) : "none",
           row->op >= 0 ? hoop_op_name((hoop_op_t)row->op) : "none", root);
    for (int ip = 0; ip < 2; ip++) {
        const variant_t *v = &row->v[ip];
        char ts[32] = "N/A", ab[16] = "N/A", bb[16] = "N/A", ws[32];
        if (v->ran) bench_time_str(v->us, ts, sizeof ts);
        if (v->has_bw) {
            snprintf(ab, sizeof ab, "%6.2f", v->algbw);
            snprintf(bb, sizeof bb, "%6.2f", v->busbw);
        }
        if (v->checked)
            snprintf(ws, sizeof ws, "%5" PRIu64, v->wrong);
        else
            snprintf(ws, sizeof ws, "%5s", "N/A");
        printf("  %7s  %6s  %6s  %5s", ts, ab, bb, ws);
    }
    printf("\n");
    fflush(stdout);
}

static int keep_row(bench_t *b, const row_t *row)
{
    if (b->nrows == b->rows_cap) {
        size_t cap = b->rows_cap ? 2 * b->rows_cap : 64;
        row_t *r = realloc(b->rows, cap * sizeof *r);
        if (!r) {
            fprintf(stderr, "hoop-perf: out of memory for the --json/--csv rows\n");
            return 0;
        }
        b->rows = r;
        b->rows_cap = cap;
    }
    b->rows[b->nrows] = *row;
    b->rows[b->nrows++].algo = b->algo;
    return 1;
}

static int run_row(bench_t *b, size_t bytes, hoop_dtype_t dt, hoop_op_t op, int root)
{
    const coll_t *co = b->coll;
    size_t es = hoop_dtype_size(dt), count = kind_count(co->counts, bytes, es, b->size);
    size_t ns = kind_send(co->counts, count, b->size), nr = kind_recv(co->counts, count, b->size);
    call_t k = make_call(b, dt, op, root < 0 ? 0 : root, count);
    row_t row;
    memset(&row, 0, sizeof row);
    row.size = (ns > nr ? ns : nr) * es;
    row.count = count;
    row.dt = co->counts == CK_NONE ? -1 : (int)dt;
    row.op = co->flags & F_OP ? (int)op : -1;
    row.root = root;
    if (b->check && rank_receives(co, &k))
        for (size_t i = 0; i < nr; i++) rc_st(b->ebuf, i, es, co->expect(&k, b->rank, i));
    int variants = co->flags & F_NO_INPLACE || b->model ? 1 : 2;
    for (int ip = 0; ip < variants; ip++)
        if (!run_variant(b, co, &k, ip, &row.v[ip])) return 0;
    if (!combine(b, &row)) return 0;
    if (b->rank != 0) return 1;
    if (b->model) {
        print_model_row(b, &row);
        return 1;
    }
    print_row(&row);
    return !(b->json || b->csv) || keep_row(b, &row);
}

/* The size after `bytes`, or 0 when the range is done. */
static int next_size(const bench_t *b, size_t *bytes)
{
    size_t v = *bytes;
    if (b->factor > 1) {
        if (v > b->maxb / b->factor) return 0;
        v = v == 0 ? 1 : v * b->factor;
    } else {
        if (v > b->maxb - b->step) return 0;
        v += b->step;
    }
    *bytes = v;
    return v <= b->maxb;
}

static int run_sizes(bench_t *b, hoop_dtype_t dt, hoop_op_t op, int root)
{
    const coll_t *co = b->coll;
    size_t es = hoop_dtype_size(dt);
    /* Warm up at the largest and the smallest size, as nccl-tests does. */
    size_t ends[2] = {b->maxb, b->minb};
    for (int i = 0; i < 2 && b->warmup > 0; i++) {
        call_t k =
            make_call(b, dt, op, root < 0 ? 0 : root, kind_count(co->counts, ends[i], es, b->size));
        place(b, co, &k, 0);
        if (!run_batch(b, co, &k, b->warmup)) return 0;
    }
    if (co->counts == CK_NONE) return run_row(b, 0, dt, op, root);
    size_t bytes = b->minb;
    do {
        if (!run_row(b, bytes, dt, op, root)) return 0;
    } while (next_size(b, &bytes));
    return 1;
}

static int run_all(bench_t *b)
{
    const coll_t *co = b->coll;
    for (int d = 0; d < HOOP_DTYPE_COUNT; d++) {
        if (!(b->dtypes & (1u << d))) continue;
        for (int o = 0; o < HOOP_OP_COUNT; o++) {
            if (co->flags & F_OP ? !(b->ops & (1u << o)) : o != 0) continue;
            int r0 = -1, r1 = -1;
            if (co->flags & F_ROOT) {
                r0 = b->root < 0 ? 0 : b->root;
                r1 = b->root < 0 ? b->size - 1 : b->root;
            }
            for (int r = r0; r <= r1; r++)
                if (!run_sizes(b, (hoop_dtype_t)d, (hoop_op_t)o, r)) return 0;
        }
        if (co->counts == CK_NONE) break; /* no data: one pass */
    }
    return 1;
}

/* ---- --json and --csv ---- */

#define NFIELDS 17
static const char *const FIELD_NAMES[NFIELDS] = {
    "collective", "algo",       "transport", "ranks",       "size_bytes", "count",
    "type",       "redop",      "root",      "oop_time_us", "oop_algbw",  "oop_busbw",
    "oop_wrong",  "ip_time_us", "ip_algbw",  "ip_busbw",    "ip_wrong"};

/* A string (str set), a number (num), or nothing (both empty: CSV "", JSON null). */
typedef struct field {
    const char *str;
    char num[40];
} field_t;

static void row_fields(const bench_t *b, const row_t *row, field_t f[NFIELDS])
{
    memset(f, 0, NFIELDS * sizeof *f);
    f[0].str = b->coll->name;
    f[1].str = row->algo;
    f[2].str = b->transport;
    snprintf(f[3].num, sizeof f[3].num, "%d", b->size);
    snprintf(f[4].num, sizeof f[4].num, "%zu", row->size);
    snprintf(f[5].num, sizeof f[5].num, "%zu", row->count);
    f[6].str = row->dt >= 0 ? hoop_dtype_name((hoop_dtype_t)row->dt) : "none";
    f[7].str = row->op >= 0 ? hoop_op_name((hoop_op_t)row->op) : "none";
    snprintf(f[8].num, sizeof f[8].num, "%d", row->root);
    for (int ip = 0; ip < 2; ip++) {
        const variant_t *v = &row->v[ip];
        field_t *g = &f[9 + 4 * ip];
        if (v->ran) snprintf(g[0].num, sizeof g[0].num, "%.3f", v->us);
        if (v->has_bw) {
            snprintf(g[1].num, sizeof g[1].num, "%.6f", v->algbw);
            snprintf(g[2].num, sizeof g[2].num, "%.6f", v->busbw);
        }
        if (v->checked) snprintf(g[3].num, sizeof g[3].num, "%" PRIu64, v->wrong);
    }
}

static void csv_str(FILE *f, const char *s)
{
    if (strpbrk(s, ",\"\r\n") == NULL) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static int write_csv(const bench_t *b)
{
    FILE *f = b->csv;
    for (int i = 0; i < NFIELDS; i++) fprintf(f, "%s%s", i ? "," : "", FIELD_NAMES[i]);
    fputc('\n', f);
    for (size_t r = 0; r < b->nrows; r++) {
        field_t fs[NFIELDS];
        row_fields(b, &b->rows[r], fs);
        for (int i = 0; i < NFIELDS; i++) {
            if (i) fputc(',', f);
            if (fs[i].str)
                csv_str(f, fs[i].str);
            else
                fputs(fs[i].num, f);
        }
        fputc('\n', f);
    }
    return fflush(f) == 0 && !ferror(f);
}

static int write_json(const bench_t *b, int ok)
{
    FILE *f = b->json;
    fprintf(f, "{\n  \"tool\": \"hoop-perf\",\n  \"version\": ");
    json_str(f, hoop_version());
    fprintf(f, ",\n  \"collective\": ");
    json_str(f, b->coll->name);
    fprintf(f, ",\n  \"algo\": ");
    json_str(f, b->algo);
    fprintf(f, ",\n  \"transport\": ");
    json_str(f, b->transport);
    fprintf(f,
            ",\n  \"ranks\": %d,\n  \"min_bytes\": %zu,\n  \"max_bytes\": %zu,\n  \"%s\": %zu,\n"
            "  \"iters\": %d,\n  \"warmup_iters\": %d,\n  \"check\": %d,\n  \"blocking\": %d,\n"
            "  \"average\": %d,\n  \"out_of_bounds\": %" PRIu64 ",\n  \"avg_busbw\": %.6f,\n"
            "  \"ok\": %s,\n  \"rows\": [",
            b->size, b->minb, b->maxb, b->factor > 1 ? "step_factor" : "step_bytes",
            b->factor > 1 ? b->factor : b->step, b->iters, b->warmup, b->check, b->blocking,
            b->average, b->wrong_total, b->bw_count ? b->bw_sum / b->bw_count : 0.0,
            ok ? "true" : "false");
    for (size_t r = 0; r < b->nrows; r++) {
        field_t fs[NFIELDS];
        row_fields(b, &b->rows[r], fs);
        fprintf(f, "%s\n    {", r ? "," : "");
        for (int i = 0; i < NFIELDS; i++) {
            fprintf(f, "%s\"%s\": ", i ? ", " : "", FIELD_NAMES[i]);
            if (fs[i].str)
                json_str(f, fs[i].str);
            else
                fputs(fs[i].num[0] ? fs[i].num : "null", f);
        }
        fputc('}', f);
    }
    fprintf(f, "\n  ]\n}\n");
    return fflush(f) == 0 && !ferror(f);
}

/* ---- header ---- */

typedef struct rank_info {
    int32_t pid;
    int32_t local_rank;
    char host[56];
} rank_info_t;

static int print_header(bench_t *b)
{
    rank_info_t me, *all = calloc((size_t)b->size, sizeof *all);
    if (!all) {
        fprintf(stderr, "hoop-perf: rank %d: out of memory\n", b->rank);
        return 0;
    }
    memset(&me, 0, sizeof me);
    me.pid = (int32_t)getpid();
    const char *lr = getenv("LOCAL_RANK");
    me.local_rank = lr ? atoi(lr) : -1;
    if (gethostname(me.host, sizeof me.host - 1) != 0) snprintf(me.host, sizeof me.host, "unknown");
    if (!checked(b, "allgather of the rank list",
                 hoop_allgather(b->comm, &me, all, sizeof me, HOOP_UINT8))) {
        free(all);
        return 0;
    }
    if (b->rank == 0) {
        char step[48];
        if (b->factor > 1)
            snprintf(step, sizeof step, "%zu(factor)", b->factor);
        else
            snprintf(step, sizeof step, "%zu(bytes)", b->step);
        printf("# hoop-perf %s: nRanks %d minBytes %zu maxBytes %zu step: %s warmup iters: %d "
               "iters: %d validation: %d blocking: %d\n",
               b->coll->name, b->size, b->minb, b->maxb, step, b->warmup, b->iters, b->check,
               b->blocking);
        printf("# hoop %s transport: %s algorithm: %s\n", hoop_version(), b->transport, b->algo);
        printf("#\n# Using ranks\n");
        for (int r = 0; r < b->size; r++) {
            all[r].host[sizeof all[r].host - 1] = '\0';
            printf("#  Rank %2d Pid %6d on %10s local rank %2d\n", r, (int)all[r].pid, all[r].host,
                   (int)all[r].local_rank);
        }
        printf("#\n");
        printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place  "
               "        \n",
               "", "", "", "", "");
        printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size",
               "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
               "algbw", "busbw", "#wrong");
        printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)",
               "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
               "");
        fflush(stdout);
    }
    free(all);
    return 1;
}

/* ---- --model ---- */

static const char *const MODEL_ALGOS[4] = {"ring", "rd", "tree", "ps"};

static int ceil_log2(int p)
{
    int l = 0;
    while ((1L << l) < p) l++;
    return l;
}

/* Predicted seconds of an all-reduce of n bytes on p ranks, for each of MODEL_ALGOS. */
static void predict(const bench_t *b, double n, double out[4])
{
    double a = b->alpha, be = b->beta, c = b->gamma, p = b->size, pm1 = p - 1;
    double L = ceil_log2(b->size);
    out[0] = 2 * pm1 * a + 2 * (pm1 / p) * n * be + (pm1 / p) * n * c;
    out[1] = L * (a + n * be + n * c);
    out[2] = 2 * L * (a + n * be) + L * n * c;
    out[3] = 2 * pm1 * (a + n * be) + pm1 * n * c;
}

/* Half the round trip of `bytes` between ranks 0 and 1, in seconds; other ranks return at once. */
static int ping_pong(const bench_t *b, unsigned char *buf, size_t bytes, int rounds, double *half)
{
    *half = 0;
    if (b->rank > 1) return 1;
    int peer = 1 - b->rank, warm = rounds / 10 + 1;
    double t0 = now_s();
    for (int i = -warm; i < rounds; i++) {
        if (i == 0) t0 = now_s();
        hoop_result_t e;
        if (b->rank == 0) {
            e = hoop_send(b->comm, buf, bytes, HOOP_UINT8, peer);
            if (e == HOOP_OK) e = hoop_recv(b->comm, buf, bytes, HOOP_UINT8, peer);
        } else {
            e = hoop_recv(b->comm, buf, bytes, HOOP_UINT8, peer);
            if (e == HOOP_OK) e = hoop_send(b->comm, buf, bytes, HOOP_UINT8, peer);
        }
        if (!checked(b, "ping-pong", e)) return 0;
    }
    *half = (now_s() - t0) / rounds / 2;
    return 1;
}

/* Seconds per byte of one input that hoop_reduce_local takes to sum float32 buffers. */
static int reduce_speed(const bench_t *b, double *gamma)
{
    size_t count = MODEL_LARGE_BYTES / sizeof(float);
    float *x = malloc(MODEL_LARGE_BYTES), *y = malloc(MODEL_LARGE_BYTES),
          *out = malloc(MODEL_LARGE_BYTES);
    int ok = x && y && out, reps = 10;
    if (!ok) fprintf(stderr, "hoop-perf: out of memory for the reduction timing\n");
    for (size_t i = 0; ok && i < count; i++) {
        x[i] = (float)(i % 7);
        y[i] = (float)(i % 5);
    }
    double t0 = now_s();
    for (int i = -2; ok && i < reps; i++) {
        if (i == 0) t0 = now_s();
        ok = checked(b, "hoop_reduce_local",
                     hoop_reduce_local(out, x, y, count, HOOP_FLOAT32, HOOP_SUM));
    }
    *gamma = ok ? (now_s() - t0) / reps / MODEL_LARGE_BYTES : 0.0;
    free(x);
    free(y);
    free(out);
    return ok;
}

static int measure_model(bench_t *b)
{
    unsigned char *buf = calloc(1, MODEL_LARGE_BYTES);
    double small = 0, large = 0;
    int ok = buf != NULL;
    if (!ok) fprintf(stderr, "hoop-perf: rank %d: out of memory\n", b->rank);
    if (ok && b->size >= 2)
        ok = ping_pong(b, buf, 8, 200, &small) && ping_pong(b, buf, MODEL_LARGE_BYTES, 10, &large);
    free(buf);
    if (ok && b->rank == 0) ok = reduce_speed(b, &b->gamma);
    b->alpha = small;
    b->beta = large > small ? (large - small) / MODEL_LARGE_BYTES : 0.0;
    return ok;
}

static void print_model_header(const bench_t *b)
{
    int p = b->size, L = ceil_log2(p);
    printf("# hoop-perf model: all-reduce of float32 sum on %d ranks\n", p);
    printf("# measured: algorithm %s (--algo or HOOP_ALGO; run once per algorithm to measure "
           "each)\n",
           b->algo);
    if (p < 2) printf("# alpha and beta need 2 ranks: taken as 0\n");
    printf("# alpha (latency)            %10.2f us      8-byte ping-pong of ranks 0 and 1, half "
           "the round trip\n",
           b->alpha * 1e6);
    printf("# beta  (per byte moved)     %10.3e s/B     %.3f GB/s: %u-byte ping-pong, minus "
           "alpha\n",
           b->beta, b->beta > 0 ? 1e-9 / b->beta : 0.0, MODEL_LARGE_BYTES);
    printf("# gamma (per byte reduced)   %10.3e s/B     %.3f GB/s: hoop_reduce_local, float32 sum "
           "of %u bytes\n",
           b->gamma, b->gamma > 0 ? 1e-9 / b->gamma : 0.0, MODEL_LARGE_BYTES);
    printf("#\n# predicted time of an all-reduce of n bytes, p = %d, L = ceil(log2 p) = %d:\n", p,
           L);
    printf("#   ring  2(p-1) a + 2((p-1)/p) n b + ((p-1)/p) n c\n");
    printf("#   rd    L (a + n b + n c)                  recursive doubling\n");
    printf("#   tree  2 L (a + n b) + L n c              binomial reduce, then binomial "
           "broadcast\n");
    printf("#   ps    2(p-1)(a + n b) + (p-1) n c        at the server, which receives p-1 "
           "buffers and sends p-1\n");
    if (p > 2 && (p & (p - 1)) != 0)
        printf("#   p = %d is not a power of two: hoop's rd first folds %d rank(s) into a partner\n"
               "#   (a + n b + n c, one of the L steps) and hands them the result at the end\n"
               "#   (a + n b more, not in the formula)\n",
               p, p - (1 << (ceil_log2(p) - 1)));
    printf("# best: the algorithm with the lowest prediction\n");
    printf("#\n# %10s  %12s  %9s  %9s  %9s  %9s  %9s  %5s  %6s\n", "size", "count", "measured",
           "ring", "rd", "tree", "ps", "best", "#wrong");
    printf("# %10s  %12s  %9s  %9s  %9s  %9s  %9s  %5s  %6s\n", "(B)", "(elements)", "(us)", "(us)",
           "(us)", "(us)", "(us)", "", "");
    fflush(stdout);
}

static void print_model_row(const bench_t *b, const row_t *row)
{
    double pred[4];
    int best = 0;
    predict(b, (double)row->size, pred);
    for (int i = 1; i < 4; i++)
        if (pred[i] < pred[best]) best = i;
    char ws[32];
    if (row->v[0].checked)
        snprintf(ws, sizeof ws, "%6" PRIu64, row->v[0].wrong);
    else
        snprintf(ws, sizeof ws, "%6s", "N/A");
    printf("%12zu  %12zu  %9.2f  %9.2f  %9.2f  %9.2f  %9.2f  %5s  %s\n", row->size, row->count,
           row->v[0].us, pred[0] * 1e6, pred[1] * 1e6, pred[2] * 1e6, pred[3] * 1e6,
           MODEL_ALGOS[best], ws);
    fflush(stdout);
}

/* ---- --explain ---- */

typedef struct trace_buf {
    char *text; /* lines, each ending in '\n'; always NUL-terminated */
    size_t len;
    uint64_t dropped;
} trace_buf_t;

/* Runs on whichever thread runs the collective; the buffer is read only after the call returns,
 * which orders these writes before the reads. */
static void trace_append(void *ctx, const char *line)
{
    trace_buf_t *t = ctx;
    size_t n = strcspn(line, "\n");
    if (t->len + n + 2 > TRACE_BYTES) {
        t->dropped++;
        return;
    }
    memcpy(t->text + t->len, line, n);
    t->len += n;
    t->text[t->len++] = '\n';
    t->text[t->len] = '\0';
}

typedef struct trace_line {
    int step, rank;
    size_t seq;
    const char *text;
    int len;
} trace_line_t;

static int by_step_then_rank(const void *pa, const void *pb)
{
    const trace_line_t *a = pa, *b = pb;
    if (a->step != b->step) return a->step < b->step ? -1 : 1;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* "<collective>#<call> <algo> step <k>: ..." gives k; -1 for a line without a step. */
static int line_step(const char *s, size_t len)
{
    const char *colon = memchr(s, ':', len), *p = s;
    if (!colon) return -1;
    for (;;) {
        const char *q = memchr(p, ' ', (size_t)(colon - p));
        if (!q) return -1;
        p = q + 1;
        if (colon - p > 5 && !strncmp(p, "step ", 5)) {
            char *end;
            long k = strtol(p + 5, &end, 10);
            return end == colon && k >= 0 && k < 1000000 ? (int)k : -1;
        }
    }
}

static void print_schedule(const bench_t *b, const char *all, const uint64_t *stats)
{
    size_t cap = 0, n = 0;
    for (int r = 0; r < b->size; r++)
        for (const char *p = all + (size_t)r * TRACE_BYTES; *p; p++) cap += *p == '\n';
    cap += (size_t)b->size; /* a last line without its newline */
    trace_line_t *lines = calloc(cap ? cap : 1, sizeof *lines);
    if (!lines) {
        fprintf(stderr, "hoop-perf: out of memory for the schedule\n");
        return;
    }
    for (int r = 0; r < b->size; r++) {
        int step = -1; /* a line without a step stays after the line before it */
        for (const char *p = all + (size_t)r * TRACE_BYTES; *p;) {
            const char *e = strchr(p, '\n');
            size_t len = e ? (size_t)(e - p) : strlen(p);
            int k = line_step(p, len);
            if (k >= 0) step = k;
            lines[n] = (trace_line_t){step, r, n, p, (int)len};
            n++;
            p += e ? len + 1 : len;
        }
    }
    qsort(lines, n, sizeof *lines, by_step_then_rank);
    printf("# schedule, by step then rank:\n");
    for (size_t i = 0; i < n; i++)
        printf("[rank %d] %.*s\n", lines[i].rank, lines[i].len, lines[i].text);
    for (int r = 0; r < b->size; r++)
        if (stats[r * 6 + 4])
            printf("# rank %d: %" PRIu64 " more lines left out (%d bytes of trace per rank)\n", r,
                   stats[r * 6 + 4], TRACE_BYTES);
    if (n == 0) printf("# (no schedule lines: the library traced nothing)\n");
    free(lines);
}

static void print_traffic(const bench_t *b, size_t bytes, const uint64_t *stats)
{
    printf("#\n# traffic of this all-reduce: payload bytes per rank; x: multiple of the %zu-byte "
           "buffer\n",
           bytes);
    printf("# %5s  %12s  %6s  %12s  %6s  %9s  %9s\n", "rank", "sent", "x", "received", "x",
           "msgs sent", "msgs recv");
    uint64_t tot[4] = {0, 0, 0, 0};
    for (int r = 0; r < b->size; r++) {
        const uint64_t *s = &stats[r * 6];
        double xs = bytes ? (double)s[0] / (double)bytes : 0.0,
               xr = bytes ? (double)s[1] / (double)bytes : 0.0;
        printf("  %5d  %12" PRIu64 "  %5.2fx  %12" PRIu64 "  %5.2fx  %9" PRIu64 "  %9" PRIu64 "\n",
               r, s[0], xs, s[1], xr, s[2], s[3]);
        for (int i = 0; i < 4; i++) tot[i] += s[i];
    }
    printf("  %5s  %12" PRIu64 "  %6s  %12" PRIu64 "  %6s  %9" PRIu64 "  %9" PRIu64 "\n", "all",
           tot[0], "", tot[1], "", tot[2], tot[3]);
}

static int run_explain(bench_t *b)
{
    const coll_t *co = b->coll;
    call_t k = make_call(b, HOOP_FLOAT32, HOOP_SUM, 0, b->minb / sizeof(float));
    size_t bytes = k.count * k.es;
    trace_buf_t tb = {calloc(1, TRACE_BYTES), 0, 0};
    char *all = b->rank == 0 ? calloc((size_t)b->size, TRACE_BYTES) : NULL;
    uint64_t mine[6] = {0}, *stats = calloc((size_t)b->size * 6, sizeof *stats);
    int ok = tb.text && stats && (all || b->rank != 0);
    if (!ok) fprintf(stderr, "hoop-perf: rank %d: out of memory\n", b->rank);
    hoop_stats_t s0, s1;
    if (ok) {
        place(b, co, &k, 0);
        fill_input(co, &k);
        memset(k.r, SENTINEL_BYTE, bytes);
        ok = checked(b, "barrier", hoop_barrier(b->comm)) &&
             checked(b, "hoop_comm_stats", hoop_comm_stats(b->comm, &s0)) &&
             checked(b, "hoop_comm_set_trace", hoop_comm_set_trace(b->comm, trace_append, &tb));
    }
    if (ok) {
        ok = checked(b, co->name, co->run(&k, NULL, NULL));
        ok = checked(b, "hoop_comm_set_trace", hoop_comm_set_trace(b->comm, NULL, NULL)) && ok;
        ok = ok && checked(b, "hoop_comm_stats", hoop_comm_stats(b->comm, &s1));
    }
    if (ok) {
        uint64_t wrong = 0;
        for (size_t i = 0; i < k.count; i++)
            if (rc_ld(k.r, i, k.es) != co->expect(&k, b->rank, i)) wrong++;
        uint64_t v[6] = {s1.bytes_sent - s0.bytes_sent,
                         s1.bytes_received - s0.bytes_received,
                         s1.messages_sent - s0.messages_sent,
                         s1.messages_received - s0.messages_received,
                         tb.dropped,
                         wrong};
        memcpy(mine, v, sizeof mine);
        ok = checked(b, "gather of the traces",
                     hoop_gather(b->comm, tb.text, all, TRACE_BYTES, HOOP_UINT8, 0)) &&
             checked(b, "gather of the traffic",
                     hoop_gather(b->comm, mine, stats, 6, HOOP_UINT64, 0));
    }
    if (ok) {
        uint64_t wrong = mine[5];
        ok = checked(b, "allreduce of the check",
                     hoop_allreduce(b->comm, &wrong, &wrong, 1, HOOP_UINT64, HOOP_SUM));
        b->wrong_total = wrong;
    }
    if (ok && b->rank == 0) {
        printf("# hoop-perf explain: one all-reduce of %zu bytes (%zu float32, sum) on %d ranks, "
               "algorithm %s\n#\n",
               bytes, k.count, b->size, b->algo);
        for (int r = 0; r < b->size; r++) all[(size_t)(r + 1) * TRACE_BYTES - 1] = '\0';
        print_schedule(b, all, stats);
        print_traffic(b, bytes, stats);
        printf("#\n# Out of bounds values : %" PRIu64 " %s\n", b->wrong_total,
               b->wrong_total ? "FAILED" : "OK");
        fflush(stdout);
    }
    free(tb.text);
    free(all);
    free(stats);
    return ok;
}

/* ---- options ---- */

static int parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno || s[0] == '-') return -1;
    unsigned long long mul = 1;
    switch (*end) {
    case 'K':
    case 'k':
        mul = 1ull << 10;
        end++;
        break;
    case 'M':
    case 'm':
        mul = 1ull << 20;
        end++;
        break;
    case 'G':
    case 'g':
        mul = 1ull << 30;
        end++;
        break;
    default: break;
    }
    if (*end == 'B' || *end == 'b') end++;
    if (*end != '\0' || v > SIZE_MAX / mul) return -1;
    *out = (size_t)(v * mul);
    return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

static int parse_dtypes(const char *s, unsigned *mask)
{
    static const struct {
        const char *alias;
        hoop_dtype_t dt;
    } aliases[] = {{"float", HOOP_FLOAT32}, {"half", HOOP_FLOAT16}, {"double", HOOP_FLOAT64},
                   {"bf16", HOOP_BFLOAT16}, {"char", HOOP_INT8},    {"int", HOOP_INT32},
                   {"uint", HOOP_UINT32}};
    if (!strcmp(s, "all")) {
        *mask = (1u << HOOP_DTYPE_COUNT) - 1;
        return 0;
    }
    for (int d = 0; d < HOOP_DTYPE_COUNT; d++)
        if (!strcmp(s, hoop_dtype_name((hoop_dtype_t)d))) {
            *mask = 1u << d;
            return 0;
        }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcmp(s, aliases[i].alias)) {
            *mask = 1u << aliases[i].dt;
            return 0;
        }
    return -1;
}

static int parse_ops(const char *s, unsigned *mask)
{
    if (!strcmp(s, "all")) {
        *mask = (1u << HOOP_OP_COUNT) - 1;
        return 0;
    }
    for (int o = 0; o < HOOP_OP_COUNT; o++)
        if (!strcmp(s, hoop_op_name((hoop_op_t)o))) {
            *mask = 1u << o;
            return 0;
        }
    return -1;
}

static void usage(FILE *f)
{
    fputs(
        "usage: hoop-perf [COLLECTIVE] [options]\n"
        "Every rank runs it: under hooprun, mpirun, srun or torchrun (without a launcher it runs\n"
        "as a single rank). Output and options follow nccl-tests.\n"
        "\n"
        "COLLECTIVE  allreduce (default), broadcast, reduce, allgather, gather, scatter,\n"
        "            reducescatter, alltoall, sendrecv, barrier (all_reduce etc. also accepted)\n"
        "\n"
        "  -b, --minbytes BYTES      smallest size (default 8; K, M, G suffixes)\n"
        "  -e, --maxbytes BYTES      largest size (default 64M)\n"
        "  -f, --stepfactor F        multiply the size by F from row to row (default 2)\n"
        "  -i, --stepbytes BYTES     add BYTES from row to row instead (when -f is absent or 1;\n"
        "                            default 1M then)\n"
        "  -n, --iters N             timed iterations per row (default 20)\n"
        "  -w, --warmup_iters N      warm-up iterations at the largest and smallest size, for\n"
        "                            every type, op and root (default 5)\n"
        "  --warm-each               also run the warm-up iterations before every timed row\n"
        "  -c, --check 0|1           count wrong elements (default 1)\n"
        "  -z, --blocking 0|1|2      0: post all iterations as nonblocking calls, then wait for\n"
        "                            them (default); 1: every call completes and then all ranks\n"
        "                            meet at a barrier before the next (the barrier is timed);\n"
        "                            2: blocking calls back to back, as MPI benchmarks time theirs\n"
        "  -a, --average 0|1|2|3     time reported: rank 0's, the mean, min or max over ranks\n"
        "                            (default 3, the slowest rank; nccl-tests' default is 1)\n"
        "  -d, --datatype T|all      int8 uint8 int32 uint32 int64 uint64 float16 (half)\n"
        "                            bfloat16 float32 (float) float64 (double) (default float32)\n"
        "  -o, --op OP|all           sum prod min max avg (default sum)\n"
        "  -r, --root R|all          root of broadcast, reduce, gather, scatter (default 0)\n"
        "  -g, --ngpus 1, -t, --nthreads 1   accepted for nccl-tests command lines\n"
        "  --algo NAME[,NAME...]     all-reduce algorithm (sets HOOP_ALGO): auto ring rd ps\n"
        "                            ps-sharded\n"
        "  --transport NAME          sets HOOP_TRANSPORT\n"
        "  --json FILE, --csv FILE   rank 0 also writes every row there\n"
        "  --model                   fit alpha (latency), beta (s per byte moved) and gamma (s "
        "per\n"
        "                            byte reduced), then print for every size from -b to -e the\n"
        "                            measured all-reduce (float32 sum, with --algo) beside the\n"
        "                            predictions of ring, rd, tree and ps (-d, -o ignored)\n"
        "  --explain                 trace one all-reduce of -b bytes of float32 (with --algo):\n"
        "                            every rank's schedule by step, then its traffic\n"
        "  -h, --help                this text\n"
        "\n",
        f);
    fputs(
        "columns\n"
        "  size    bytes of the largest buffer of the call: count x element size for allreduce,\n"
        "          broadcast, reduce and sendrecv; the total over ranks (ranks x count x element\n"
        "          size) for allgather, gather, reducescatter, scatter and alltoall, as "
        "nccl-tests\n"
        "          (so these sizes are rounded down to a multiple of ranks x element size)\n"
        "  count   the count passed to the call: per rank for allgather, gather, reducescatter,\n"
        "          scatter; per peer for alltoall; the whole buffer otherwise\n"
        "  time    microseconds per call, averaged over -n iterations, then over ranks as -a says\n"
        "  algbw   size / time, in GB/s (1e9 bytes per second)\n"
        "  busbw   algbw x bus factor, comparable across rank counts (n ranks): 2(n-1)/n "
        "allreduce;\n"
        "          (n-1)/n allgather, reducescatter, alltoall, gather, scatter; 1 broadcast,\n"
        "          reduce, sendrecv; barrier reports time only\n"
        "  #wrong  received elements that differ from independently computed values, summed over\n"
        "          ranks (reduce, gather: the root's result; N/A with -c 0). Inputs are exact in\n"
        "          every type whatever the order of reduction\n"
        "  in-place: one buffer, as nccl-tests: allgather and gather send from recvbuf +\n"
        "          rank x count; reducescatter and scatter receive at sendbuf + rank x count;\n"
        "          the others pass the same pointer twice. hoop_broadcast is in place: out of\n"
        "          place, the root's input is first copied to its receive buffer, untimed.\n"
        "          sendrecv (its send and receive would overlap) and barrier have no in-place\n"
        "          form (N/A)\n"
        "sendrecv: every rank sends to rank+1 and receives from rank-1 at once\n"
        "--csv/--json columns: collective, algo, transport, ranks, size_bytes, count, type, "
        "redop,\n"
        "  root, then time_us, algbw, busbw, wrong for oop (out of place) and ip (in place);\n"
        "  empty (CSV) or null (JSON) where the table says N/A\n"
        "exit status: 0 all right, 1 wrong elements or a failed call, 2 bad usage\n",
        f);
}

enum { OPT_ALGO = 256, OPT_TRANSPORT, OPT_JSON, OPT_CSV, OPT_MODEL, OPT_EXPLAIN, OPT_WARM_EACH };

typedef struct opts {
    int model, explain, factor_set, step_set;
    const char *algos; /* --algo as given, possibly a comma-separated list */
} opts_t;

/* Returns 0; -1 for -h; 2 after printing what is wrong. */
static int parse_args(int argc, char **argv, bench_t *b, opts_t *o)
{
    static const struct option longs[] = {{"minbytes", required_argument, NULL, 'b'},
                                          {"maxbytes", required_argument, NULL, 'e'},
                                          {"stepfactor", required_argument, NULL, 'f'},
                                          {"stepbytes", required_argument, NULL, 'i'},
                                          {"iters", required_argument, NULL, 'n'},
                                          {"warmup_iters", required_argument, NULL, 'w'},
                                          {"check", required_argument, NULL, 'c'},
                                          {"blocking", required_argument, NULL, 'z'},
                                          {"average", required_argument, NULL, 'a'},
                                          {"datatype", required_argument, NULL, 'd'},
                                          {"op", required_argument, NULL, 'o'},
                                          {"root", required_argument, NULL, 'r'},
                                          {"ngpus", required_argument, NULL, 'g'},
                                          {"nthreads", required_argument, NULL, 't'},
                                          {"algo", required_argument, NULL, OPT_ALGO},
                                          {"transport", required_argument, NULL, OPT_TRANSPORT},
                                          {"json", required_argument, NULL, OPT_JSON},
                                          {"csv", required_argument, NULL, OPT_CSV},
                                          {"warm-each", no_argument, NULL, OPT_WARM_EACH},
                                          {"model", no_argument, NULL, OPT_MODEL},
                                          {"explain", no_argument, NULL, OPT_EXPLAIN},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    int c, v = 0, li;
    opterr = 0;
    while ((li = -1, c = getopt_long(argc, argv, ":b:e:f:i:n:w:c:z:a:d:o:r:g:t:h", longs, &li)) !=
           -1) {
        int bad = 0;
        switch (c) {
        case 'b': bad = parse_size(optarg, &b->minb); break;
        case 'e': bad = parse_size(optarg, &b->maxb); break;
        case 'f':
            bad = parse_int(optarg, 1, 1 << 20, &v);
            b->factor = (size_t)v;
            o->factor_set = 1;
            break;
        case 'i':
            bad = parse_size(optarg, &b->step) || b->step == 0;
            o->step_set = 1;
            break;
        case 'n': bad = parse_int(optarg, 1, 1 << 24, &b->iters); break;
        case 'w': bad = parse_int(optarg, 0, 1 << 24, &b->warmup); break;
        case 'c': bad = parse_int(optarg, 0, 1, &b->check); break;
        case 'z': bad = parse_int(optarg, 0, 2, &b->blocking); break;
        case 'a': bad = parse_int(optarg, 0, 3, &b->average); break;
        case 'd': bad = parse_dtypes(optarg, &b->dtypes); break;
        case 'o': bad = parse_ops(optarg, &b->ops); break;
        case 'r':
            if (!strcmp(optarg, "all"))
                b->root = -1;
            else
                bad = parse_int(optarg, 0, 1 << 30, &b->root);
            break;
        case 'g':
        case 't': bad = parse_int(optarg, 1, 1, &v); break; /* one rank per process */
        case OPT_ALGO:
            /* A list (ring,ps) runs the sweep once per algorithm in one job. */
            o->algos = optarg;
            bad = optarg[0] == '\0' ||
                  (!strchr(optarg, ',') && setenv("HOOP_ALGO", optarg, 1) != 0);
            break;
        case OPT_TRANSPORT:
            bad = optarg[0] == '\0' || setenv("HOOP_TRANSPORT", optarg, 1) != 0;
            break;
        case OPT_JSON: b->json_path = optarg; break;
        case OPT_CSV: b->csv_path = optarg; break;
        case OPT_WARM_EACH: b->warm_each = 1; break;
        case OPT_MODEL: o->model = 1; break;
        case OPT_EXPLAIN: o->explain = 1; break;
        case 'h': return -1;
        case ':':
            fprintf(stderr, "hoop-perf: option %s needs a value (see hoop-perf -h)\n",
                    argv[optind - 1]);
            return 2;
        default:
            if (optopt)
                fprintf(stderr, "hoop-perf: unknown option '-%c' (see hoop-perf -h)\n", optopt);
            else
                fprintf(stderr, "hoop-perf: unknown option '%s' (see hoop-perf -h)\n",
                        argv[optind - 1]);
            return 2;
        }
        if (bad) {
            if (li >= 0)
                fprintf(stderr, "hoop-perf: bad value for --%s: '%s' (see hoop-perf -h)\n",
                        longs[li].name, optarg);
            else
                fprintf(stderr, "hoop-perf: bad value for -%c: '%s' (see hoop-perf -h)\n", c,
                        optarg);
            return 2;
        }
    }
    if (optind < argc) {
        b->coll = find_coll(argv[optind]);
        if (!b->coll || optind + 1 < argc) {
            fprintf(stderr, "hoop-perf: unknown collective '%s' (one of:", argv[optind]);
            for (size_t i = 0; i < NCOLLS; i++) fprintf(stderr, " %s", COLLS[i].name);
            fprintf(stderr, ")\n");
            return 2;
        }
    }
    if (!o->factor_set && o->step_set) b->factor = 1;
    if (b->factor <= 1 && !o->step_set) b->step = 1u << 20;
    if (b->minb > b->maxb) {
        fprintf(stderr, "hoop-perf: -b %zu is larger than -e %zu\n", b->minb, b->maxb);
        return 2;
    }
    if ((o->model || o->explain) &&
        (b->coll != &COLLS[0] || o->model + o->explain > 1 || b->json_path || b->csv_path)) {
        fprintf(stderr, "hoop-perf: --model and --explain are for allreduce, one at a time, "
                        "without --json/--csv\n");
        return 2;
    }
    return 0;
}

/* Buffers for the largest row of every chosen dtype; in place needs the larger of the two sides. */
static int alloc_buffers(bench_t *b)
{
    const coll_t *co = b->coll;
    size_t sb = 0, rb = 0, eb = 0;
    for (int d = 0; d < HOOP_DTYPE_COUNT; d++) {
        if (!(b->dtypes & (1u << d))) continue;
        size_t es = hoop_dtype_size((hoop_dtype_t)d),
               count = kind_count(co->counts, b->maxb, es, b->size);
        size_t ns = kind_send(co->counts, count, b->size) * es,
               nr = kind_recv(co->counts, count, b->size) * es;
        if (ns > sb) sb = ns;
        if (nr > eb) eb = nr;
        if (ns > rb) rb = ns;
        if (nr > rb) rb = nr;
    }
    b->sbuf = calloc(1, sb ? sb : 1);
    b->rbuf = calloc(1, rb ? rb : 1);
    b->ebuf = malloc(eb ? eb : 1);
    /* sendrecv posts two requests per iteration */
    b->reqs =
        calloc(2 * (size_t)(b->iters > b->warmup ? b->iters : b->warmup) + 2, sizeof *b->reqs);
    if (b->sbuf && b->rbuf && b->ebuf && b->reqs) return 1;
    fprintf(stderr, "hoop-perf: rank %d: out of memory for buffers of %zu bytes\n", b->rank, rb);
    return 0;
}

static FILE *open_output(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) fprintf(stderr, "hoop-perf: cannot write %s: %s\n", path, strerror(errno));
    return f;
}

/* Settles on every rank what only some may see (a bad root, no memory, a file not writable):
 * returns the worst status, 0 when all is well. */
static int agree(bench_t *b, int status)
{
    int32_t s = status;
    if (!checked(b, "allreduce of the start-up status",
                 hoop_allreduce(b->comm, &s, &s, 1, HOOP_INT32, HOOP_MAX)))
        return 1;
    return (int)s;
}

int main(int argc, char **argv)
{
    bench_t b;
    opts_t o;
    memset(&b, 0, sizeof b);
    memset(&o, 0, sizeof o);
    b.coll = &COLLS[0];
    b.minb = 8;
    b.maxb = 64u << 20;
    b.factor = 2;
    b.iters = 20;
    b.warmup = 5;
    b.check = 1;
    b.average = 3;
    b.dtypes = 1u << HOOP_FLOAT32;
    b.ops = 1u << HOOP_SUM;

    int rc = parse_args(argc, argv, &b, &o);
    if (rc < 0) {
        usage(stdout);
        return 0;
    }
    if (rc) return rc;
    if (o.model || o.explain) {
        b.dtypes = 1u << HOOP_FLOAT32;
        b.ops = 1u << HOOP_SUM;
        if (o.explain) b.maxb = b.minb;
    }
    const char *algo = getenv("HOOP_ALGO"), *tp = getenv("HOOP_TRANSPORT");
    b.algo = algo && algo[0] ? algo : "auto";
    b.transport = tp && tp[0] ? tp : "auto";

    hoop_result_t e = hoop_init_from_env(&b.comm);
    if (e != HOOP_OK) {
        fprintf(stderr,
                "hoop-perf: hoop_init failed: %s (see the message above; HOOP_ALGO=%s "
                "HOOP_TRANSPORT=%s)\n",
                hoop_error_string(e), b.algo, b.transport);
        return 1;
    }
    b.rank = hoop_comm_rank(b.comm);
    b.size = hoop_comm_size(b.comm);

    int status = 0;
    if (b.root >= b.size) {
        if (b.rank == 0)
            fprintf(stderr, "hoop-perf: -r %d: the root must be below the %d ranks\n", b.root,
                    b.size);
        status = 2;
    }
    if (b.coll->run == sendrecv_run && b.size < 2) {
        if (b.rank == 0) fprintf(stderr, "hoop-perf: sendrecv needs 2 ranks or more\n");
        status = 2;
    }
    if (!status && !alloc_buffers(&b)) status = 1;
    if (!status && b.rank == 0 && b.json_path && !(b.json = open_output(b.json_path))) status = 1;
    if (!status && b.rank == 0 && b.csv_path && !(b.csv = open_output(b.csv_path))) status = 1;
    status = agree(&b, status);

    int ok = status == 0;
    char *algo_list = NULL;
    if (ok && o.explain) {
        ok = run_explain(&b);
    } else if (ok && o.model) {
        b.model = 1;
        ok = measure_model(&b) && checked(&b, "barrier", hoop_barrier(b.comm));
        if (ok && b.rank == 0) print_model_header(&b);
        ok = ok && run_all(&b);
    } else if (ok) {
        ok = print_header(&b);
        if (o.algos != NULL && strchr(o.algos, ',') != NULL) {
            /* Rows point at their algorithm's name: the list lives until the end. */
            algo_list = strdup(o.algos);
            ok = ok && algo_list != NULL;
            for (char *save = NULL, *a = ok ? strtok_r(algo_list, ",", &save) : NULL;
                 ok && a != NULL; a = strtok_r(NULL, ",", &save)) {
                ok = checked(&b, "hoop_comm_set_algo", hoop_comm_set_algo(b.comm, a));
                b.algo = a;
                if (ok && b.rank == 0) printf("# --algo %s\n", a);
                ok = ok && run_all(&b);
            }
        } else {
            ok = ok && run_all(&b);
        }
        if (ok && b.rank == 0) {
            printf("# Out of bounds values : %" PRIu64 " %s\n", b.wrong_total,
                   b.wrong_total ? "FAILED" : "OK");
            printf("# Avg bus bandwidth    : %g \n", b.bw_count ? b.bw_sum / b.bw_count : 0.0);
            printf("#\n");
            fflush(stdout);
        }
    }
    if (b.csv && !write_csv(&b)) ok = 0;
    if (b.json && !write_json(&b, ok && b.wrong_total == 0)) ok = 0;
    if (b.csv && fclose(b.csv) != 0) ok = 0;
    if (b.json && fclose(b.json) != 0) ok = 0;
    if (!ok && status == 0) hoop_comm_abort(b.comm);
    hoop_comm_destroy(b.comm);
    free(b.sbuf);
    free(b.rbuf);
    free(b.ebuf);
    free(b.reqs);
    free(b.rows);
    free(algo_list);
    if (status) return status;
    return ok && b.wrong_total == 0 ? 0 : 1;
}
