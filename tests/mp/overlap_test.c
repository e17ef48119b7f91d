/*
 * Send and receive buffers that partly overlap, run as every rank under hooprun.
 *
 *   overlap_test [--fake-hosts K] [--algos A,B,...] [--device MODULE [--stream]]
 *
 * For every collective with two buffers (all-reduce, reduce, all-gather, gather, scatter,
 * reduce-scatter, all-to-all), every algorithm that can run it (hoop_comm_set_algo, the same on
 * every rank), odd counts, a few dtypes and ops, each rank places its sendbuf at d elements from
 * its recvbuf inside one allocation, for several d on both sides (recvbuf = sendbuf + k and the
 * reverse; overlaps of one element, of about half, of all but one): a partial overlap, never one of
 * the documented in-place forms, which run as controls. Each rank picks its own d (the case number
 * plus its rank selects it), so ranks differ in how their buffers overlap, which is local and
 * must not matter. Every call must return HOOP_OK with the right bytes, computed here from every
 * rank's input, and must leave every byte of the allocation outside recvbuf as it was: the part
 * of the input outside recvbuf, and the guards around both. Blocking and nonblocking calls in
 * turn.
 *
 * Inputs are small integers (within +-7), so sums, maxima and integer averages are exact in every
 * dtype used and the reference needs no rounding.
 *
 * --device: the allocation is device memory of that CUDA module (tests/cuda: the test double, or
 * libhoop-cuda.so on a GPU), filled and read back through it; --stream also orders every call on
 * a stream of the module, the copies in and out queued on it around the call.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoop.h"
#include "../cuda/devbuf.h"

enum kind {
    K_ALLREDUCE,
    K_REDUCE,
    K_ALLGATHER,
    K_GATHER,
    K_SCATTER,
    K_REDUCE_SCATTER,
    K_ALLTOALL,
    K_N
};
static const char *const KIND_NAME[] = {"allreduce", "reduce",         "allgather", "gather",
                                        "scatter",   "reduce_scatter", "alltoall"};

typedef struct combo {
    hoop_dtype_t dt;
    hoop_op_t op;
} combo_t;

/* Reductions: the op matters; the data movers take the dtype only (op unused). */
static const combo_t RED[] = {{HOOP_INT32, HOOP_SUM},
                              {HOOP_FLOAT32, HOOP_MAX},
                              {HOOP_INT8, HOOP_SUM},
                              {HOOP_FLOAT64, HOOP_MIN},
                              {HOOP_INT32, HOOP_AVG}};
static const combo_t MOVE[] = {
    {HOOP_INT32, HOOP_SUM}, {HOOP_INT8, HOOP_SUM}, {HOOP_FLOAT64, HOOP_SUM}};

static const size_t SMALL[] = {1, 7, 1031};
/* Over the shared area's 256 KiB rounds per rank in int32, and over HOOP_SMALL_BYTES. */
#define LARGE 70001

#define GUARD 64 /* bytes before and after the used range */

static int R, P, fails, calls;
static hoop_comm_t *C;
static int g_device;   /* --device */
static void *g_stream; /* --stream */

static int is_reduction(enum kind k)
{
    return k == K_ALLREDUCE || k == K_REDUCE || k == K_REDUCE_SCATTER;
}

/* Rank r's input element j in case t: an integer in [-7, 7]. */
static int64_t in_val(int r, size_t j, unsigned t)
{
    uint64_t x = ((uint64_t)(unsigned)r * 0x9E3779B97F4A7C15ull) ^
                 ((uint64_t)j * 0xC2B2AE3D27D4EB4Full) ^ ((uint64_t)t * 0x165667B19E3779F9ull);
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (int64_t)(x % 15) - 7;
}

