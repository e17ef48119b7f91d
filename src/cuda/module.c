/* libhoop-cuda.so: the CUDA module's table (module.h) over the CUDA runtime, linked statically so
 * that the module needs nothing of the toolkit where it runs, only the driver (which the runtime
 * opens itself, at the first call). libhoop loads it only once the driver is in the process. The
 * test double (tests/cuda/double) is this same file built against a model of the runtime.
 *
 * Contexts. Every operation makes the primary context of its communicator's device current for
 * its duration through the driver (cuCtxSetCurrent) and puts back whatever the thread had,
 * nothing included: the runtime's cudaSetDevice would make a context on the device it restores
 * (device 0 for a thread that never chose one), which costs memory on a GPU the process may not
 * use and fails on one in EXCLUSIVE_PROCESS mode. Pointers are classified by the driver
 * (cuPointerGetAttributes), which needs no context, where cudaPointerGetAttributes makes one.
 * Each operation also runs in the relaxed stream capture mode, so that an application's capture
 * on another thread neither fails it nor is invalidated by it.
 *
 * Streams. The synchronous operations given no stream run on the context's own stream
 * (cudaStreamNonBlocking) after an event recorded on the legacy default stream: they follow the
 * work queued there before them, as on the legacy stream, but never wait for what a blocking
 * stream queues later, such as another communicator's wait for a host word. Frees of device
 * memory are stream-ordered; pinned host memory is freed with the context (cudaFreeHost waits
 * for the whole device). */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/kernels.h"
#include "cuda/module.h"

#define EXPORT __attribute__((visibility("default")))
/* What it calls itself in messages; the test double, built from this file, says so. */
#ifndef HOOP__CUDA_MODULE_NAME
#define HOOP__CUDA_MODULE_NAME "libhoop-cuda.so"
#endif

/* Pinned buffers given back while the context lives: cudaFreeHost would synchronize the
 * device, which a call must never do (a stream may wait for that very call). */
typedef struct held {
    void *p;
    struct held *next;
} held_t;

typedef CUresult (*wait_value_fn)(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned flags);

/* The driver's functions the module calls, from the runtime's entry points (the module links
 * no libcuda), looked up once per process. */
static struct {
    pthread_once_t once;
    cudaError_t error; /* the lookup failed: no usable driver */
    CUresult (*ctx_get)(CUcontext *);
    CUresult (*ctx_set)(CUcontext);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*release)(CUdevice);
    CUresult (*attrs)(unsigned, CUpointer_attribute *, void **, CUdeviceptr);
    wait_value_fn wait_value; /* NULL where stream memory operations are missing */
} drv = {.once = PTHREAD_ONCE_INIT};

struct hoop_cuda_ctx {
    int device;
    int sms;           /* multiprocessors: the kernels' grids are sized to them */
    int pools;         /* the stream-ordered allocator is there (cudaMallocAsync) */
    CUcontext primary; /* the device's primary context, retained */
    cudaStream_t own;  /* the synchronous operations' stream, under own_mu */
    cudaEvent_t gate;  /* orders own after the legacy stream, per operation */
    cudaStream_t pool; /* allocations and frees */
    wait_value_fn wait_value;
    pthread_mutex_t own_mu, held_mu;
    held_t *held;
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

/* The module's CUDA version and the driver's, for the sentence of a driver too old. */
static void versions(int *runtime, int *driver)
{
    *runtime = CUDART_VERSION;
    if (cudaDriverGetVersion(driver) != cudaSuccess) *driver = 0;
}

/* "no usable CUDA driver: ...": the floor this module's runtime sets, and what the driver has. */
static void no_driver(char *err, size_t n, const char *what, cudaError_t e)
{
    int rt, dv;
    versions(&rt, &dv);
    if (dv == 0) { /* no libcuda at all: a machine without a GPU */
        say(err, n, "no CUDA device: no CUDA driver is installed: %s: %s (%s)", what,
            cudaGetErrorString(e), cudaGetErrorName(e));
        return;
    }
    say(err, n,
        "no usable CUDA driver: this module's CUDA runtime %d.%d needs a driver for CUDA %d.%d or "
        "newer (R580 or later for 13.0), and this one is for CUDA %d.%d: %s: %s (%s)",
        rt / 1000, rt % 1000 / 10, rt / 1000, rt % 1000 / 10, dv / 1000, dv % 1000 / 10, what,
        cudaGetErrorString(e), cudaGetErrorName(e));
}

/* "cudaMemcpyAsync: an illegal memory access was encountered (cudaErrorIllegalAddress)". */
static int failed(hoop_cuda_ctx_t *ctx, const char *what, cudaError_t e)
{
    if (e == cudaErrorInsufficientDriver)
        no_driver(ctx->err, sizeof ctx->err, what, e);
    else
        say(ctx->err, sizeof ctx->err, "%s: %s (%s)", what, cudaGetErrorString(e),
            cudaGetErrorName(e));
    return -1;
}

static void *entry(const char *name, cudaError_t *e)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q;
    cudaError_t r = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q);
    if (r != cudaSuccess && *e == cudaSuccess) *e = r;
    cudaGetLastError();
    return r == cudaSuccess && q == cudaDriverEntryPointSuccess ? fn : NULL;
}

