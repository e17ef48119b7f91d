/* Unit tests of the CPU reduction kernels (src/reduce/reduce.c).
 *
 * Every result is checked against a reference computed another way: integers element by element
 * in uint64_t with explicit masking and sign extension, floats in double with a float16/bfloat16
 * codec built on frexp/ldexp/rint rather than bit tricks. Computing in double and rounding once
 * gives the same answer as the kernels' float arithmetic followed by a second rounding, because
 * float carries more than 2p+1 bits for both 16-bit formats (and double does for float). */
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

/* Restated here instead of taken from the library, so a wrong table there cannot hide. */
static const size_t DSIZE[HOOP_DTYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
static const char *const DNAME[HOOP_DTYPE_COUNT] = {"int8",    "uint8",  "int32",   "uint32",
                                                    "int64",   "uint64", "float16", "bfloat16",
                                                    "float32", "float64"};
static const char *const ONAME[HOOP_OP_COUNT] = {"sum", "prod", "min", "max", "avg"};

static int is_int(hoop_dtype_t dt) { return dt <= HOOP_UINT64; }
static int is_signed_int(hoop_dtype_t dt)
{
    return dt == HOOP_INT8 || dt == HOOP_INT32 || dt == HOOP_INT64;
}

/* ---- deterministic random numbers (xorshift64*) ---- */

typedef struct {
    uint64_t s;
} rng_t;

static uint64_t rnd(rng_t *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1Dull;
}

/* ---- reference codec for small binary formats: `mant` stored mantissa bits, `ebits` exponent bits ---- */

static double ref_decode(uint32_t bits, int mant, int ebits)
{
    int bias = (1 << (ebits - 1)) - 1;
    uint32_t e = (bits >> mant) & ((1u << ebits) - 1u);
    uint32_t f = bits & ((1u << mant) - 1u);
    int neg = (bits >> (mant + ebits)) & 1u;
    double v;
    if (e == (1u << ebits) - 1u)
        v = f ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp((double)f, 1 - bias - mant);
    else
        v = ldexp((double)(f + (1u << mant)), (int)e - bias - mant);
    return neg ? -v : v;
}

/* Round v to nearest even in the format; NaN becomes the canonical quiet NaN with v's sign. */
static uint32_t ref_encode(double v, int mant, int ebits)
{
    int bias = (1 << (ebits - 1)) - 1;
    uint32_t sign = signbit(v) ? 1u << (mant + ebits) : 0u;
    uint32_t inf = ((1u << ebits) - 1u) << mant;
    double a = fabs(v);
    if (isnan(v)) return sign | inf | (1u << (mant - 1));
    if (isinf(a)) return sign | inf;
    if (a == 0.0) return sign;
    int e2;
    (void)frexp(a, &e2);
    int ex = e2 - 1;                      /* a = 1.xxx * 2^ex */
    if (ex < 1 - bias) ex = 1 - bias;     /* subnormal: fixed ulp */
    double m = rint(ldexp(a, mant - ex)); /* significand in ulps; rint rounds half to even */
    if (m >= ldexp(1.0, mant + 1)) {      /* rounding carried into the next binade */
        m = ldexp(m, -1);
        ex++;
    }
    if (ex > bias) return sign | inf;
    if (m < ldexp(1.0, mant)) return sign | (uint32_t)m; /* subnormal */
    return sign | ((uint32_t)(ex + bias) << mant) | ((uint32_t)m - (1u << mant));
}

static double half_val(uint16_t h) { return ref_decode(h, 10, 5); }
static double bf16_val(uint16_t h) { return ref_decode(h, 7, 8); }
static uint16_t half_of(double v) { return (uint16_t)ref_encode(v, 10, 5); }
static uint16_t bf16_of(double v) { return (uint16_t)ref_encode(v, 7, 8); }

static int half_is_nan(uint16_t h) { return (h & 0x7fffu) > 0x7c00u; }
static int bf16_is_nan(uint16_t h) { return (h & 0x7fffu) > 0x7f80u; }

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits_of_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ---- element access ---- */

static uint64_t load_u(const void *p, size_t i, size_t w)
{
    const unsigned char *c = (const unsigned char *)p + i * w;
    switch (w) {
    case 1: {
        uint8_t v;
        memcpy(&v, c, 1);
        return v;
    }
    case 2: {
        uint16_t v;
        memcpy(&v, c, 2);
        return v;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, c, 4);
        return v;
    }
    default: {
        uint64_t v;
        memcpy(&v, c, 8);
        return v;
    }
    }
}

static void store_u(void *p, size_t i, size_t w, uint64_t v)
{
    unsigned char *c = (unsigned char *)p + i * w;
    switch (w) {
    case 1: {
        uint8_t x = (uint8_t)v;
        memcpy(c, &x, 1);
        break;
    }
    case 2: {
        uint16_t x = (uint16_t)v;
        memcpy(c, &x, 2);
        break;
    }
    case 4: {
        uint32_t x = (uint32_t)v;
        memcpy(c, &x, 4);
        break;
    }
    default: memcpy(c, &v, 8); break;
    }
}

static uint64_t width_mask(size_t w)
{
    return w == 8 ? ~(uint64_t)0 : ((uint64_t)1 << (8 * w)) - 1u;
}

/* Two's complement value of the low 8*w bits of u. */
static int64_t sext(uint64_t u, size_t w)
{
    uint64_t m = width_mask(w);
    u &= m;
    if ((u >> (8 * w - 1)) & 1u) return -(int64_t)(~u & m) - 1;
    return (int64_t)u;
}

static double load_f(hoop_dtype_t dt, const void *p, size_t i)
{
    uint64_t u = load_u(p, i, DSIZE[dt]);
    switch (dt) {
    case HOOP_FLOAT16: return half_val((uint16_t)u);
    case HOOP_BFLOAT16: return bf16_val((uint16_t)u);
    case HOOP_FLOAT32: return (double)f32_from_bits((uint32_t)u);
    default: {
        double d;
        memcpy(&d, &u, sizeof d);
        return d;
    }
    }
}

static void store_f(hoop_dtype_t dt, void *p, size_t i, double v)
{
    switch (dt) {
    case HOOP_FLOAT16: store_u(p, i, 2, half_of(v)); break;
    case HOOP_BFLOAT16: store_u(p, i, 2, bf16_of(v)); break;
    case HOOP_FLOAT32: store_u(p, i, 4, bits_of_f32((float)v)); break;
    default: {
        uint64_t u;
        memcpy(&u, &v, sizeof u);
        store_u(p, i, 8, u);
        break;
    }
    }
}