static void store(void *buf, size_t i, hoop_dtype_t dt, int64_t v)
{
    unsigned char *p = (unsigned char *)buf + i * hoop_dtype_size(dt);
    switch (dt) {
    case HOOP_INT8: {
        int8_t x = (int8_t)v;
        memcpy(p, &x, 1);
        break;
    }
    case HOOP_INT32: {
        int32_t x = (int32_t)v;
        memcpy(p, &x, 4);
        break;
    }
    case HOOP_FLOAT32: {
        float x = (float)v;
        memcpy(p, &x, 4);
        break;
    }
    case HOOP_FLOAT64: {
        double x = (double)v;
        memcpy(p, &x, 8);
        break;
    }
    default: abort();
    }
}

/* op over every rank's input element j (the ranks' inputs are in_val(q, j, t)). */
static int64_t reduced(hoop_op_t op, size_t j, unsigned t)
{
    int64_t acc = in_val(0, j, t);
    for (int q = 1; q < P; q++) {
        int64_t v = in_val(q, j, t);
        if (op == HOOP_SUM || op == HOOP_AVG)
            acc += v;
        else if (op == HOOP_MAX)
            acc = v > acc ? v : acc;
        else
            acc = v < acc ? v : acc;
    }
    return op == HOOP_AVG ? acc / P : acc; /* C's division truncates toward zero, as hoop's */
}

/* Elements of this rank's input and output for kind k at count n (0 for a buffer it does not
 * use), and whether it is the root. */
static void shape(enum kind k, size_t n, int root, size_t *in, size_t *out)
{
    size_t p = (size_t)P;
    switch (k) {
    case K_ALLREDUCE: *in = n, *out = n; break;
    case K_REDUCE: *in = n, *out = R == root ? n : 0; break;
    case K_ALLGATHER: *in = n, *out = n * p; break;
    case K_GATHER: *in = n, *out = R == root ? n * p : 0; break;
    case K_SCATTER: *in = R == root ? n * p : 0, *out = n; break;
    case K_REDUCE_SCATTER: *in = n * p, *out = n; break;
    case K_ALLTOALL: *in = n * p, *out = n * p; break;
    default: abort();
    }
}

/* The expected output element i of this rank. */
static int64_t expected(enum kind k, hoop_op_t op, size_t n, int root, size_t i, unsigned t)
{
    size_t blk = i / (n ? n : 1), off = i % (n ? n : 1);
    switch (k) {
    case K_ALLREDUCE:
    case K_REDUCE: return reduced(op, i, t);
    case K_ALLGATHER:
    case K_GATHER: return in_val((int)blk, off, t);
    case K_SCATTER: return in_val(root, (size_t)R * n + i, t);
    case K_REDUCE_SCATTER: return reduced(op, (size_t)R * n + i, t);
    case K_ALLTOALL: return in_val((int)blk, (size_t)R * n + off, t);
    default: abort();
    }
}

/* Whether sendbuf = recvbuf + d elements is one of hoop.h's in-place forms for this rank. */
static int documented_in_place(enum kind k, size_t n, int root, long d)
{
    switch (k) {
    case K_ALLREDUCE:
    case K_REDUCE:
    case K_ALLTOALL: return d == 0;
    case K_ALLGATHER:
    case K_GATHER: return d == (long)((size_t)R * n);
    case K_SCATTER: return d == -(long)((size_t)root * n);
    case K_REDUCE_SCATTER: return d == 0 || d == -(long)((size_t)R * n);
    default: return 0;
    }
}

