/* The GPU kernels' element-wise math (src/cuda/elementwise.h), compiled for the host, against the
 * CPU kernels (src/reduce), bit for bit: every dtype and op, the float16/bfloat16 conversions over
 * all 65536 values and every rounding boundary, NaN (signalling, quiet, either sign, payloads),
 * infinities, signed zeros, subnormals, integer wrap-around, and the last step of the average.
 * Needs no GPU: it shows that the functions the kernels are built from compute what the CPU
 * computes; the GPU test (test_kernels.c) shows that the device computes what they say. */
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {
#include "reduce/reduce.h"
}
#include "cuda/elementwise.h"
#include "inputs.h"

static long failures;

static void fail(const char *what, hoop_dtype_t dt, int op, uint64_t a, uint64_t b, uint64_t got,
                 uint64_t want)
{
    if (++failures <= 20)
        std::printf("FAIL %s %s %s: a=0x%" PRIx64 " b=0x%" PRIx64 ": elementwise 0x%" PRIx64
                    ", CPU kernel 0x%" PRIx64 "\n",
                    what, hoop_dtype_name(dt), op >= 0 ? hoop_op_name((hoop_op_t)op) : "-", a, b,
                    got, want);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next64() { return hoop_test_next(&rng); }

template <typename T> static uint64_t raw(T v)
{
    uint64_t r = 0;
    std::memcpy(&r, &v, sizeof v);
    return r;
}

template <typename T> static T from_raw(uint64_t r)
{
    T v;
    std::memcpy(&v, &r, sizeof v);
    return v;
}

/* ---- conversions ---- */

static void check_conversions()
{
    for (uint32_t h = 0; h < 0x10000; h++) {
        uint32_t got = hoop_ew_f32_bits(hoop_ew_h2f((uint16_t)h));
        uint32_t want = hoop_ew_f32_bits(hoop__half_to_float((uint16_t)h));
        if (got != want) fail("half_to_float", HOOP_FLOAT16, -1, h, 0, got, want);
        got = hoop_ew_f32_bits(hoop_ew_bf2f((uint16_t)h));
        want = hoop_ew_f32_bits(hoop__bf16_to_float((uint16_t)h));
        if (got != want) fail("bf16_to_float", HOOP_BFLOAT16, -1, h, 0, got, want);
    }
    /* Every rounding boundary: each 16-bit value, the midpoint to its upper neighbour (exact in
     * float: 12 or 9 significant bits) and the floats on either side of both; then floats with
     * every top half and low bits around both formats' rounding positions; then random bits. */
    std::vector<uint32_t> fs;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float lo[2] = {hoop__half_to_float((uint16_t)h), hoop__bf16_to_float((uint16_t)h)};
        float hi[2] = {hoop__half_to_float((uint16_t)(h + 1)),
                       hoop__bf16_to_float((uint16_t)(h + 1))};
        for (int k = 0; k < 2; k++) {
            uint32_t v = hoop_ew_f32_bits(lo[k]);
            uint32_t mid = hoop_ew_f32_bits((float)(((double)lo[k] + (double)hi[k]) / 2));
            for (int d = -1; d <= 1; d++) {
                fs.push_back(v + (uint32_t)d);
                fs.push_back(mid + (uint32_t)d);
            }
        }
    }
    static const uint32_t lows[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000,
                                    0x3000, 0x7fff, 0x8000, 0x8001, 0xffff, 0x5555, 0xaaaa};
    for (uint32_t top = 0; top < 0x10000; top++)
        for (uint32_t low : lows) fs.push_back(top << 16 | low);
    for (int i = 0; i < 1 << 22; i++) fs.push_back((uint32_t)next64());
    for (uint32_t x : fs) {
        float f = hoop_ew_f32_from(x);
        uint16_t got = hoop_ew_f2h(f), want = hoop__float_to_half(f);
        if (got != want) fail("float_to_half", HOOP_FLOAT16, -1, x, 0, got, want);
        got = hoop_ew_f2bf(f);
        want = hoop__float_to_bf16(f);
        if (got != want) fail("float_to_bf16", HOOP_BFLOAT16, -1, x, 0, got, want);
    }
    std::printf("conversions: %zu floats and all 65536 16-bit values\n", fs.size());
}

/* ---- the operations ---- */

/* Compares hoop_ew<DT>::apply<OP> with hoop__reduce on the pairs (a[i], b[i]), in both the order
 * given and swapped, and in place (out == a, out == b) too. */