/* ---- the reference reduction ---- */

static void ref_elem(hoop_dtype_t dt, hoop_op_t op, const void *a, const void *b, size_t i,
                     void *out)
{
    size_t w = DSIZE[dt];
    if (is_int(dt)) {
        uint64_t ua = load_u(a, i, w), ub = load_u(b, i, w), r = 0;
        int lt = is_signed_int(dt) ? sext(ua, w) < sext(ub, w) : ua < ub;
        switch (op) {
        case HOOP_SUM:
        case HOOP_AVG: r = ua + ub; break;
        case HOOP_PROD:
            r = ua * ub; /* the low bits of a product do not depend on the high bits */
            break;
        case HOOP_MIN: r = lt ? ua : ub; break;
        default: r = lt ? ub : ua; break;
        }
        store_u(out, i, w, r & width_mask(w));
        return;
    }
    double x = load_f(dt, a, i), y = load_f(dt, b, i), r;
    switch (op) {
    case HOOP_SUM:
    case HOOP_AVG: r = x + y; break;
    case HOOP_PROD: r = x * y; break;
    case HOOP_MIN: r = (isnan(x) || isnan(y)) ? NAN : (x < y ? x : y); break;
    default: r = (isnan(x) || isnan(y)) ? NAN : (x > y ? x : y); break;
    }
    store_f(dt, out, i, r);
}

/* Does element i of got match the reference? NaN matches any NaN (a quiet one for the 16-bit
 * formats); a zero min/max may be either zero, since -0 == +0 leaves the pick to the kernel. */
static int elem_ok(hoop_dtype_t dt, hoop_op_t op, const void *got, const void *want, size_t i)
{
    size_t w = DSIZE[dt];
    uint64_t g = load_u(got, i, w), x = load_u(want, i, w);
    if (is_int(dt)) return g == x;
    double gv = load_f(dt, got, i), wv = load_f(dt, want, i);
    if (isnan(wv)) {
        if (dt == HOOP_FLOAT16) return half_is_nan((uint16_t)g) && (g & 0x0200u);
        if (dt == HOOP_BFLOAT16) return bf16_is_nan((uint16_t)g) && (g & 0x0040u);
        return isnan(gv);
    }
    if ((op == HOOP_MIN || op == HOOP_MAX) && wv == 0.0) return gv == 0.0;
    return g == x;
}

static void describe(char *buf, size_t len, hoop_dtype_t dt, const void *p, size_t i)
{
    uint64_t u = load_u(p, i, DSIZE[dt]);
    if (is_int(dt))
        snprintf(buf, len, "%lld (0x%llx)", (long long)sext(u, DSIZE[dt]), (unsigned long long)u);
    else
        snprintf(buf, len, "%.17g (0x%llx)", load_f(dt, p, i), (unsigned long long)u);
}

/* ---- data ---- */

static void fill(hoop_dtype_t dt, void *buf, size_t n, rng_t *r)
{
    size_t w = DSIZE[dt];
    for (size_t i = 0; i < n; i++) {
        uint64_t k = rnd(r), bits = rnd(r);
        unsigned kind = (unsigned)(k % 8);
        if (is_int(dt)) {
            /* Mostly random; now and then an extreme value to provoke wrap-around. */
            uint64_t smax = width_mask(w) >> 1; /* largest signed value of this width */
            const uint64_t edge[] = {0, 1, 2, ~(uint64_t)0, smax, smax + 1u};
            uint64_t v = kind == 0 ? edge[(k >> 8) % 6] : bits;
            store_u(buf, i, w, v & width_mask(w));
            continue;
        }
        double moderate = (double)((int64_t)(k >> 40) % 4001 - 2000) / 16.0;
        if (dt == HOOP_FLOAT16 || dt == HOOP_BFLOAT16) {
            /* Half of them raw bit patterns: NaN, inf and subnormals all come up. */
            if (kind < 4)
                store_u(buf, i, 2, bits & 0xffffu);
            else
                store_f(dt, buf, i, moderate);
            continue;
        }
        if (kind == 0) {
            static const double special[] = {NAN,   -NAN,   INFINITY, -INFINITY,
                                             0.0,   -0.0,   1e-310,   -1e-310,
                                             1e-40, 3.4e38, -3.4e38,  1.7e308};
            store_f(dt, buf, i, special[(k >> 8) % 12]);
        } else if (kind < 3) {
            store_u(buf, i, w, bits & width_mask(w));
        } else {
            store_f(dt, buf, i, moderate);
        }
    }
}

/* ---- the dtype x op x size x aliasing matrix ---- */

enum { MODE_SEPARATE, MODE_OUT_IS_A, MODE_OUT_IS_B, MODE_COUNT };
static const char *const MODE_NAME[MODE_COUNT] = {"out separate", "out == a", "out == b"};
#define GUARD 16
#define SENTINEL 0xA5

