/* A CUDA module's kernels against the CPU kernels, bit for bit:
 *   test_kernels MODULE
 * every dtype and op and the average's division, on the special values of inputs.h against
 * each other (every 16-bit value against each special one), random bits, and sizes from 0 to
 * 1 MiB + 3 elements at offsets that put the three buffers at the same and at different
 * alignments, byte offsets that break element alignment too, in place (out = a, out = b) and out
 * of place, with guards around the output that must stay untouched. Run on libhoop-cuda.so it
 * needs a GPU: where the module cannot open a device it exits 77 ("no CUDA device"), which
 * meson counts as skipped. Run on the test double it checks the test itself. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf.h"
#include "inputs.h"
#include "reduce/reduce.h"

#define GUARD 64 /* bytes before and after each output, sentinel-filled */
#define SENTINEL 0xa5
#define BIG ((size_t)1048579)

static const hoop_cuda_module_t *mod;
static hoop_cuda_ctx_t *ctx;
static long checks, failures;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    if (++failures > 20) return;
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

static uint64_t ld(const unsigned char *p, size_t es)
{
    uint64_t v = 0;
    memcpy(&v, p, es);
    return v;
}

static void st(unsigned char *p, size_t es, uint64_t v) { memcpy(p, &v, es); }

static void must(int rc, const char *what)
{
    if (rc == 0) return;
    printf("FAIL %s: %s\n", what, mod->error(ctx));
    exit(1);
}

typedef struct bufs {
    unsigned char *da, *db, *dout;       /* device: a, b, and the output with its guards */
    unsigned char *hout, *ref, *ta, *tb; /* host */
    size_t cap;                          /* bytes each holds beyond the guards */
} bufs_t;

/* One case: out = a op b (op < 0: the average's division of a by -op) on n elements of
 * host inputs a and b, at byte offsets oo, oa, ob; mode 1: out = a, mode 2: out = b. */
static void run_case(bufs_t *w, hoop_dtype_t dt, int op, const unsigned char *a,
                     const unsigned char *b, size_t n, size_t oo, size_t oa, size_t ob, int mode)
{
    size_t es = hoop_dtype_size(dt), bytes = n * es, span = GUARD * 2 + oo + bytes;
    unsigned char *out = w->dout + GUARD + oo;
    /* The reference, on aligned copies (the CPU kernels take element-aligned pointers). */
    memcpy(w->ta, a, bytes);
    memcpy(w->tb, b, bytes);
    if (op < 0) {
        memcpy(w->ref, w->ta, bytes);
        hoop__reduce_avg_finish(w->ref, n, dt, -op);
    } else {
        hoop__reduce(w->ref, w->ta, w->tb, n, dt, (hoop_op_t)op);
    }
    memset(w->hout, SENTINEL, span);
    if (mode == 1 || op < 0) memcpy(w->hout + GUARD + oo, a, bytes);
    if (mode == 2) memcpy(w->hout + GUARD + oo, b, bytes);
    must(mod->copy(ctx, w->dout, w->hout, span, NULL), "copy to device");
    const void *da = mode == 1 ? out : w->da + oa, *db = mode == 2 ? out : w->db + ob;
    if (mode != 1 && op >= 0) must(mod->copy(ctx, w->da + oa, a, bytes, NULL), "copy to device");
    if (mode != 2 && op >= 0) must(mod->copy(ctx, w->db + ob, b, bytes, NULL), "copy to device");
    if (op < 0)
        must(mod->avg_finish(ctx, out, n, dt, -op, NULL), "avg_finish");
    else
        must(mod->reduce(ctx, out, da, db, n, dt, (hoop_op_t)op, NULL), "reduce");
    must(mod->copy(ctx, w->hout, w->dout, span, NULL), "copy from device");
    checks++;
    long wrong = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t got = ld(w->hout + GUARD + oo + i * es, es), want = ld(w->ref + i * es, es);
        if (got != want && wrong++ < 3)
            fail("%s %s%s n=%zu offsets out %zu a %zu b %zu%s: element %zu: a=0x%llx b=0x%llx: "
                 "got 0x%llx, CPU 0x%llx",
                 hoop_dtype_name(dt), op < 0 ? "avg_finish /" : hoop_op_name((hoop_op_t)op),
                 op < 0 ? "" : "", n, oo, oa, ob,
                 mode == 1   ? " out=a"
                 : mode == 2 ? " out=b"
                             : "",
                 i, (unsigned long long)ld(a + i * es, es), (unsigned long long)ld(b + i * es, es),
                 (unsigned long long)got, (unsigned long long)want);
    }
    for (size_t i = 0; i < span; i++)
        if ((i < GUARD + oo || i >= GUARD + oo + bytes) && w->hout[i] != SENTINEL) {
            fail("%s n=%zu: byte %zd beside the output was written", hoop_dtype_name(dt), n,
                 (ptrdiff_t)i - (ptrdiff_t)(GUARD + oo));
            break;
        }
}

