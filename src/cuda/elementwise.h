/* The element-wise math of the GPU reduction kernels: one function per dtype and op, usable in
 * device code and in host C or C++ alike, giving the bits the CPU kernels of src/reduce give for
 * every input. tests/cuda/test_elementwise.cpp compares them on the host, bit for bit; the GPU
 * test compares the kernels built from them on a device.
 *
 * What makes the bits equal on both sides:
 *   - each float operation is one IEEE operation rounded to nearest even: on the device the _rn
 *     intrinsics, which are never contracted into FMA; on the host plain operators (nothing here
 *     has the a * b + c shape that contraction needs, and the build says -ffp-contract=off);
 *   - a NaN produced by sum, product or average is the canonical quiet NaN of its dtype, as the
 *     CPU kernels make it (hardware differs in which NaN it returns: x86 the first operand's or
 *     0xffc00000, GPUs 0x7fffffff);
 *   - float16 and bfloat16 compute in float and round once, which is the correctly rounded 16-bit
 *     result: on the host with the CPU kernels' conversions, on the device with the native 16-bit
 *     instructions, or hardware conversions where no NaN can pass (their NaNs differ);
 *   - min and max select an operand with the CPU kernels' comparisons (a NaN operand wins);
 *   - integers wrap around, computed unsigned.
 * Denormals are kept: the device code is built without -ftz, the host code must not run with
 * FTZ/DAZ set (the CPU kernels share that assumption). */
#ifndef HOOP_CUDA_ELEMENTWISE_H
#define HOOP_CUDA_ELEMENTWISE_H

#include <stdint.h>
#include <string.h>

#include "hoop.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define HOOP__HD static __host__ __device__ __forceinline__
#else
#define HOOP__HD static inline
#endif

/* ---- bits, and one rounding per operation ---- */

HOOP__HD uint32_t hoop_ew_f32_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

