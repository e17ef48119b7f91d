/*
 * hoop-perf: bandwidth and correctness of collectives, printed in the layout of nccl-tests so that
 * the numbers read the same way.
 *
 *   hooprun -n 4 hoop-perf [allreduce] [-b minbytes] [-e maxbytes] [-f factor] [-n iters]
 *                          [-w warmup] [-c 0|1] [-d dtype|all] [-o op|all] [-z 0|1]
 *
 * time:   the slowest rank's average over iters, in microseconds.
 * algbw:  bytes / time.
 * busbw:  algbw times the collective's bus factor (2(n-1)/n for all-reduce): what each link of an
 *         optimal ring carries, comparable across rank counts.
 * #wrong: elements that differ from an independently computed expected value, summed over ranks.
 *         Inputs are chosen so that every result is exact in every dtype, whatever the order in
 *         which the library reduces.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hoop.h"

#define SENTINEL_BYTE 0xA5

/* ---- elements: raw bits, float16 / bfloat16 written independently of the library ---- */

static float f32_from_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static uint32_t f32_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m * 0x1p-24f;
        return (h & 0x8000u) ? -v : v;
    }
    if (e == 31) return f32_from_bits(sign | 0x7f800000u | (m << 13));
    return f32_from_bits(sign | ((e + 112) << 23) | (m << 13));
}

static uint32_t round_shift(uint32_t v, unsigned shift)
{
    uint32_t q = v >> shift, rem = v & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return q;
}

static uint16_t float_to_half(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t exp = (x >> 23) & 0xffu, man = x & 0x7fffffu;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0u));
    int e = (int)exp - 112;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        unsigned shift = (unsigned)(14 - e);
        if (shift > 25) return sign;
        return (uint16_t)(sign | round_shift(man | 0x800000u, shift));
    }
    return (uint16_t)(sign | (((uint32_t)e << 10) + round_shift(man, 13)));
}

static float bf16_to_float(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

static uint16_t float_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static int is_float(hoop_dtype_t dt) { return dt >= HOOP_FLOAT16 && dt <= HOOP_FLOAT64; }

static int is_signed_int(hoop_dtype_t dt)
{
    return dt == HOOP_INT8 || dt == HOOP_INT32 || dt == HOOP_INT64;
}

static uint64_t width_mask(size_t es)
{
    return es >= 8 ? ~(uint64_t)0 : ((uint64_t)1 << (8 * es)) - 1;
}

static int64_t sign_extend(uint64_t v, size_t es)
{
    if (es >= 8) return (int64_t)v;
    unsigned sh = (unsigned)(64 - 8 * es);
    return (int64_t)(v << sh) >> sh;
}

static uint64_t ld(const void *buf, size_t i, size_t es)
{
    const unsigned char *p = (const unsigned char *)buf + i * es;
    uint8_t v8;
    uint16_t v16;
    uint32_t v32;
    uint64_t v64;
    switch (es) {
    case 1: memcpy(&v8, p, 1); return v8;
    case 2: memcpy(&v16, p, 2); return v16;
    case 4: memcpy(&v32, p, 4); return v32;
    default: memcpy(&v64, p, 8); return v64;
    }
}

static void st(void *buf, size_t i, size_t es, uint64_t v)
{
    unsigned char *p = (unsigned char *)buf + i * es;
    uint8_t v8 = (uint8_t)v;
    uint16_t v16 = (uint16_t)v;
    uint32_t v32 = (uint32_t)v;
    switch (es) {
    case 1: memcpy(p, &v8, 1); break;
    case 2: memcpy(p, &v16, 2); break;
    case 4: memcpy(p, &v32, 4); break;
    default: memcpy(p, &v, 8); break;
    }
}

static double fdec(hoop_dtype_t dt, uint64_t raw)
{
    double d;
    switch (dt) {
    case HOOP_FLOAT16: return half_to_float((uint16_t)raw);
    case HOOP_BFLOAT16: return bf16_to_float((uint16_t)raw);
    case HOOP_FLOAT32: return f32_from_bits((uint32_t)raw);
    default: memcpy(&d, &raw, sizeof d); return d;
    }
}

static uint64_t fenc_float(hoop_dtype_t dt, float f)
{
    switch (dt) {
    case HOOP_FLOAT16: return float_to_half(f);
    case HOOP_BFLOAT16: return float_to_bf16(f);
    default: return f32_bits(f);
    }
}

static uint64_t fenc(hoop_dtype_t dt, double v)
{
    uint64_t b;
    if (dt != HOOP_FLOAT64) return fenc_float(dt, (float)v);
    memcpy(&b, &v, sizeof b);
    return b;
}

/* Any integer value in the dtype (wrapping) or a double that the float dtype holds exactly. */
static uint64_t encode(hoop_dtype_t dt, size_t es, int64_t v)
{
    return is_float(dt) ? fenc(dt, (double)v) : (uint64_t)v & width_mask(es);
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
        return is_float(dt) ? fenc(dt, fvals[(h >> 3) % 4]) : encode(dt, es, ivals[(h >> 3) % 4]);
    }
    default: return encode(dt, es, (int64_t)((h >> 5) % 2001) - 1000);
    }
}