static void drv_lookup(void)
{
    cudaError_t e = cudaSuccess;
    *(void **)&drv.ctx_get = entry("cuCtxGetCurrent", &e);
    *(void **)&drv.ctx_set = entry("cuCtxSetCurrent", &e);
    *(void **)&drv.retain = entry("cuDevicePrimaryCtxRetain", &e);
    *(void **)&drv.release = entry("cuDevicePrimaryCtxRelease", &e);
    *(void **)&drv.attrs = entry("cuPointerGetAttributes", &e);
    *(void **)&drv.wait_value = entry("cuStreamWaitValue32", &e);
    if (e == cudaSuccess && (drv.ctx_get == NULL || drv.ctx_set == NULL || drv.retain == NULL ||
                             drv.release == NULL || drv.attrs == NULL))
        e = cudaErrorNotSupported;
    drv.error = e;
}

/* 0 once the driver's functions are there, else -1 with the sentence in err. */
static int drv_ready(char *err, size_t n)
{
    pthread_once(&drv.once, drv_lookup);
    if (drv.error == cudaSuccess) return 0;
    if (drv.error == cudaErrorInsufficientDriver)
        no_driver(err, n, "cudaGetDriverEntryPointByVersion", drv.error);
    else
        say(err, n, "no usable CUDA driver: its entry points cannot be had: %s (%s)",
            cudaGetErrorString(drv.error), cudaGetErrorName(drv.error));
    return -1;
}

/* What an operation changes on the calling thread, put back by leave(). */
typedef struct saved {
    CUcontext prev;
    enum cudaStreamCaptureMode mode;
} saved_t;

static int enter(hoop_cuda_ctx_t *ctx, saved_t *sv)
{
    sv->prev = NULL;
    if (drv.ctx_get(&sv->prev) != CUDA_SUCCESS) sv->prev = NULL;
    if (sv->prev != ctx->primary && drv.ctx_set(ctx->primary) != CUDA_SUCCESS) {
        say(ctx->err, sizeof ctx->err, "cuCtxSetCurrent: cannot make CUDA device %d current",
            ctx->device);
        return -1;
    }
    sv->mode = cudaStreamCaptureModeRelaxed;
    if (cudaThreadExchangeStreamCaptureMode(&sv->mode) != cudaSuccess) {
        cudaGetLastError();
        sv->mode = cudaStreamCaptureModeRelaxed;
    }
    return 0;
}

static void leave(hoop_cuda_ctx_t *ctx, const saved_t *sv)
{
    enum cudaStreamCaptureMode m = sv->mode;
    if (m != cudaStreamCaptureModeRelaxed) cudaThreadExchangeStreamCaptureMode(&m);
    if (sv->prev != ctx->primary) drv.ctx_set(sv->prev);
}

