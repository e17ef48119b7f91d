/* libhoop-cuda.so: the CUDA module's table (module.h) over the CUDA runtime, linked statically so
 * that the module needs nothing of the toolkit where it runs, only the driver (which the runtime
 * opens itself, at the first call). libhoop loads it only once the driver is in the process.
 *
 * Every operation runs on the legacy default stream, so it starts after the work the
 * application queued there (and on the streams that synchronize with it), and waits for its
 * own completion before returning: calls are blocking and complete in memory, as the table
 * promises. Stream-ordered calls come later. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/kernels.h"
#include "cuda/module.h"

#define EXPORT __attribute__((visibility("default")))

struct hoop_cuda_ctx {
    int device;
    int sms; /* multiprocessors: the kernels' grids are sized to them */
    char err[384];
};

static void say(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *err, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

/* "cudaMemcpyAsync: an illegal memory access was encountered (cudaErrorIllegalAddress)". */
static int failed(hoop_cuda_ctx_t *ctx, const char *what, cudaError_t e)
{
    say(ctx->err, sizeof ctx->err, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return -1;
}

/* The operations run on the context's device and put the caller's current device back after. */
static int enter(hoop_cuda_ctx_t *ctx, int *prev)
{
    cudaError_t e = cudaGetDevice(prev);
    if (e == cudaSuccess && *prev != ctx->device) e = cudaSetDevice(ctx->device);
    return e == cudaSuccess ? 0 : failed(ctx, "cudaSetDevice", e);
}

/* Waits for what the operation queued; rc is its result so far. */
static int leave(hoop_cuda_ctx_t *ctx, int prev, int rc)
{
    cudaError_t e = cudaStreamSynchronize(cudaStreamLegacy);
    if (rc == 0 && e != cudaSuccess) rc = failed(ctx, "cudaStreamSynchronize", e);
    if (prev != ctx->device) cudaSetDevice(prev);
    return rc;
}

/* ---- what a pointer is ---- */

typedef CUresult (*range_fn)(CUdeviceptr *base, size_t *size, CUdeviceptr p);

static int classify(const void *p, hoop_cuda_ptr_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    struct cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e == cudaErrorInvalidValue) { /* older drivers say so of plain host memory */
        cudaGetLastError();
        return 0;
    }
    if (e == cudaErrorNoDevice) { /* no device visible to this process: nothing is device memory */
        cudaGetLastError();
        return 0;
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        say(err, errlen, "no usable CUDA driver: cudaPointerGetAttributes: %s (%s)",
            cudaGetErrorString(e), cudaGetErrorName(e));
        return -1;
    }
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) return 0;
    out->type = HOOP__CUDA_PTR_DEVICE;
    out->device = a.device;
    /* The allocation's extent, so that libhoop can cache it: from the driver, without linking
     * it. Managed memory is left uncached (it can move). */
    static range_fn range_cache;
    range_fn range = __atomic_load_n(&range_cache, __ATOMIC_ACQUIRE);
    if (range == NULL) {
        void *fn = NULL;
        enum cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                             &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess) {
            range = (range_fn)fn;
            __atomic_store_n(&range_cache, range, __ATOMIC_RELEASE);
        }
        cudaGetLastError();
    }
    CUdeviceptr base;
    size_t size;
    if (a.type == cudaMemoryTypeDevice && range != NULL &&
        range(&base, &size, (CUdeviceptr)(uintptr_t)p) == CUDA_SUCCESS) {
        out->base = (uintptr_t)base;
        out->size = size;
    }
    return 0;
}

/* ---- contexts ---- */

static hoop_cuda_ctx_t *open_ctx(int device, char *err, size_t errlen)
{
    int sms = 0;
    cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e != cudaSuccess) {
        cudaGetLastError();
        say(err, errlen, "CUDA device %d: %s (%s)", device, cudaGetErrorString(e),
            cudaGetErrorName(e));
        return NULL;
    }
    hoop_cuda_ctx_t *ctx = calloc(1, sizeof *ctx);
    if (ctx == NULL) {
        say(err, errlen, "out of memory");
        return NULL;
    }
    ctx->device = device;
    ctx->sms = sms;
    return ctx;
}

static void close_ctx(hoop_cuda_ctx_t *ctx) { free(ctx); }

static const char *error(const hoop_cuda_ctx_t *ctx) { return ctx->err; }

/* ---- operations ---- */

static int copy(hoop_cuda_ctx_t *ctx, void *dst, const void *src, size_t n)
{
    int prev;
    if (n == 0 || dst == src) return 0;
    if (enter(ctx, &prev) != 0) return -1;
    cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, cudaStreamLegacy);
    return leave(ctx, prev, e == cudaSuccess ? 0 : failed(ctx, "cudaMemcpyAsync", e));
}

static void *alloc(hoop_cuda_ctx_t *ctx, size_t bytes);
static void dfree(hoop_cuda_ctx_t *ctx, void *p);