static void check_dtype(bufs_t *w, hoop_dtype_t dt, uint64_t *rng)
{
    size_t es = hoop_dtype_size(dt);
    uint64_t sp[HOOP__TEST_MAX_SPECIALS];
    size_t nsp = hoop_test_specials(dt, sp);
    /* The value pairs: specials against each other, every 16-bit value against each special,
     * then random bits; sizes and alignments run on the random part. */
    size_t npairs = nsp * nsp + (es <= 2 ? ((size_t)1 << (8 * es)) * nsp : 0), total = npairs + BIG;
    unsigned char *a = malloc(total * es), *b = malloc(total * es);
    if (a == NULL || b == NULL) exit(1);
    size_t k = 0;
    for (size_t i = 0; i < nsp; i++)
        for (size_t j = 0; j < nsp; j++, k++) {
            st(a + k * es, es, sp[i]);
            st(b + k * es, es, sp[j]);
        }
    if (es <= 2)
        for (uint64_t v = 0; v < (1ull << (8 * es)); v++)
            for (size_t j = 0; j < nsp; j++, k++) {
                st(a + k * es, es, v);
                st(b + k * es, es, sp[j]);
            }
    for (; k < total; k++) {
        st(a + k * es, es, hoop_test_next(rng));
        st(b + k * es, es, hoop_test_next(rng));
    }
    unsigned char *ra = a + npairs * es, *rb = b + npairs * es;
    static const size_t sizes[] = {0,  1,  2,  3,   5,   7,   8,   15,   16,   17,   31,   33,
                                   63, 64, 65, 127, 129, 255, 257, 1000, 4095, 4097, 65537};
    /* (out, a, b) offsets in elements: one alignment for all, then three different ones. */
    static const size_t offs[][3] = {{0, 0, 0}, {1, 1, 1}, {3, 3, 3}, {0, 1, 2},
                                     {1, 0, 0}, {7, 5, 3}, {8, 0, 4}, {0, 0, 9}};
    static const int divisors[] = {1, 2, 3, 7, 1000, 65537};
    for (int op = 0; op < HOOP_OP_COUNT; op++) {
        for (int m = 0; m < 3; m++) {
            run_case(w, dt, op, a, b, npairs, 0, 0, 0, m);
            run_case(w, dt, op, b, a, npairs, 0, 0, 0, m);
        }
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (size_t o = 0; o < sizeof offs / sizeof offs[0]; o++)
                for (int m = 0; m < 3; m++)
                    run_case(w, dt, op, ra, rb, sizes[s], offs[o][0] * es, offs[o][1] * es,
                             offs[o][2] * es, m);
        run_case(w, dt, op, ra, rb, BIG, 0, 0, 0, 0);
        run_case(w, dt, op, ra, rb, BIG, 2 * es, es, 3 * es, 1);
        if (es > 1) /* not even aligned to the element */
            run_case(w, dt, op, ra, rb, 1000, 1, 0, es + 1, 0);
    }
    for (size_t d = 0; d < sizeof divisors / sizeof divisors[0]; d++) {
        run_case(w, dt, -divisors[d], a, a, npairs, 0, 0, 0, 1);
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            run_case(w, dt, -divisors[d], ra, ra, sizes[s], es * (s % 3), 0, 0, 1);
    }
    run_case(w, dt, -3, ra, ra, BIG, es, 0, 0, 1);
    printf("%s: %zu value pairs, %zu sizes x %zu alignments x 3 aliasings, 1 MiB + 3 elements\n",
           hoop_dtype_name(dt), npairs, sizeof sizes / sizeof sizes[0],
           sizeof offs / sizeof offs[0]);
    free(a);
    free(b);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_kernels MODULE\n");
        return 2;
    }
    char err[512];
    if (devbuf_open(argv[1], err, sizeof err) != 0) {
        mod = devbuf_module();
        if (mod == NULL) { /* the module itself is broken: that is a failure, not a skip */
            printf("FAIL cannot load %s: %s\n", argv[1], err);
            return 1;
        }
        printf("no CUDA device: %s\n", err);
        return 77;
    }
    mod = devbuf_module();
    ctx = devbuf_ctx();
    printf("module: %s\n", mod->name);
    bufs_t w;
    size_t pairs_max = 65536 * HOOP__TEST_MAX_SPECIALS +
                       HOOP__TEST_MAX_SPECIALS * HOOP__TEST_MAX_SPECIALS;
    w.cap = (pairs_max > BIG ? pairs_max : BIG) * 8 + 64;
    w.da = devbuf_alloc(w.cap);
    w.db = devbuf_alloc(w.cap);
    w.dout = devbuf_alloc(w.cap + 2 * GUARD);
    w.hout = malloc(w.cap + 2 * GUARD);
    w.ref = malloc(w.cap);
    w.ta = malloc(w.cap);
    w.tb = malloc(w.cap);
    if (!w.hout || !w.ref || !w.ta || !w.tb) return 1;
    uint64_t rng = 0x2545f4914f6cdd1dull;
    for (int dt = 0; dt < HOOP_DTYPE_COUNT; dt++) check_dtype(&w, (hoop_dtype_t)dt, &rng);
    devbuf_free(w.da);
    devbuf_free(w.db);
    devbuf_free(w.dout);
    free(w.hout);
    free(w.ref);
    free(w.ta);
    free(w.tb);
    printf("%ld cases, %ld failed\n", checks, failures);
    return failures ? 1 : 0;
}
