/*
 * Reference element arithmetic for checking collectives without trusting the library: raw element
 * access, float16 / bfloat16 conversions, and a naive reduction of raw values. Written apart from
 * the library's own kernels on purpose, so that a bug there cannot hide behind the same bug here.
 * Elements are raw bits in the low bytes of a uint64_t, in the machine's byte order.
 */
#ifndef HOOP_COMMON_REFCHECK_H
#define HOOP_COMMON_REFCHECK_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hoop.h"

float rc_half_to_float(uint16_t h);
uint16_t rc_float_to_half(float f); /* round to nearest, ties to even */
float rc_bf16_to_float(uint16_t h);
uint16_t rc_float_to_bf16(float f); /* round to nearest, ties to even; NaN stays NaN */

int rc_is_float(hoop_dtype_t dt);
int rc_is_signed_int(hoop_dtype_t dt);

/* Float dtypes only: raw bits to a double (exact), a double to raw bits (rounded). */
double rc_fdec(hoop_dtype_t dt, uint64_t raw);
uint64_t rc_fenc(hoop_dtype_t dt, double v);

/* The small helpers stay inline: checks call them once per element of large buffers. */
static inline uint64_t rc_width_mask(size_t es)
{
    return es >= 8 ? ~(uint64_t)0 : ((uint64_t)1 << (8 * es)) - 1;
}

static inline int64_t rc_sign_extend(uint64_t v, size_t es)
{
    if (es >= 8) return (int64_t)v;
    unsigned sh = (unsigned)(64 - 8 * es);
    return (int64_t)(v << sh) >> sh;
}

/* Element i of es bytes; memcpy keeps unaligned buffers legal. */
static inline uint64_t rc_ld(const void *buf, size_t i, size_t es)
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

static inline void rc_st(void *buf, size_t i, size_t es, uint64_t v)
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

/*
 * A naive reduction: start from {0}, add every rank's raw input in any order, then read the
 * result for n ranks. Integers wrap explicitly; floats accumulate in double, which is exact only
 * for inputs chosen so (small integers for SUM/AVG, powers of two for PROD).
 */
typedef struct rc_acc {
    int have;
    uint64_t u;    /* integers: wrapped sum / product */
    double d;      /* floats: sum / product */
    uint64_t best; /* MIN/MAX: raw bits of the winner */
} rc_acc_t;

void rc_acc_add(rc_acc_t *a, hoop_dtype_t dt, size_t es, hoop_op_t op, uint64_t raw);
uint64_t rc_acc_result(const rc_acc_t *a, hoop_dtype_t dt, size_t es, hoop_op_t op, int n);

/* Input element idx of rank r of p for a case (salt): exact under any order of reduction (small
 * integers for sums, powers of two for products, any value for min and max), integers any bits.
 * rc_fill_exact writes n of them. */
/* A 64-bit mixer (splitmix64's finaliser): a hash of x. */
uint64_t rc_mix(uint64_t x);
uint64_t rc_exact_input(hoop_dtype_t dt, hoop_op_t op, int p, int r, uint64_t salt, size_t idx);
void rc_fill_exact(void *buf, hoop_dtype_t dt, hoop_op_t op, int p, int r, uint64_t salt, size_t n);

#endif
