/* The one-pass fold of the zero-copy collectives: every input read once, the result written into
 * every output straight from registers.
 *
 * Folding a chunk into a scratch buffer and then copying that buffer into each output (what
 * hoop__reduce and hoop__copy_stream do one after the other) reads the inputs in one burst and
 * writes the outputs in another, and moves every result through the cache twice more. One loop
 * that loads 64 bytes of every input, folds them, and stores the result into every output keeps
 * reads and writes in flight together; docs/performance.md ("Symmetric memory") has what it
 * measured against the two-pass form.
 *
 * The kernels are written with vector extensions, since a plain loop that must end in a streaming
 * store does not vectorize, and each element operation is the one reduce.c's scalar macro
 * computes: the results are bit-identical to a fold with hoop__reduce in the same operand order.
 * AVX2 only, picked at run time; the dtypes and ops without a kernel here (float16, bfloat16, the
 * integer average) and other processors return 0 and the caller folds the usual way. */
#include "reduce/reduce.h"

#include <string.h>

#include "base/tables.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) &&                            \
    !defined(HOOP_REDUCE_NO_CLONES)
#define SPREAD_AVX2 1
#include <immintrin.h>
#endif

#define BLOCK 64 /* a cache line: two 32-byte vectors per input and output */

#ifdef SPREAD_AVX2
#define ATTR __attribute__((target("avx2")))

typedef float f32v __attribute__((vector_size(32)));
typedef double f64v __attribute__((vector_size(32)));
typedef int32_t i32v __attribute__((vector_size(32)));
typedef int64_t i64v __attribute__((vector_size(32)));
typedef int8_t i8v __attribute__((vector_size(32)));
typedef uint8_t u8v __attribute__((vector_size(32)));
typedef uint32_t u32v __attribute__((vector_size(32)));
typedef uint64_t u64v __attribute__((vector_size(32)));

/* m ? a : b lane by lane, m all ones or all zeros (what a vector compare gives); MT the mask's
 * type, VT the values'. */
#define SEL(VT, MT, m, a, b) ((VT)((((MT)(a)) & (m)) | (((MT)(b)) & ~(m))))

/* reduce.c's operations, lane by lane. CANON: a NaN result becomes the canonical quiet NaN. */
#define V_CANON(VT, MT, r, nan) SEL(VT, MT, (r) != (r), nan, r)
#define V_FSUM(VT, MT, x, y, nan) V_CANON(VT, MT, (x) + (y), nan)
#define V_FPROD(VT, MT, x, y, nan) V_CANON(VT, MT, (x) * (y), nan)
#define V_FMIN(VT, MT, x, y, nan) SEL(VT, MT, ((x) != (x)) | ((x) < (y)), x, y)
#define V_FMAX(VT, MT, x, y, nan) SEL(VT, MT, ((x) != (x)) | ((x) > (y)), x, y)
#define V_SUM(VT, MT, x, y, nan) ((x) + (y))
#define V_PROD(VT, MT, x, y, nan) ((x) * (y))
#define V_MIN(VT, MT, x, y, nan) SEL(VT, MT, (y) < (x), y, x)
#define V_MAX(VT, MT, x, y, nan) SEL(VT, MT, (x) < (y), y, x)

/* A kernel over nb bytes (a multiple of BLOCK): in[0] op in[1] op ... in[nin-1] into every
 * out[j]. Float kernels finish an average (x / d, canonical NaN) where avg is set. The stores
 * stream where stream is set (then every out[j] is BLOCK-aligned). */
