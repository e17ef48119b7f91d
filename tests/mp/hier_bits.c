/* Bits of the hierarchical all-reduce on inputs that round: every rank must end with the same bits
 * (checked by an all-gather of every rank's result), and the result must be the sum, average or
 * product of every rank's inputs within the rounding the dtype allows (each rank regenerates every
 * rank's inputs and reduces them in double). The exact-input suite (coll_test) checks the values;
 * this checks that no element is reduced twice in different orders.
 *
 *   hooprun -n N hier_bits --fake-hosts K [--algo NAME] [--expect-algo NAME]
 *   hooprun -n N hier_bits --fake-hosts K --odd-rank R --odd-algo NAME
 *
 * --fake-hosts K: rank r claims host r % K (HOOP_HOSTID). --expect-algo: the schedule tracer must
 * have seen that algorithm run every large call (so a forced "hier" that fell back is caught).
 * --odd-rank R --odd-algo NAME: rank R alone sets NAME (hoop_comm_set_algo) for one all-reduce of
 * 16 KiB + 12 B: every rank must fail it with HOOP_ERR_MISMATCH or the abort that follows. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoop.h"

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static double half_to_double(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? INFINITY : ldexp(m + 1024, e - 25);
    return s ? -v : v;
}

static double bf16_to_double(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Element i of rank r's input: |x| in [0.5, 2) with a random sign (sum, avg) or positive (prod). */
static void gen(hoop_dtype_t dt, hoop_op_t op, int r, size_t i, void *out)
{
    uint64_t x = mix(((uint64_t)r << 40) ^ ((uint64_t)dt << 32) ^ ((uint64_t)op << 28) ^ i);
    int neg = op != HOOP_PROD && (x & 1);
    uint64_t m = x >> 12;
    switch (dt) {
    case HOOP_FLOAT16: {
        uint16_t h = (uint16_t)((neg ? 0x8000 : 0) | ((14 + (x >> 1 & 1)) << 10) | (m & 1023));
        memcpy(out, &h, 2);
        break;
    }
    case HOOP_BFLOAT16: {
        uint16_t h = (uint16_t)((neg ? 0x8000 : 0) | ((126 + (x >> 1 & 1)) << 7) | (m & 127));
        memcpy(out, &h, 2);
        break;
    }
    case HOOP_FLOAT32: {
        float f = (float)((neg ? -1.0 : 1.0) *
                          (0.5 + 1.5 * (double)(m >> 20) / (double)(1u << 31)));
        memcpy(out, &f, 4);
        break;
    }
    default: {
        double d = (neg ? -1.0 : 1.0) * (0.5 + 1.5 * (double)(m >> 12) / (double)(1ull << 40));
        memcpy(out, &d, 8);
        break;
    }
    }
}

static double value(hoop_dtype_t dt, const void *p)
{
    uint16_t h;
    float f;
    double d;
    switch (dt) {
    case HOOP_FLOAT16: memcpy(&h, p, 2); return half_to_double(h);
    case HOOP_BFLOAT16: memcpy(&h, p, 2); return bf16_to_double(h);
    case HOOP_FLOAT32: memcpy(&f, p, 4); return f;
    default: memcpy(&d, p, 8); return d;
    }
}

static double eps_of(hoop_dtype_t dt)
{
    switch (dt) {
    case HOOP_FLOAT16: return ldexp(1, -11);
    case HOOP_BFLOAT16: return ldexp(1, -8);
    case HOOP_FLOAT32: return ldexp(1, -24);
    default: return ldexp(1, -53);
    }
}

typedef struct {
    char want[32];
    int seen;
} trace_t;

static void on_trace(void *ctx, const char *line)
{
    trace_t *t = ctx;
    char pat[48];
    snprintf(pat, sizeof(pat), " %s step ", t->want);
    if (strncmp(line, "allreduce#", 10) == 0 && strstr(line, pat) != NULL) t->seen = 1;
}