template <hoop_dtype_t DT, hoop_op_t OP>
static void check_op(const std::vector<uint64_t> &a, const std::vector<uint64_t> &b)
{
    typedef typename hoop_ew<DT>::T T;
    size_t n = a.size();
    std::vector<T> x(n), y(n), out(n), inplace(n);
    for (size_t i = 0; i < n; i++) {
        x[i] = from_raw<T>(a[i]);
        y[i] = from_raw<T>(b[i]);
    }
    for (int swap = 0; swap < 2; swap++) {
        const std::vector<T> &p = swap ? y : x, &q = swap ? x : y;
        hoop__reduce(out.data(), p.data(), q.data(), n, DT, OP);
        inplace = q;
        hoop__reduce(inplace.data(), p.data(), inplace.data(), n, DT, OP);
        for (size_t i = 0; i < n; i++) {
            uint64_t got = raw(hoop_ew<DT>::template apply<OP>(p[i], q[i]));
            if (got != raw(out[i])) fail("op", DT, OP, raw(p[i]), raw(q[i]), got, raw(out[i]));
            if (raw(inplace[i]) != raw(out[i]))
                fail("in-place CPU kernel", DT, OP, raw(p[i]), raw(q[i]), raw(inplace[i]),
                     raw(out[i]));
        }
    }
}

template <hoop_dtype_t DT> static void check_div(const std::vector<uint64_t> &a)
{
    typedef typename hoop_ew<DT>::T T;
    /* Rank counts, including ones float16 cannot hold (the CPU divides in float). */
    static const int divisors[] = {1, 2, 3, 4, 5, 6, 7, 8, 12, 100, 1000, 4099, 65537, 2147483647};
    std::vector<T> buf(a.size());
    for (int d : divisors) {
        for (size_t i = 0; i < a.size(); i++) buf[i] = from_raw<T>(a[i]);
        hoop__reduce_avg_finish(buf.data(), buf.size(), DT, d);
        for (size_t i = 0; i < a.size(); i++) {
            uint64_t got = raw(hoop_ew<DT>::div(from_raw<T>(a[i]), d));
            if (got != raw(buf[i]))
                fail("avg_finish", DT, HOOP_AVG, a[i], (uint64_t)d, got, raw(buf[i]));
        }
    }
}

static std::vector<uint64_t> specials(hoop_dtype_t dt)
{
    uint64_t v[HOOP__TEST_MAX_SPECIALS];
    size_t n = hoop_test_specials(dt, v);
    return std::vector<uint64_t>(v, v + n);
}

template <hoop_dtype_t DT> static void check_dtype()
{
    size_t es = hoop_dtype_size(DT);
    uint64_t mask = es == 8 ? ~0ull : (1ull << (8 * es)) - 1;
    std::vector<uint64_t> sp = specials(DT), a, b;
    /* Every pair of special values; for 16-bit dtypes every value against every special; then
     * random bits (NaN payloads and subnormals come up), and random "nice" floats whose sums and
     * products round. */
    for (uint64_t x : sp)
        for (uint64_t y : sp) {
            a.push_back(x);
            b.push_back(y);
        }
    if (es <= 2)
        for (uint64_t x = 0; x <= mask; x++)
            for (uint64_t y : sp) {
                a.push_back(x);
                b.push_back(y);
            }
    for (int i = 0; i < 1 << 18; i++) {
        a.push_back(next64() & mask);
        b.push_back(next64() & mask);
    }
    if (DT == HOOP_FLOAT32 || DT == HOOP_FLOAT64)
        for (int i = 0; i < 1 << 16; i++) {
            double u = (double)(int64_t)(next64() >> 20) / 1024.0, v = (double)(next64() >> 40);
            a.push_back(DT == HOOP_FLOAT32 ? raw((float)u) : raw(u));
            b.push_back(DT == HOOP_FLOAT32 ? raw((float)(v / 3)) : raw(v / 3));
        }
    check_op<DT, HOOP_SUM>(a, b);
    check_op<DT, HOOP_PROD>(a, b);
    check_op<DT, HOOP_MIN>(a, b);
    check_op<DT, HOOP_MAX>(a, b);
    check_op<DT, HOOP_AVG>(a, b);
    check_div<DT>(a);
    std::printf("%s: %zu pairs, sum/prod/min/max/avg and the average's division\n",
                hoop_dtype_name(DT), a.size());
}

int main()
{
    check_conversions();
    check_dtype<HOOP_INT8>();
    check_dtype<HOOP_UINT8>();
    check_dtype<HOOP_INT32>();
    check_dtype<HOOP_UINT32>();
    check_dtype<HOOP_INT64>();
    check_dtype<HOOP_UINT64>();
    check_dtype<HOOP_FLOAT16>();
    check_dtype<HOOP_BFLOAT16>();
    check_dtype<HOOP_FLOAT32>();
    check_dtype<HOOP_FLOAT64>();
    if (failures) {
        std::printf("%ld mismatches\n", failures);
        return 1;
    }
    std::printf("elementwise math and CPU kernels agree bit for bit\n");
    return 0;
}