/* The naive reference: reduce every rank's input element, wrapping integers explicitly. */
static uint64_t reduce_ref(hoop_dtype_t dt, size_t es, hoop_op_t op, int n, size_t i)
{
    uint64_t mask = width_mask(es), first = input(dt, es, op, n, 0, i);
    if (op == HOOP_MIN || op == HOOP_MAX) {
        uint64_t best = first;
        for (int q = 1; q < n; q++) {
            uint64_t v = input(dt, es, op, n, q, i);
            int less, greater;
            if (is_float(dt)) {
                less = fdec(dt, v) < fdec(dt, best);
                greater = fdec(dt, v) > fdec(dt, best);
            } else if (is_signed_int(dt)) {
                less = sign_extend(v, es) < sign_extend(best, es);
                greater = sign_extend(v, es) > sign_extend(best, es);
            } else {
                less = v < best;
                greater = v > best;
            }
            if ((op == HOOP_MIN && less) || (op == HOOP_MAX && greater)) best = v;
        }
        return best;
    }
    if (is_float(dt)) {
        double acc = fdec(dt, first);
        for (int q = 1; q < n; q++) {
            double v = fdec(dt, input(dt, es, op, n, q, i));
            acc = op == HOOP_PROD ? acc * v : acc + v;
        }
        if (op != HOOP_AVG) return fenc(dt, acc);
        if (dt == HOOP_FLOAT64) return fenc(dt, acc / (double)n);
        return fenc_float(dt, (float)acc / (float)n);
    }
    uint64_t acc = first;
    for (int q = 1; q < n; q++) {
        uint64_t v = input(dt, es, op, n, q, i);
        acc = op == HOOP_PROD ? acc * v : acc + v;
    }
    acc &= mask;
    if (op != HOOP_AVG) return acc;
    if (is_signed_int(dt)) return (uint64_t)(sign_extend(acc, es) / (int64_t)n) & mask;
    return acc / (uint64_t)n;
}

/* ---- the collectives ---- */

typedef struct bench bench_t;

typedef struct coll {
    const char *name;
    int has_op, has_root;
    /* The call's count argument for a message of `bytes` (what nccl-tests calls the size). */
    size_t (*count_of)(size_t bytes, size_t es, int n);
    /* Elements in one rank's send and receive buffers for that count. */
    size_t (*send_elems)(size_t count, int n);
    size_t (*recv_elems)(size_t count, int n);
    /* Bytes reported in the size column. */
    size_t (*size_bytes)(size_t count, size_t es, int n);
    double (*bus_factor)(int n);
    /* Blocking when req is NULL. */
    hoop_result_t (*run)(hoop_comm_t *c, const void *s, void *r, size_t count, hoop_dtype_t dt,
                         hoop_op_t op, int root, hoop_request_t **req);
    /* Input element i of `rank`, and expected receive element i of `rank`. */
    uint64_t (*in)(hoop_dtype_t dt, size_t es, hoop_op_t op, int n, int rank, int root, size_t i);
    uint64_t (*expect)(hoop_dtype_t dt, size_t es, hoop_op_t op, int n, int rank, int root,
                       size_t count, size_t i);
} coll_t;