/* Leaves the context entered for a call that gave e: 0, or -1 with the sentence of what. */
static int left(hoop_cuda_ctx_t *ctx, const saved_t *sv, const char *what, cudaError_t e)
{
    leave(ctx, sv);
    return e == cudaSuccess ? 0 : failed(ctx, what, e);
}

/* Leaves the context entered for a call that made p and gave e: p, or NULL with the sentence of
 * what. */
static void *made(hoop_cuda_ctx_t *ctx, const saved_t *sv, const char *what, cudaError_t e, void *p)
{
    return left(ctx, sv, what, e) == 0 ? p : NULL;
}

static cudaStream_t strm(void *stream)
{
    return stream != NULL ? (cudaStream_t)stream : cudaStreamLegacy;
}

/* A synchronous operation's stream: the given one, or the context's own, ordered after the
 * legacy stream's work so far (own_mu held until sync_end). Inside enter/leave. */
static int sync_begin(hoop_cuda_ctx_t *ctx, void *stream, cudaStream_t *run)
{
    if (stream != NULL) {
        *run = (cudaStream_t)stream;
        return 0;
    }
    pthread_mutex_lock(&ctx->own_mu);
    *run = ctx->own;
    cudaError_t e = cudaEventRecord(ctx->gate, cudaStreamLegacy);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(ctx->own, ctx->gate, 0);
    if (e == cudaSuccess) return 0;
    pthread_mutex_unlock(&ctx->own_mu);
    return failed(ctx, "ordering after the legacy stream", e);
}

/* Waits for what the operation queued on run; rc is its result so far. */
static int sync_end(hoop_cuda_ctx_t *ctx, void *stream, cudaStream_t run, int rc)
{
    cudaError_t e = cudaStreamSynchronize(run);
    if (rc == 0 && e != cudaSuccess) rc = failed(ctx, "cudaStreamSynchronize", e);
    if (stream == NULL) pthread_mutex_unlock(&ctx->own_mu);
    return rc;
}

/* ---- what a pointer is ---- */

static int classify(const void *p, hoop_cuda_ptr_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (drv_ready(err, errlen) != 0) return -1;
    unsigned type = 0;
    int ordinal = -1;
    unsigned char managed = 0;
    CUdeviceptr base = 0;
    size_t size = 0;
    CUpointer_attribute at[] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    void *data[] = {&type, &ordinal, &managed, &base, &size};
    /* Memory the driver does not know is not an error here: its attributes stay 0. */
    CUresult r = drv.attrs(5, at, data, (CUdeviceptr)(uintptr_t)p);
    if (r != CUDA_SUCCESS) {
        say(err, errlen, "no usable CUDA driver: cuPointerGetAttributes: CUDA driver error %d",
            (int)r);
        return -1;
    }
    if (!managed && type != CU_MEMORYTYPE_DEVICE) return 0;
    out->type = HOOP__CUDA_PTR_DEVICE;
    out->device = ordinal;
    /* The allocation's extent, so that libhoop can cache it; managed memory is left uncached
     * (it can move). */
    if (!managed && size > 0) {
        out->base = (uintptr_t)base;
        out->size = size;
    }
    return 0;
}

/* ---- contexts ---- */

static void ctx_free(hoop_cuda_ctx_t *ctx)
{
    pthread_mutex_destroy(&ctx->own_mu);
    pthread_mutex_destroy(&ctx->held_mu);
    free(ctx);
}

