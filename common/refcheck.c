/* Reference element arithmetic; see refcheck.h. */
#include "refcheck.h"

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

float rc_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m * 0x1p-24f; /* subnormal or zero: exact */
        return (h & 0x8000u) ? -v : v;
    }
    if (e == 31) return f32_from_bits(sign | 0x7f800000u | (m << 13));
    return f32_from_bits(sign | ((e + 112) << 23) | (m << 13));
}

/* Keeps the bits above `shift`, rounding to nearest, ties to even. */
static uint32_t round_shift(uint32_t v, unsigned shift)
{
    uint32_t q = v >> shift, rem = v & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return q;
}

uint16_t rc_float_to_half(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t exp = (x >> 23) & 0xffu, man = x & 0x7fffffu;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0u));
    int e = (int)exp - 112; /* biased half exponent */
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        unsigned shift = (unsigned)(14 - e);
        if (shift > 25) return sign; /* below half the smallest subnormal */
        /* A carry out of the subnormal range lands on the smallest normal: still right. */
        return (uint16_t)(sign | round_shift(man | 0x800000u, shift));
    }
    /* A carry out of the mantissa bumps the exponent, up to infinity: still right. */
    return (uint16_t)(sign | (((uint32_t)e << 10) + round_shift(man, 13)));
}

float rc_bf16_to_float(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

uint16_t rc_float_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet the NaN */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

int rc_is_float(hoop_dtype_t dt)
{
    return dt == HOOP_FLOAT16 || dt == HOOP_BFLOAT16 || dt == HOOP_FLOAT32 || dt == HOOP_FLOAT64;
}

int rc_is_signed_int(hoop_dtype_t dt)
{
    return dt == HOOP_INT8 || dt == HOOP_INT32 || dt == HOOP_INT64;
}

double rc_fdec(hoop_dtype_t dt, uint64_t raw)
{
    double d;
    switch (dt) {
    case HOOP_FLOAT16: return rc_half_to_float((uint16_t)raw);
    case HOOP_BFLOAT16: return rc_bf16_to_float((uint16_t)raw);
    case HOOP_FLOAT32: return f32_from_bits((uint32_t)raw);
    default: memcpy(&d, &raw, sizeof d); return d;
    }
}

static uint64_t fenc_float(hoop_dtype_t dt, float f)
{
    switch (dt) {
    case HOOP_FLOAT16: return rc_float_to_half(f);
    case HOOP_BFLOAT16: return rc_float_to_bf16(f);
    default: return f32_bits(f);
    }
}

uint64_t rc_fenc(hoop_dtype_t dt, double v)
{
    uint64_t b;
    if (dt != HOOP_FLOAT64) return fenc_float(dt, (float)v);
    memcpy(&b, &v, sizeof b);
    return b;
}

void rc_acc_add(rc_acc_t *a, hoop_dtype_t dt, size_t es, hoop_op_t op, uint64_t raw)
{
    int is_float = rc_is_float(dt);
    if (!a->have) {
        a->have = 1;
        a->u = raw;
        a->d = is_float ? rc_fdec(dt, raw) : 0.0;
        a->best = raw;
        return;
    }
    if (op == HOOP_MIN || op == HOOP_MAX) {
        int less, greater; /* raw against best */
        if (is_float) {
            less = rc_fdec(dt, raw) < rc_fdec(dt, a->best);
            greater = rc_fdec(dt, raw) > rc_fdec(dt, a->best);
        } else if (rc_is_signed_int(dt)) {
            less = rc_sign_extend(raw, es) < rc_sign_extend(a->best, es);
            greater = rc_sign_extend(raw, es) > rc_sign_extend(a->best, es);
        } else {
            less = raw < a->best;
            greater = raw > a->best;
        }
        if ((op == HOOP_MIN && less) || (op == HOOP_MAX && greater)) a->best = raw;
        return;
    }
    if (is_float) {
        double v = rc_fdec(dt, raw);
        a->d = op == HOOP_PROD ? a->d * v : a->d + v;
    } else {
        a->u = op == HOOP_PROD ? a->u * raw : a->u + raw; /* mod 2^64, hence mod 2^width */
    }
}

uint64_t rc_acc_result(const rc_acc_t *a, hoop_dtype_t dt, size_t es, hoop_op_t op, int n)
{
    uint64_t mask = rc_width_mask(es);
    if (op == HOOP_MIN || op == HOOP_MAX) return a->best;
    if (!rc_is_float(dt)) {
        uint64_t w = a->u & mask;
        if (op != HOOP_AVG) return w;
        if (rc_is_signed_int(dt)) return (uint64_t)(rc_sign_extend(w, es) / (int64_t)n) & mask;
        return w / (uint64_t)n;
    }
    if (op != HOOP_AVG) return rc_fenc(dt, a->d);
    /* Narrow float averages divide in float, then round once to the dtype. */
    if (dt == HOOP_FLOAT64) return rc_fenc(dt, a->d / (double)n);
    return fenc_float(dt, (float)a->d / (float)n);
}

/* ---- inputs whose reduction is exact in any order ---- */

uint64_t rc_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* Input element idx of rank r: exact under any order of reduction (small integers for sums,
 * powers of two for products, any value for min and max), integers any bits. */
uint64_t rc_exact_input(hoop_dtype_t dt, hoop_op_t op, int p, int r, uint64_t salt, size_t idx)
{
    uint64_t h = rc_mix(salt * 0x9e3779b97f4a7c15ull ^ (uint64_t)r << 40 ^ (uint64_t)idx);
    size_t es = hoop_dtype_size(dt);
    if (!rc_is_float(dt)) {
        if (op == HOOP_PROD && idx % 4 != 0) h |= 1;
        return h & rc_width_mask(es);
    }
    static const double prod_vals[4] = {1.0, 2.0, -1.0, 0.5};
    double v;
    if (op == HOOP_SUM || op == HOOP_AVG) {
        int64_t m = 256 / p;
        v = (double)((int64_t)(h % (uint64_t)(2 * m + 1)) - m);
    } else if (op == HOOP_PROD) {
        v = prod_vals[h % 4];
    } else {
        v = (double)(int32_t)(uint32_t)(h >> 32) / 65536.0;
        if (v == 0.0) v = 1.0;
    }
    return rc_fenc(dt, v);
}

void rc_fill_exact(void *buf, hoop_dtype_t dt, hoop_op_t op, int p, int r, uint64_t salt, size_t n)
{
    size_t es = hoop_dtype_size(dt);
    for (size_t i = 0; i < n; i++) rc_st(buf, i, es, rc_exact_input(dt, op, p, r, salt, i));
}