static size_t same_count(size_t bytes, size_t es, int n)
{
    (void)n;
    return bytes / es;
}
static size_t elems_count(size_t count, int n)
{
    (void)n;
    return count;
}
static size_t bytes_count(size_t count, size_t es, int n)
{
    (void)n;
    return count * es;
}
static double allreduce_factor(int n) { return n > 1 ? 2.0 * (n - 1) / n : 0.0; }

static hoop_result_t allreduce_run(hoop_comm_t *c, const void *s, void *r, size_t count,
                                   hoop_dtype_t dt, hoop_op_t op, int root, hoop_request_t **req)
{
    (void)root;
    return req ? hoop_iallreduce(c, s, r, count, dt, op, req)
               : hoop_allreduce(c, s, r, count, dt, op);
}

static uint64_t reduce_in(hoop_dtype_t dt, size_t es, hoop_op_t op, int n, int rank, int root,
                          size_t i)
{
    (void)root;
    return input(dt, es, op, n, rank, i);
}

static uint64_t allreduce_expect(hoop_dtype_t dt, size_t es, hoop_op_t op, int n, int rank,
                                 int root, size_t count, size_t i)
{
    (void)rank;
    (void)root;
    (void)count;
    return reduce_ref(dt, es, op, n, i);
}

/* More collectives plug in here with their own counts, bus factor, inputs and reference. */
static const coll_t COLLS[] = {
    {"allreduce", 1, 0, same_count, elems_count, elems_count, bytes_count, allreduce_factor,
     allreduce_run, reduce_in, allreduce_expect},
};

/* ---- the benchmark ---- */