static void check_case(hoop_dtype_t dt, hoop_op_t op, size_t n, int mode, size_t off, rng_t *r)
{
    size_t w = DSIZE[dt];
    size_t total = (n + off + GUARD) * w;
    unsigned char *a = malloc(total), *b = malloc(total), *o = malloc(total);
    unsigned char *a0 = malloc(total), *b0 = malloc(total), *want = malloc(total);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(o);
    assert_non_null(a0);
    assert_non_null(b0);
    assert_non_null(want);
    memset(a, SENTINEL, total);
    memset(b, SENTINEL, total);
    memset(o, SENTINEL, total);
    unsigned char *pa = a + off * w, *pb = b + off * w, *po = o + off * w;
    fill(dt, pa, n, r);
    fill(dt, pb, n, r);
    memcpy(a0, a, total);
    memcpy(b0, b, total);
    for (size_t i = 0; i < n; i++) ref_elem(dt, op, pa, pb, i, want);

    switch (mode) {
    case MODE_SEPARATE: hoop__reduce(po, pa, pb, n, dt, op); break;
    case MODE_OUT_IS_A:
        memcpy(o, a, total);
        hoop__reduce(po, po, pb, n, dt, op);
        break;
    default:
        memcpy(o, b, total);
        hoop__reduce(po, pa, po, n, dt, op);
        break;
    }

    for (size_t i = 0; i < n; i++) {
        if (!elem_ok(dt, op, po, want, i)) {
            char sa[64], sb[64], sg[64], sw[64];
            describe(sa, sizeof sa, dt, pa, i);
            describe(sb, sizeof sb, dt, pb, i);
            describe(sg, sizeof sg, dt, po, i);
            describe(sw, sizeof sw, dt, want, i);
            fail_msg("%s %s n=%zu %s offset=%zu: element %zu: %s op %s gave %s, want %s", DNAME[dt],
                     ONAME[op], n, MODE_NAME[mode], off, i, sa, sb, sg, sw);
        }
    }
    /* Nothing written outside [0, n), and inputs not touched (except the aliased one). */
    const unsigned char *exp_o = mode == MODE_OUT_IS_A ? a0 : mode == MODE_OUT_IS_B ? b0 : NULL;
    for (size_t j = 0; j < off * w; j++) assert_int_equal(o[j], exp_o ? exp_o[j] : SENTINEL);
    for (size_t j = (off + n) * w; j < total; j++)
        assert_int_equal(o[j], exp_o ? exp_o[j] : SENTINEL);
    if (mode == MODE_SEPARATE) {
        assert_memory_equal(a, a0, total);
        assert_memory_equal(b, b0, total);
    } else if (mode == MODE_OUT_IS_A) {
        assert_memory_equal(b, b0, total);
    } else {
        assert_memory_equal(a, a0, total);
    }
    free(a);
    free(b);
    free(o);
    free(a0);
    free(b0);
    free(want);
}

static void test_matrix(void **state)
{
    (void)state;
    static const size_t sizes[] = {0, 1, 7, 33, 1031};
    rng_t r = {0x9E3779B97F4A7C15ull};
    for (int dt = 0; dt < HOOP_DTYPE_COUNT; dt++)
        for (int op = 0; op < HOOP_OP_COUNT; op++)
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
                for (int mode = 0; mode < MODE_COUNT; mode++)
                    for (size_t off = 0; off < 2; off++) /* off = 1: not vector-aligned */
                        check_case((hoop_dtype_t)dt, (hoop_op_t)op, sizes[s], mode, off, &r);
}

/* Every float16/bfloat16 bit pattern against a shuffled partner, through the vectorized kernels. */
static void pairs_16bit(hoop_dtype_t dt)
{
    enum { N = 65536 };
    uint16_t *a = malloc(N * 2), *b = malloc(N * 2), *o = malloc(N * 2), *want = malloc(N * 2);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(o);
    assert_non_null(want);
    rng_t r = {12345};
    for (int round = 0; round < 3; round++) {
        for (uint32_t i = 0; i < N; i++) a[i] = b[i] = (uint16_t)i;
        for (uint32_t i = N - 1; i > 0; i--) { /* Fisher-Yates on b */
            uint32_t j = (uint32_t)(rnd(&r) % (i + 1));
            uint16_t t = b[i];
            b[i] = b[j];
            b[j] = t;
        }
        for (int op = 0; op < HOOP_OP_COUNT; op++) {
            hoop__reduce(o, a, b, N, dt, (hoop_op_t)op);
            for (size_t i = 0; i < N; i++) ref_elem(dt, (hoop_op_t)op, a, b, i, want);
            for (size_t i = 0; i < N; i++)
                if (!elem_ok(dt, (hoop_op_t)op, o, want, i))
                    fail_msg("%s %s: 0x%04x op 0x%04x gave 0x%04x, want 0x%04x", DNAME[dt],
                             ONAME[op], a[i], b[i], o[i], want[i]);
        }
    }
    free(a);
    free(b);
    free(o);
    free(want);
}

static void test_half_all_pairs(void **state)
{
    (void)state;
    pairs_16bit(HOOP_FLOAT16);
}

static void test_bf16_all_pairs(void **state)
{
    (void)state;
    pairs_16bit(HOOP_BFLOAT16);
}

/* ---- conversions ---- */

static void test_half_roundtrip_exhaustive(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = hoop__half_to_float((uint16_t)h);
        uint16_t back = hoop__float_to_half(f);
        if (half_is_nan((uint16_t)h)) {
            /* Quiet on the way out and back; sign and payload survive, only the quiet bit is added. */
            if (!isnan(f) || !(bits_of_f32(f) & 0x00400000u) || !half_is_nan(back) ||
                !(back & 0x0200u) || (back | 0x0200u) != (h | 0x0200u))
                fail_msg("half NaN 0x%04x -> %a -> 0x%04x", h, (double)f, back);
            continue;
        }
        double want = half_val((uint16_t)h);
        if ((double)f != want || !signbit(f) != !signbit(want))
            fail_msg("half 0x%04x -> %a, want %a", h, (double)f, want);
        if (back != h) fail_msg("half 0x%04x -> %a -> 0x%04x", h, (double)f, back);
    }
}

static void test_bf16_roundtrip_exhaustive(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = hoop__bf16_to_float((uint16_t)h);
        uint16_t back = hoop__float_to_bf16(f);
        if (bf16_is_nan((uint16_t)h)) {
            if (!isnan(f) || !(bits_of_f32(f) & 0x00400000u) || !bf16_is_nan(back) ||
                !(back & 0x0040u) || (back | 0x0040u) != (h | 0x0040u))
                fail_msg("bf16 NaN 0x%04x -> %a -> 0x%04x", h, (double)f, back);
            continue;
        }
        double want = bf16_val((uint16_t)h);
        if ((double)f != want || !signbit(f) != !signbit(want))
            fail_msg("bf16 0x%04x -> %a, want %a", h, (double)f, want);
        if (back != h) fail_msg("bf16 0x%04x -> %a -> 0x%04x", h, (double)f, back);
    }
}

/* For every pair of neighbouring finite values h, h+1: the exact midpoint goes to the even one, and
 * the floats just either side of it go to the nearer one. h+1 past the largest finite value is
 * infinity, which the midpoint reaches by rounding up (the largest finite mantissa is odd). */