static hoop_cuda_ctx_t *open_ctx(int device, char *err, size_t errlen)
{
    if (drv_ready(err, errlen) != 0) return NULL;
    int sms = 0, pools = 0;
    cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (e == cudaErrorInsufficientDriver)
            no_driver(err, errlen, "cudaDeviceGetAttribute", e);
        else
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
    ctx->wait_value = drv.wait_value;
    pthread_mutex_init(&ctx->own_mu, NULL);
    pthread_mutex_init(&ctx->held_mu, NULL);
    /* The primary context of the buffers' device: the one the application uses there. */
    CUresult r = drv.retain(&ctx->primary, device);
    if (r != CUDA_SUCCESS) {
        int mode = 0;
        cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, device);
        cudaGetLastError();
        say(err, errlen, "CUDA device %d: cuDevicePrimaryCtxRetain: CUDA driver error %d%s", device,
            (int)r,
            mode == cudaComputeModeExclusiveProcess
                ? " (the device is in EXCLUSIVE_PROCESS compute mode: another process has it)"
                : "");
        ctx_free(ctx);
        return NULL;
    }
    saved_t sv;
    if (enter(ctx, &sv) != 0) {
        say(err, errlen, "%s", ctx->err);
        drv.release(device);
        ctx_free(ctx);
        return NULL;
    }
    const char *what = "cudaStreamCreateWithFlags";
    e = cudaStreamCreateWithFlags(&ctx->own, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&ctx->pool, cudaStreamNonBlocking);
    if (e == cudaSuccess) {
        what = "cudaEventCreateWithFlags";
        e = cudaEventCreateWithFlags(&ctx->gate, cudaEventDisableTiming);
    }
    if (e == cudaSuccess &&
        cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device) == cudaSuccess)
        ctx->pools = pools;
    cudaGetLastError();
    leave(ctx, &sv);
    if (e != cudaSuccess) {
        say(err, errlen, "CUDA device %d: %s: %s (%s)", device, what, cudaGetErrorString(e),
            cudaGetErrorName(e));
        drv.release(device);
        ctx_free(ctx);
        return NULL;
    }
    return ctx;
}

/* With the communicator, when no call is in flight: waits for its streams, frees what it kept. */
static void close_ctx(hoop_cuda_ctx_t *ctx)
{
    saved_t sv;
    if (enter(ctx, &sv) == 0) {
        cudaStreamSynchronize(ctx->own);
        cudaStreamSynchronize(ctx->pool);
        cudaStreamDestroy(ctx->own);
        cudaStreamDestroy(ctx->pool);
        cudaEventDestroy(ctx->gate);
        for (held_t *h = ctx->held, *n; h != NULL; h = n) {
            n = h->next;
            cudaFreeHost(h->p);
            free(h);
        }
        cudaGetLastError();
        leave(ctx, &sv);
    }
    drv.release(ctx->device);
    ctx_free(ctx);
}

static const char *error(const hoop_cuda_ctx_t *ctx) { return ctx->err; }

/* ---- copies and kernels ---- */

static void *alloc(hoop_cuda_ctx_t *ctx, size_t bytes);
static void dfree(hoop_cuda_ctx_t *ctx, void *p);

static int copy(hoop_cuda_ctx_t *ctx, void *dst, const void *src, size_t n, void *stream)
{
    if (n == 0) return 0;
    saved_t sv;
    cudaStream_t run;
    if (enter(ctx, &sv) != 0) return -1;
    int rc = sync_begin(ctx, stream, &run);
    if (rc == 0) {
        cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, run);
        rc = sync_end(ctx, stream, run, e == cudaSuccess ? 0 : failed(ctx, "cudaMemcpyAsync", e));
    }
    leave(ctx, &sv);
    return rc;
}