int main(int argc, char **argv)
{
    const char *algo = NULL, *odd_algo = NULL;
    int odd_rank = -1;
    trace_t tr = {.want = "", .seen = 0};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--fake-hosts")) {
            const char *r = getenv("RANK");
            int k = atoi(argv[i + 1]);
            char id[32];
            snprintf(id, sizeof(id), "fake-host-%d", (r ? atoi(r) : 0) % (k > 0 ? k : 1));
            setenv("HOOP_HOSTID", id, 1);
        } else if (!strcmp(argv[i], "--algo")) {
            algo = argv[i + 1];
        } else if (!strcmp(argv[i], "--odd-rank")) {
            odd_rank = atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "--odd-algo")) {
            odd_algo = argv[i + 1];
        } else if (!strcmp(argv[i], "--expect-algo")) {
            snprintf(tr.want, sizeof(tr.want), "%s", argv[i + 1]);
        } else {
            fprintf(stderr, "hier_bits: bad argument %s\n", argv[i]);
            return 2;
        }
    }
    hoop_comm_t *c;
    hoop_result_t rc = hoop_init_from_env(&c);
    if (rc != HOOP_OK) {
        printf("FAIL hoop_init: %s\n", hoop_error_string(rc));
        return 1;
    }
    int me = hoop_comm_rank(c), p = hoop_comm_size(c);
    if (algo != NULL && hoop_comm_set_algo(c, algo) != HOOP_OK) {
        printf("rank %d: FAIL hoop_comm_set_algo(%s): %s\n", me, algo, hoop_comm_last_error(c));
        return 1;
    }
    if (odd_algo != NULL) {
        /* One rank runs another algorithm: every rank must fail the call with the mismatch (or
         * the abort it causes), none may succeed or hang. */
        hoop_comm_set_timeout(c, 20);
        if (me == odd_rank) hoop_comm_set_algo(c, odd_algo);
        float x[4099];
        for (size_t i = 0; i < 4099; i++) x[i] = (float)i;
        rc = hoop_allreduce(c, x, x, 4099, HOOP_FLOAT32, HOOP_SUM);
        int ok = rc == HOOP_ERR_MISMATCH || rc == HOOP_ERR_ABORTED;
        printf("rank %d: %s: %s (%s)\n", me, ok ? "expected failure" : "FAIL",
               hoop_error_string(rc), hoop_comm_last_error(c));
        hoop_comm_destroy(c);
        return !ok;
    }
    if (tr.want[0]) hoop_comm_set_trace(c, on_trace, &tr);
    const hoop_dtype_t dts[] = {HOOP_FLOAT16, HOOP_BFLOAT16, HOOP_FLOAT32, HOOP_FLOAT64};
    const hoop_op_t ops[] = {HOOP_SUM, HOOP_AVG, HOOP_PROD};
    const size_t counts[] = {1, 7, 1031, 100003};
    size_t maxn = 100003;
    unsigned char *in = malloc(maxn * 8), *out = malloc(maxn * 8),
                  *all = malloc(maxn * 8 * (size_t)p), *tmp = malloc(8);
    long checks = 0, fails = 0;
    for (size_t di = 0; di < 4; di++)
        for (size_t oi = 0; oi < 3; oi++)
            for (size_t ci = 0; ci < 4; ci++)
                for (int inplace = 0; inplace < 2; inplace++) {
                    hoop_dtype_t dt = dts[di];
                    hoop_op_t op = ops[oi];
                    size_t n = counts[ci], es = hoop_dtype_size(dt);
                    for (size_t i = 0; i < n; i++) gen(dt, op, me, i, in + i * es);
                    void *dst = inplace ? in : out;
                    tr.seen = 0;
                    rc = hoop_allreduce(c, in, dst, n, dt, op);
                    if (rc != HOOP_OK) {
                        printf("rank %d: FAIL allreduce n=%zu: %s\n", me, n,
                               hoop_comm_last_error(c));
                        return 1;
                    }
                    if (tr.want[0] && n * es > 65536 && !tr.seen) {
                        printf("rank %d: FAIL allreduce n=%zu dtype %d did not run %s\n", me, n,
                               (int)dt, tr.want);
                        fails++;
                    }
                    rc = hoop_allgather(c, dst, all, n * es, HOOP_UINT8);
                    if (rc != HOOP_OK) {
                        printf("rank %d: FAIL allgather: %s\n", me, hoop_comm_last_error(c));
                        return 1;
                    }
                    const unsigned char *res = dst;
                    for (int r = 0; r < p; r++) {
                        checks++;
                        if (memcmp(all + (size_t)r * n * es, res, n * es) != 0) {
                            size_t i = 0;
                            while (memcmp(all + ((size_t)r * n + i) * es, res + i * es, es) == 0)
                                i++;
                            if (fails++ < 10)
                                printf("rank %d: FAIL dtype %d op %d n=%zu: rank %d's element %zu "
                                       "has other bits (%.17g here, %.17g there)\n",
                                       me, (int)dt, (int)op, n, r, i, value(dt, res + i * es),
                                       value(dt, all + ((size_t)r * n + i) * es));
                        }
                    }
                    /* The value, against every rank's inputs reduced in double. */
                    double eps = eps_of(dt);
                    for (size_t i = 0; i < n; i++) {
                        double ref = op == HOOP_PROD ? 1 : 0, mag = 0;
                        for (int r = 0; r < p; r++) {
                            gen(dt, op, r, i, tmp);
                            double v = value(dt, tmp);
                            ref = op == HOOP_PROD ? ref * v : ref + v;
                            mag += fabs(v);
                        }
                        if (op == HOOP_AVG) {
                            ref /= p;
                            mag /= p;
                        }
                        double got = value(dt, res + i * es);
                        double tol = op == HOOP_PROD ? 2.0 * p * eps * fabs(ref)
                                                     : 2.0 * p * eps * mag;
                        checks++;
                        if (!(fabs(got - ref) <= tol)) {
                            if (fails++ < 10)
                                printf("rank %d: FAIL dtype %d op %d n=%zu element %zu: %.17g, "
                                       "want %.17g within %.3g\n",
                                       me, (int)dt, (int)op, n, i, got, ref, tol);
                        }
                    }
                }
    printf("rank %d: %ld checks passed, %ld failed\n", me, checks - fails, fails);
    free(in);
    free(out);
    free(all);
    free(tmp);
    hoop_comm_destroy(c);
    return fails != 0;
}