#define DEF_SPREAD(name, VT, MT, OPV, FLOAT)                                                       \
    ATTR static void name(void *const *out, int nout, const void *const *in, int nin, size_t at,   \
                          size_t nb, int stream, int avg, VT d, VT nan)                            \
    {                                                                                              \
        (void)avg;                                                                                 \
        (void)d;                                                                                   \
        (void)nan;                                                                                 \
        for (size_t i = at; i < at + nb; i += BLOCK) {                                             \
            VT x0, x1;                                                                             \
            memcpy(&x0, (const uint8_t *)in[0] + i, 32);                                           \
            memcpy(&x1, (const uint8_t *)in[0] + i + 32, 32);                                      \
            for (int k = 1; k < nin; k++) {                                                        \
                VT y0, y1;                                                                         \
                memcpy(&y0, (const uint8_t *)in[k] + i, 32);                                       \
                memcpy(&y1, (const uint8_t *)in[k] + i + 32, 32);                                  \
                x0 = OPV(VT, MT, x0, y0, nan);                                                     \
                x1 = OPV(VT, MT, x1, y1, nan);                                                     \
            }                                                                                      \
            if (FLOAT && avg) {                                                                    \
                x0 = V_CANON(VT, MT, x0 / d, nan);                                                 \
                x1 = V_CANON(VT, MT, x1 / d, nan);                                                 \
            }                                                                                      \
            if (stream) {                                                                          \
                for (int j = 0; j < nout; j++) {                                                   \
                    _mm256_stream_si256((__m256i *)(void *)((uint8_t *)out[j] + i), (__m256i)x0);  \
                    _mm256_stream_si256((__m256i *)(void *)((uint8_t *)out[j] + i + 32),           \
                                        (__m256i)x1);                                              \
                }                                                                                  \
            } else {                                                                               \
                for (int j = 0; j < nout; j++) {                                                   \
                    memcpy((uint8_t *)out[j] + i, &x0, 32);                                        \
                    memcpy((uint8_t *)out[j] + i + 32, &x1, 32);                                   \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        if (stream) _mm_sfence();                                                                  \
    }

#define DEF_FLOAT_SPREAD(tag, VT, MT)                                                              \
    DEF_SPREAD(sum_##tag, VT, MT, V_FSUM, 1)                                                       \
    DEF_SPREAD(prod_##tag, VT, MT, V_FPROD, 1)                                                     \
    DEF_SPREAD(min_##tag, VT, MT, V_FMIN, 1)                                                       \
    DEF_SPREAD(max_##tag, VT, MT, V_FMAX, 1)
DEF_FLOAT_SPREAD(f32, f32v, i32v)
DEF_FLOAT_SPREAD(f64, f64v, i64v)

/* Integers add and multiply unsigned (wrap-around, the same bits for both signednesses). */
DEF_SPREAD(sum_u8, u8v, i8v, V_SUM, 0)
DEF_SPREAD(prod_u8, u8v, i8v, V_PROD, 0)
DEF_SPREAD(sum_u32, u32v, i32v, V_SUM, 0)
DEF_SPREAD(prod_u32, u32v, i32v, V_PROD, 0)
DEF_SPREAD(sum_u64, u64v, i64v, V_SUM, 0)
DEF_SPREAD(prod_u64, u64v, i64v, V_PROD, 0)
#define DEF_INT_MINMAX(tag, VT, MT)                                                                \
    DEF_SPREAD(min_##tag, VT, MT, V_MIN, 0)                                                        \
    DEF_SPREAD(max_##tag, VT, MT, V_MAX, 0)
DEF_INT_MINMAX(i8, i8v, i8v)
DEF_INT_MINMAX(u8, u8v, i8v)
DEF_INT_MINMAX(i32, i32v, i32v)
DEF_INT_MINMAX(u32, u32v, i32v)
DEF_INT_MINMAX(i64, i64v, i64v)
DEF_INT_MINMAX(u64, u64v, i64v)

typedef struct {
    void *const *out;
    const void *const *in;
    int nout, nin, stream;
} spread_t;

#define CALL(k, VT) k(b->out, b->nout, b->in, b->nin, at, nb, b->stream, 0, (VT){0}, (VT){0})
#define CALLF(k, VT, dv, nv)                                                                       \
    k(b->out, b->nout, b->in, b->nin, at, nb, b->stream, avg, (VT){0} + (dv), (VT){0} + (nv))

/* Whether body() has a kernel for dt/op. */
static int has_kernel(hoop_dtype_t dt, hoop_op_t op)
{
    int fl = dt == HOOP_FLOAT32 || dt == HOOP_FLOAT64;
    int in = dt == HOOP_INT8 || dt == HOOP_UINT8 || dt == HOOP_INT32 || dt == HOOP_UINT32 ||
             dt == HOOP_INT64 || dt == HOOP_UINT64;
    return (fl || in) && (op == HOOP_SUM || op == HOOP_PROD || op == HOOP_MIN || op == HOOP_MAX ||
                          (op == HOOP_AVG && fl));
}

/* The kernel of each op for one float dtype (tag, VT) and for one integer width: sum and product
 * unsigned (tag u), minimum and maximum signed (s) or unsigned (u) as dt says. */
#define BY_OP_FLOAT(tag, VT, dv, nv)                                                               \
    do {                                                                                           \
        if (o == HOOP_SUM)                                                                         \
            CALLF(sum_##tag, VT, dv, nv);                                                          \
        else if (o == HOOP_PROD)                                                                   \
            CALLF(prod_##tag, VT, dv, nv);                                                         \
        else if (o == HOOP_MIN)                                                                    \
            CALLF(min_##tag, VT, dv, nv);                                                          \
        else                                                                                       \
            CALLF(max_##tag, VT, dv, nv);                                                          \
    } while (0)
#define BY_OP_INT(s, u, SV, UV, is_signed)                                                         \
    do {                                                                                           \
        if (o == HOOP_SUM)                                                                         \
            CALL(sum_##u, UV);                                                                     \
        else if (o == HOOP_PROD)                                                                   \
            CALL(prod_##u, UV);                                                                    \
        else if (is_signed)                                                                        \
            o == HOOP_MIN ? CALL(min_##s, SV) : CALL(max_##s, SV);                                 \
        else                                                                                       \
            o == HOOP_MIN ? CALL(min_##u, UV) : CALL(max_##u, UV);                                 \
    } while (0)

/* Bytes [at, at + nb) of every buffer through dt/op's kernel (has_kernel said there is one). */
ATTR static void body(const spread_t *b, size_t at, size_t nb, hoop_dtype_t dt, hoop_op_t op,
                      int divisor)
{
    int avg = op == HOOP_AVG;
    hoop_op_t o = avg ? HOOP_SUM : op;
    switch (dt) {
    case HOOP_FLOAT32: BY_OP_FLOAT(f32, f32v, (float)divisor, __builtin_nanf("")); break;
    case HOOP_FLOAT64: BY_OP_FLOAT(f64, f64v, (double)divisor, __builtin_nan("")); break;
    case HOOP_INT8:
    case HOOP_UINT8: BY_OP_INT(i8, u8, i8v, u8v, dt == HOOP_INT8); break;
    case HOOP_INT32:
    case HOOP_UINT32: BY_OP_INT(i32, u32, i32v, u32v, dt == HOOP_INT32); break;
    default: BY_OP_INT(i64, u64, i64v, u64v, dt == HOOP_INT64); break; /* the 64-bit integers */
    }
}
#endif /* SPREAD_AVX2 */

/* The elements before and after the vector body, the usual way (they are fewer than a block on
 * each side): folded into a block on the stack, then copied into every output. */
static void edge(void *const *out, int nout, const void *const *in, int nin, size_t at, size_t n,
                 size_t es, hoop_dtype_t dt, hoop_op_t op, int divisor)
{
    _Alignas(BLOCK) uint8_t acc[BLOCK];
    if (n == 0) return;
    size_t off = at * es;
    if (nin == 1) memcpy(acc, (const uint8_t *)in[0] + off, n * es);
    for (int k = 1; k < nin; k++)
        hoop__reduce(acc, k == 1 ? (const uint8_t *)in[0] + off : acc, (const uint8_t *)in[k] + off,
                     n, dt, op);
    if (op == HOOP_AVG) hoop__reduce_avg_finish(acc, n, dt, divisor);
    for (int j = 0; j < nout; j++) memcpy((uint8_t *)out[j] + off, acc, n * es);
}

int hoop__reduce_spread(void *const *out, int nout, const void *const *in, int nin, size_t n,
                        hoop_dtype_t dt, hoop_op_t op, int divisor, int stream)
{
#ifdef SPREAD_AVX2
    size_t es = hoop__dtype_size(dt);
    if (nin < 1 || nout < 1 || divisor < 1 || es == 0 || !has_kernel(dt, op) ||
        !__builtin_cpu_supports("avx2"))
        return 0;
    /* Streaming stores want every output line-aligned at the same element: a head of elements
     * the usual way first. Outputs not aligned alike take plain stores. */
    uintptr_t a0 = (uintptr_t)out[0];
    size_t head = (BLOCK - a0 % BLOCK) % BLOCK;
    for (int j = 1; j < nout && stream; j++)
        if (((uintptr_t)out[j] - a0) % BLOCK != 0) stream = 0;
    if (!stream || head % es != 0 || head / es > n) head = 0;
    size_t h = head / es, nb = (n - h) * es / BLOCK * BLOCK;
    spread_t b = {.out = out, .in = in, .nout = nout, .nin = nin, .stream = stream};
    edge(out, nout, in, nin, 0, h, es, dt, op, divisor);
    if (nb > 0) body(&b, head, nb, dt, op, divisor);
    edge(out, nout, in, nin, h + nb / es, n - h - nb / es, es, dt, op, divisor);
    return 1;
#else
    (void)out, (void)nout, (void)in, (void)nin, (void)n, (void)dt, (void)op, (void)divisor;
    (void)stream;
    return 0;
#endif
}