static int move(hoop_cuda_ctx_t *ctx, void *dst, const void *src, size_t n, void *stream)
{
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    if (d + n <= s || s + n <= d || n == 0 || d == s) return copy(ctx, dst, src, n, stream);
    /* Overlapping ranges (rare: in-place conventions that overlap only partly): through a
     * temporary, since copies between overlapping ranges are undefined. */
    void *tmp = alloc(ctx, n);
    if (tmp == NULL) return -1;
    int rc = copy(ctx, tmp, src, n, stream);
    if (rc == 0) rc = copy(ctx, dst, tmp, n, stream);
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
                  hoop_dtype_t dt, hoop_op_t op, void *stream)
{
    size_t es = esize(dt), bytes = count * es;
    if (count == 0 || es == 0) return 0;
    if (misaligned(out, es) || misaligned(a, es) || misaligned(b, es)) {
        char *t = alloc(ctx, 3 * bytes);
        if (t == NULL) return -1;
        int rc = copy(ctx, t + bytes, a, bytes, stream);
        if (rc == 0) rc = copy(ctx, t + 2 * bytes, b, bytes, stream);
        if (rc == 0) rc = reduce(ctx, t, t + bytes, t + 2 * bytes, count, dt, op, stream);
        if (rc == 0) rc = copy(ctx, out, t, bytes, stream);
        dfree(ctx, t);
        return rc;
    }
    saved_t sv;
    cudaStream_t run;
    if (enter(ctx, &sv) != 0) return -1;
    int rc = sync_begin(ctx, stream, &run);
    if (rc == 0) {
        cudaError_t e = (cudaError_t)hoop_cuda_launch_reduce(out, a, b, count, dt, op, ctx->sms,
                                                             (void *)run);
        rc = sync_end(ctx, stream, run, e == cudaSuccess ? 0 : failed(ctx, "reduction kernel", e));
    }
    leave(ctx, &sv);
    return rc;
}

static int avg_finish(hoop_cuda_ctx_t *ctx, void *buf, size_t count, hoop_dtype_t dt, int divisor,
                      void *stream)
{
    size_t es = esize(dt), bytes = count * es;
    if (count == 0 || es == 0) return 0;
    if (misaligned(buf, es)) {
        char *t = alloc(ctx, bytes);
        if (t == NULL) return -1;
        int rc = copy(ctx, t, buf, bytes, stream);
        if (rc == 0) rc = avg_finish(ctx, t, count, dt, divisor, stream);
        if (rc == 0) rc = copy(ctx, buf, t, bytes, stream);
        dfree(ctx, t);
        return rc;
    }
    saved_t sv;
    cudaStream_t run;
    if (enter(ctx, &sv) != 0) return -1;
    int rc = sync_begin(ctx, stream, &run);
    if (rc == 0) {
        cudaError_t e = (cudaError_t)hoop_cuda_launch_avg(buf, count, dt, divisor, ctx->sms,
                                                          (void *)run);
        rc = sync_end(ctx, stream, run, e == cudaSuccess ? 0 : failed(ctx, "average kernel", e));
    }
    leave(ctx, &sv);
    return rc;
}

static void *alloc(hoop_cuda_ctx_t *ctx, size_t bytes)
{
    saved_t sv;
    void *p = NULL;
    if (enter(ctx, &sv) != 0) return NULL;
    /* Stream-ordered where the device has pools, so that the free never synchronizes the
     * device; ready for any stream once the pool stream has it. */
    cudaError_t e = ctx->pools ? cudaMallocAsync(&p, bytes ? bytes : 1, ctx->pool)
                               : cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaSuccess && ctx->pools) e = cudaStreamSynchronize(ctx->pool);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* out of memory is not sticky: leave no trace for the application */
        failed(ctx, "cudaMalloc", e);
        p = NULL;
    }
    leave(ctx, &sv);
    return p;
}

static void dfree(hoop_cuda_ctx_t *ctx, void *p)
{
    saved_t sv;
    if (p == NULL || enter(ctx, &sv) != 0) return;
    /* Every use is complete (the operations are synchronous), so no stream needs ordering. */
    if (ctx->pools)
        cudaFreeAsync(p, ctx->pool);
    else
        cudaFree(p);
    cudaGetLastError();
    leave(ctx, &sv);
}

static void *host_alloc(hoop_cuda_ctx_t *ctx, size_t bytes)
{
    saved_t sv;
    void *p = NULL;
    if (enter(ctx, &sv) != 0) return NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1,
                                  cudaHostAllocPortable | cudaHostAllocMapped);
    if (e != cudaSuccess) cudaGetLastError(); /* not left for the application */
    return made(ctx, &sv, "cudaHostAlloc", e, p);
}

