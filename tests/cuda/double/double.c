/* libhoop-cuda-double.so: a CUDA runtime TEST DOUBLE. It implements the CUDA module's table
 * (src/cuda/module.h) on the host, for tests on machines without a GPU; it is never installed.
 *
 * "Device memory" lives in an arena that is mapped twice from one memfd: the addresses it hands
 * out belong to a PROT_NONE mapping, so host code that dereferences a device pointer by accident
 * faults at once (as it would on a real GPU), while the double's own copies and kernels reach the
 * same pages through a second, private read-write mapping. Every operation checks its device
 * ranges against the live allocations and aborts the process naming the culprit when one is out
 * of bounds, freed, or (for a kernel) host memory. The kernels are the CPU reductions. It also
 * exports the driver's cuPointerGetAttribute, so that it can stand for the driver too
 * (HOOP_CUDA_DRIVER) in tests of a libhoop that has no module.
 *
 * Knobs, for error-path tests: HOOP_CUDA_DOUBLE_BYTES (arena size, default 2G),
 * HOOP_CUDA_DOUBLE_FAIL=N (the Nth operation fails with "injected failure"; also
 * hoop_cuda_double_fail_in(N) from a test), HOOP_CUDA_DOUBLE_NODRIVER=1 (classify fails as a
 * runtime without a usable driver does). */
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda/module.h"
#include "reduce/reduce.h"

#define EXPORT __attribute__((visibility("default")))
#define ALIGN 256 /* what cudaMalloc guarantees */
#define MAX_BLOCKS 65536

struct hoop_cuda_ctx {
    int device;
    char err[256];
};

typedef struct block {
    size_t off, size;
} block_t;

static struct {
    pthread_once_t once;
    pthread_mutex_t mu;
    char *dev;   /* the addresses handed out: PROT_NONE */
    char *alias; /* the same pages, read-write, for the double alone */
    size_t bytes;
    block_t blocks[MAX_BLOCKS]; /* live allocations, sorted by offset */
    int nblocks;
    long fail_in; /* operations until the injected failure; 0: none */
    int nodriver;
} g = {.once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER};

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "CUDA test double: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

static void arena_init(void)
{
    const char *b = getenv("HOOP_CUDA_DOUBLE_BYTES");
    g.bytes = b != NULL ? strtoull(b, NULL, 0) : (size_t)2 << 30;
    const char *f = getenv("HOOP_CUDA_DOUBLE_FAIL");
    g.fail_in = f != NULL ? atol(f) : 0;
    g.nodriver = getenv("HOOP_CUDA_DOUBLE_NODRIVER") != NULL;
    int fd = memfd_create("hoop-cuda-double", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)g.bytes) != 0) die("cannot make the device arena");
    g.dev = mmap(NULL, g.bytes, PROT_NONE, MAP_SHARED, fd, 0);
    g.alias = mmap(NULL, g.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (g.dev == MAP_FAILED || g.alias == MAP_FAILED) die("cannot map the device arena");
    close(fd);
}

static void init(void) { pthread_once(&g.once, arena_init); }

static int in_arena(const void *p)
{
    return (const char *)p >= g.dev && (const char *)p < g.dev + g.bytes;
}

/* The live block holding [p, p + n), or -1. Under mu. */
static int find(const void *p, size_t n)
{
    size_t off = (size_t)((const char *)p - g.dev);
    int lo = 0, hi = g.nblocks - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const block_t *k = &g.blocks[mid];
        if (off < k->off)
            hi = mid - 1;
        else if (off >= k->off + (k->size ? k->size : 1))
            lo = mid + 1;
        else
            return off + n <= k->off + k->size || n == 0 ? mid : -1;
    }
    return -1;
}

/* What the double's code reads or writes for p: the alias of a device range (checked), or p. */
static char *reach(const void *p, size_t n, int kernel, const char *what)
{
    if (!in_arena(p)) {
        if (kernel) die("%s: %p is host memory, which a kernel cannot read", what, p);
        return (char *)p;
    }
    pthread_mutex_lock(&g.mu);
    int k = find(p, n);
    pthread_mutex_unlock(&g.mu);
    if (k < 0)
        die("%s: %zu bytes at device address %p are not inside one live allocation", what, n, p);
    return g.alias + ((const char *)p - g.dev);
}