static int move(hoop_cuda_ctx_t *ctx, void *dst, const void *src, size_t n)
{
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    if (d + n <= s || s + n <= d || n == 0 || d == s) return copy(ctx, dst, src, n);
    /* Overlapping ranges (rare: in-place conventions that overlap only partly): through a
     * temporary, since copies between overlapping ranges are undefined. */
    void *tmp = alloc(ctx, n);
    if (tmp == NULL) return -1;
    int rc = copy(ctx, tmp, src, n);
    if (rc == 0) rc = copy(ctx, dst, tmp, n);
    dfree(ctx, tmp);
    return rc;
}

/* Element sizes (the module links nothing of libhoop). */
static size_t esize(hoop_dtype_t dt)
{
    static const unsigned char sizes[HOOP_DTYPE_COUNT] = {
        [HOOP_INT8] = 1,    [HOOP_UINT8] = 1,   [HOOP_INT32] = 4,   [HOOP_UINT32] = 4,
        [HOOP_INT64] = 8,   [HOOP_UINT64] = 8,  [HOOP_FLOAT16] = 2, [HOOP_BFLOAT16] = 2,
        [HOOP_FLOAT32] = 4, [HOOP_FLOAT64] = 8,
    };
    return (unsigned)dt < HOOP_DTYPE_COUNT ? sizes[dt] : 0;
}

/* Kernels need buffers aligned to their element; the rare pointer that is not (a byte offset
 * into a float buffer, say) is copied into an aligned temporary and back. */
static int misaligned(const void *p, size_t es) { return ((uintptr_t)p & (es - 1)) != 0; }

static int reduce(hoop_cuda_ctx_t *ctx, void *out, const void *a, const void *b, size_t count,
                  hoop_dtype_t dt, hoop_op_t op)
{
    size_t es = esize(dt), bytes = count * es;
    if (count == 0 || es == 0) return 0;
    if (misaligned(out, es) || misaligned(a, es) || misaligned(b, es)) {
        char *t = alloc(ctx, 3 * bytes);
        if (t == NULL) return -1;
        int rc = copy(ctx, t + bytes, a, bytes);
        if (rc == 0) rc = copy(ctx, t + 2 * bytes, b, bytes);
        if (rc == 0) rc = reduce(ctx, t, t + bytes, t + 2 * bytes, count, dt, op);
        if (rc == 0) rc = copy(ctx, out, t, bytes);
        dfree(ctx, t);
        return rc;
    }
    int prev;
    if (enter(ctx, &prev) != 0) return -1;
    cudaError_t e = (cudaError_t)hoop_cuda_launch_reduce(out, a, b, count, dt, op, ctx->sms,
                                                         (void *)cudaStreamLegacy);
    return leave(ctx, prev, e == cudaSuccess ? 0 : failed(ctx, "reduction kernel", e));
}

static int avg_finish(hoop_cuda_ctx_t *ctx, void *buf, size_t count, hoop_dtype_t dt, int divisor)
{
    size_t es = esize(dt), bytes = count * es;
    if (count == 0 || es == 0) return 0;
    if (misaligned(buf, es)) {
        char *t = alloc(ctx, bytes);
        if (t == NULL) return -1;
        int rc = copy(ctx, t, buf, bytes);
        if (rc == 0) rc = avg_finish(ctx, t, count, dt, divisor);
        if (rc == 0) rc = copy(ctx, buf, t, bytes);
        dfree(ctx, t);
        return rc;
    }
    int prev;
    if (enter(ctx, &prev) != 0) return -1;
    cudaError_t e = (cudaError_t)hoop_cuda_launch_avg(buf, count, dt, divisor, ctx->sms,
                                                      (void *)cudaStreamLegacy);
    return leave(ctx, prev, e == cudaSuccess ? 0 : failed(ctx, "average kernel", e));
}

static void *alloc(hoop_cuda_ctx_t *ctx, size_t bytes)
{
    int prev;
    void *p = NULL;
    if (enter(ctx, &prev) != 0) return NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* out of memory is not sticky: leave no trace for the application */
        failed(ctx, "cudaMalloc", e);
        p = NULL;
    }
    if (prev != ctx->device) cudaSetDevice(prev);
    return p;
}

static void dfree(hoop_cuda_ctx_t *ctx, void *p)
{
    int prev;
    if (p == NULL || enter(ctx, &prev) != 0) return;
    cudaFree(p);
    if (prev != ctx->device) cudaSetDevice(prev);
}

static void *host_alloc(hoop_cuda_ctx_t *ctx, size_t bytes)
{
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        cudaGetLastError();
        failed(ctx, "cudaHostAlloc", e);
        return NULL;
    }
    return p;
}

static void host_free(hoop_cuda_ctx_t *ctx, void *p)
{
    (void)ctx;
    if (p != NULL) cudaFreeHost(p);
}

static const hoop_cuda_module_t table = {
    .abi = HOOP__CUDA_ABI,
    .size = sizeof(hoop_cuda_module_t),
    .name = "libhoop-cuda.so",
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