static void host_free(hoop_cuda_ctx_t *ctx, void *p)
{
    if (p == NULL) return;
    held_t *h = malloc(sizeof *h);
    if (h == NULL) { /* no memory to keep it: freed now, at the cost of a device sync */
        saved_t sv;
        if (enter(ctx, &sv) == 0) {
            cudaFreeHost(p);
            leave(ctx, &sv);
        }
        return;
    }
    h->p = p;
    pthread_mutex_lock(&ctx->held_mu);
    h->next = ctx->held;
    ctx->held = h;
    pthread_mutex_unlock(&ctx->held_mu);
}

/* ---- streams and events ---- */

static void *stream_create(hoop_cuda_ctx_t *ctx)
{
    saved_t sv;
    cudaStream_t s = NULL;
    if (enter(ctx, &sv) != 0) return NULL;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    return made(ctx, &sv, "cudaStreamCreateWithFlags", e, s);
}

static void stream_destroy(hoop_cuda_ctx_t *ctx, void *stream)
{
    saved_t sv;
    if (stream == NULL || enter(ctx, &sv) != 0) return;
    cudaStreamDestroy((cudaStream_t)stream);
    leave(ctx, &sv);
}

static int stream_sync(hoop_cuda_ctx_t *ctx, void *stream)
{
    saved_t sv;
    if (enter(ctx, &sv) != 0) return -1;
    cudaError_t e = cudaStreamSynchronize(strm(stream));
    return left(ctx, &sv, "cudaStreamSynchronize", e);
}

static int copy_async(hoop_cuda_ctx_t *ctx, void *dst, const void *src, size_t n, void *stream)
{
    saved_t sv;
    if (n == 0) return 0;
    if (enter(ctx, &sv) != 0) return -1;
    cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, strm(stream));
    return left(ctx, &sv, "cudaMemcpyAsync", e);
}

static void *event_create(hoop_cuda_ctx_t *ctx)
{
    saved_t sv;
    cudaEvent_t ev = NULL;
    if (enter(ctx, &sv) != 0) return NULL;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    return made(ctx, &sv, "cudaEventCreateWithFlags", e, ev);
}

static void event_destroy(hoop_cuda_ctx_t *ctx, void *event)
{
    saved_t sv;
    if (event == NULL || enter(ctx, &sv) != 0) return;
    cudaEventDestroy((cudaEvent_t)event);
    leave(ctx, &sv);
}

/* On the legacy stream of the context's device (the calling thread's may be another's). */
static int event_record(hoop_cuda_ctx_t *ctx, void *event, void *stream)
{
    saved_t sv;
    if (enter(ctx, &sv) != 0) return -1;
    cudaError_t e = cudaEventRecord((cudaEvent_t)event, strm(stream));
    return left(ctx, &sv, "cudaEventRecord", e);
}

static int event_query(hoop_cuda_ctx_t *ctx, void *event)
{
    saved_t sv;
    if (enter(ctx, &sv) != 0) return -1;
    cudaError_t e = cudaEventQuery((cudaEvent_t)event);
    if (e == cudaErrorNotReady) cudaGetLastError();
    leave(ctx, &sv);
    if (e == cudaSuccess) return 1;
    if (e == cudaErrorNotReady) return 0;
    return failed(ctx, "cudaEventQuery", e);
}

static int stream_wait_event(hoop_cuda_ctx_t *ctx, void *stream, void *event)
{
    saved_t sv;
    if (enter(ctx, &sv) != 0) return -1;
    cudaError_t e = cudaStreamWaitEvent(strm(stream), (cudaEvent_t)event, 0);
    return left(ctx, &sv, "cudaStreamWaitEvent", e);
}

/* Where the driver has no stream memory operations: a host function on the stream that polls
 * the word. It calls no CUDA function, as host functions must not, and the word it waits for
 * depends on host work only (libhoop's stream-ordered calls run on the host), never on CUDA work
 * queued after it. */
typedef struct {
    const uint32_t *word;
    uint32_t value;
} word_wait_t;

