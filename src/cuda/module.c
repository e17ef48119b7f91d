/* libhoop-cuda.so: the CUDA module's table (module.h) over the CUDA runtime, linked statically so
 * that the module needs nothing of the toolkit where it runs, only the driver (which the runtime
 * opens itself, at the first call). libhoop loads it only once the driver is in the process.
 *
 * The synchronous operations run on the stream they are given (the legacy default stream for
 * NULL: it starts after the work the application queued there and on the streams that
 * synchronize with it) and wait for that stream before returning, so they are complete in
 * memory, as the table promises. Streams, events, a stream's wait for a word that the host
 * sets (cuStreamWaitValue32) and asynchronous copies serve stream-ordered calls. Nothing here
 * synchronizes the whole device: frees of device memory are stream-ordered, pinned host memory
 * is freed with the context. */
#include <cuda.h>
#include <cuda_runtime_api.h>
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
 * device, which a stream-ordered call must never do (a stream may wait for that very call). */
typedef struct held {
    void *p;
    struct held *next;
} held_t;

typedef CUresult (*wait_value_fn)(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned flags);

struct hoop_cuda_ctx {
    int device;
    int sms;                  /* multiprocessors: the kernels' grids are sized to them */
    int pools;                /* the stream-ordered allocator is there (cudaMallocAsync) */
    cudaStream_t own;         /* the context's stream for allocations and frees */
    wait_value_fn wait_value; /* cuStreamWaitValue32, NULL where stream memory ops are missing */
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
static cudaStream_t strm(void *stream)
{
    return stream != NULL ? (cudaStream_t)stream : cudaStreamLegacy;
}

static int leave(hoop_cuda_ctx_t *ctx, int prev, int rc, void *stream)
{
    cudaError_t e = cudaStreamSynchronize(strm(stream));
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
    int prev = 0, pools = 0;
    cudaGetDevice(&prev);
    if (prev != device) cudaSetDevice(device);
    e = cudaStreamCreateWithFlags(&ctx->own, cudaStreamNonBlocking);
    if (e == cudaSuccess &&
        cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device) == cudaSuccess)
        ctx->pools = pools;
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault,
                                         &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
        ctx->wait_value = (wait_value_fn)fn;
    cudaGetLastError();
    if (prev != device) cudaSetDevice(prev);
    if (e != cudaSuccess) {
        say(err, errlen, "CUDA device %d: cudaStreamCreateWithFlags: %s (%s)", device,
            cudaGetErrorString(e), cudaGetErrorName(e));
        free(ctx);
        return NULL;
    }
    return ctx;
}

static void close_ctx(hoop_cuda_ctx_t *ctx)
{
    cudaStreamSynchronize(ctx->own);
    cudaStreamDestroy(ctx->own);
    for (held_t *h = ctx->held, *n; h != NULL; h = n) {
        n = h->next;
        cudaFreeHost(h->p);
        free(h);
    }
    free(ctx);
}

static const char *error(const hoop_cuda_ctx_t *ctx) { return ctx->err; }

/* ---- operations ---- */

static int copy(hoop_cuda_ctx_t *ctx, void *dst, const void *src, size_t n, void *stream)
{
    int prev;
    if (n == 0 || dst == src) return 0;
    if (enter(ctx, &prev) != 0) return -1;
    cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, strm(stream));
    return leave(ctx, prev, e == cudaSuccess ? 0 : failed(ctx, "cudaMemcpyAsync", e), stream);
}

static void *alloc(hoop_cuda_ctx_t *ctx, size_t bytes);
static void dfree(hoop_cuda_ctx_t *ctx, void *p);

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
    int prev;
    if (enter(ctx, &prev) != 0) return -1;
    cudaError_t e = (cudaError_t)hoop_cuda_launch_reduce(out, a, b, count, dt, op, ctx->sms,
                                                         (void *)strm(stream));
    return leave(ctx, prev, e == cudaSuccess ? 0 : failed(ctx, "reduction kernel", e), stream);
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
    int prev;
    if (enter(ctx, &prev) != 0) return -1;
    cudaError_t e = (cudaError_t)hoop_cuda_launch_avg(buf, count, dt, divisor, ctx->sms,
                                                      (void *)strm(stream));
    return leave(ctx, prev, e == cudaSuccess ? 0 : failed(ctx, "average kernel", e), stream);
}

static void *alloc(hoop_cuda_ctx_t *ctx, size_t bytes)
{
    int prev;
    void *p = NULL;
    if (enter(ctx, &prev) != 0) return NULL;
    /* Stream-ordered where the device has pools, so that the free never synchronizes the
     * device; ready for any stream once the context's stream has it. */
    cudaError_t e = ctx->pools ? cudaMallocAsync(&p, bytes ? bytes : 1, ctx->own)
                               : cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaSuccess && ctx->pools) e = cudaStreamSynchronize(ctx->own);
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
    /* Every use is complete (the operations are synchronous), so no stream needs ordering. */
    if (ctx->pools)
        cudaFreeAsync(p, ctx->own);
    else
        cudaFree(p);
    if (prev != ctx->device) cudaSetDevice(prev);
}