static hoop_result_t post(enum kind k, const void *s, void *r, size_t n, combo_t cb, int root,
                          int nb)
{
    hoop_request_t *q = NULL;
    hoop_request_t **rq = nb ? &q : NULL;
    hoop_result_t rc;
    switch (k) {
    case K_ALLREDUCE:
        rc = nb ? hoop_iallreduce(C, s, r, n, cb.dt, cb.op, rq)
                : hoop_allreduce(C, s, r, n, cb.dt, cb.op);
        break;
    case K_REDUCE:
        rc = nb ? hoop_ireduce(C, s, r, n, cb.dt, cb.op, root, rq)
                : hoop_reduce(C, s, r, n, cb.dt, cb.op, root);
        break;
    case K_ALLGATHER:
        rc = nb ? hoop_iallgather(C, s, r, n, cb.dt, rq) : hoop_allgather(C, s, r, n, cb.dt);
        break;
    case K_GATHER:
        rc = nb ? hoop_igather(C, s, r, n, cb.dt, root, rq) : hoop_gather(C, s, r, n, cb.dt, root);
        break;
    case K_SCATTER:
        rc = nb ? hoop_iscatter(C, s, r, n, cb.dt, root, rq)
                : hoop_scatter(C, s, r, n, cb.dt, root);
        break;
    case K_REDUCE_SCATTER:
        rc = nb ? hoop_ireduce_scatter(C, s, r, n, cb.dt, cb.op, rq)
                : hoop_reduce_scatter(C, s, r, n, cb.dt, cb.op);
        break;
    case K_ALLTOALL:
        rc = nb ? hoop_ialltoall(C, s, r, n, cb.dt, rq) : hoop_alltoall(C, s, r, n, cb.dt);
        break;
    default: abort();
    }
    if (rc == HOOP_OK && nb) rc = hoop_wait(q);
    return rc;
}

/* Offsets d (elements, sendbuf - recvbuf) that make a partial overlap of in and out elements:
 * d in (-in, out), d != 0. The list has the same length on every rank (controls fill it up), so
 * every rank makes the same calls. */
#define NOFF 7
static void offsets(enum kind k, size_t n, int root, size_t in, size_t out, long *d, int *control)
{
    long I = (long)in, O = (long)out;
    long cand[] = {1, -1, O - 1, -(I - 1), O / 2 + 1, -(I / 2) - 1, O > 2 ? 2 : -2};
    int m = 0;
    for (int i = 0; i < (int)(sizeof cand / sizeof cand[0]) && m < NOFF; i++) {
        long x = cand[i];
        if (in == 0 || out == 0 || x <= -I || x >= O || x == 0 ||
            documented_in_place(k, n, root, x))
            continue;
        int dup = 0;
        for (int j = 0; j < m; j++) dup |= d[j] == x;
        if (dup) continue;
        control[m] = 0;
        d[m++] = x;
    }
    /* The rest: the documented in-place form where this rank uses both buffers, else apart. */
    for (; m < NOFF; m++) {
        control[m] = 1;
        long ip = 0;
        int has = in > 0 && out > 0;
        if (has) {
            switch (k) {
            case K_ALLGATHER:
            case K_GATHER: ip = (long)((size_t)R * n); break;
            case K_SCATTER: ip = -(long)((size_t)root * n); break;
            case K_REDUCE_SCATTER: ip = (m & 1) ? -(long)((size_t)R * n) : 0; break;
            default: ip = 0;
            }
        }
        d[m] = has ? ip : O + 3; /* apart: 3 elements of gap */
    }
}