static void CUDART_CB poll_word(void *arg)
{
    word_wait_t *w = arg;
    while ((int32_t)(__atomic_load_n(w->word, __ATOMIC_ACQUIRE) - w->value) < 0) {
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
    free(w);
}

static int stream_wait_word(hoop_cuda_ctx_t *ctx, void *stream, const uint32_t *word,
                            uint32_t value)
{
    saved_t sv;
    if (enter(ctx, &sv) != 0) return -1;
    int rc = 0, done = 0;
    if (ctx->wait_value != NULL) {
        void *dptr = NULL;
        cudaError_t e = cudaHostGetDevicePointer(&dptr, (void *)word, 0);
        if (e != cudaSuccess) {
            rc = failed(ctx, "cudaHostGetDevicePointer", e);
            done = 1;
        } else {
            CUresult r = ctx->wait_value((CUstream)strm(stream), (CUdeviceptr)(uintptr_t)dptr,
                                         value, CU_STREAM_WAIT_VALUE_GEQ);
            if (r == CUDA_SUCCESS) {
                done = 1;
            } else if (r != CUDA_ERROR_NOT_SUPPORTED) {
                say(ctx->err, sizeof ctx->err, "cuStreamWaitValue32: CUDA driver error %d", (int)r);
                rc = -1;
                done = 1;
            } else {
                ctx->wait_value = NULL; /* not on this device: the host function from now on */
            }
        }
    }
    if (!done) {
        word_wait_t *w = malloc(sizeof *w);
        if (w == NULL) {
            say(ctx->err, sizeof ctx->err, "out of memory");
            rc = -1;
        } else {
            w->word = word;
            w->value = value;
            cudaError_t e = cudaLaunchHostFunc(strm(stream), poll_word, w);
            if (e != cudaSuccess) {
                free(w);
                rc = failed(ctx, "cudaLaunchHostFunc", e);
            }
        }
    }
    leave(ctx, &sv);
    return rc;
}

static int stream_capturing(hoop_cuda_ctx_t *ctx, void *stream)
{
    saved_t sv;
    if (enter(ctx, &sv) != 0) return -1;
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(strm(stream), &st);
    leave(ctx, &sv);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return failed(ctx, "cudaStreamIsCapturing", e);
    }
    return st != cudaStreamCaptureStatusNone;
}

/* ---- IPC ---- */

_Static_assert(sizeof(cudaIpcMemHandle_t) <= HOOP__CUDA_IPC_HANDLE, "the handle must fit");

/* cudaMalloc, not the stream-ordered allocator: its memory cannot be exported this way. */
static void *ipc_alloc(hoop_cuda_ctx_t *ctx, size_t bytes, void *handle)
{
    saved_t sv;
    void *p = NULL;
    if (enter(ctx, &sv) != 0) return NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    cudaIpcMemHandle_t h;
    if (e == cudaSuccess) {
        e = cudaIpcGetMemHandle(&h, p);
        if (e != cudaSuccess) {
            cudaFree(p);
            p = NULL;
            failed(ctx, "cudaIpcGetMemHandle", e);
        } else {
            memset(handle, 0, HOOP__CUDA_IPC_HANDLE);
            memcpy(handle, &h, sizeof h);
        }
    } else {
        cudaGetLastError();
        failed(ctx, "cudaMalloc", e);
        p = NULL;
    }
    leave(ctx, &sv);
    return p;
}

/* With the communicator, when no call is in flight: cudaFree may synchronize the device. */
static void ipc_free(hoop_cuda_ctx_t *ctx, void *p)
{
    saved_t sv;
    if (p == NULL || enter(ctx, &sv) != 0) return;
    cudaFree(p);
    leave(ctx, &sv);
}

static void *ipc_open(hoop_cuda_ctx_t *ctx, const void *handle)
{
    saved_t sv;
    void *p = NULL;
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, sizeof h);
    if (enter(ctx, &sv) != 0) return NULL;
    cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) cudaGetLastError(); /* not left for the application */
    return made(ctx, &sv, "cudaIpcOpenMemHandle", e, p);
}

static void ipc_close(hoop_cuda_ctx_t *ctx, void *p)
{
    saved_t sv;
    if (p == NULL || enter(ctx, &sv) != 0) return;
    cudaIpcCloseMemHandle(p);
    leave(ctx, &sv);
}