static void *host_alloc(hoop_cuda_ctx_t *ctx, size_t bytes)
{
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1,
                                  cudaHostAllocPortable | cudaHostAllocMapped);
    if (e != cudaSuccess) {
        cudaGetLastError();
        failed(ctx, "cudaHostAlloc", e);
        return NULL;
    }
    return p;
}

static void host_free(hoop_cuda_ctx_t *ctx, void *p)
{
    if (p == NULL) return;
    held_t *h = malloc(sizeof *h);
    if (h == NULL) { /* no memory to keep it: freed now, at the cost of a device sync */
        cudaFreeHost(p);
        return;
    }
    h->p = p;
    h->next = ctx->held;
    ctx->held = h;
}

/* ---- streams and events ---- */

static void *stream_create(hoop_cuda_ctx_t *ctx)
{
    int prev;
    cudaStream_t s = NULL;
    if (enter(ctx, &prev) != 0) return NULL;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        failed(ctx, "cudaStreamCreateWithFlags", e);
        s = NULL;
    }
    if (prev != ctx->device) cudaSetDevice(prev);
    return s;
}

static void stream_destroy(hoop_cuda_ctx_t *ctx, void *stream)
{
    (void)ctx;
    if (stream != NULL) cudaStreamDestroy((cudaStream_t)stream);
}

static int stream_sync(hoop_cuda_ctx_t *ctx, void *stream)
{
    cudaError_t e = cudaStreamSynchronize(strm(stream));
    return e == cudaSuccess ? 0 : failed(ctx, "cudaStreamSynchronize", e);
}

static int copy_async(hoop_cuda_ctx_t *ctx, void *dst, const void *src, size_t n, void *stream)
{
    int prev;
    if (n == 0) return 0;
    if (enter(ctx, &prev) != 0) return -1;
    cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, strm(stream));
    if (prev != ctx->device) cudaSetDevice(prev);
    return e == cudaSuccess ? 0 : failed(ctx, "cudaMemcpyAsync", e);
}

static void *event_create(hoop_cuda_ctx_t *ctx)
{
    int prev;
    cudaEvent_t ev = NULL;
    if (enter(ctx, &prev) != 0) return NULL;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        failed(ctx, "cudaEventCreateWithFlags", e);
        ev = NULL;
    }
    if (prev != ctx->device) cudaSetDevice(prev);
    return ev;
}

static void event_destroy(hoop_cuda_ctx_t *ctx, void *event)
{
    (void)ctx;
    if (event != NULL) cudaEventDestroy((cudaEvent_t)event);
}

static int event_record(hoop_cuda_ctx_t *ctx, void *event, void *stream)
{
    cudaError_t e = cudaEventRecord((cudaEvent_t)event, strm(stream));
    return e == cudaSuccess ? 0 : failed(ctx, "cudaEventRecord", e);
}

static int event_query(hoop_cuda_ctx_t *ctx, void *event)
{
    cudaError_t e = cudaEventQuery((cudaEvent_t)event);
    if (e == cudaSuccess) return 1;
    if (e == cudaErrorNotReady) {
        cudaGetLastError();
        return 0;
    }
    return failed(ctx, "cudaEventQuery", e);
}

static int stream_wait_event(hoop_cuda_ctx_t *ctx, void *stream, void *event)
{
    cudaError_t e = cudaStreamWaitEvent(strm(stream), (cudaEvent_t)event, 0);
    return e == cudaSuccess ? 0 : failed(ctx, "cudaStreamWaitEvent", e);
}

/* Where the driver has no stream memory operations: a host function on the stream that polls
 * the word (it holds up the runtime's callback thread meanwhile, which is why it is only the
 * fallback). It calls no CUDA function, as host functions must not. */
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
    if (ctx->wait_value != NULL) {
        void *dptr = NULL;
        cudaError_t e = cudaHostGetDevicePointer(&dptr, (void *)word, 0);
        if (e != cudaSuccess) return failed(ctx, "cudaHostGetDevicePointer", e);
        CUresult r = ctx->wait_value((CUstream)strm(stream), (CUdeviceptr)(uintptr_t)dptr, value,
                                     CU_STREAM_WAIT_VALUE_GEQ);
        if (r == CUDA_SUCCESS) return 0;
        if (r != CUDA_ERROR_NOT_SUPPORTED) {
            say(ctx->err, sizeof ctx->err, "cuStreamWaitValue32: CUDA driver error %d", (int)r);
            return -1;
        }
        ctx->wait_value = NULL; /* not on this device: the host function from now on */
    }
    word_wait_t *w = malloc(sizeof *w);
    if (w == NULL) {
        say(ctx->err, sizeof ctx->err, "out of memory");
        return -1;
    }
    w->word = word;
    w->value = value;
    cudaError_t e = cudaLaunchHostFunc(strm(stream), poll_word, w);
    if (e != cudaSuccess) {
        free(w);
        return failed(ctx, "cudaLaunchHostFunc", e);
    }
    return 0;
}

