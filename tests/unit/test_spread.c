/* Unit tests of the one-pass fold (src/reduce/spread.c) that the zero-copy collectives use.
 *
 * Its contract is bit-identity with the chained hoop__reduce calls it replaces (test_reduce checks
 * those against an independent reference), so every case here folds the same operands both ways
 * and compares bytes: every dtype and op, one to six inputs, one to five outputs, sizes around the
 * 64-byte block, outputs aligned alike or not (streaming stores or plain ones), an output that is
 * one of the inputs (in place), and values that bite (NaN payloads, infinities, signed zeros,
 * subnormals, extreme integers). Guard bytes around every output must stay as they were, and a
 * dtype/op without a one-pass kernel must return 0 with nothing written. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "reduce/reduce.h"

static const size_t DSIZE[HOOP_DTYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};

enum { MAXIN = 6, MAXOUT = 5, MAXN = 1100, PAD = 128, GUARD = 0xa5 };

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

/* Raw bits mostly; floats also get special values now and then. */
static void fill(hoop_dtype_t dt, uint8_t *p, size_t n, uint64_t *s)
{
    size_t w = DSIZE[dt];
    for (size_t i = 0; i < n; i++) {
        uint64_t k = rnd(s), bits = rnd(s);
        if (dt == HOOP_FLOAT32 && k % 4 == 0) {
            static const float sp[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, 1.5f};
            float f = sp[(k >> 8) % 8];
            memcpy(p + i * w, &f, w);
        } else if (dt == HOOP_FLOAT64 && k % 4 == 0) {
            static const double sp[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e-310, 1.5};
            double f = sp[(k >> 8) % 8];
            memcpy(p + i * w, &f, w);
        } else if ((dt == HOOP_FLOAT32 || dt == HOOP_FLOAT64) && k % 4 == 1) {
            /* moderate values, whose sums and products round */
            double v = (double)((int64_t)(k >> 40) % 4001 - 2000) / 7.0;
            if (dt == HOOP_FLOAT32) {
                float f = (float)v;
                memcpy(p + i * w, &f, w);
            } else {
                memcpy(p + i * w, &v, w);
            }
        } else {
            memcpy(p + i * w, &bits, w);
        }
    }
}

/* The chained calls the one-pass fold stands for. */
static void chained(uint8_t *want, const uint8_t *const *in, int nin, size_t n, hoop_dtype_t dt,
                    hoop_op_t op, int divisor)
{
    memcpy(want, in[0], n * DSIZE[dt]);
    for (int k = 1; k < nin; k++) hoop__reduce(want, want, in[k], n, dt, op);
    if (op == HOOP_AVG) hoop__reduce_avg_finish(want, n, dt, divisor);
}

static int has_kernel(hoop_dtype_t dt, hoop_op_t op)
{
#if defined(__x86_64__)
    if (!__builtin_cpu_supports("avx2")) return 0;
    int fl = dt == HOOP_FLOAT32 || dt == HOOP_FLOAT64;
    return dt != HOOP_FLOAT16 && dt != HOOP_BFLOAT16 && (op != HOOP_AVG || fl);
#else
    (void)dt, (void)op;
    return 0;
#endif
}

/* One case: nin inputs, nout outputs at byte offsets off[j] into their own buffers (or, where
 * inplace, output 0 is input 0). */