HOOP__HD float hoop_ew_f32_from(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

HOOP__HD double hoop_ew_f64_from(uint64_t u)
{
#ifdef __CUDA_ARCH__
    return __longlong_as_double((long long)u);
#else
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
#endif
}

#ifdef __CUDA_ARCH__
#define HOOP__EW_FADD(x, y) __fadd_rn((x), (y))
#define HOOP__EW_FMUL(x, y) __fmul_rn((x), (y))
#define HOOP__EW_FDIV(x, y) __fdiv_rn((x), (y))
#define HOOP__EW_DADD(x, y) __dadd_rn((x), (y))
#define HOOP__EW_DMUL(x, y) __dmul_rn((x), (y))
#define HOOP__EW_DDIV(x, y) __ddiv_rn((x), (y))
#else
#define HOOP__EW_FADD(x, y) ((x) + (y))
#define HOOP__EW_FMUL(x, y) ((x) * (y))
#define HOOP__EW_FDIV(x, y) ((x) / (y))
#define HOOP__EW_DADD(x, y) ((x) + (y))
#define HOOP__EW_DMUL(x, y) ((x) * (y))
#define HOOP__EW_DDIV(x, y) ((x) / (y))
#endif

/* The canonical quiet NaNs: positive, quiet bit only. */
#define HOOP__EW_F32_QNAN 0x7fc00000u
#define HOOP__EW_F64_QNAN 0x7ff8000000000000ull

HOOP__HD float hoop_ew_canon_f32(float r)
{
    return r != r ? hoop_ew_f32_from(HOOP__EW_F32_QNAN) : r;
}
HOOP__HD double hoop_ew_canon_f64(double r)
{
    return r != r ? hoop_ew_f64_from(HOOP__EW_F64_QNAN) : r;
}

/* ---- float16 / bfloat16, the CPU kernels' conversions (src/reduce/reduce.c) ---- */

HOOP__HD uint32_t hoop_ew_sel(uint32_t mask, uint32_t a, uint32_t b)
{
    return (a & mask) | (b & ~mask);
}
HOOP__HD uint32_t hoop_ew_mask(int cond) { return 0u - (uint32_t)cond; }

HOOP__HD float hoop_ew_h2f(uint16_t h)
{
    int32_t em = h & 0x7fff;
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    /* Normal: rebias 15 -> 127; inf/NaN twice more to reach 255; NaN gets the quiet bit. */
    uint32_t r = ((uint32_t)em << 13) + (112u << 23) + (hoop_ew_mask(em >= 0x7c00) & (112u << 23));
    r |= hoop_ew_mask(em > 0x7c00) & 0x00400000u;
    /* Zero and subnormals: em * 2^-24, exact. */
    uint32_t sub = hoop_ew_f32_bits(HOOP__EW_FMUL((float)em, 0x1p-24f));
    r = hoop_ew_sel(hoop_ew_mask(em < 0x0400), sub, r);
    return hoop_ew_f32_from(sign | r);
}

HOOP__HD uint16_t hoop_ew_f2h(float f)
{
    uint32_t x = hoop_ew_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    int32_t ax = (int32_t)(x & 0x7fffffffu);
    uint32_t ux = (uint32_t)ax;
    /* Normal: rebias and round to nearest even on the 13 dropped bits. */
    uint32_t norm = (ux - (112u << 23) + 0x0fffu + ((ux >> 13) & 1u)) >> 13;
    /* Subnormal: adding 0.5 lets the FPU round to the half subnormal step, 2^-24. */
    uint32_t sub = hoop_ew_f32_bits(HOOP__EW_FADD(hoop_ew_f32_from(ux), 0.5f)) - 0x3f000000u;
    uint32_t nan = 0x7e00u | ((ux >> 13) & 0x03ffu);
    uint32_t r = hoop_ew_sel(hoop_ew_mask(ax >= 0x38800000), norm, sub);
    r = hoop_ew_sel(hoop_ew_mask(ax >= 0x477ff000), 0x7c00u, r);
    r = hoop_ew_sel(hoop_ew_mask(ax > 0x7f800000), nan, r);
    return (uint16_t)(sign | r);
}

HOOP__HD float hoop_ew_bf2f(uint16_t h)
{
    uint32_t quiet = hoop_ew_mask((h & 0x7fff) > 0x7f80) & 0x00400000u;
    return hoop_ew_f32_from(((uint32_t)h << 16) | quiet);
}

HOOP__HD uint16_t hoop_ew_f2bf(float f)
{
    uint32_t x = hoop_ew_f32_bits(f);
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t nan = (x >> 16) | 0x0040u;
    return (uint16_t)hoop_ew_sel(hoop_ew_mask((int32_t)(x & 0x7fffffffu) > 0x7f800000), nan,
                                 rounded);
}

/* ---- the operations: hoop_ew_<op>_<dtype>(a, b), and hoop_ew_div_<dtype>(x, divisor) ---- */

/* min/max of floats: a NaN x is returned as is, a NaN y fails the comparison and is returned; the
 * same expressions as the CPU kernels, so that ties of signed zeros go the same way too. */
#define HOOP__EW_FMIN(x, y) ((((x) != (x)) | ((x) < (y))) ? (x) : (y))
#define HOOP__EW_FMAX(x, y) ((((x) != (x)) | ((x) > (y))) ? (x) : (y))

/* Integers: add and multiply unsigned (wrap-around is defined there and two's complement makes
 * the bits equal for signed types); uint8 through uint32, which holds any product of two. */
#define HOOP__EW_INT(tag, T, U)                                                                    \
    HOOP__HD T hoop_ew_sum_##tag(T a, T b) { return (T)(U)((U)a + (U)b); }                         \
    HOOP__HD T hoop_ew_prod_##tag(T a, T b) { return (T)(U)((U)a * (U)b); }                        \
    HOOP__HD T hoop_ew_min_##tag(T a, T b) { return b < a ? b : a; }                               \
    HOOP__HD T hoop_ew_max_##tag(T a, T b) { return a < b ? b : a; }
HOOP__EW_INT(i8, int8_t, uint32_t)
HOOP__EW_INT(u8, uint8_t, uint32_t)
HOOP__EW_INT(i32, int32_t, uint32_t)
HOOP__EW_INT(u32, uint32_t, uint32_t)
HOOP__EW_INT(i64, int64_t, uint64_t)
HOOP__EW_INT(u64, uint64_t, uint64_t)

/* Integer averages truncate toward zero; the divisor is a rank count (>= 1). */
HOOP__HD int8_t hoop_ew_div_i8(int8_t x, int d) { return (int8_t)((int)x / d); }
HOOP__HD uint8_t hoop_ew_div_u8(uint8_t x, int d) { return (uint8_t)((unsigned)x / (unsigned)d); }
HOOP__HD int32_t hoop_ew_div_i32(int32_t x, int d) { return x / (int32_t)d; }
HOOP__HD uint32_t hoop_ew_div_u32(uint32_t x, int d) { return x / (uint32_t)d; }
HOOP__HD int64_t hoop_ew_div_i64(int64_t x, int d) { return x / (int64_t)d; }
HOOP__HD uint64_t hoop_ew_div_u64(uint64_t x, int d) { return x / (uint64_t)d; }

HOOP__HD float hoop_ew_sum_f32(float a, float b) { return hoop_ew_canon_f32(HOOP__EW_FADD(a, b)); }
HOOP__HD float hoop_ew_prod_f32(float a, float b) { return hoop_ew_canon_f32(HOOP__EW_FMUL(a, b)); }
HOOP__HD float hoop_ew_min_f32(float a, float b) { return HOOP__EW_FMIN(a, b); }
HOOP__HD float hoop_ew_max_f32(float a, float b) { return HOOP__EW_FMAX(a, b); }
HOOP__HD float hoop_ew_div_f32(float x, int d)
{
    return hoop_ew_canon_f32(HOOP__EW_FDIV(x, (float)d));
}

HOOP__HD double hoop_ew_sum_f64(double a, double b)
{
    return hoop_ew_canon_f64(HOOP__EW_DADD(a, b));
}
HOOP__HD double hoop_ew_prod_f64(double a, double b)
{
    return hoop_ew_canon_f64(HOOP__EW_DMUL(a, b));
}
HOOP__HD double hoop_ew_min_f64(double a, double b) { return HOOP__EW_FMIN(a, b); }
HOOP__HD double hoop_ew_max_f64(double a, double b) { return HOOP__EW_FMAX(a, b); }
HOOP__HD double hoop_ew_div_f64(double x, int d)
{
    return hoop_ew_canon_f64(HOOP__EW_DDIV(x, (double)d));
}

/* float16 and bfloat16: computed in float and rounded once on the way back, which is exactly the
 * correctly rounded 16-bit operation (float's 24 bits hold the sum or product of two 16-bit values
 * closely enough that rounding twice cannot differ from rounding once: 24 >= 2 * 11 + 2). So on
 * the device the native 16-bit instructions (add.rn.f16, and bf16 from sm_80) give the same bits,
 * NaN aside, which is made canonical as on the CPU. Min and max select an operand, quieted if it
 * is a NaN (what the CPU's round trip through float does); a comparison in float is exact. */
#if defined(__CUDA_ARCH__)
#define HOOP__EW_CMP_F16(h) __half2float(__ushort_as_half(h)) /* exact; a NaN stays a NaN */
#else
#define HOOP__EW_CMP_F16(h) hoop_ew_h2f(h)
#endif
#define HOOP__EW_CMP_BF16(h) hoop_ew_bf2f(h)

/* The float result of an average's division back to 16 bits: NaN made canonical first. */
HOOP__HD uint16_t hoop_ew_f2h_canon(float r)
{
#if defined(__CUDA_ARCH__)
    return r != r ? (uint16_t)0x7e00 : __half_as_ushort(__float2half_rn(r)); /* cvt.rn: RNE */
#else
    return hoop_ew_f2h(hoop_ew_canon_f32(r));
#endif
}
HOOP__HD uint16_t hoop_ew_f2bf_canon(float r) { return hoop_ew_f2bf(hoop_ew_canon_f32(r)); }

HOOP__HD uint16_t hoop_ew_sum_f16(uint16_t a, uint16_t b)
{
#if defined(__CUDA_ARCH__)
    __half r = __hadd_rn(__ushort_as_half(a), __ushort_as_half(b));
    return __hisnan(r) ? (uint16_t)0x7e00 : __half_as_ushort(r);
#else
    return hoop_ew_f2h(hoop_ew_sum_f32(hoop_ew_h2f(a), hoop_ew_h2f(b)));
#endif
}

HOOP__HD uint16_t hoop_ew_prod_f16(uint16_t a, uint16_t b)
{
#if defined(__CUDA_ARCH__)
    __half r = __hmul_rn(__ushort_as_half(a), __ushort_as_half(b));
    return __hisnan(r) ? (uint16_t)0x7e00 : __half_as_ushort(r);
#else
    return hoop_ew_f2h(hoop_ew_prod_f32(hoop_ew_h2f(a), hoop_ew_h2f(b)));
#endif
}

HOOP__HD uint16_t hoop_ew_sum_bf16(uint16_t a, uint16_t b)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    __nv_bfloat16 r = __hadd_rn(__ushort_as_bfloat16(a), __ushort_as_bfloat16(b));
    return __hisnan(r) ? (uint16_t)0x7fc0 : __bfloat16_as_ushort(r);
#else
    return hoop_ew_f2bf(hoop_ew_sum_f32(hoop_ew_bf2f(a), hoop_ew_bf2f(b)));
#endif
}

