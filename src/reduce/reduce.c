/* CPU reduction kernels.
 *
 * Each kernel is a plain indexed loop over typed pointers with the dtype/op switch hoisted outside,
 * so the compiler vectorizes it. Pointers are not restrict-qualified because out may equal a or b;
 * with same-index access that aliasing is harmless.
 *
 * Signed integers add and multiply through their unsigned counterparts: two's complement wrap-around
 * is bit-identical and unsigned overflow is defined. float16 and bfloat16 convert with integer bit
 * manipulation and selects (no per-element branches, no _Float16), which also vectorizes.
 *
 * A NaN that a sum, product or average produces is the canonical quiet NaN of its dtype (positive,
 * quiet bit only): which NaN the hardware returns depends on the processor (x86 gives the first
 * operand's, or 0xffc00000 for inf - inf; GPUs 0x7fffffff) and on the compiler's operand order, and
 * replicas that reduced on different devices must still agree bit for bit. The GPU kernels'
 * element-wise math (src/cuda/elementwise.h) does the same. */
#include "reduce/reduce.h"

#include <math.h>
#include <string.h>
#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#endif

static inline float as_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t as_u32(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ---- float16 / bfloat16 conversions ---- */

/* mask ? a : b for an all-ones or all-zero mask. Plain ?: lets the compiler sink the float work of
 * the unselected side into a branch, which blocks vectorization (float ops may trap). */
static inline uint32_t sel(uint32_t mask, uint32_t a, uint32_t b)
{
    return (a & mask) | (b & ~mask);
}
static inline uint32_t mask_if(int cond) { return 0u - (uint32_t)cond; }

/* Magnitudes are kept in int32_t: they fit, and signed compares are single SIMD instructions. */

static inline float h2f(uint16_t h)
{
    int32_t em = h & 0x7fff;
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    /* Normal: rebias the exponent from 15 to 127; inf/NaN: rebias twice more to reach 255.
     * NaN gets the quiet bit so that no payload can turn it into infinity later. */
    uint32_t r = ((uint32_t)em << 13) + (112u << 23) + (mask_if(em >= 0x7c00) & (112u << 23));
    r |= mask_if(em > 0x7c00) & 0x00400000u;
    /* Zero/subnormal: em * 2^-24, exact (em < 2^10) and a normal float, so DAZ cannot flush it. */
    uint32_t sub = as_u32((float)em * 0x1p-24f);
    r = sel(mask_if(em < 0x0400), sub, r);
    return as_float(sign | r);
}

static inline uint16_t f2h(float f)
{
    uint32_t x = as_u32(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    int32_t ax = (int32_t)(x & 0x7fffffffu);
    uint32_t ux = (uint32_t)ax;
    /* Normal result: rebias, then round to nearest even on the 13 dropped bits; a carry out of the
     * mantissa correctly bumps the exponent. Wraps harmlessly when not selected. */
    uint32_t norm = (ux - (112u << 23) + 0x0fffu + ((ux >> 13) & 1u)) >> 13;
    /* Subnormal result: adding 0.5 (whose ulp is 2^-24, the half subnormal step) lets the FPU do
     * the round-to-nearest-even; just below 2^-14 correctly rounds up to the smallest normal. */
    uint32_t sub = as_u32(as_float(ux) + 0.5f) - 0x3f000000u;
    uint32_t nan = 0x7e00u | ((ux >> 13) & 0x03ffu);
    uint32_t r = sel(mask_if(ax >= 0x38800000), norm, sub);
    /* >= 65520 rounds to infinity: 65504, the largest half, has an odd mantissa. */
    r = sel(mask_if(ax >= 0x477ff000), 0x7c00u, r);
    r = sel(mask_if(ax > 0x7f800000), nan, r);
    return (uint16_t)(sign | r);
}

static inline float bf2f(uint16_t h)
{
    uint32_t quiet = mask_if((h & 0x7fff) > 0x7f80) & 0x00400000u;
    return as_float(((uint32_t)h << 16) | quiet);
}

static inline uint16_t f2bf(float f)
{
    uint32_t x = as_u32(f);
    /* Round to nearest even on the 16 dropped bits; overflow carries into infinity by itself. */
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t nan = (x >> 16) | 0x0040u;
    return (uint16_t)sel(mask_if((int32_t)(x & 0x7fffffffu) > 0x7f800000), nan, rounded);
}

/* The canonical NaN of an arithmetic result (see the top), applied to the 16-bit value: it is what
 * converting the canonical float NaN gives (0x7e00, 0x7fc0), and an integer select vectorizes
 * where a float one between the conversions does not. */
static inline uint16_t f2h_canon(float f)
{
    uint16_t h = f2h(f);
    return (uint16_t)sel(mask_if((h & 0x7fff) > 0x7c00), 0x7e00u, h);
}

static inline uint16_t f2bf_canon(float f)
{
    uint16_t h = f2bf(f);
    return (uint16_t)sel(mask_if((h & 0x7fff) > 0x7f80), 0x7fc0u, h);
}

float hoop__half_to_float(uint16_t h) { return h2f(h); }
uint16_t hoop__float_to_half(float f) { return f2h(f); }
float hoop__bf16_to_float(uint16_t h) { return bf2f(h); }
uint16_t hoop__float_to_bf16(float f) { return f2bf(f); }

/* ---- element operations ---- */

#define OP_SUM(x, y) ((x) + (y))
#define OP_PROD(x, y) ((x) * (y))
/* Float arithmetic: a NaN result becomes the canonical one (NAN, converted to the operand type:
 * 0x7fc00000 or 0x7ff8000000000000). A compare and a blend, which vectorize. */
#define CANON(r) ((r) != (r) ? NAN : (r))
#define OP_FSUM(x, y) CANON((x) + (y))
#define OP_FPROD(x, y) CANON((x) * (y))
#define OP_MIN(x, y) ((y) < (x) ? (y) : (x))
#define OP_MAX(x, y) ((x) < (y) ? (y) : (x))
/* NaN-propagating: a NaN x is returned as is; a NaN y fails the comparison and is returned. Both
 * tests are evaluated (| not ||): a comparison that is only conditionally evaluated could trap, so
 * the compiler would keep the branch and not vectorize. */
#define OP_FMIN(x, y) ((((x) != (x)) | ((x) < (y))) ? (x) : (y))
#define OP_FMAX(x, y) ((((x) != (x)) | ((x) > (y))) ? (x) : (y))

/* On x86-64 every kernel also gets an AVX2 clone picked once at load time (ifunc); the baseline
 * SSE2 build stays the fallback. Define HOOP_REDUCE_NO_CLONES to build the portable code alone. */
#if defined(__x86_64__) && defined(__has_attribute) && !defined(HOOP_REDUCE_NO_CLONES)
#if __has_attribute(target_clones)
#define KERNEL_ATTR __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef KERNEL_ATTR
#define KERNEL_ATTR
#endif

/* out[i] = OP(a[i], b[i]) over elements of type T, computed in type U (LOAD converts an element to
 * U, STORE converts back). In-place calls get their own loop: a vectorizer's runtime overlap check
 * may reject out == a and fall back to scalar code, while out against the other operand passes. */
#define KERNEL_BODY(OP, U, LOAD, STORE, A, B)                                                      \
    for (size_t i = 0; i < n; i++) {                                                               \
        U x = LOAD(A[i]), y = LOAD(B[i]);                                                          \
        out[i] = STORE(OP(x, y));                                                                  \
    }
#define DEF_KERNEL_GEN(name, T, U, OP, LOAD, STORE)                                                \
    KERNEL_ATTR static void name(T *out, const T *a, const T *b, size_t n)                         \
    {                                                                                              \
        if (out == a) {                                                                            \
            KERNEL_BODY(OP, U, LOAD, STORE, out, b)                                                \
        } else if (out == b) {                                                                     \
            KERNEL_BODY(OP, U, LOAD, STORE, a, out)                                                \
        } else {                                                                                   \
            KERNEL_BODY(OP, U, LOAD, STORE, a, b)                                                  \
        }                                                                                          \
    }

#define ID(x) (x)
#define DEF_KERNEL(name, T, OP) DEF_KERNEL_GEN(name, T, T, OP, ID, (T))
#define DEF_KERNEL_CONV(name, OP, TOF, FROMF) DEF_KERNEL_GEN(name, uint16_t, float, OP, TOF, FROMF)

/* Wrapping add/multiply: one unsigned kernel per width serves both signednesses. uint8 operands
 * promote to int, whose range holds any uint8 sum or product before the truncating store. */
#define DEF_WRAP(w)                                                                                \
    DEF_KERNEL(sum_u##w, uint##w##_t, OP_SUM)                                                      \
    DEF_KERNEL(prod_u##w, uint##w##_t, OP_PROD)
DEF_WRAP(8)
DEF_WRAP(32)
DEF_WRAP(64)

#define DEF_MINMAX(tag, T)                                                                         \
    DEF_KERNEL(min_##tag, T, OP_MIN)                                                               \
    DEF_KERNEL(max_##tag, T, OP_MAX)
DEF_MINMAX(i8, int8_t)
DEF_MINMAX(u8, uint8_t)
DEF_MINMAX(i32, int32_t)
DEF_MINMAX(u32, uint32_t)
DEF_MINMAX(i64, int64_t)
DEF_MINMAX(u64, uint64_t)

#define DEF_FLOAT(tag, T)                                                                          \
    DEF_KERNEL(sum_##tag, T, OP_FSUM)                                                              \
    DEF_KERNEL(prod_##tag, T, OP_FPROD)                                                            \
    DEF_KERNEL(min_##tag, T, OP_FMIN)                                                              \
    DEF_KERNEL(max_##tag, T, OP_FMAX)
DEF_FLOAT(f32, float)
DEF_FLOAT(f64, double)

#define DEF_CONV(tag, TOF, FROMF)                                                                  \
    DEF_KERNEL_CONV(sum_##tag, OP_SUM, TOF, FROMF##_canon)                                         \
    DEF_KERNEL_CONV(prod_##tag, OP_PROD, TOF, FROMF##_canon)                                       \
    DEF_KERNEL_CONV(min_##tag, OP_FMIN, TOF, FROMF)                                                \
    DEF_KERNEL_CONV(max_##tag, OP_FMAX, TOF, FROMF)
DEF_CONV(f16, h2f, f2h)
DEF_CONV(bf16, bf2f, f2bf)

/* Dispatch on op for one dtype: SUMK/PRODK name the add/multiply kernels, tag the min/max ones.
 * The buffers convert implicitly from void * to each kernel's element type. */
#define DISPATCH(SUMK, PRODK, tag)                                                                 \
    do {                                                                                           \
        switch (op) {                                                                              \
        case HOOP_SUM:                                                                             \
        case HOOP_AVG: SUMK(out, a, b, n); break;                                                  \
        case HOOP_PROD: PRODK(out, a, b, n); break;                                                \
        case HOOP_MIN: min_##tag(out, a, b, n); break;                                             \
        case HOOP_MAX: max_##tag(out, a, b, n); break;                                             \
        default: break;                                                                            \
        }                                                                                          \
    } while (0)

void hoop__reduce(void *out, const void *a, const void *b, size_t n, hoop_dtype_t dt, hoop_op_t op)
{
    /* Invalid dtype/op are rejected by the callers; here they are a no-op rather than a crash. */
    if (n == 0 || !out || !a || !b) return;
    switch (dt) {
    case HOOP_INT8: DISPATCH(sum_u8, prod_u8, i8); break;
    case HOOP_UINT8: DISPATCH(sum_u8, prod_u8, u8); break;
    case HOOP_INT32: DISPATCH(sum_u32, prod_u32, i32); break;
    case HOOP_UINT32: DISPATCH(sum_u32, prod_u32, u32); break;
    case HOOP_INT64: DISPATCH(sum_u64, prod_u64, i64); break;
    case HOOP_UINT64: DISPATCH(sum_u64, prod_u64, u64); break;
    case HOOP_FLOAT16: DISPATCH(sum_f16, prod_f16, f16); break;
    case HOOP_BFLOAT16: DISPATCH(sum_bf16, prod_bf16, bf16); break;
    case HOOP_FLOAT32: DISPATCH(sum_f32, prod_f32, f32); break;
    case HOOP_FLOAT64: DISPATCH(sum_f64, prod_f64, f64); break;
    default: break;
    }
}

/* ---- average ---- */

#define DEF_DIV(tag, T, D)                                                                         \
    KERNEL_ATTR static void div_##tag(T *buf, size_t n, D d)                                       \
    {                                                                                              \
        for (size_t i = 0; i < n; i++) buf[i] = (T)(buf[i] / d);                                   \
    }
DEF_DIV(i8, int8_t, int)
DEF_DIV(u8, uint8_t, unsigned)
DEF_DIV(i32, int32_t, int32_t)
DEF_DIV(u32, uint32_t, uint32_t)
DEF_DIV(i64, int64_t, int64_t)
DEF_DIV(u64, uint64_t, uint64_t)

#define DEF_FDIV(tag, T)                                                                           \
    KERNEL_ATTR static void div_##tag(T *buf, size_t n, T d)                                       \
    {                                                                                              \
        for (size_t i = 0; i < n; i++) buf[i] = (T)CANON(buf[i] / d);                              \
    }
DEF_FDIV(f32, float)
DEF_FDIV(f64, double)

#define DEF_DIV_CONV(tag, TOF, FROMF)                                                              \
    KERNEL_ATTR static void div_##tag(uint16_t *buf, size_t n, float d)                            \
    {                                                                                              \
        for (size_t i = 0; i < n; i++) buf[i] = FROMF##_canon(TOF(buf[i]) / d);                    \
    }
DEF_DIV_CONV(f16, h2f, f2h)
DEF_DIV_CONV(bf16, bf2f, f2bf)

void hoop__reduce_avg_finish(void *buf, size_t n, hoop_dtype_t dt, int divisor)
{
    /* The divisor is a rank count. Anything below 1 is a caller bug: leaving the data untouched
     * avoids division by zero and the INT_MIN / -1 trap. */
    if (n == 0 || !buf || divisor < 1) return;
    switch (dt) {
    case HOOP_INT8: div_i8(buf, n, divisor); break;
    case HOOP_UINT8: div_u8(buf, n, (unsigned)divisor); break;
    case HOOP_INT32: div_i32(buf, n, (int32_t)divisor); break;
    case HOOP_UINT32: div_u32(buf, n, (uint32_t)divisor); break;
    case HOOP_INT64: div_i64(buf, n, (int64_t)divisor); break;
    case HOOP_UINT64: div_u64(buf, n, (uint64_t)divisor); break;
    case HOOP_FLOAT16: div_f16(buf, n, (float)divisor); break;
    case HOOP_BFLOAT16: div_bf16(buf, n, (float)divisor); break;
    case HOOP_FLOAT32: div_f32(buf, n, (float)divisor); break;
    case HOOP_FLOAT64: div_f64(buf, n, (double)divisor); break;
    default: break;
    }
}

/* Streaming stores write whole lines to memory without reading them first (no read for
 * ownership) and without filling the cache with data nobody reads soon: for outputs larger than
 * the caches that is about a third of the memory traffic of a copy saved. SSE2 is every x86-64's;
 * elsewhere a plain copy. The fence makes the stores ordered before anything that follows, as a
 * plain copy's are. */
void hoop__copy_stream(void *dst, const void *src, size_t n)
{
#if defined(__x86_64__) && defined(__SSE2__)
    uint8_t *d = dst;
    const uint8_t *s = src;
    size_t head = (size_t)(-(uintptr_t)d & 15);
    if (n < 256) {
        memcpy(dst, src, n);
        return;
    }
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    size_t body = n & ~(size_t)63;
    for (size_t i = 0; i < body; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
        _mm_stream_si128((__m128i *)(d + i), a);
        _mm_stream_si128((__m128i *)(d + i + 16), b);
        _mm_stream_si128((__m128i *)(d + i + 32), c);
        _mm_stream_si128((__m128i *)(d + i + 48), e);
    }
    memcpy(d + body, s + body, n - body);
    _mm_sfence();
#else
    memcpy(dst, src, n);
#endif
}