static void one(hoop_dtype_t dt, hoop_op_t op, int nin, int nout, size_t n, const size_t *off,
                int inplace, int stream, uint64_t *s, size_t *ran)
{
    size_t w = DSIZE[dt], bytes = n * w;
    static uint8_t inbuf[MAXIN][MAXN * 8 + 2 * PAD], outbuf[MAXOUT][MAXN * 8 + 2 * PAD];
    static uint8_t want[MAXN * 8];
    const void *in[MAXIN];
    void *out[MAXOUT];
    for (int k = 0; k < nin; k++) {
        /* inputs at an element-aligned offset of their own */
        in[k] = inbuf[k] + PAD + (size_t)k * w;
        fill(dt, (uint8_t *)in[k], n, s);
    }
    for (int j = 0; j < nout; j++) {
        memset(outbuf[j], GUARD, sizeof outbuf[j]);
        out[j] = outbuf[j] + PAD + off[j];
    }
    if (inplace) {
        memcpy(outbuf[0] + PAD + off[0], in[0], bytes);
        in[0] = out[0];
    }
    chained(want, (const uint8_t *const *)in, nin, n, dt, op, nin);
    uint8_t keep[MAXN * 8];
    if (inplace) memcpy(keep, out[0], bytes);
    int got = hoop__reduce_spread(out, nout, in, nin, n, dt, op, nin, stream);
    assert_int_equal(got, has_kernel(dt, op));
    for (int j = 0; j < nout; j++) {
        const uint8_t *b = outbuf[j];
        size_t at = PAD + off[j];
        if (got) {
            if (memcmp(b + at, want, bytes) != 0) {
                for (size_t i = 0; i < n; i++)
                    if (memcmp(b + at + i * w, want + i * w, w) != 0)
                        fail_msg("dtype %d op %d nin %d nout %d n %zu out %d off %zu inplace %d "
                                 "stream %d: element %zu differs",
                                 dt, op, nin, nout, n, j, off[j], inplace, stream, i);
            }
        } else if (inplace && j == 0) {
            assert_memory_equal(b + at, keep, bytes); /* nothing written */
        } else {
            for (size_t i = 0; i < bytes; i++) assert_int_equal(b[at + i], GUARD);
        }
        for (size_t i = 0; i < at; i++) assert_int_equal(b[i], GUARD);
        for (size_t i = at + bytes; i < sizeof outbuf[j]; i++) assert_int_equal(b[i], GUARD);
    }
    *ran += (size_t)got;
}

static void test_matrix(void **state)
{
    (void)state;
    static const size_t sizes[] = {1, 3, 15, 16, 17, 63, 64, 65, 127, 129, 200, 1031, MAXN};
    static const int ins[] = {1, 2, 3, 6}, outs[] = {1, 2, 5};
    uint64_t s = 0x9e3779b97f4a7c15ull;
    size_t ran = 0, cases = 0;
    for (int dt = 0; dt < HOOP_DTYPE_COUNT; dt++)
        for (int op = 0; op < HOOP_OP_COUNT; op++)
            for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
                for (size_t ii = 0; ii < 4; ii++)
                    for (size_t oi = 0; oi < 3; oi++)
                        for (int shape = 0; shape < 4; shape++) {
                            size_t w = DSIZE[dt], off[MAXOUT];
                            /* 0: every output line-aligned; 1: all alike, mid-line; 2: not
                             * alike (plain stores); 3: in place, mid-line */
                            for (int j = 0; j < MAXOUT; j++)
                                off[j] = shape == 0 ? 0 : shape == 2 ? (size_t)j * w * 3 : 5 * w;
                            for (int stream = 0; stream < 2; stream++) {
                                one((hoop_dtype_t)dt, (hoop_op_t)op, ins[ii], outs[oi], sizes[si],
                                    off, shape == 3, stream, &s, &ran);
                                cases++;
                            }
                        }
    /* On a processor with the kernels, most cases must have run them. */
    if (has_kernel(HOOP_FLOAT32, HOOP_SUM)) assert_true(ran > cases / 2);
    printf("one-pass fold: %zu of %zu cases ran the kernels\n", ran, cases);
}

/* Every float32 operation at the lanes' awkward pairs: NaN against a number both ways round,
 * signed zeros, infinities; the bits must be the chained calls'. */
static void test_float_pairs(void **state)
{
    (void)state;
    static const uint32_t v[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7f800000u,
                                 0xff800000u, 0x00000000u, 0x80000000u, 0x00000001u,
                                 0x3f800000u, 0xbf800000u, 0x7f7fffffu, 0xff7fffffu};
    enum { K = sizeof v / sizeof v[0], N = K * K + 16 };
    uint32_t a[N], b[N], o[N], want[N];
    for (size_t i = 0; i < N; i++) {
        a[i] = v[(i / K) % K];
        b[i] = v[i % K];
    }
    for (int op = 0; op < HOOP_OP_COUNT; op++) {
        const void *in[2] = {a, b};
        const uint8_t *cin[2] = {(const uint8_t *)a, (const uint8_t *)b};
        void *out[1] = {o};
        chained((uint8_t *)want, cin, 2, N, HOOP_FLOAT32, (hoop_op_t)op, 2);
        if (hoop__reduce_spread(out, 1, in, 2, N, HOOP_FLOAT32, (hoop_op_t)op, 2, 0))
            assert_memory_equal(o, want, sizeof o);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matrix),
        cmocka_unit_test(test_float_pairs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