HOOP__HD uint16_t hoop_ew_prod_bf16(uint16_t a, uint16_t b)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    __nv_bfloat16 r = __hmul_rn(__ushort_as_bfloat16(a), __ushort_as_bfloat16(b));
    return __hisnan(r) ? (uint16_t)0x7fc0 : __bfloat16_as_ushort(r);
#else
    return hoop_ew_f2bf(hoop_ew_prod_f32(hoop_ew_bf2f(a), hoop_ew_bf2f(b)));
#endif
}

/* The chosen operand, with the quiet bit (qbit) set if it is a NaN (magnitude above inf). */
#define HOOP__EW_HALF_SELECT(tag, CMP, EXPR, INF, QBIT)                                            \
    HOOP__HD uint16_t hoop_ew_##tag(uint16_t a, uint16_t b)                                        \
    {                                                                                              \
        float x = CMP(a), y = CMP(b);                                                              \
        uint16_t r = (EXPR) ? a : b;                                                               \
        return (uint16_t)(r | ((r & 0x7fff) > (INF) ? (QBIT) : 0));                                \
    }
HOOP__EW_HALF_SELECT(min_f16, HOOP__EW_CMP_F16, (x != x) | (x < y), 0x7c00, 0x0200)
HOOP__EW_HALF_SELECT(max_f16, HOOP__EW_CMP_F16, (x != x) | (x > y), 0x7c00, 0x0200)
HOOP__EW_HALF_SELECT(min_bf16, HOOP__EW_CMP_BF16, (x != x) | (x < y), 0x7f80, 0x0040)
HOOP__EW_HALF_SELECT(max_bf16, HOOP__EW_CMP_BF16, (x != x) | (x > y), 0x7f80, 0x0040)