/* One call: this rank's buffers sendbuf = recvbuf + d in one allocation. */
static int one(const char *algo, enum kind k, size_t n, combo_t cb, int root, long d, int control,
               unsigned t, int nb)
{
    size_t es = hoop_dtype_size(cb.dt), in, out;
    shape(k, n, root, &in, &out);
    long lo = d < 0 ? d : 0, hi = (long)out > d + (long)in ? (long)out : d + (long)in;
    size_t span = (size_t)(hi - lo) * es + 2 * GUARD;
    unsigned char *a = malloc(span), *before = malloc(span), *want = malloc(span);
    if (a == NULL || before == NULL || want == NULL) {
        printf("rank %d: FAIL out of memory for %zu bytes\n", R, span);
        exit(1);
    }
    for (size_t i = 0; i < span; i++) a[i] = (unsigned char)(0xA5 ^ (i * 31));
    unsigned char *rb = a + GUARD + (size_t)(-lo) * es;
    unsigned char *sb = rb + d * (long)es;
    for (size_t j = 0; j < in; j++) store(sb, j, cb.dt, in_val(R, j, t));
    memcpy(before, a, span);
    memcpy(want, a, span);
    unsigned char *wr = want + (rb - a);
    for (size_t i = 0; i < out; i++) store(wr, i, cb.dt, expected(k, cb.op, n, root, i, t));
    /* The call's buffers: in a, or at the same offsets in device memory. */
    unsigned char *dev = NULL, *base = a;
    if (g_device) {
        base = dev = devbuf_alloc(span);
        if (g_stream)
            devbuf_copy_async(dev, a, span, g_stream);
        else
            devbuf_copy(dev, a, span);
    }
    unsigned char *crb = base + (rb - a), *csb = base + (sb - a);
    hoop_result_t rc = post(k, in > 0 ? csb : NULL, out > 0 ? crb : NULL, n, cb, root, nb);
    if (g_device) {
        if (g_stream) { /* queued after the call on its stream; then the stream is waited for */
            devbuf_copy_async(a, dev, span, g_stream);
            devbuf_sync(g_stream);
        } else {
            devbuf_copy(a, dev, span);
        }
        devbuf_free(dev);
    }
    calls++;
    const char *what = control ? "in place (control)" : "partial overlap";
    if (rc != HOOP_OK) {
        printf("rank %d: FAIL %s algo=%s count=%zu %s %s root=%d sendbuf=recvbuf%+ld elements (%s, "
               "%s): %s: %s\n",
               R, KIND_NAME[k], algo, n, hoop_dtype_name(cb.dt), hoop_op_name(cb.op), root, d, what,
               nb ? "nonblocking" : "blocking", hoop_error_string(rc), hoop_comm_last_error(C));
        exit(1);
    }
    int bad = 0;
    for (size_t i = 0; i < span && !bad; i++) {
        if (a[i] == want[i]) continue;
        long at = (long)i - (long)(rb - a);
        long el = at >= 0 ? at / (long)es : -(((-at) + (long)es - 1) / (long)es);
        int inside = at >= 0 && (size_t)el < out;
        printf("rank %d: FAIL %s algo=%s count=%zu %s %s root=%d sendbuf=recvbuf%+ld elements (%s, "
               "%s): HOOP_OK but byte %ld from recvbuf (element %ld, %s) is 0x%02x, not 0x%02x%s\n",
               R, KIND_NAME[k], algo, n, hoop_dtype_name(cb.dt), hoop_op_name(cb.op), root, d, what,
               nb ? "nonblocking" : "blocking", at, el, inside ? "a result" : "outside recvbuf",
               a[i], want[i], before[i] == a[i] ? "" : " (it changed)");
        bad = 1;
    }
    fails += bad;
    free(a);
    free(before);
    free(want);
    return bad;
}