/* The injected failure, when its turn comes. */
static int injected(hoop_cuda_ctx_t *ctx)
{
    pthread_mutex_lock(&g.mu);
    int fail = g.fail_in > 0 && --g.fail_in == 0;
    pthread_mutex_unlock(&g.mu);
    if (fail) snprintf(ctx->err, sizeof ctx->err, "injected failure (HOOP_CUDA_DOUBLE_FAIL)");
    return fail;
}

/* ---- the table ---- */

static int classify(const void *p, hoop_cuda_ptr_t *out, char *err, size_t errlen)
{
    init();
    memset(out, 0, sizeof *out);
    if (g.nodriver) {
        snprintf(err, errlen, "no usable CUDA driver (HOOP_CUDA_DOUBLE_NODRIVER)");
        return -1;
    }
    if (!in_arena(p)) return 0;
    out->type = HOOP__CUDA_PTR_DEVICE;
    pthread_mutex_lock(&g.mu);
    int k = find(p, 0);
    if (k >= 0) {
        out->base = (uintptr_t)(g.dev + g.blocks[k].off);
        out->size = g.blocks[k].size;
    }
    pthread_mutex_unlock(&g.mu);
    return 0;
}

static hoop_cuda_ctx_t *open_ctx(int device, char *err, size_t errlen)
{
    init();
    if (device != 0) {
        snprintf(err, errlen, "the CUDA test double has one device, 0 (asked for %d)", device);
        return NULL;
    }
    return calloc(1, sizeof(hoop_cuda_ctx_t));
}

static void close_ctx(hoop_cuda_ctx_t *ctx) { free(ctx); }

static const char *error(const hoop_cuda_ctx_t *ctx) { return ctx->err; }

static int copy(hoop_cuda_ctx_t *ctx, void *dst, const void *src, size_t n)
{
    if (injected(ctx)) return -1;
    if (n == 0) return 0;
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    if (d != s && d < s + n && s < d + n)
        die("copy of %zu bytes between overlapping ranges %p and %p", n, dst, src);
    memcpy(reach(dst, n, 0, "copy destination"), reach(src, n, 0, "copy source"), n);
    return 0;
}

static int move(hoop_cuda_ctx_t *ctx, void *dst, const void *src, size_t n)
{
    if (injected(ctx)) return -1;
    if (n == 0) return 0;
    memmove(reach(dst, n, 0, "move destination"), reach(src, n, 0, "move source"), n);
    return 0;
}