HOOP__HD uint16_t hoop_ew_div_f16(uint16_t x, int d)
{
    return hoop_ew_f2h_canon(HOOP__EW_FDIV(HOOP__EW_CMP_F16(x), (float)d));
}
HOOP__HD uint16_t hoop_ew_div_bf16(uint16_t x, int d)
{
    return hoop_ew_f2bf_canon(HOOP__EW_FDIV(hoop_ew_bf2f(x), (float)d));
}

/* ---- C++: the function of a (dtype, op) chosen at compile time, for kernels and tests ---- */
#ifdef __cplusplus

template <hoop_dtype_t DT> struct hoop_ew;

/* hoop_ew<DT>::T is the element's storage type; ::apply<OP>(a, b) and ::div(x, d) the math. */
#define HOOP__EW_BIND(DT, T_, tag)                                                                 \
    template <> struct hoop_ew<DT> {                                                               \
        typedef T_ T;                                                                              \
        template <hoop_op_t OP> HOOP__HD T apply(T a, T b)                                         \
        {                                                                                          \
            return OP == HOOP_PROD  ? hoop_ew_prod_##tag(a, b)                                     \
                   : OP == HOOP_MIN ? hoop_ew_min_##tag(a, b)                                      \
                   : OP == HOOP_MAX ? hoop_ew_max_##tag(a, b)                                      \
                                    : hoop_ew_sum_##tag(a, b); /* SUM, and AVG before its end */   \
        }                                                                                          \
        HOOP__HD T div(T x, int d) { return hoop_ew_div_##tag(x, d); }                             \
    };
HOOP__EW_BIND(HOOP_INT8, int8_t, i8)
HOOP__EW_BIND(HOOP_UINT8, uint8_t, u8)
HOOP__EW_BIND(HOOP_INT32, int32_t, i32)
HOOP__EW_BIND(HOOP_UINT32, uint32_t, u32)
HOOP__EW_BIND(HOOP_INT64, int64_t, i64)
HOOP__EW_BIND(HOOP_UINT64, uint64_t, u64)
HOOP__EW_BIND(HOOP_FLOAT16, uint16_t, f16)
HOOP__EW_BIND(HOOP_BFLOAT16, uint16_t, bf16)
HOOP__EW_BIND(HOOP_FLOAT32, float, f32)
HOOP__EW_BIND(HOOP_FLOAT64, double, f64)
#undef HOOP__EW_BIND

#endif /* __cplusplus */

#endif