/* ---- IPC ---- */

_Static_assert(sizeof(cudaIpcMemHandle_t) <= HOOP__CUDA_IPC_HANDLE, "the handle must fit");

/* cudaMalloc, not the stream-ordered allocator: its memory cannot be exported this way. */
static void *ipc_alloc(hoop_cuda_ctx_t *ctx, size_t bytes, void *handle)
{
    int prev;
    void *p = NULL;
    if (enter(ctx, &prev) != 0) return NULL;
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
    if (prev != ctx->device) cudaSetDevice(prev);
    return p;
}

/* With the communicator, when no call is in flight: cudaFree may synchronize the device. */
static void ipc_free(hoop_cuda_ctx_t *ctx, void *p)
{
    int prev;
    if (p == NULL || enter(ctx, &prev) != 0) return;
    cudaFree(p);
    if (prev != ctx->device) cudaSetDevice(prev);
}

static void *ipc_open(hoop_cuda_ctx_t *ctx, const void *handle)
{
    int prev;
    void *p = NULL;
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, sizeof h);
    if (enter(ctx, &prev) != 0) return NULL;
    cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
        cudaGetLastError();
        failed(ctx, "cudaIpcOpenMemHandle", e);
        p = NULL;
    }
    if (prev != ctx->device) cudaSetDevice(prev);
    return p;
}

static void ipc_close(hoop_cuda_ctx_t *ctx, void *p)
{
    int prev;
    if (p == NULL || enter(ctx, &prev) != 0) return;
    cudaIpcCloseMemHandle(p);
    if (prev != ctx->device) cudaSetDevice(prev);
}

/* ---- asynchronous kernels, IPC events ---- */

static int reduce_async(hoop_cuda_ctx_t *ctx, void *out, const void *a, const void *b,
                        size_t count, hoop_dtype_t dt, hoop_op_t op, void *stream)
{
    size_t es = esize(dt);
    if (count == 0 || es == 0) return 0;
    if (misaligned(out, es) || misaligned(a, es) || misaligned(b, es))
        return reduce(ctx, out, a, b, count, dt, op, stream);
    int prev;
    if (enter(ctx, &prev) != 0) return -1;
    cudaError_t e = (cudaError_t)hoop_cuda_launch_reduce(out, a, b, count, dt, op, ctx->sms,
                                                         (void *)strm(stream));
    int rc = e == cudaSuccess ? 0 : failed(ctx, "reduction kernel", e);
    if (prev != ctx->device) cudaSetDevice(prev);
    return rc;
}

static int avg_finish_async(hoop_cuda_ctx_t *ctx, void *buf, size_t count, hoop_dtype_t dt,
                            int divisor, void *stream)
{
    size_t es = esize(dt);
    if (count == 0 || es == 0) return 0;
    if (misaligned(buf, es)) return avg_finish(ctx, buf, count, dt, divisor, stream);
    int prev;
    if (enter(ctx, &prev) != 0) return -1;
    cudaError_t e = (cudaError_t)hoop_cuda_launch_avg(buf, count, dt, divisor, ctx->sms,
                                                      (void *)strm(stream));
    int rc = e == cudaSuccess ? 0 : failed(ctx, "average kernel", e);
    if (prev != ctx->device) cudaSetDevice(prev);
    return rc;
}

_Static_assert(sizeof(cudaIpcEventHandle_t) <= HOOP__CUDA_IPC_HANDLE, "the handle must fit");

static void *ipc_event_create(hoop_cuda_ctx_t *ctx, void *handle)
{
    int prev;
    cudaEvent_t ev = NULL;
    if (enter(ctx, &prev) != 0) return NULL;
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
    if (prev != ctx->device) cudaSetDevice(prev);
    return ev;
}

static void *ipc_event_open(hoop_cuda_ctx_t *ctx, const void *handle)
{
    int prev;
    cudaEvent_t ev = NULL;
    cudaIpcEventHandle_t h;
    memcpy(&h, handle, sizeof h);
    if (enter(ctx, &prev) != 0) return NULL;
    cudaError_t e = cudaIpcOpenEventHandle(&ev, h);
    if (e != cudaSuccess) {
        cudaGetLastError();
        failed(ctx, "cudaIpcOpenEventHandle", e);
        ev = NULL;
    }
    if (prev != ctx->device) cudaSetDevice(prev);
    return ev;
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
};

EXPORT const hoop_cuda_module_t *hoop_cuda_module(void) { return &table; }
