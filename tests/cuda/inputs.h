/* Inputs for the CUDA tests (test_elementwise.cpp, test_kernels.c), C and C++ alike: the values
 * that matter per dtype, as raw bits (signed zeros, subnormals, the largest finite values,
 * infinities, NaNs of both signs, quiet and signalling, with payloads; integer extremes), and a
 * deterministic generator for the random rest. */
#ifndef HOOP_TESTS_CUDA_INPUTS_H
#define HOOP_TESTS_CUDA_INPUTS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hoop.h"

#define HOOP__TEST_MAX_SPECIALS 32

/* Writes the special values of dt into out; returns how many. */
static inline size_t hoop_test_specials(hoop_dtype_t dt, uint64_t out[HOOP__TEST_MAX_SPECIALS])
{
    static const uint64_t f16[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00,
                                   0xbc00, 0x3c01, 0x3555, 0x7bff, 0xfbff, 0x7c00, 0xfc00,
                                   0x7c01, 0xfc01, 0x7dff, 0x7e00, 0xfe00, 0x7fff, 0xffff,
                                   0x1000, 0x0c00, 0x0e00, 0x3800, 0x5bff, 0x4000};
    static const uint64_t bf16[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x0080, 0x3f80, 0xbf80,
                                    0x3f81, 0x3eab, 0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7f81, 0xff81,
                                    0x7fbf, 0x7fc0, 0xffc0, 0x7fff, 0xffff, 0x3b80, 0x5f80, 0x4000};
    static const uint64_t f32[] = {0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007fffff,
                                   0x00800000, 0x3f800000, 0xbf800000, 0x3f800001, 0x7f7fffff,
                                   0xff7fffff, 0x7f800000, 0xff800000, 0x7f800001, 0xff800001,
                                   0x7fbfffff, 0x7fc00000, 0xffc00000, 0x7fc12345, 0x7fffffff,
                                   0xffffffff, 0x33800000, 0x4b800000, 0x3f000000};
    static const uint64_t f64[] = {0x0ull,
                                   0x8000000000000000ull,
                                   0x1ull,
                                   0x000fffffffffffffull,
                                   0x0010000000000000ull,
                                   0x3ff0000000000000ull,
                                   0xbff0000000000000ull,
                                   0x3ff0000000000001ull,
                                   0x7fefffffffffffffull,
                                   0x7ff0000000000000ull,
                                   0xfff0000000000000ull,
                                   0x7ff0000000000001ull,
                                   0xfff0000000000001ull,
                                   0x7ff8000000000000ull,
                                   0xfff8000000000000ull,
                                   0x7ff8000000012345ull,
                                   0x7fffffffffffffffull,
                                   0x3ca0000000000000ull};
    const uint64_t *src = NULL;
    size_t n = 0;
    switch (dt) {
    case HOOP_FLOAT16: src = f16, n = sizeof f16 / sizeof f16[0]; break;
    case HOOP_BFLOAT16: src = bf16, n = sizeof bf16 / sizeof bf16[0]; break;
    case HOOP_FLOAT32: src = f32, n = sizeof f32 / sizeof f32[0]; break;
    case HOOP_FLOAT64: src = f64, n = sizeof f64 / sizeof f64[0]; break;
    default: {
        size_t es = hoop_dtype_size(dt);
        uint64_t mask = es == 8 ? ~0ull : (1ull << (8 * es)) - 1, top = 1ull << (8 * es - 1);
        const uint64_t v[] = {0,
                              1,
                              2,
                              3,
                              mask,
                              mask - 1,
                              top,
                              top - 1,
                              top + 1,
                              top >> 1,
                              0x55 & mask,
                              0xaaaaaaaaaaaaaaaaull & mask,
                              0x9e3779b97f4a7c15ull & mask};
        n = sizeof v / sizeof v[0];
        memcpy(out, v, sizeof v);
        return n;
    }
    }
    memcpy(out, src, n * sizeof *src);
    return n;
}

/* xorshift64: the same inputs on every run. */
static inline uint64_t hoop_test_next(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

#endif