static int has_algo(const char *list, const char *a)
{
    size_t n = strlen(a);
    for (const char *p = list; p != NULL && *p != '\0';) {
        const char *e = strchr(p, ',');
        size_t len = e != NULL ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, a, n) == 0) return 1;
        p = e != NULL ? e + 1 : NULL;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *algos = "auto,ring,rd,rabenseifner,ps,ps-sharded,shm,p2p,hier";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--fake-hosts") && i + 1 < argc) {
            /* Rank r claims host r % K: shared memory inside a fake host, TCP across. */
            int k = atoi(argv[++i]);
            const char *rk = getenv("RANK");
            char id[32];
            snprintf(id, sizeof id, "fake-host-%d", (rk != NULL ? atoi(rk) : 0) % (k > 0 ? k : 1));
            setenv("HOOP_HOSTID", id, 1);
        } else if (!strcmp(argv[i], "--algos") && i + 1 < argc) {
            algos = argv[++i];
        } else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            char err[512];
            if (devbuf_open(argv[++i], err, sizeof err) != 0) {
                printf("SKIP: %s\n", err);
                return 77;
            }
            g_device = 1;
        } else if (!strcmp(argv[i], "--stream") && g_device) {
            g_stream = devbuf_stream();
        } else {
            fprintf(stderr, "usage: overlap_test [--fake-hosts K] [--algos A,B,...] "
                            "[--device MODULE [--stream]]\n");
            return 2;
        }
    }
    hoop_result_t rc = hoop_init_from_env(&C);
    if (rc != HOOP_OK) {
        printf("FAIL hoop_init: %s\n", hoop_error_string(rc));
        return 1;
    }
    R = hoop_comm_rank(C);
    P = hoop_comm_size(C);
    if (g_stream != NULL) hoop_comm_set_stream(C, g_stream);
    /* The all-reduce algorithms one by one; the other collectives choose among the area, the
     * point-to-point schedules and the hierarchical ones only. */
    static const char *const ALL[] = {"auto",       "ring", "rd",  "rabenseifner", "ps",
                                      "ps-sharded", "shm",  "p2p", "hier"};
    unsigned t = 1;
    for (size_t ai = 0; ai < sizeof ALL / sizeof ALL[0]; ai++) {
        const char *algo = ALL[ai];
        if (!has_algo(algos, algo)) continue;
        if (hoop_comm_set_algo(C, algo) != HOOP_OK) {
            printf("rank %d: FAIL hoop_comm_set_algo(%s): %s\n", R, algo, hoop_comm_last_error(C));
            return 1;
        }
        int flat_only = strcmp(algo, "auto") && strcmp(algo, "shm") && strcmp(algo, "p2p") &&
                        strcmp(algo, "hier");
        for (int k = 0; k < K_N; k++) {
            if (flat_only && k != K_ALLREDUCE) continue;
            /* gather, scatter and all-to-all have one schedule (after the area's step). */
            if ((k == K_GATHER || k == K_SCATTER || k == K_ALLTOALL) && strcmp(algo, "auto") &&
                strcmp(algo, "p2p"))
                continue;
            const combo_t *cbs = is_reduction((enum kind)k) ? RED : MOVE;
            size_t ncb = is_reduction((enum kind)k) ? sizeof RED / sizeof RED[0]
                                                    : sizeof MOVE / sizeof MOVE[0];
            for (size_t ci = 0; ci <= sizeof SMALL / sizeof SMALL[0]; ci++) {
                int large = ci == sizeof SMALL / sizeof SMALL[0];
                size_t n = large ? LARGE : SMALL[ci];
                for (size_t bi = 0; bi < (large ? 1 : ncb); bi++) {
                    int root = (int)((t + (unsigned)k) % (unsigned)P);
                    size_t in, out;
                    shape((enum kind)k, n, root, &in, &out);
                    long d[NOFF];
                    int control[NOFF];
                    offsets((enum kind)k, n, root, in, out, d, control);
                    for (int j = 0; j < NOFF; j++) {
                        int pick = (j + R) % NOFF;
                        one(algo, (enum kind)k, n, cbs[bi], root, d[pick], control[pick], t,
                            (int)((t + (unsigned)j) & 1));
                        t++;
                    }
                }
            }
        }
    }
    /* Every rank's verdict: a rank that saw right bytes passes only if the others did too. */
    int32_t mine = fails, all = 0;
    rc = hoop_allreduce(C, &mine, &all, 1, HOOP_INT32, HOOP_SUM);
    hoop_comm_destroy(C);
    if (rc != HOOP_OK) {
        printf("rank %d: FAIL the final all-reduce: %s\n", R, hoop_error_string(rc));
        return 1;
    }
    printf("rank %d: %d calls, %d wrong here, %d on all ranks\n", R, calls, fails, (int)all);
    return all == 0 ? 0 : 1;
}