static void ties_16bit(int is_half)
{
    uint32_t inf = is_half ? 0x7c00u : 0x7f80u;
    for (uint32_t h = 0; h < inf; h++) {
        double lo = is_half ? half_val((uint16_t)h) : bf16_val((uint16_t)h);
        double hi = h + 1 == inf
                        ? (is_half ? 65536.0 : ldexp(1.0, 128))
                        : (is_half ? half_val((uint16_t)(h + 1)) : bf16_val((uint16_t)(h + 1)));
        float mid = (float)((lo + hi) / 2); /* exact: needs one bit more than the format has */
        assert_true((double)mid == (lo + hi) / 2);
        uint32_t even = (h & 1u) ? h + 1 : h;
        float below = nextafterf(mid, 0.0f), above = nextafterf(mid, INFINITY);
        for (int neg = 0; neg < 2; neg++) {
            uint32_t s = neg ? 0x8000u : 0u;
            float m = neg ? -mid : mid, bl = neg ? -below : below, ab = neg ? -above : above;
            uint16_t gm = is_half ? hoop__float_to_half(m) : hoop__float_to_bf16(m);
            uint16_t gb = is_half ? hoop__float_to_half(bl) : hoop__float_to_bf16(bl);
            uint16_t ga = is_half ? hoop__float_to_half(ab) : hoop__float_to_bf16(ab);
            if (gm != (s | even) || gb != (s | h) || ga != (s | (h + 1)))
                fail_msg("%s ties near 0x%04x (sign %d): mid %a -> 0x%04x, below -> 0x%04x, above "
                         "-> 0x%04x",
                         is_half ? "half" : "bf16", h, neg, (double)m, gm, gb, ga);
        }
    }
}

static void test_half_ties_exhaustive(void **state)
{
    (void)state;
    ties_16bit(1);
}

static void test_bf16_ties_exhaustive(void **state)
{
    (void)state;
    ties_16bit(0);
}

typedef struct {
    float in;
    uint16_t want;
} conv_case_t;

static void test_half_constructed(void **state)
{
    (void)state;
    const conv_case_t cases[] = {
        {1.0f, 0x3c00},
        {-2.0f, 0xc000},
        {1.0f + 0x1p-11f, 0x3c00},            /* tie, even is down */
        {1.0f + 3 * 0x1p-11f, 0x3c02},        /* tie, even is up */
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01}, /* just past the tie */
        {65504.0f, 0x7bff},
        {65519.0f, 0x7bff},
        {65520.0f, 0x7c00}, /* tie at the top rounds to infinity */
        {1e6f, 0x7c00},
        {-1e6f, 0xfc00},
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
        {0x1p-14f, 0x0400},            /* smallest normal */
        {0x1p-14f - 0x1p-26f, 0x0400}, /* rounds up into the normals */
        {0x1p-24f, 0x0001},            /* smallest subnormal */
        {0x1p-25f, 0x0000},            /* tie to even zero */
        {0x1p-25f + 0x1p-40f, 0x0001},
        {3 * 0x1p-25f, 0x0002}, /* tie to even 2 */
        {5 * 0x1p-25f, 0x0002}, /* tie to even 2 */
        {0x3ffp-24f, 0x03ff},   /* largest subnormal */
        {-0x1p-24f, 0x8001},
        {0x1p-30f, 0x0000},
        {-0x1p-30f, 0x8000},
        {0x1p-149f, 0x0000}, /* float subnormal */
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {0.1f, 0x2e66},
        {3.14159265f, 0x4248},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t got = hoop__float_to_half(cases[i].in);
        if (got != cases[i].want)
            fail_msg("float_to_half(%a) = 0x%04x, want 0x%04x", (double)cases[i].in, got,
                     cases[i].want);
    }
    /* Signalling and payload-only NaNs must stay NaN, never collapse into infinity. */
    const uint32_t nans[] = {0x7f800001u, 0xff800001u, 0x7fc00000u,
                             0x7f801fffu, 0x7fffffffu, 0xffc00000u};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        uint16_t h = hoop__float_to_half(f32_from_bits(nans[i]));
        assert_true(half_is_nan(h));
        assert_true(h & 0x0200u);
        assert_int_equal(h & 0x8000u, (nans[i] >> 16) & 0x8000u);
    }
}

static void test_bf16_constructed(void **state)
{
    (void)state;
    const conv_case_t cases[] = {
        {1.0f, 0x3f80},
        {-2.0f, 0xc000},
        {1.0f + 0x1p-8f, 0x3f80},     /* tie, even is down */
        {1.0f + 3 * 0x1p-8f, 0x3f82}, /* tie, even is up */
        {1.0f + 0x1p-8f + 0x1p-20f, 0x3f81},
        {f32_from_bits(0x7f7f7fffu), 0x7f7f},
        {f32_from_bits(0x7f7f8000u), 0x7f80}, /* tie at the top rounds to infinity */
        {f32_from_bits(0x7f7fffffu), 0x7f80}, /* FLT_MAX */
        {INFINITY, 0x7f80},
        {-INFINITY, 0xff80},
        {f32_from_bits(0x00008000u), 0x0000}, /* subnormal tie to even zero */
        {f32_from_bits(0x00018000u), 0x0002}, /* subnormal tie to even 2 */
        {f32_from_bits(0x00008001u), 0x0001},
        {f32_from_bits(0x007fffffu), 0x0080}, /* rounds up into the normals */
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {3.14159265f, 0x4049},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t got = hoop__float_to_bf16(cases[i].in);
        if (got != cases[i].want)
            fail_msg("float_to_bf16(%a) = 0x%04x, want 0x%04x", (double)cases[i].in, got,
                     cases[i].want);
    }
    const uint32_t nans[] = {0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7f80ffffu, 0x7fffffffu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        uint16_t h = hoop__float_to_bf16(f32_from_bits(nans[i]));
        assert_true(bf16_is_nan(h));
        assert_true(h & 0x0040u);
        assert_int_equal(h & 0x8000u, (nans[i] >> 16) & 0x8000u);
    }
}

/* Random float bit patterns (and a stride over all of them) against the reference rounding. */
static void test_float_to_16bit_sampled(void **state)
{
    (void)state;
    rng_t r = {777};
    for (uint64_t k = 0; k < (1u << 20) + (1u << 20); k++) {
        uint32_t u = k < (1u << 20) ? (uint32_t)rnd(&r) : (uint32_t)((k - (1u << 20)) * 4093u);
        float f = f32_from_bits(u);
        uint16_t h = hoop__float_to_half(f), bf = hoop__float_to_bf16(f);
        if (isnan(f)) {
            assert_true(half_is_nan(h));
            assert_true(bf16_is_nan(bf));
            continue;
        }
        if (h != half_of(f))
            fail_msg("float_to_half(%a) = 0x%04x, want 0x%04x", (double)f, h, half_of(f));
        if (bf != bf16_of(f))
            fail_msg("float_to_bf16(%a) = 0x%04x, want 0x%04x", (double)f, bf, bf16_of(f));
    }
}