static size_t esize(hoop_dtype_t dt)
{
    static const unsigned char sizes[HOOP_DTYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
    return (unsigned)dt < HOOP_DTYPE_COUNT ? sizes[dt] : 0;
}

static int reduce(hoop_cuda_ctx_t *ctx, void *out, const void *a, const void *b, size_t count,
                  hoop_dtype_t dt, hoop_op_t op)
{
    if (injected(ctx)) return -1;
    if (count == 0) return 0;
    size_t es = esize(dt), n = count * es;
    char *o = reach(out, n, 1, "reduction output");
    const char *x = reach(a, n, 1, "reduction input a"), *y = reach(b, n, 1, "reduction input b");
    if (((uintptr_t)o | (uintptr_t)x | (uintptr_t)y) % es == 0) {
        hoop__reduce(o, x, y, count, dt, op);
        return 0;
    }
    /* Not aligned to the element: as the real module, through aligned copies. */
    char *t = malloc(3 * n);
    if (t == NULL) die("out of host memory");
    memcpy(t + n, x, n);
    memcpy(t + 2 * n, y, n);
    hoop__reduce(t, t + n, t + 2 * n, count, dt, op);
    memcpy(o, t, n);
    free(t);
    return 0;
}

static int avg_finish(hoop_cuda_ctx_t *ctx, void *buf, size_t count, hoop_dtype_t dt, int divisor)
{
    if (injected(ctx)) return -1;
    if (count == 0) return 0;
    size_t es = esize(dt), n = count * es;
    char *p = reach(buf, n, 1, "average");
    if ((uintptr_t)p % es == 0) {
        hoop__reduce_avg_finish(p, count, dt, divisor);
        return 0;
    }
    char *t = malloc(n);
    if (t == NULL) die("out of host memory");
    memcpy(t, p, n);
    hoop__reduce_avg_finish(t, count, dt, divisor);
    memcpy(p, t, n);
    free(t);
    return 0;
}

static void *alloc(hoop_cuda_ctx_t *ctx, size_t bytes)
{
    init();
    size_t size = bytes ? bytes : 1;
    pthread_mutex_lock(&g.mu);
    /* First fit between live blocks; a gap of ALIGN after each, so that overruns of one block
     * never land in the next. */
    size_t at = 0;
    int i = 0;
    for (; i < g.nblocks; i++) {
        if (at + size + ALIGN <= g.blocks[i].off) break;
        at = (g.blocks[i].off + g.blocks[i].size + 2 * ALIGN - 1) / ALIGN * ALIGN;
    }
    if (g.nblocks == MAX_BLOCKS || at + size > g.bytes) {
        pthread_mutex_unlock(&g.mu);
        snprintf(ctx->err, sizeof ctx->err, "out of device memory (%zu bytes asked)", bytes);
        return NULL;
    }
    memmove(&g.blocks[i + 1], &g.blocks[i], (size_t)(g.nblocks - i) * sizeof(block_t));
    g.blocks[i] = (block_t){at, size};
    g.nblocks++;
    pthread_mutex_unlock(&g.mu);
    /* Fresh device memory holds garbage, not zeros: a read of what nobody wrote shows. */
    memset(g.alias + at, 0xdb, size);
    return g.dev + at;
}

static void dfree(hoop_cuda_ctx_t *ctx, void *p)
{
    (void)ctx;
    if (p == NULL) return;
    if (!in_arena(p)) die("free of %p, which is not device memory", p);
    pthread_mutex_lock(&g.mu);
    int k = find(p, 0);
    if (k < 0 || g.dev + g.blocks[k].off != (char *)p)
        die("free of %p, which is not an allocation", p);
    block_t b = g.blocks[k];
    /* Give the pages back while the block is still taken: once it is not, another thread may
     * allocate it and write there. */
    size_t first = (b.off + 4095) / 4096 * 4096, last = (b.off + b.size) / 4096 * 4096;
    if (last > first) madvise(g.alias + first, last - first, MADV_REMOVE);
    memmove(&g.blocks[k], &g.blocks[k + 1], (size_t)(g.nblocks - k - 1) * sizeof(block_t));
    g.nblocks--;
    pthread_mutex_unlock(&g.mu);
}

static void *host_alloc(hoop_cuda_ctx_t *ctx, size_t bytes)
{
    (void)ctx;
    return malloc(bytes ? bytes : 1);
}

static void host_free(hoop_cuda_ctx_t *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static const hoop_cuda_module_t table = {
    .abi = HOOP__CUDA_ABI,
    .size = sizeof(hoop_cuda_module_t),
    .name = "CUDA test double",
    .classify = classify,
    .open = open_ctx,
    .close = close_ctx,
    .copy = copy,
    .move = move,
    .reduce = reduce,
    .avg_finish = avg_finish,
    .alloc = alloc,
    .free = dfree,
    .host_alloc = host_alloc,
    .host_free = host_free,
    .error = error,
};

EXPORT const hoop_cuda_module_t *hoop_cuda_module(void) { return &table; }

/* Tests: the nth operation from now fails (0: none). */
EXPORT void hoop_cuda_double_fail_in(long n)
{
    init();
    pthread_mutex_lock(&g.mu);
    g.fail_in = n;
    pthread_mutex_unlock(&g.mu);
}

/* The driver's classification, as libcuda has it: CU_POINTER_ATTRIBUTE_MEMORY_TYPE (2) gives
 * CU_MEMORYTYPE_DEVICE (2); memory the driver does not know is CUDA_ERROR_INVALID_VALUE (1). */
EXPORT int cuPointerGetAttribute(void *data, int attribute, unsigned long long ptr)
{
    init();
    if (attribute != 2 || !in_arena((const void *)(uintptr_t)ptr)) return 1;
    *(unsigned *)data = 2;
    return 0;
}