struct bench {
    hoop_comm_t *comm;
    int rank, size;
    const coll_t *coll;
    size_t minb, maxb, factor;
    int iters, warmup, check, blocking;
    unsigned dtypes, ops; /* bit masks */
    unsigned char *sbuf, *rbuf, *ebuf;
    size_t sbytes, rbytes;
    hoop_request_t **reqs;
    double bw_sum;
    int bw_count;
    uint64_t wrong_total;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fail_call(bench_t *b, const char *what, hoop_result_t e)
{
    fprintf(stderr, "hoop-perf: rank %d: %s failed: %s: %s\n", b->rank, what, hoop_error_string(e),
            hoop_comm_last_error(b->comm));
    fflush(stderr);
}

/* Runs the collective iters times, blocking or all posted at once. Returns 0 on failure. */
static int run_iters(bench_t *b, const void *s, void *r, size_t count, hoop_dtype_t dt,
                     hoop_op_t op, int iters)
{
    if (b->blocking) {
        for (int i = 0; i < iters; i++) {
            hoop_result_t e = b->coll->run(b->comm, s, r, count, dt, op, 0, NULL);
            if (e != HOOP_OK) {
                fail_call(b, b->coll->name, e);
                return 0;
            }
        }
        return 1;
    }
    int posted = 0, ok = 1;
    for (; posted < iters; posted++) {
        hoop_result_t e = b->coll->run(b->comm, s, r, count, dt, op, 0, &b->reqs[posted]);
        if (e != HOOP_OK) {
            fail_call(b, b->coll->name, e);
            ok = 0;
            break;
        }
    }
    for (int i = 0; i < posted; i++) {
        hoop_result_t e = hoop_wait(b->reqs[i]);
        if (e != HOOP_OK && ok) {
            fail_call(b, "hoop_wait", e);
            ok = 0;
        }
    }
    return ok;
}

static void fill_input(const bench_t *b, unsigned char *buf, size_t n, hoop_dtype_t dt, size_t es,
                       hoop_op_t op)
{
    for (size_t i = 0; i < n; i++) st(buf, i, es, b->coll->in(dt, es, op, b->size, b->rank, 0, i));
}

/* Times one variant; when checking, runs it once more on fresh inputs and counts wrong elements. */
static int run_variant(bench_t *b, size_t count, hoop_dtype_t dt, hoop_op_t op, int inplace,
                       double *us, uint64_t *wrong)
{
    size_t es = hoop_dtype_size(dt), ns = b->coll->send_elems(count, b->size),
           nr = b->coll->recv_elems(count, b->size);
    unsigned char *s = inplace ? b->rbuf : b->sbuf;
    fill_input(b, s, ns, dt, es, op);
    hoop_result_t e = hoop_barrier(b->comm);
    if (e != HOOP_OK) {
        fail_call(b, "barrier", e);
        return 0;
    }
    double t0 = now_s();
    if (!run_iters(b, s, b->rbuf, count, dt, op, b->iters)) return 0;
    *us = (now_s() - t0) / b->iters * 1e6;
    *wrong = 0;
    if (!b->check) return 1;

    fill_input(b, s, ns, dt, es, op);
    if (!inplace) memset(b->rbuf, SENTINEL_BYTE, nr * es);
    e = b->coll->run(b->comm, s, b->rbuf, count, dt, op, 0, NULL);
    if (e != HOOP_OK) {
        fail_call(b, b->coll->name, e);
        return 0;
    }
    for (size_t i = 0; i < nr; i++)
        if (ld(b->rbuf, i, es) != ld(b->ebuf, i, es)) ++*wrong;
    return 1;
}

static void time_str(double us, char *out, size_t len)
{
    if (us >= 10000.0)
        snprintf(out, len, "%7.0f", us);
    else if (us >= 100.0)
        snprintf(out, len, "%7.1f", us);
    else
        snprintf(out, len, "%7.2f", us);
}

static int run_size(bench_t *b, size_t bytes, hoop_dtype_t dt, hoop_op_t op)
{
    size_t es = hoop_dtype_size(dt), count = b->coll->count_of(bytes, es, b->size);
    size_t nr = b->coll->recv_elems(count, b->size);
    if (b->check)
        for (size_t i = 0; i < nr; i++)
            st(b->ebuf, i, es, b->coll->expect(dt, es, op, b->size, b->rank, 0, count, i));

    double us[2];
    uint64_t wrong[2];
    for (int ip = 0; ip < 2; ip++)
        if (!run_variant(b, count, dt, op, ip, &us[ip], &wrong[ip])) return 0;
    hoop_result_t e = hoop_allreduce(b->comm, us, us, 2, HOOP_FLOAT64, HOOP_MAX);
    if (e == HOOP_OK) e = hoop_allreduce(b->comm, wrong, wrong, 2, HOOP_UINT64, HOOP_SUM);
    if (e != HOOP_OK) {
        fail_call(b, "reducing the results", e);
        return 0;
    }
    size_t size = b->coll->size_bytes(count, es, b->size);
    if (b->rank == 0) {
        printf("%12zu  %12zu  %8s  %6s  %6i", size, count, hoop_dtype_name(dt),
               b->coll->has_op ? hoop_op_name(op) : "none", b->coll->has_root ? 0 : -1);
    }
    for (int ip = 0; ip < 2; ip++) {
        double algbw = us[ip] > 0 ? (double)size / 1e9 / (us[ip] * 1e-6) : 0.0;
        double busbw = algbw * b->coll->bus_factor(b->size);
        b->bw_sum += busbw;
        b->bw_count++;
        b->wrong_total += wrong[ip];
        if (b->rank != 0) continue;
        char ts[32], ws[32];
        time_str(us[ip], ts, sizeof ts);
        if (b->check)
            snprintf(ws, sizeof ws, "%5" PRIu64, wrong[ip]);
        else
            snprintf(ws, sizeof ws, "%5s", "N/A");
        printf("  %7s  %6.2f  %6.2f  %5s", ts, algbw, busbw, ws);
    }
    if (b->rank == 0) {
        printf("\n");
        fflush(stdout);
    }
    return 1;
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
    fprintf(
        f,
        "usage: hoop-perf [COLLECTIVE] [options]    (run every rank, e.g. under hooprun)\n"
        "  COLLECTIVE     allreduce (default)\n"
        "  -b BYTES       smallest message (default 8; K, M, G suffixes)\n"
        "  -e BYTES       largest message (default 64M)\n"
        "  -f FACTOR      size multiplier between rows (default 2)\n"
        "  -n ITERS       timed iterations per row (default 20)\n"
        "  -w ITERS       warm-up iterations (default 5)\n"
        "  -c 0|1         check results (default 1)\n"
        "  -d DTYPE|all   int8 uint8 int32 uint32 int64 uint64 float16 bfloat16 float32 float64\n"
        "                 (default float32)\n"
        "  -o OP|all      sum prod min max avg (default sum)\n"
        "  -z 0|1         1: wait for each call; 0: post all iterations, then wait (default 0)\n");
}

typedef struct rank_info {
    int32_t pid;
    int32_t local_rank;
    char host[56];
} rank_info_t;

static int print_header(bench_t *b)
{
    rank_info_t me, *all = calloc((size_t)b->size, sizeof *all);
    if (!all) return 0;
    memset(&me, 0, sizeof me);
    me.pid = (int32_t)getpid();
    const char *lr = getenv("LOCAL_RANK");
    me.local_rank = lr ? atoi(lr) : -1;
    if (gethostname(me.host, sizeof me.host - 1) != 0) snprintf(me.host, sizeof me.host, "unknown");
    hoop_result_t e = hoop_allgather(b->comm, &me, all, sizeof me, HOOP_UINT8);
    if (e != HOOP_OK) {
        fail_call(b, "allgather of the rank list", e);
        free(all);
        return 0;
    }
    if (b->rank == 0) {
        const char *tp = getenv("HOOP_TRANSPORT"), *algo = getenv("HOOP_ALGO");
        printf("# hoop-perf %s: nRanks %d minBytes %zu maxBytes %zu step: %zu(factor) warmup "
               "iters: %d "
               "iters: %d validation: %d blocking: %d\n",
               b->coll->name, b->size, b->minb, b->maxb, b->factor, b->warmup, b->iters, b->check,
               b->blocking);
        printf("# hoop %s transport: %s algorithm: %s\n", hoop_version(), tp && tp[0] ? tp : "auto",
               algo && algo[0] ? algo : "auto");
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

static int run_all(bench_t *b)
{
    for (int d = 0; d < HOOP_DTYPE_COUNT; d++) {
        if (!(b->dtypes & (1u << d))) continue;
        hoop_dtype_t dt = (hoop_dtype_t)d;
        size_t es = hoop_dtype_size(dt);
        for (int o = 0; o < HOOP_OP_COUNT; o++) {
            if (b->coll->has_op ? !(b->ops & (1u << o)) : o != 0) continue;
            hoop_op_t op = (hoop_op_t)o;
            /* Warm up at the largest and the smallest size, as nccl-tests does. */
            size_t ends[2] = {b->maxb, b->minb};
            for (int k = 0; k < 2 && b->warmup > 0; k++) {
                size_t count = b->coll->count_of(ends[k], es, b->size);
                if (!run_iters(b, b->sbuf, b->rbuf, count, dt, op, b->warmup)) return 0;
            }
            for (size_t bytes = b->minb; bytes <= b->maxb;) {
                if (!run_size(b, bytes, dt, op)) return 0;
                if (bytes == 0)
                    bytes = 1;
                else if (bytes > b->maxb / b->factor)
                    break;
                else
                    bytes *= b->factor;
            }
        }
    }
    return 1;
}

int main(int argc, char **argv)
{
    bench_t b;
    memset(&b, 0, sizeof b);
    b.coll = &COLLS[0];
    b.minb = 8;
    b.maxb = 64u << 20;
    b.factor = 2;
    b.iters = 20;
    b.warmup = 5;
    b.check = 1;
    b.blocking = 0;
    b.dtypes = 1u << HOOP_FLOAT32;
    b.ops = 1u << HOOP_SUM;

    int c;
    opterr = 0;
    while ((c = getopt(argc, argv, "b:e:f:n:w:c:d:o:z:h")) != -1) {
        int bad = 0, v = 0;
        switch (c) {
        case 'b': bad = parse_size(optarg, &b.minb); break;
        case 'e': bad = parse_size(optarg, &b.maxb); break;
        case 'f':
            bad = parse_int(optarg, 2, 1 << 20, &v);
            b.factor = (size_t)v;
            break;
        case 'n': bad = parse_int(optarg, 1, 1 << 24, &b.iters); break;
        case 'w': bad = parse_int(optarg, 0, 1 << 24, &b.warmup); break;
        case 'c': bad = parse_int(optarg, 0, 1, &b.check); break;
        case 'z': bad = parse_int(optarg, 0, 1, &b.blocking); break;
        case 'd': bad = parse_dtypes(optarg, &b.dtypes); break;
        case 'o': bad = parse_ops(optarg, &b.ops); break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "hoop-perf: unknown option or missing value: -%c\n", optopt);
            usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "hoop-perf: bad value for -%c: '%s' (see hoop-perf -h)\n", c, optarg);
            return 2;
        }
    }
    if (optind < argc) {
        const coll_t *found = NULL;
        for (size_t i = 0; i < sizeof COLLS / sizeof COLLS[0]; i++)
            if (!strcmp(argv[optind], COLLS[i].name)) found = &COLLS[i];
        if (!found || optind + 1 < argc) {
            fprintf(stderr, "hoop-perf: unknown collective '%s' (available: allreduce)\n",
                    argv[optind]);
            return 2;
        }
        b.coll = found;
    }
    if (b.minb > b.maxb) {
        fprintf(stderr, "hoop-perf: -b %zu is larger than -e %zu\n", b.minb, b.maxb);
        return 2;
    }

    hoop_result_t e = hoop_init(&b.comm, NULL, -1, -1);
    if (e != HOOP_OK) {
        fprintf(stderr, "hoop-perf: hoop_init failed: %s (run every rank, e.g. under hooprun)\n",
                hoop_error_string(e));
        return 1;
    }
    b.rank = hoop_comm_rank(b.comm);
    b.size = hoop_comm_size(b.comm);

    /* Buffers for the largest row of every dtype chosen. */
    for (int d = 0; d < HOOP_DTYPE_COUNT; d++) {
        if (!(b.dtypes & (1u << d))) continue;
        size_t es = hoop_dtype_size((hoop_dtype_t)d), count = b.coll->count_of(b.maxb, es, b.size);
        size_t sb = b.coll->send_elems(count, b.size) * es,
               rb = b.coll->recv_elems(count, b.size) * es;
        if (sb > b.sbytes) b.sbytes = sb;
        if (rb > b.rbytes) b.rbytes = rb;
    }
    b.sbuf = malloc(b.sbytes ? b.sbytes : 1);
    b.rbuf = malloc(b.rbytes ? b.rbytes : 1);
    b.ebuf = b.check ? malloc(b.rbytes ? b.rbytes : 1) : NULL;
    b.reqs = calloc((size_t)(b.iters > b.warmup ? b.iters : b.warmup) + 1, sizeof *b.reqs);
    int ok = b.sbuf && b.rbuf && (b.ebuf || !b.check) && b.reqs;
    if (!ok)
        fprintf(stderr, "hoop-perf: rank %d: out of memory for %zu-byte buffers\n", b.rank,
                b.rbytes);
    if (ok) {
        memset(b.sbuf, 0, b.sbytes);
        memset(b.rbuf, 0, b.rbytes);
        ok = print_header(&b) && run_all(&b);
    }
    if (ok && b.rank == 0) {
        printf("# Out of bounds values : %" PRIu64 " %s\n", b.wrong_total,
               b.wrong_total ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g \n", b.bw_count ? b.bw_sum / b.bw_count : 0.0);
        printf("#\n");
        fflush(stdout);
    }
    if (!ok) hoop_comm_abort(b.comm);
    hoop_comm_destroy(b.comm);
    free(b.sbuf);
    free(b.rbuf);
    free(b.ebuf);
    free(b.reqs);
    return ok && b.wrong_total == 0 ? 0 : 1;
}