/* ---- constructed reductions ---- */

static uint16_t red16(hoop_dtype_t dt, hoop_op_t op, uint16_t x, uint16_t y)
{
    uint16_t o;
    hoop__reduce(&o, &x, &y, 1, dt, op);
    return o;
}

static void test_half_overflow_subnormal(void **state)
{
    (void)state;
    const hoop_dtype_t H = HOOP_FLOAT16;
    assert_int_equal(red16(H, HOOP_SUM, 0x7bff, 0x7bff), 0x7c00); /* 65504 + 65504 */
    assert_int_equal(red16(H, HOOP_SUM, 0x7bff, 0x4c00),
                     0x7c00); /* 65504 + 16 = 65520: tie to inf */
    assert_int_equal(red16(H, HOOP_SUM, 0x7bff, 0x4bfc), 0x7bff); /* 65504 + 15.97 */
    assert_int_equal(red16(H, HOOP_SUM, 0xfbff, 0xfbff), 0xfc00);
    assert_int_equal(red16(H, HOOP_PROD, 0x5c00, 0x5c00), 0x7c00); /* 256 * 256 */
    assert_int_equal(red16(H, HOOP_PROD, 0x5c00, 0xdc00), 0xfc00);
    assert_int_equal(red16(H, HOOP_SUM, 0x0001, 0x0001), 0x0002);  /* subnormals add exactly */
    assert_int_equal(red16(H, HOOP_SUM, 0x03ff, 0x0001), 0x0400);  /* into the normals */
    assert_int_equal(red16(H, HOOP_SUM, 0x0400, 0x8001), 0x03ff);  /* and back out */
    assert_int_equal(red16(H, HOOP_PROD, 0x0c00, 0x0c00), 0x0001); /* 2^-12 * 2^-12 = 2^-24 */
    assert_int_equal(red16(H, HOOP_PROD, 0x0800, 0x0c00), 0x0000); /* 2^-25: tie to even zero */
    assert_int_equal(red16(H, HOOP_PROD, 0x0e00, 0x0c00), 0x0002); /* 1.5 * 2^-24: tie to even 2 */
    assert_int_equal(red16(H, HOOP_PROD, 0x0e00, 0x8c00), 0x8002);
    assert_int_equal(red16(H, HOOP_PROD, 0x0a00, 0x0c00), 0x0001); /* 0.75 * 2^-24 rounds up */
    assert_int_equal(red16(H, HOOP_PROD, 0x0001, 0x3800), 0x0000); /* 2^-24 * 0.5: tie to zero */
    assert_int_equal(red16(H, HOOP_SUM, 0x3c00, 0x1000), 0x3c00);  /* 1 + 2^-11: tie to even */
    assert_int_equal(red16(H, HOOP_SUM, 0x3c01, 0x1000), 0x3c02);  /* (1 + 2^-10) + 2^-11 */
    assert_int_equal(red16(H, HOOP_SUM, 0x7c00, 0xfc00) & 0x7e00, 0x7e00); /* inf - inf: NaN */
    assert_true(half_is_nan(red16(H, HOOP_SUM, 0x7c01, 0x3c00))); /* signalling NaN stays NaN */
    assert_true(half_is_nan(red16(H, HOOP_PROD, 0x3c00, 0x7d00)));

    const hoop_dtype_t B = HOOP_BFLOAT16;
    assert_int_equal(red16(B, HOOP_SUM, 0x7f7f, 0x7f7f), 0x7f80);
    assert_int_equal(red16(B, HOOP_PROD, 0x5f80, 0x5f80), 0x7f80); /* 2^64 * 2^64 */
    assert_int_equal(red16(B, HOOP_SUM, 0x0001, 0x0001), 0x0002);
    assert_int_equal(red16(B, HOOP_SUM, 0x007f, 0x0001), 0x0080);
    assert_int_equal(red16(B, HOOP_SUM, 0x3f80, 0x3b80), 0x3f80); /* 1 + 2^-8: tie to even */
    assert_int_equal(red16(B, HOOP_SUM, 0x3f81, 0x3b80), 0x3f82);
    assert_true(bf16_is_nan(red16(B, HOOP_SUM, 0x7f81, 0x3f80)));
}