/* ---- asynchronous kernels, IPC events ---- */

static int reduce_async(hoop_cuda_ctx_t *ctx, void *out, const void *a, const void *b, size_t count,
                        hoop_dtype_t dt, hoop_op_t op, void *stream)
{
    size_t es = esize(dt);
    if (count == 0 || es == 0) return 0;
    if (misaligned(out, es) || misaligned(a, es) || misaligned(b, es))
        return reduce(ctx, out, a, b, count, dt, op, stream);
    saved_t sv;
    if (enter(ctx, &sv) != 0) return -1;
    cudaError_t e = (cudaError_t)hoop_cuda_launch_reduce(out, a, b, count, dt, op, ctx->sms,
                                                         (void *)strm(stream));
    return left(ctx, &sv, "reduction kernel", e);
}

static int avg_finish_async(hoop_cuda_ctx_t *ctx, void *buf, size_t count, hoop_dtype_t dt,
                            int divisor, void *stream)
{
    size_t es = esize(dt);
    if (count == 0 || es == 0) return 0;
    if (misaligned(buf, es)) return avg_finish(ctx, buf, count, dt, divisor, stream);
    saved_t sv;
    if (enter(ctx, &sv) != 0) return -1;
    cudaError_t e = (cudaError_t)hoop_cuda_launch_avg(buf, count, dt, divisor, ctx->sms,
                                                      (void *)strm(stream));
    return left(ctx, &sv, "average kernel", e);
}

_Static_assert(sizeof(cudaIpcEventHandle_t) <= HOOP__CUDA_IPC_HANDLE, "the handle must fit");

static void *ipc_event_create(hoop_cuda_ctx_t *ctx, void *handle)
{
    saved_t sv;
    cudaEvent_t ev = NULL;
    if (enter(ctx, &sv) != 0) return NULL;
    /* Interprocess events must be made without timing. */
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventInterprocess);
    cudaIpcEventHandle_t h;
    if (e == cudaSuccess && (e = cudaIpcGetEventHandle(&h, ev)) != cudaSuccess) {
        cudaEventDestroy(ev);
        ev = NULL;
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        failed(ctx, "cudaEventCreateWithFlags(cudaEventInterprocess)", e);
        ev = NULL;
    } else {
        memset(handle, 0, HOOP__CUDA_IPC_HANDLE);
        memcpy(handle, &h, sizeof h);
    }
    leave(ctx, &sv);
    return ev;
}

static void *ipc_event_open(hoop_cuda_ctx_t *ctx, const void *handle)
{
    saved_t sv;
    cudaEvent_t ev = NULL;
    cudaIpcEventHandle_t h;
    memcpy(&h, handle, sizeof h);
    if (enter(ctx, &sv) != 0) return NULL;
    cudaError_t e = cudaIpcOpenEventHandle(&ev, h);
    if (e != cudaSuccess) cudaGetLastError(); /* not left for the application */
    return made(ctx, &sv, "cudaIpcOpenEventHandle", e, ev);
}

static const hoop_cuda_module_t table = {
    .abi = HOOP__CUDA_ABI,
    .size = sizeof(hoop_cuda_module_t),
    .name = HOOP__CUDA_MODULE_NAME,
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
    .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .stream_sync = stream_sync,
    .copy_async = copy_async,
    .event_create = event_create,
    .event_destroy = event_destroy,
    .event_record = event_record,
    .event_query = event_query,
    .stream_wait_event = stream_wait_event,
    .stream_wait_word = stream_wait_word,
    .ipc_alloc = ipc_alloc,
    .ipc_free = ipc_free,
    .ipc_open = ipc_open,
    .ipc_close = ipc_close,
    .reduce_async = reduce_async,
    .avg_finish_async = avg_finish_async,
    .ipc_event_create = ipc_event_create,
    .ipc_event_open = ipc_event_open,
    .stream_capturing = stream_capturing,
    .versions = versions,
};

EXPORT const hoop_cuda_module_t *hoop_cuda_module(void) { return &table; }