static void test_int_wraparound(void **state)
{
    (void)state;
    typedef struct {
        hoop_dtype_t dt;
        hoop_op_t op;
        uint64_t a, b, want; /* bit patterns, low bytes used */
    } wcase_t;
    const wcase_t cases[] = {
        {HOOP_INT8, HOOP_SUM, 127, 1, 0x80},      /* 127 + 1 = -128 */
        {HOOP_INT8, HOOP_SUM, 0x80, 0xff, 0x7f},  /* -128 + -1 = 127 */
        {HOOP_INT8, HOOP_PROD, 16, 16, 0},        /* 256 */
        {HOOP_INT8, HOOP_PROD, 0x80, 0xff, 0x80}, /* -128 * -1 = -128 */
        {HOOP_INT8, HOOP_PROD, 100, 3, 44},       /* 300 - 256 */
        {HOOP_INT8, HOOP_PROD, 0x9c, 3, 0xd4},    /* -100 * 3 = -300 = -44 */
        {HOOP_UINT8, HOOP_SUM, 255, 1, 0},
        {HOOP_UINT8, HOOP_SUM, 200, 100, 44},
        {HOOP_UINT8, HOOP_PROD, 255, 255, 1},
        {HOOP_UINT8, HOOP_PROD, 16, 16, 0},
        {HOOP_INT32, HOOP_SUM, 0x7fffffff, 1, 0x80000000},
        {HOOP_INT32, HOOP_SUM, 0x80000000, 0xffffffff, 0x7fffffff},
        {HOOP_INT32, HOOP_PROD, 65536, 65536, 0},
        {HOOP_INT32, HOOP_PROD, 0x80000000, 0xffffffff, 0x80000000},
        {HOOP_INT32, HOOP_PROD, 0x7fffffff, 0x7fffffff, 1},
        {HOOP_INT32, HOOP_PROD, 123456789, 1000, 0xbe991a08}, /* 123456789000 mod 2^32 */
        {HOOP_UINT32, HOOP_SUM, 0xffffffff, 2, 1},
        {HOOP_UINT32, HOOP_PROD, 0xffffffff, 0xffffffff, 1},
        {HOOP_UINT32, HOOP_PROD, 0x10000, 0x10001, 0x10000},
        {HOOP_INT64, HOOP_SUM, 0x7fffffffffffffffull, 1, 0x8000000000000000ull},
        {HOOP_INT64, HOOP_SUM, 0x8000000000000000ull, ~0ull, 0x7fffffffffffffffull},
        {HOOP_INT64, HOOP_PROD, 1ull << 32, 1ull << 32, 0},
        {HOOP_INT64, HOOP_PROD, 0x8000000000000000ull, ~0ull, 0x8000000000000000ull},
        {HOOP_INT64, HOOP_PROD, 0x7fffffffffffffffull, 0x7fffffffffffffffull, 1},
        {HOOP_UINT64, HOOP_SUM, ~0ull, 1, 0},
        {HOOP_UINT64, HOOP_PROD, ~0ull, ~0ull, 1},
        {HOOP_UINT64, HOOP_PROD, 0x100000001ull, 0xffffffffull, 0xffffffffffffffffull},
        {HOOP_UINT64, HOOP_PROD, 1ull << 63, 2, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const wcase_t *c = &cases[i];
        size_t w = DSIZE[c->dt];
        /* Several elements so the vector loop, not just the scalar tail, sees the values. */
        enum { N = 37 };
        unsigned char a[N * 8], b[N * 8], o[N * 8];
        for (size_t j = 0; j < N; j++) {
            store_u(a, j, w, c->a);
            store_u(b, j, w, c->b);
        }
        hoop__reduce(o, a, b, N, c->dt, c->op);
        for (size_t j = 0; j < N; j++)
            if (load_u(o, j, w) != (c->want & width_mask(w)))
                fail_msg("case %zu: %s %s 0x%llx, 0x%llx gave 0x%llx, want 0x%llx", i, DNAME[c->dt],
                         ONAME[c->op], (unsigned long long)c->a, (unsigned long long)c->b,
                         (unsigned long long)load_u(o, j, w), (unsigned long long)c->want);
    }
}

/* NaN wins min/max from either side; infinities order normally. */
static void test_minmax_nan_inf(void **state)
{
    (void)state;
    const double pairs[][2] = {
        {NAN, 1.0},       {1.0, NAN},       {NAN, NAN},
        {-INFINITY, 1.0}, {1.0, INFINITY},  {INFINITY, -INFINITY},
        {INFINITY, NAN},  {NAN, -INFINITY}, {-0.0, 0.0},
        {2.0, -3.0},
    };
    enum { NP = sizeof pairs / sizeof pairs[0], REP = 5 };
    const hoop_dtype_t fdt[] = {HOOP_FLOAT16, HOOP_BFLOAT16, HOOP_FLOAT32, HOOP_FLOAT64};
    for (size_t d = 0; d < 4; d++) {
        hoop_dtype_t dt = fdt[d];
        /* Repeat the pairs so every position of a vector register sees every case. */
        unsigned char a[NP * REP * 8], b[NP * REP * 8], o[NP * REP * 8];
        for (size_t i = 0; i < NP * REP; i++) {
            store_f(dt, a, i, pairs[i % NP][0]);
            store_f(dt, b, i, pairs[i % NP][1]);
        }
        for (int op = HOOP_MIN; op <= HOOP_MAX; op++) {
            hoop__reduce(o, a, b, NP * REP, dt, (hoop_op_t)op);
            for (size_t i = 0; i < NP * REP; i++) {
                double x = pairs[i % NP][0], y = pairs[i % NP][1], got = load_f(dt, o, i);
                if (isnan(x) || isnan(y)) {
                    if (!isnan(got))
                        fail_msg("%s %s(%g, %g) = %g, want NaN", DNAME[dt], ONAME[op], x, y, got);
                } else {
                    double want = op == HOOP_MIN ? fmin(x, y) : fmax(x, y);
                    if (got != want)
                        fail_msg("%s %s(%g, %g) = %g, want %g", DNAME[dt], ONAME[op], x, y, got,
                                 want);
                }
            }
        }
    }
}

/* ---- average ---- */

/* Reference quotient truncated toward zero, done on magnitudes so it does not lean on C's rule. */
static void ref_avg(hoop_dtype_t dt, void *buf, size_t i, int d)
{
    size_t w = DSIZE[dt];
    if (is_int(dt)) {
        uint64_t u = load_u(buf, i, w);
        if (is_signed_int(dt)) {
            int64_t s = sext(u, w);
            uint64_t mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
            uint64_t q = mag / (uint64_t)d;
            store_u(buf, i, w, s < 0 ? (uint64_t)0 - q : q);
        } else {
            store_u(buf, i, w, u / (uint64_t)d);
        }
        return;
    }
    store_f(dt, buf, i, load_f(dt, buf, i) / d);
}

static void test_avg_finish_random(void **state)
{
    (void)state;
    static const int divisors[] = {1, 2, 3, 7, 64, 1000, 65537};
    rng_t r = {4242};
    enum { N = 1031 };
    for (int dt = 0; dt < HOOP_DTYPE_COUNT; dt++) {
        for (size_t k = 0; k < sizeof divisors / sizeof divisors[0]; k++) {
            size_t w = DSIZE[dt];
            unsigned char *buf = malloc((N + GUARD) * w), *want = malloc((N + GUARD) * w);
            assert_non_null(buf);
            assert_non_null(want);
            memset(buf, SENTINEL, (N + GUARD) * w);
            fill((hoop_dtype_t)dt, buf, N, &r);
            memcpy(want, buf, (N + GUARD) * w);
            for (size_t i = 0; i < N; i++) ref_avg((hoop_dtype_t)dt, want, i, divisors[k]);
            hoop__reduce_avg_finish(buf, N, (hoop_dtype_t)dt, divisors[k]);
            for (size_t i = 0; i < N; i++) {
                if (!elem_ok((hoop_dtype_t)dt, HOOP_SUM, buf, want, i)) {
                    char sg[64], sw[64];
                    describe(sg, sizeof sg, (hoop_dtype_t)dt, buf, i);
                    describe(sw, sizeof sw, (hoop_dtype_t)dt, want, i);
                    fail_msg("%s avg_finish /%d element %zu: got %s, want %s", DNAME[dt],
                             divisors[k], i, sg, sw);
                }
            }
            assert_memory_equal(buf + N * w, want + N * w, GUARD * w);
            free(buf);
            free(want);
        }
    }
}

static void test_avg_finish_constructed(void **state)
{
    (void)state;
    {
        int8_t v[] = {-7, 7, -128, 127, -1, 1, 0, -6};
        const int8_t want[] = {-3, 3, -64, 63, 0, 0, 0, -3};
        hoop__reduce_avg_finish(v, 8, HOOP_INT8, 2);
        assert_memory_equal(v, want, sizeof v);
    }
    {
        int8_t v[] = {-7, -8, -9, 127, -128};
        const int8_t want[] = {-2, -2, -3, 42, -42};
        hoop__reduce_avg_finish(v, 5, HOOP_INT8, 3);
        assert_memory_equal(v, want, sizeof v);
    }
    {
        uint8_t v[] = {255, 7, 1};
        const uint8_t want[] = {127, 3, 0};
        hoop__reduce_avg_finish(v, 3, HOOP_UINT8, 2);
        assert_memory_equal(v, want, sizeof v);
    }
    {
        int32_t v[] = {-7, INT32_MIN, INT32_MAX, -1, 10, -9};
        const int32_t want[] = {0, -268435456, 268435455, 0, 1, -1};
        hoop__reduce_avg_finish(v, 6, HOOP_INT32, 8);
        assert_memory_equal(v, want, sizeof v);
    }
    {
        uint32_t v[] = {UINT32_MAX, 5};
        const uint32_t want[] = {UINT32_MAX / 3, 1};
        hoop__reduce_avg_finish(v, 2, HOOP_UINT32, 3);
        assert_memory_equal(v, want, sizeof v);
    }
    {
        int64_t v[] = {INT64_MIN, INT64_MAX, -5, 5};
        const int64_t want[] = {-((int64_t)1 << 61), ((int64_t)1 << 61) - 1, -1, 1};
        hoop__reduce_avg_finish(v, 4, HOOP_INT64, 4);
        assert_memory_equal(v, want, sizeof v);
    }
    {
        uint64_t v[] = {UINT64_MAX, 9};
        const uint64_t want[] = {UINT64_MAX / 10, 0};
        hoop__reduce_avg_finish(v, 2, HOOP_UINT64, 10);
        assert_memory_equal(v, want, sizeof v);
    }
    {
        float v[] = {1.0f, -7.0f, INFINITY};
        hoop__reduce_avg_finish(v, 3, HOOP_FLOAT32, 3);
        assert_true(v[0] == 1.0f / 3.0f);
        assert_true(v[1] == -7.0f / 3.0f);
        assert_true(isinf(v[2]));
    }
    {
        double v[] = {1.0, -7.0};
        hoop__reduce_avg_finish(v, 2, HOOP_FLOAT64, 3);
        assert_true(v[0] == 1.0 / 3.0);
        assert_true(v[1] == -7.0 / 3.0);
    }
    {
        uint16_t v[] = {0x3c00, 0xc700, 0x0001, 0x0003, 0x7c00}; /* 1, -7, 2^-24, 3*2^-24, inf */
        hoop__reduce_avg_finish(v, 5, HOOP_FLOAT16, 2);
        assert_int_equal(v[0], 0x3800); /* 0.5 */
        assert_int_equal(v[1], 0xc300); /* -3.5 */
        assert_int_equal(v[2], 0x0000); /* 2^-25: tie to even zero */
        assert_int_equal(v[3], 0x0002); /* 1.5 * 2^-24: tie to even 2 */
        assert_int_equal(v[4], 0x7c00);
        uint16_t t = 0x3c00;
        hoop__reduce_avg_finish(&t, 1, HOOP_FLOAT16, 3);
        assert_int_equal(t, 0x3555); /* 1/3 rounded to nearest */
    }
    {
        uint16_t v[] = {0x3f80, 0xc0e0}; /* 1, -7 */
        hoop__reduce_avg_finish(v, 2, HOOP_BFLOAT16, 3);
        assert_int_equal(v[0], 0x3eab); /* 1/3 = 0x3eaaaaab -> rounds up */
        assert_int_equal(v[1], 0xc015); /* -7/3 = 0xc0155555 -> rounds down */
    }
}

/* ---- bad input ---- */

static void test_invalid_args(void **state)
{
    (void)state;
    unsigned char a[64], b[64], o[64], o0[64];
    memset(a, 1, sizeof a);
    memset(b, 2, sizeof b);
    memset(o, SENTINEL, sizeof o);
    memcpy(o0, o, sizeof o);
    hoop__reduce(o, a, b, 8, HOOP_DTYPE_COUNT, HOOP_SUM);
    hoop__reduce(o, a, b, 8, (hoop_dtype_t)-1, HOOP_SUM);
    hoop__reduce(o, a, b, 8, HOOP_INT32, HOOP_OP_COUNT);
    hoop__reduce(o, a, b, 8, HOOP_INT32, (hoop_op_t)-1);
    hoop__reduce(o, a, b, 0, HOOP_INT32, HOOP_SUM);
    hoop__reduce(NULL, a, b, 8, HOOP_INT32, HOOP_SUM);
    hoop__reduce(o, NULL, b, 8, HOOP_INT32, HOOP_SUM);
    hoop__reduce(o, a, NULL, 8, HOOP_INT32, HOOP_SUM);
    assert_memory_equal(o, o0, sizeof o);
    /* A divisor below 1 leaves the data alone rather than dividing by zero. */
    int32_t v[2] = {INT32_MIN, 7};
    hoop__reduce_avg_finish(v, 2, HOOP_INT32, 0);
    hoop__reduce_avg_finish(v, 2, HOOP_INT32, -1);
    hoop__reduce_avg_finish(v, 2, HOOP_DTYPE_COUNT, 2);
    hoop__reduce_avg_finish(NULL, 2, HOOP_INT32, 2);
    assert_int_equal(v[0], INT32_MIN);
    assert_int_equal(v[1], 7);
}

/* A NaN that arithmetic produces is the canonical quiet NaN, whatever NaN went in and on which
 * side, so that CPU and GPU kernels agree bit for bit; min/max return the NaN operand (quieted). */
static void test_nan_canonical(void **state)
{
    (void)state;
    const uint32_t f32n[] = {0x7fc00001u, 0xffc00000u, 0x7f800001u, 0xffbfffffu};
    for (size_t i = 0; i < sizeof f32n / sizeof f32n[0]; i++) {
        for (int op = 0; op < HOOP_OP_COUNT; op++) {
            uint32_t a[2] = {f32n[i], bits_of_f32(1.5f)}, b[2] = {bits_of_f32(2.0f), f32n[i]}, o[2];
            hoop__reduce(o, a, b, 2, HOOP_FLOAT32, (hoop_op_t)op);
            int minmax = op == HOOP_MIN || op == HOOP_MAX;
            for (int k = 0; k < 2; k++)
                assert_int_equal(o[k], minmax ? f32n[i] : 0x7fc00000u); /* min/max: as is */
        }
    }
    uint32_t inf[2] = {0x7f800000u, 0x00000000u}, ninf[2] = {0xff800000u, 0x7f800000u}, o[2];
    hoop__reduce(o, inf, ninf, 2, HOOP_FLOAT32, HOOP_SUM); /* inf - inf; 0 + inf */
    assert_int_equal(o[0], 0x7fc00000u);
    assert_int_equal(o[1], 0x7f800000u);
    hoop__reduce(o, inf, ninf, 2, HOOP_FLOAT32, HOOP_PROD); /* inf * -inf; 0 * inf */
    assert_int_equal(o[0], 0xff800000u);
    assert_int_equal(o[1], 0x7fc00000u);
    uint64_t d[2] = {0xfff0000000000001ull, 0x7ff0000000000000ull};
    uint64_t e[2] = {0x3ff0000000000000ull, 0xfff0000000000000ull}, od[2];
    hoop__reduce(od, d, e, 2, HOOP_FLOAT64, HOOP_SUM);
    assert_true(od[0] == 0x7ff8000000000000ull && od[1] == 0x7ff8000000000000ull);
    hoop__reduce_avg_finish(d, 2, HOOP_FLOAT64, 3);
    assert_true(d[0] == 0x7ff8000000000000ull && d[1] == 0x7ff0000000000000ull);
    float f[1] = {f32_from_bits(0xffc12345u)};
    hoop__reduce_avg_finish(f, 1, HOOP_FLOAT32, 2);
    assert_int_equal(bits_of_f32(f[0]), 0x7fc00000u);
    /* 16-bit: NaN of either sign and payload, signalling or quiet, and inf - inf. */
    const uint16_t hn[] = {0x7c01, 0xfe55, 0x7fff, 0x7c00};
    const uint16_t bn[] = {0x7f81, 0xffc5, 0x7fff, 0x7f80};
    for (size_t i = 0; i < 4; i++) {
        uint16_t a[2] = {hn[i], 0x3c00}, b[2] = {(uint16_t)(i == 3 ? 0xfc00 : 0x4000), hn[i]},
                 o16[2];
        hoop__reduce(o16, a, b, 2, HOOP_FLOAT16, HOOP_SUM);
        assert_int_equal(o16[0], 0x7e00);
        if (i < 3) assert_int_equal(o16[1], 0x7e00);
        uint16_t c[2] = {bn[i], 0x3f80}, e16[2] = {(uint16_t)(i == 3 ? 0xff80 : 0x4000), bn[i]};
        hoop__reduce(o16, c, e16, 2, HOOP_BFLOAT16, HOOP_SUM);
        assert_int_equal(o16[0], 0x7fc0);
        if (i < 3) assert_int_equal(o16[1], 0x7fc0);
        hoop__reduce(o16, c, e16, 2, HOOP_BFLOAT16, HOOP_MAX);
        if (i < 3) assert_int_equal(o16[0], bn[i] | 0x0040);
        hoop__reduce_avg_finish(a, 1, HOOP_FLOAT16, 2);
        assert_int_equal(a[0], i < 3 ? 0x7e00 : 0x7c00);
    }
}

/* hoop__copy_stream is memcpy: every length to 1 KiB and a few large ones, at every alignment of
 * source and destination within a line; the bytes around the destination stay untouched. */
static void test_copy_stream(void **state)
{
    (void)state;
    enum { MAXN = 70000, PAD = 64 };
    uint8_t *src = malloc(MAXN + 2 * PAD), *dst = malloc(MAXN + 2 * PAD);
    assert_non_null(src);
    assert_non_null(dst);
    for (size_t i = 0; i < MAXN + 2 * PAD; i++) src[i] = (uint8_t)(i * 131u + 7u);
    static const size_t big[] = {4095, 4096, 4097, 65536 + 13, MAXN};
    for (size_t k = 0; k < 1025 + sizeof big / sizeof big[0]; k++) {
        size_t n = k < 1025 ? k : big[k - 1025];
        for (size_t so = 0; so < 64; so += k < 1025 ? 21 : 5)
            for (size_t d0 = 0; d0 < 64; d0 += k < 1025 ? 13 : 3) {
                memset(dst, 0xee, MAXN + 2 * PAD);
                hoop__copy_stream(dst + PAD + d0, src + so, n);
                assert_memory_equal(dst + PAD + d0, src + so, n);
                for (size_t i = 0; i < PAD + d0; i++) assert_int_equal(dst[i], 0xee);
                for (size_t i = PAD + d0 + n; i < MAXN + 2 * PAD; i++)
                    assert_int_equal(dst[i], 0xee);
            }
    }
    free(src);
    free(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matrix),
        cmocka_unit_test(test_copy_stream),
        cmocka_unit_test(test_half_all_pairs),
        cmocka_unit_test(test_bf16_all_pairs),
        cmocka_unit_test(test_half_roundtrip_exhaustive),
        cmocka_unit_test(test_bf16_roundtrip_exhaustive),
        cmocka_unit_test(test_half_ties_exhaustive),
        cmocka_unit_test(test_bf16_ties_exhaustive),
        cmocka_unit_test(test_half_constructed),
        cmocka_unit_test(test_bf16_constructed),
        cmocka_unit_test(test_float_to_16bit_sampled),
        cmocka_unit_test(test_half_overflow_subnormal),
        cmocka_unit_test(test_int_wraparound),
        cmocka_unit_test(test_minmax_nan_inf),
        cmocka_unit_test(test_nan_canonical),
        cmocka_unit_test(test_avg_finish_random),
        cmocka_unit_test(test_avg_finish_constructed),
        cmocka_unit_test(test_invalid_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
