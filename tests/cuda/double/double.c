/* The CUDA runtime TEST DOUBLE: the part of the CUDA runtime and driver APIs that the CUDA module
 * (src/cuda/module.c) calls, implemented on the host, so that the module's own code runs in
 * tests on machines without a GPU. libhoop-cuda-double.so is module.c built against the stand-in
 * headers of include/ and linked with this file instead of the CUDA runtime and kernels.cu; it is
 * never installed. docs/cuda.md ("The CUDA runtime test double") says what it models and why.
 *
 * What it models, each because a defect passed CI where the double was kinder than CUDA:
 *  - devices (HOOP_CUDA_DOUBLE_DEVICES, default 2), a current context per thread, and primary
 *    contexts made only by the calls that make them (cudaSetDevice, cuDevicePrimaryCtxRetain, and
 *    any call that needs a context when the thread has none: on its current device, 0 unless set;
 *    cudaPointerGetAttributes is one), counted (hoop_cuda_double_contexts);
 *  - compute modes: a device in EXCLUSIVE_PROCESS mode takes a context of one process only;
 *  - the legacy default stream of each device, which waits for the work queued before on its
 *    blocking streams, and they for its;
 *  - asynchronous copies to or from pageable host memory, which complete before they return;
 *  - a limited number of hardware queues per context (CUDA_DEVICE_MAX_CONNECTIONS, default 8):
 *    streams are given one at creation, round robin, and a queue runs its streams' work in the
 *    order it was queued, so a stream parked on a wait holds up every stream behind it there;
 *  - allocations (cudaMalloc, cudaHostAlloc, IPC opens) that order later work of every stream
 *    after the work queued before them, and frees (cudaFree, cudaFreeHost) that wait for the
 *    device: the programming guide's implicit synchronization, read strictly;
 *  - freeing memory that another live process has open from its IPC handle (undefined in CUDA):
 *    the exporter aborts, naming the importer, and so does the importer's later access;
 *  - stream capture: captured work is not run but kept for graph replay; calls that CUDA forbids
 *    during a capture (per the thread's capture interaction mode) fail and invalidate it;
 *  - a driver older than the runtime (HOOP_CUDA_DOUBLE_DRIVER): the runtime's calls fail.
 *
 * Device memory lives in an arena mapped twice from one memfd: the addresses handed out belong to
 * a PROT_NONE mapping, so host code that dereferences a device pointer faults at once (as on a
 * GPU), while the double's copies and kernels reach the same pages through a private read-write
 * alias. Every operation checks its device ranges against the live allocations and aborts the
 * process naming the culprit when one is out of bounds or freed, or a kernel is given pageable
 * host memory. A queue's worker sleeps a random while before each copy or kernel
 * (HOOP_CUDA_DOUBLE_DELAY_US, default 2000), so that unordered work shows as wrong results, and
 * a wait that lasts HOOP_CUDA_DOUBLE_WAIT_S (default 120) aborts, describing every blocked queue,
 * where a GPU would hang. IPC handles name the arena's memfd through /proc so that another
 * process maps the allocation. The kernels are the CPU reductions. Also exports the driver's
 * cuPointerGetAttribute, so that it can stand for the driver (HOOP_TEST_CUDA_DRIVER).
 *
 * Testing knobs: HOOP_CUDA_DOUBLE_BYTES (arena), HOOP_CUDA_DOUBLE_FAIL=N (the Nth queued
 * operation fails; hoop_cuda_double_fail_in), HOOP_CUDA_DOUBLE_NODRIVER=1 (a driver too old),
 * HOOP_CUDA_DOUBLE_EXCLUSIVE=DEVS@KEY (those devices in EXCLUSIVE_PROCESS mode among the
 * processes that give KEY), HOOP_CUDA_DOUBLE_NOWAITVALUE=1 (no stream memory operations). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cuda.h"
#include "cuda/kernels.h"
#include "cuda_runtime_api.h"
#include "reduce/reduce.h"

#define EXPORT __attribute__((visibility("default")))
#define ALIGN 256 /* what cudaMalloc guarantees */
#define MAX_BLOCKS 65536
#define MAX_DEVICES 8
#define MAX_QUEUES 32
#define RUNTIME_VERSION 13000

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

/* ---- state ---- */

typedef struct op op_t;
typedef struct hwq hwq_t;

/* A capture sequence on one stream (cudaStreamBeginCapture to cudaStreamEndCapture). */
typedef struct capture {
    struct CUstream_st *s;
    enum cudaStreamCaptureMode mode;
    enum cudaStreamCaptureStatus status;
    pthread_t owner;
    struct CUgraph_st *graph;
    struct capture *next;
} capture_t;

struct CUctx_st { /* a device's primary context */
    int device;
    int made;
    int nq;
    hwq_t *q[MAX_QUEUES];
    unsigned next_q;
    struct CUstream_st *legacy;
    struct CUstream_st *streams; /* every stream of the context, the legacy one included */
};

struct CUstream_st {
    uint32_t magic;
    struct CUctx_st *ctx;
    hwq_t *q;
    int blocking; /* synchronizes with the legacy stream (cudaStreamDefault) */
    int legacy;
    uint64_t queued, done;
    uint64_t barrier; /* work queued before an allocation: later work of any stream waits for it */
    int dying;        /* destroyed: a wait of its that never ends gives up (a peer died) */
    int dropping;     /* a wait gave up: its later work is dropped */
    capture_t *cap;
    struct CUstream_st *next;
};

/* An event's counters: in the event, or for an IPC event in a page of its own memfd that other
 * processes map from its handle. */
typedef struct ev_counts {
    _Atomic uint64_t recorded, reached;
} ev_counts_t;

struct CUevent_st {
    uint32_t magic;
    struct CUctx_st *ctx;
    int interprocess;
    int opened; /* another process's IPC event: only waited for and queried here */
    int fd;
    uint64_t serial;
    capture_t *captured; /* its latest record is a node of this capture */
    int refs;            /* queued operations that use it, plus its owner until destroyed */
    ev_counts_t *c;
    ev_counts_t own;
};

enum {
    OP_COPY,
    OP_REDUCE,
    OP_AVG,
    OP_HOST_FN,
    OP_RECORD,
    OP_WAIT_EVENT,
    OP_WAIT_WORD,
    OP_FREE,
    OP_MARK
};
static const char *const op_name[] = {"copy",          "reduction kernel",    "average kernel",
                                      "host function", "event record",        "event wait",
                                      "word wait",     "stream-ordered free", "marker"};

typedef struct pre {
    struct CUstream_st *s;
    uint64_t seq;
} pre_t;

struct op {
    int kind;
    struct CUstream_st *s;
    uint64_t seq;
    int npre;
    pre_t *pre;
    int dir; /* OP_COPY: D2H, H2D or OTHER, for the copy counts */
    void *dst;
    const void *src, *src2;
    size_t n;
    hoop_dtype_t dt;
    hoop_op_t rop;
    int divisor;
    struct CUevent_st *ev;
    uint64_t gen;
    const uint32_t *word;
    uint32_t value;
    cudaHostFn_t fn;
    void *arg;
    op_t *next;
};

struct hwq {
    struct CUctx_st *ctx;
    int index;
    op_t *head, *tail, *running;
    pthread_cond_t cv;
    unsigned seed;
};

struct CUgraph_st {
    op_t *head, *tail;
};
struct CUgraphExec_st {
    struct CUgraph_st g;
};

typedef struct block {
    size_t off, size;
    int device;
    int pool; /* from cudaMallocAsync: not exportable over IPC */
    int xrec; /* its export record + 1 (given an IPC handle), or 0 */
} block_t;

/* Who has an exported allocation open: one record per allocation given an IPC handle, in a
 * memfd of the exporter's (g.xfd) that importers map through /proc as they map the memory. An
 * importer puts its pid in a slot when it opens the handle and clears it when it closes; a dead
 * process's pid (or a zombie's) does not count, as its mappings went with it. */
#define XRECS 1024
#define XPIDS 14
typedef struct xrec {
    _Atomic uint64_t serial; /* the first handle's: 0 while the record is unused */
    _Atomic int32_t freed;   /* the exporter freed the allocation */
    _Atomic int32_t pid[XPIDS];
} xrec_t;

typedef struct pinned {
    char *p;
    size_t size;
    int mapped;
} pinned_t;

static struct {
    pthread_once_t once;
    pthread_mutex_t mu; /* all of the state, every stream's counts and every queue */
    pthread_cond_t cv;  /* some stream's done count moved */
    int ndevices, nqueues, driver, no_waitvalue;
    unsigned exclusive; /* devices in EXCLUSIVE_PROCESS mode (bits) */
    char exclusive_key[64];
    long delay_us, wait_s;
    int initialized;
    long fail_in;
    struct CUctx_st ctx[MAX_DEVICES];
    int made[MAX_DEVICES];   /* primary contexts made in this process, by device */
    int lockfd[MAX_DEVICES]; /* an exclusive device's lock, held while the context lives */
    char *dev, *alias;       /* the arena: handed out (PROT_NONE), and the double's view */
    size_t bytes;
    int fd;
    block_t blocks[MAX_BLOCKS]; /* live allocations, sorted by offset */
    int xfd;                    /* the export records' memfd, made by the first handle */
    xrec_t *xrecs;
    int nxrecs;
    int nblocks;
    uint64_t serial;
    struct {
        char *dev, *alias, *map;
        size_t size, maplen;
        int device;
        xrec_t *xmap, *rec; /* the exporter's records mapped here, and this allocation's */
        int slot;           /* where this process's pid is in it */
    } imports[1024];
    int nimports;
    pinned_t *pinned;
    int npinned, cappinned;
    capture_t *captures; /* active or invalidated, until their end */
} g = {.once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static __thread struct CUctx_st *tl_ctx;            /* the thread's current context */
static __thread int tl_dev;                         /* its current device while it has no context */
static __thread enum cudaStreamCaptureMode tl_mode; /* cudaThreadExchangeStreamCaptureMode */
static __thread int tl_in_host_fn;
static __thread cudaError_t tl_last;

/* Asynchronous copies queued and not done yet, by direction (device to host, host to device),
 * the most there were at once, and how many were queued while one of the other direction was in
 * flight: what the staging's pipelining test reads (hoop_cuda_double_copy_stats). */
enum { D2H, H2D, OTHER };
static struct {
    _Atomic long inflight[2], most[2], crossed;
} copies;

#define STREAM_MAGIC 0x5354524du
#define EVENT_MAGIC 0x4556454eu
#define DEAD_MAGIC 0xdeadu

static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? strtol(v, NULL, 0) : dflt;
}

static void pause_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static void setup(void)
{
    g.bytes = (size_t)env_long("HOOP_CUDA_DOUBLE_BYTES", (long)2 << 30);
    g.fail_in = env_long("HOOP_CUDA_DOUBLE_FAIL", 0);
    g.ndevices = (int)env_long("HOOP_CUDA_DOUBLE_DEVICES", 2);
    if (g.ndevices < 1 || g.ndevices > MAX_DEVICES) g.ndevices = 2;
    g.nqueues = (int)env_long("CUDA_DEVICE_MAX_CONNECTIONS", 8);
    if (g.nqueues < 1 || g.nqueues > MAX_QUEUES) g.nqueues = 8;
    g.driver = (int)env_long("HOOP_CUDA_DOUBLE_DRIVER", RUNTIME_VERSION);
    if (getenv("HOOP_CUDA_DOUBLE_NODRIVER") != NULL) g.driver = 12020;
    g.no_waitvalue = getenv("HOOP_CUDA_DOUBLE_NOWAITVALUE") != NULL;
    g.delay_us = env_long("HOOP_CUDA_DOUBLE_DELAY_US", 2000);
    g.wait_s = env_long("HOOP_CUDA_DOUBLE_WAIT_S", 120);
    const char *x = getenv("HOOP_CUDA_DOUBLE_EXCLUSIVE"); /* "0,1@key" */
    if (x != NULL) {
        const char *at = strchr(x, '@');
        for (const char *p = x; *p != '\0' && p != at; p++)
            if (*p >= '0' && *p <= '9' && *p - '0' < MAX_DEVICES) g.exclusive |= 1u << (*p - '0');
        snprintf(g.exclusive_key, sizeof g.exclusive_key, "%s", at != NULL ? at + 1 : "");
    }
    for (int d = 0; d < MAX_DEVICES; d++) {
        g.ctx[d].device = d;
        g.lockfd[d] = -1;
    }
    int fd = memfd_create("hoop-cuda-double", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)g.bytes) != 0) die("cannot make the device arena");
    g.dev = mmap(NULL, g.bytes, PROT_NONE, MAP_SHARED, fd, 0);
    g.alias = mmap(NULL, g.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (g.dev == MAP_FAILED || g.alias == MAP_FAILED) die("cannot map the device arena");
    g.fd = fd;
}

static void init(void) { pthread_once(&g.once, setup); }

/* ---- errors ---- */

static cudaError_t ret(cudaError_t e)
{
    if (e != cudaSuccess) tl_last = e;
    return e;
}

/* The runtime's calls fail with a driver older than it, as the real one's do. */
static int driver_ok(void)
{
    init();
    return g.driver >= RUNTIME_VERSION;
}

#define RUNTIME_ENTRY()                                                                            \
    do {                                                                                           \
        if (!driver_ok()) return ret(cudaErrorInsufficientDriver);                                 \
        if (tl_in_host_fn) return ret(cudaErrorNotPermitted);                                      \
        g.initialized = 1;                                                                         \
    } while (0)

/* The injected failure, when its turn comes. */
static int injected(void)
{
    pthread_mutex_lock(&g.mu);
    int fail = g.fail_in > 0 && --g.fail_in == 0;
    pthread_mutex_unlock(&g.mu);
    return fail;
}

EXPORT const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorDevicesUnavailable: return "cudaErrorDevicesUnavailable";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorNotPermitted: return "cudaErrorNotPermitted";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    case cudaErrorUnknown: return "cudaErrorUnknown";
    }
    return "cudaErrorUnknown";
}

EXPORT const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInsufficientDriver:
        return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorDevicesUnavailable: return "CUDA-capable device(s) is/are busy or unavailable";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorNotPermitted: return "operation not permitted";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorStreamCaptureUnsupported:
        return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureIsolation:
        return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorStreamCaptureImplicit:
        return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorUnknown: return "injected failure (HOOP_CUDA_DOUBLE_FAIL)";
    }
    return "unknown error";
}

EXPORT cudaError_t cudaGetLastError(void)
{
    cudaError_t e = tl_last;
    tl_last = cudaSuccess;
    return e;
}

EXPORT cudaError_t cudaDriverGetVersion(int *v)
{
    init();
    *v = g.driver;
    return cudaSuccess;
}

EXPORT cudaError_t cudaRuntimeGetVersion(int *v)
{
    *v = RUNTIME_VERSION;
    return cudaSuccess;
}

/* ---- contexts ---- */

static hwq_t *queue_new(struct CUctx_st *c, int index);

/* EXCLUSIVE_PROCESS: one process's context at a time, among the processes that name the same
 * key (an abstract socket's name is the lock: the kernel frees it when the process goes). */
static int exclusive_take(int d)
{
    if (!(g.exclusive & (1u << d)) || g.lockfd[d] >= 0) return 0;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) die("cannot make the exclusive device's lock");
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int n = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "hoop-cuda-double/%s/%d",
                     g.exclusive_key, d);
    if (bind(fd, (struct sockaddr *)&a,
             (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)) != 0) {
        close(fd);
        return -1;
    }
    g.lockfd[d] = fd;
    return 0;
}

/* Makes device d's primary context if it is not made yet. Under mu. */
static cudaError_t ctx_make(int d, struct CUctx_st **out)
{
    if (d < 0 || d >= g.ndevices) return cudaErrorInvalidDevice;
    struct CUctx_st *c = &g.ctx[d];
    if (!c->made) {
        if (exclusive_take(d) != 0) return cudaErrorDevicesUnavailable;
        c->nq = g.nqueues;
        for (int i = 0; i < c->nq; i++) c->q[i] = queue_new(c, i);
        struct CUstream_st *s = calloc(1, sizeof *s);
        if (s == NULL) die("out of host memory");
        s->magic = STREAM_MAGIC;
        s->ctx = c;
        s->legacy = 1;
        s->q = c->q[c->next_q++ % (unsigned)c->nq];
        c->legacy = s;
        c->streams = s;
        c->made = 1;
        g.made[d]++;
    }
    *out = c;
    return cudaSuccess;
}

/* The calling thread's context, made on its current device when it has none (what the runtime
 * does at any call that needs one). */
static cudaError_t need_ctx(struct CUctx_st **out)
{
    if (tl_ctx != NULL) {
        *out = tl_ctx;
        return cudaSuccess;
    }
    pthread_mutex_lock(&g.mu);
    cudaError_t e = ctx_make(tl_dev, out);
    pthread_mutex_unlock(&g.mu);
    if (e == cudaSuccess) tl_ctx = *out;
    return e;
}

EXPORT cudaError_t cudaGetDeviceCount(int *n)
{
    RUNTIME_ENTRY();
    *n = g.ndevices;
    return cudaSuccess;
}

EXPORT cudaError_t cudaGetDevice(int *d)
{
    RUNTIME_ENTRY();
    *d = tl_ctx != NULL ? tl_ctx->device : tl_dev;
    return cudaSuccess;
}

/* As CUDA 12 and later: makes the device's primary context at once, and current. */
EXPORT cudaError_t cudaSetDevice(int d)
{
    RUNTIME_ENTRY();
    struct CUctx_st *c;
    pthread_mutex_lock(&g.mu);
    cudaError_t e = ctx_make(d, &c);
    pthread_mutex_unlock(&g.mu);
    if (e != cudaSuccess) return ret(e);
    tl_ctx = c;
    tl_dev = d;
    return cudaSuccess;
}

EXPORT cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr attr, int d)
{
    RUNTIME_ENTRY();
    if (d < 0 || d >= g.ndevices) return ret(cudaErrorInvalidDevice);
    switch (attr) {
    case cudaDevAttrMultiProcessorCount: *v = 4; break;
    case cudaDevAttrComputeMode:
        *v = g.exclusive & (1u << d) ? cudaComputeModeExclusiveProcess : cudaComputeModeDefault;
        break;
    case cudaDevAttrMemoryPoolsSupported: *v = 1; break;
    default: return ret(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

/* ---- stream capture: what a thread may call meanwhile ---- */

/* Whether the calling thread is barred from a potentially unsafe call now (CUDA's rules for the
 * thread's capture interaction mode); if so the captures that bar it are invalidated. Under mu. */
static int barred_locked(void)
{
    if (tl_mode == cudaStreamCaptureModeRelaxed) return 0;
    int barred = 0;
    pthread_t self = pthread_self();
    for (capture_t *k = g.captures; k != NULL; k = k->next) {
        if (k->status != cudaStreamCaptureStatusActive || k->mode == cudaStreamCaptureModeRelaxed)
            continue;
        int mine = pthread_equal(k->owner, self);
        if (mine ||
            (tl_mode == cudaStreamCaptureModeGlobal && k->mode == cudaStreamCaptureModeGlobal)) {
            k->status = cudaStreamCaptureStatusInvalidated;
            barred = 1;
        }
    }
    return barred;
}

static int barred(void)
{
    pthread_mutex_lock(&g.mu);
    int b = barred_locked();
    pthread_mutex_unlock(&g.mu);
    return b;
}

EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
    RUNTIME_ENTRY();
    enum cudaStreamCaptureMode old = tl_mode;
    tl_mode = *mode;
    *mode = old;
    return cudaSuccess;
}

/* ---- memory ---- */

static int in_arena(const void *p)
{
    return (const char *)p >= g.dev && (const char *)p < g.dev + g.bytes;
}

/* The import holding p, or -1. Under mu. */
static int import_of(const void *p)
{
    for (int i = 0; i < g.nimports; i++)
        if ((const char *)p >= g.imports[i].dev &&
            (const char *)p < g.imports[i].dev + g.imports[i].size)
            return i;
    return -1;
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

/* The pinned allocation holding [p, p + n), or NULL. Under mu. */
static pinned_t *pinned_of(const void *p, size_t n)
{
    for (int i = 0; i < g.npinned; i++)
        if ((const char *)p >= g.pinned[i].p &&
            (const char *)p + n <= g.pinned[i].p + g.pinned[i].size)
            return &g.pinned[i];
    return NULL;
}

enum { MEM_PAGEABLE, MEM_PINNED, MEM_DEVICE };

/* What p is, and its device (device memory). Under mu. */
static int kind_of(const void *p, size_t n, int *device)
{
    if (in_arena(p)) {
        int k = find(p, 0);
        *device = k >= 0 ? g.blocks[k].device : -1;
        return MEM_DEVICE;
    }
    int i = import_of(p);
    if (i >= 0) {
        *device = g.imports[i].device;
        return MEM_DEVICE;
    }
    *device = -1;
    return pinned_of(p, n) != NULL ? MEM_PINNED : MEM_PAGEABLE;
}

/* What the double's code reads or writes for p: the alias of a device range (checked), or p. */
static char *reach(const void *p, size_t n, int kernel, const char *what)
{
    pthread_mutex_lock(&g.mu);
    char *a = NULL;
    if (in_arena(p)) {
        int k = find(p, n);
        if (k < 0)
            die("%s: %zu bytes at device address %p are not inside one live allocation", what, n,
                p);
        a = g.alias + ((const char *)p - g.dev);
    } else {
        int i = import_of(p);
        if (i >= 0) {
            if ((const char *)p + n > g.imports[i].dev + g.imports[i].size)
                die("%s: %zu bytes at %p run past the peer's memory opened there", what, n, p);
            if (atomic_load(&g.imports[i].rec->freed))
                die("%s: %zu bytes at %p: memory opened from an IPC handle that its exporter has "
                    "freed since",
                    what, n, p);
            a = g.imports[i].alias + ((const char *)p - g.imports[i].dev);
        } else {
            pinned_t *pp = pinned_of(p, n);
            if (kernel && (pp == NULL || !pp->mapped))
                die("%s: %p is host memory that is not mapped for the device, which a kernel "
                    "cannot read",
                    what, p);
            a = (char *)p;
        }
    }
    pthread_mutex_unlock(&g.mu);
    return a;
}

/* A block of device d: first fit between live blocks, with a gap of ALIGN after each so that an
 * overrun of one never lands in the next. Fresh memory holds garbage (0xdb), not zeros. */
static void *block_alloc(size_t bytes, size_t align, int d, int pool)
{
    init();
    size_t size = bytes ? bytes : 1;
    pthread_mutex_lock(&g.mu);
    size_t at = 0;
    int i = 0;
    for (; i < g.nblocks; i++) {
        at = (at + align - 1) / align * align;
        if (at + size + ALIGN <= g.blocks[i].off) break;
        at = (g.blocks[i].off + g.blocks[i].size + 2 * ALIGN - 1) / ALIGN * ALIGN;
    }
    at = (at + align - 1) / align * align;
    if (g.nblocks == MAX_BLOCKS || at + size > g.bytes) {
        pthread_mutex_unlock(&g.mu);
        return NULL;
    }
    memmove(&g.blocks[i + 1], &g.blocks[i], (size_t)(g.nblocks - i) * sizeof(block_t));
    g.blocks[i] = (block_t){at, size, d, pool, 0};
    g.nblocks++;
    pthread_mutex_unlock(&g.mu);
    memset(g.alias + at, 0xdb, size);
    return g.dev + at;
}

/* Under mu. */
/* Whether process pid has ended (gone, or a zombie). */
static int process_ended(int32_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 1;
    buf[n] = '\0';
    const char *st = strrchr(buf, ')');
    return st != NULL && st[1] == ' ' && (st[2] == 'Z' || st[2] == 'X');
}

/* The exporter frees an allocation other processes opened from its IPC handle: CUDA leaves that
 * undefined while any of them still has it open (its next access faults), so a live importer
 * aborts the exporter, naming both, and its own later accesses abort too (freed). Under mu. */
static void export_freed(void *p, xrec_t *r, const char *what)
{
    atomic_store(&r->freed, 1);
    for (int i = 0; i < XPIDS; i++) {
        int32_t pid = atomic_load(&r->pid[i]);
        if (pid != 0 && !process_ended(pid))
            die("%s of %p, exported over IPC, while process %d still has it open "
                "(cudaIpcOpenMemHandle without cudaIpcCloseMemHandle): undefined in CUDA, and that "
                "process's next access faults",
                what, p, (int)pid);
    }
}

static void block_free(void *p, const char *what)
{
    if (!in_arena(p)) die("%s of %p, which is not device memory of this process", what, p);
    int k = find(p, 0);
    if (k < 0 || g.dev + g.blocks[k].off != (char *)p)
        die("%s of %p, which is not an allocation", what, p);
    block_t b = g.blocks[k];
    if (b.xrec > 0) export_freed(p, &g.xrecs[b.xrec - 1], what);
    /* The pages go back while the block is still taken: once it is not, another thread may
     * allocate it and write there. */
    size_t first = (b.off + 4095) / 4096 * 4096, last = (b.off + b.size) / 4096 * 4096;
    if (last > first) madvise(g.alias + first, last - first, MADV_REMOVE);
    memmove(&g.blocks[k], &g.blocks[k + 1], (size_t)(g.nblocks - k - 1) * sizeof(block_t));
    g.nblocks--;
}

/* ---- hardware queues and streams ----
 * A queue is a worker thread running, in the order they were queued, the operations of the
 * streams given to it. An operation first waits for its preconditions (the legacy stream's
 * implicit synchronization, an allocation's ordering), then for what it waits for itself. */

static const char *stream_name(const struct CUstream_st *s, char *buf, size_t n)
{
    if (s->legacy)
        snprintf(buf, n, "device %d's legacy stream", s->ctx->device);
    else
        snprintf(buf, n, "stream %p of device %d", (const void *)s, s->ctx->device);
    return buf;
}

/* Every queue that is held up, for a wait that gave up. Under mu. */
static void describe_queues(char *out, size_t n)
{
    size_t len = 0;
    out[0] = '\0';
    for (int d = 0; d < g.ndevices; d++) {
        struct CUctx_st *c = &g.ctx[d];
        if (!c->made) continue;
        for (int i = 0; i < c->nq; i++) {
            hwq_t *q = c->q[i];
            op_t *o = q->running;
            if (o == NULL || len + 200 > n) continue;
            char sn[64];
            int w = snprintf(out + len, n - len, "\n  device %d queue %d: %s of %s", d, i,
                             op_name[o->kind], stream_name(o->s, sn, sizeof sn));
            if (w > 0) len += (size_t)w;
            if (o->kind == OP_WAIT_WORD && len < n) {
                w = snprintf(out + len, n - len, " (word %p is %u, waits for %u)",
                             (const void *)o->word, __atomic_load_n(o->word, __ATOMIC_ACQUIRE),
                             o->value);
                if (w > 0) len += (size_t)w;
            }
            int behind = 0;
            for (op_t *b = q->head; b != NULL; b = b->next) behind++;
            if (behind > 0 && len < n) {
                w = snprintf(out + len, n - len, ", %d operation(s) queued behind it", behind);
                if (w > 0) len += (size_t)w;
            }
        }
    }
}

static void give_up(const char *what) __attribute__((noreturn));
static void give_up(const char *what)
{
    char desc[4096];
    pthread_mutex_lock(&g.mu);
    describe_queues(desc, sizeof desc);
    pthread_mutex_unlock(&g.mu);
    die("%s: still waiting after %ld s; a GPU would hang here. Held-up queues:%s", what, g.wait_s,
        desc[0] ? desc : " none");
}

/* Waits until s has done seq; 0 if s's work was dropped meanwhile. Under mu. */
static void wait_done_locked(struct CUstream_st *s, uint64_t seq, const char *what)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += g.wait_s;
    while (s->done < seq) {
        if (pthread_cond_timedwait(&g.cv, &g.mu, &until) == ETIMEDOUT && s->done < seq) {
            pthread_mutex_unlock(&g.mu);
            give_up(what);
        }
    }
}

static void copy_queued(int dir)
{
    if (dir == OTHER) return;
    long now = atomic_fetch_add(&copies.inflight[dir], 1) + 1;
    long most = atomic_load(&copies.most[dir]);
    while (now > most && !atomic_compare_exchange_weak(&copies.most[dir], &most, now)) {
    }
    if (atomic_load(&copies.inflight[!dir]) > 0) atomic_fetch_add(&copies.crossed, 1);
}

static void event_unref_locked(struct CUevent_st *e);

/* Polls until the counter reaches target or the word reaches value (cyclic, as
 * CU_STREAM_WAIT_VALUE_GEQ), or s is destroyed (then 0: CUDA lets a destroyed stream's work
 * finish by itself, and the double has no other way to end a wait for a process that went
 * away). */
static int poll_until(struct CUstream_st *s, _Atomic uint64_t *ctr, uint64_t target,
                      const uint32_t *word, uint32_t value, const char *what)
{
    long limit_us = g.wait_s * 1000000, waited = 0;
    for (;;) {
        if (ctr != NULL && atomic_load_explicit(ctr, memory_order_acquire) >= target) return 1;
        if (word != NULL && (int32_t)(__atomic_load_n(word, __ATOMIC_ACQUIRE) - value) >= 0)
            return 1;
        pthread_mutex_lock(&g.mu);
        int dying = s->dying;
        pthread_mutex_unlock(&g.mu);
        if (dying) return 0;
        if (waited > limit_us) give_up(what);
        pause_us(20);
        waited += 20;
    }
}

/* Runs o; 0 when it was a wait that gave up (its stream was destroyed). */
static int run_op(hwq_t *q, op_t *o)
{
    char what[160], sn[64];
    switch (o->kind) {
    case OP_COPY:
        memcpy(o->dst, o->src, o->n);
        if (o->dir != OTHER) atomic_fetch_sub(&copies.inflight[o->dir], 1);
        break;
    case OP_REDUCE: hoop__reduce(o->dst, o->src, o->src2, o->n, o->dt, o->rop); break;
    case OP_AVG: hoop__reduce_avg_finish(o->dst, o->n, o->dt, o->divisor); break;
    case OP_HOST_FN:
        tl_in_host_fn = 1;
        o->fn(o->arg);
        tl_in_host_fn = 0;
        break;
    case OP_RECORD: {
        uint64_t cur = atomic_load(&o->ev->c->reached);
        while (cur < o->gen && !atomic_compare_exchange_weak(&o->ev->c->reached, &cur, o->gen)) {
        }
        break;
    }
    case OP_WAIT_EVENT:
        snprintf(what, sizeof what, "an event wait of %s (queue %d)",
                 stream_name(o->s, sn, sizeof sn), q->index);
        return poll_until(o->s, &o->ev->c->reached, o->gen, NULL, 0, what);
    case OP_WAIT_WORD:
        snprintf(what, sizeof what, "a word wait of %s (queue %d)",
                 stream_name(o->s, sn, sizeof sn), q->index);
        return poll_until(o->s, NULL, 0, o->word, o->value, what);
    case OP_FREE:
        pthread_mutex_lock(&g.mu);
        block_free(o->dst, "cudaFreeAsync");
        pthread_mutex_unlock(&g.mu);
        break;
    case OP_MARK: break;
    }
    return 1;
}

static void *queue_main(void *arg)
{
    hwq_t *q = arg;
    char what[128], sn[64];
    pthread_mutex_lock(&g.mu);
    for (;;) {
        while (q->head == NULL) pthread_cond_wait(&q->cv, &g.mu);
        op_t *o = q->head;
        q->head = o->next;
        if (q->head == NULL) q->tail = NULL;
        q->running = o;
        for (int i = 0; i < o->npre; i++) {
            snprintf(what, sizeof what, "%s of %s (queue %d), ordered after %s", op_name[o->kind],
                     stream_name(o->s, sn, sizeof sn), q->index,
                     o->pre[i].s->legacy ? "the legacy stream's work" : "other streams' work");
            wait_done_locked(o->pre[i].s, o->pre[i].seq, what);
        }
        int work = o->kind == OP_COPY || o->kind == OP_REDUCE || o->kind == OP_AVG ||
                   o->kind == OP_HOST_FN;
        int drop = o->s->dropping;
        pthread_mutex_unlock(&g.mu);
        if (work && !drop && g.delay_us > 0)
            pause_us((long)(rand_r(&q->seed) % (unsigned)(g.delay_us + 1)));
        int gave_up = 0;
        if (!drop)
            gave_up = !run_op(q, o);
        else if (o->kind == OP_COPY && o->dir != OTHER)
            atomic_fetch_sub(&copies.inflight[o->dir], 1);
        pthread_mutex_lock(&g.mu);
        if (gave_up) o->s->dropping = 1;
        q->running = NULL;
        o->s->done = o->seq;
        if (o->ev != NULL) event_unref_locked(o->ev);
        pthread_cond_broadcast(&g.cv);
        free(o->pre);
        free(o);
    }
    return NULL;
}

static hwq_t *queue_new(struct CUctx_st *c, int index)
{
    hwq_t *q = calloc(1, sizeof *q);
    if (q == NULL) die("out of host memory");
    q->ctx = c;
    q->index = index;
    q->seed = (unsigned)getpid() * 7919u + (unsigned)index * 104729u + (unsigned)time(NULL);
    pthread_cond_init(&q->cv, NULL);
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &at, queue_main, q) != 0) die("cannot start a hardware queue");
    pthread_attr_destroy(&at);
    return q;
}

static void add_pre(op_t *o, int *cap, struct CUstream_st *s, uint64_t seq)
{
    if (o->npre == *cap) {
        *cap = *cap ? 2 * *cap : 4;
        o->pre = realloc(o->pre, (size_t)*cap * sizeof *o->pre);
        if (o->pre == NULL) die("out of host memory");
    }
    o->pre[o->npre++] = (pre_t){s, seq};
}

static op_t *op_new(int kind)
{
    op_t *o = calloc(1, sizeof *o);
    if (o == NULL) die("out of host memory");
    o->kind = kind;
    return o;
}

/* Queues o on s (not capturing), with its implicit preconditions. Under mu. */
static void enqueue_locked(struct CUstream_st *s, op_t *o)
{
    struct CUctx_st *c = s->ctx;
    int cap = 0;
    for (struct CUstream_st *t = c->streams; t != NULL; t = t->next) {
        if (t == s) continue;
        uint64_t want = 0;
        if (t->barrier > t->done) want = t->barrier;
        /* The legacy stream waits for the blocking streams' work queued before, and they for
         * its. */
        if (((s->legacy && t->blocking) || (s->blocking && t->legacy)) && t->queued > t->done)
            want = t->queued;
        if (want > t->done) add_pre(o, &cap, t, want);
    }
    o->s = s;
    o->seq = ++s->queued;
    if (o->ev != NULL) o->ev->refs++;
    o->next = NULL;
    hwq_t *q = s->q;
    if (q->tail != NULL)
        q->tail->next = o;
    else
        q->head = o;
    q->tail = o;
    pthread_cond_signal(&q->cv);
}

/* Later work of every stream of c waits for the work queued so far (an allocation). Under mu. */
static void barrier_locked(struct CUctx_st *c)
{
    for (struct CUstream_st *t = c->streams; t != NULL; t = t->next) t->barrier = t->queued;
}

/* Waits for every stream of c (a free). Under mu. */
static void device_sync_locked(struct CUctx_st *c, const char *what)
{
    for (struct CUstream_st *t = c->streams; t != NULL; t = t->next)
        wait_done_locked(t, t->queued, what);
}

static struct CUstream_st *as_stream(cudaStream_t p, const char *what)
{
    struct CUstream_st *s = p;
    if (s == NULL || s->magic != STREAM_MAGIC)
        die("%s: %p is not a live stream of the double", what, (void *)p);
    return s;
}

/* The stream a handle names: NULL, cudaStreamLegacy and cudaStreamPerThread are the calling
 * thread's current device's legacy stream (the double has no per-thread default stream). */
static cudaError_t resolve(cudaStream_t h, struct CUstream_st **out, const char *what)
{
    if ((uintptr_t)h <= 2) {
        struct CUctx_st *c;
        cudaError_t e = need_ctx(&c);
        if (e != cudaSuccess) return e;
        *out = c->legacy;
        return cudaSuccess;
    }
    *out = as_stream(h, what);
    return cudaSuccess;
}

/* A capture that o's stream is in: o becomes a node of its graph (0), or the capture was
 * invalidated (an error); -1 when s does not capture. Under mu. */
static int captured_locked(struct CUstream_st *s, op_t *o, cudaError_t *err)
{
    if (s->cap == NULL) return -1;
    if (s->cap->status != cudaStreamCaptureStatusActive) {
        free(o);
        *err = cudaErrorStreamCaptureInvalidated;
        return 1;
    }
    struct CUgraph_st *gr = s->cap->graph;
    o->next = NULL;
    if (gr->tail != NULL)
        gr->tail->next = o;
    else
        gr->head = o;
    gr->tail = o;
    if (o->kind == OP_RECORD) o->ev->captured = s->cap;
    if (o->ev != NULL) o->ev->refs++;
    /* Not in flight until the graph is launched. */
    if (o->kind == OP_COPY && o->dir != OTHER) atomic_fetch_sub(&copies.inflight[o->dir], 1);
    return 0;
}

/* Any use of the legacy stream during a capture that bars the thread: CUDA refuses it, since the
 * legacy stream would depend on the capturing stream. Under mu. */
static int legacy_barred_locked(const struct CUstream_st *s)
{
    return s->legacy && barred_locked();
}

/* Queues o on h: on the stream, or into its capture. */
static cudaError_t submit(cudaStream_t h, op_t *o, const char *what)
{
    struct CUstream_st *s;
    cudaError_t e = resolve(h, &s, what);
    if (e != cudaSuccess) {
        free(o);
        return ret(e);
    }
    pthread_mutex_lock(&g.mu);
    if (legacy_barred_locked(s)) {
        pthread_mutex_unlock(&g.mu);
        free(o);
        return ret(cudaErrorStreamCaptureImplicit);
    }
    int c = captured_locked(s, o, &e);
    if (c < 0) enqueue_locked(s, o);
    pthread_mutex_unlock(&g.mu);
    return c > 0 ? ret(e) : cudaSuccess;
}

EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned int flags)
{
    RUNTIME_ENTRY();
    struct CUctx_st *c;
    cudaError_t e = need_ctx(&c);
    if (e != cudaSuccess) return ret(e);
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (s == NULL) return ret(cudaErrorMemoryAllocation);
    s->magic = STREAM_MAGIC;
    s->ctx = c;
    s->blocking = !(flags & cudaStreamNonBlocking);
    pthread_mutex_lock(&g.mu);
    s->q = c->q[c->next_q++ % (unsigned)c->nq];
    s->next = c->streams;
    c->streams = s;
    pthread_mutex_unlock(&g.mu);
    *out = s;
    return cudaSuccess;
}

/* Returns at once; the stream's queued work still runs (a wait of its that never ends gives up:
 * the double's way to end waits for a process that died). The stream's memory is kept (and
 * marked dead) so that work queued on other streams may still name it. */
EXPORT cudaError_t cudaStreamDestroy(cudaStream_t h)
{
    RUNTIME_ENTRY();
    struct CUstream_st *s = as_stream(h, "cudaStreamDestroy");
    pthread_mutex_lock(&g.mu);
    s->dying = 1;
    s->magic = DEAD_MAGIC;
    pthread_mutex_unlock(&g.mu);
    return cudaSuccess;
}

EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t h)
{
    RUNTIME_ENTRY();
    struct CUstream_st *s;
    cudaError_t e = resolve(h, &s, "cudaStreamSynchronize");
    if (e != cudaSuccess) return ret(e);
    pthread_mutex_lock(&g.mu);
    if (s->cap != NULL || barred_locked()) {
        if (s->cap != NULL) s->cap->status = cudaStreamCaptureStatusInvalidated;
        pthread_mutex_unlock(&g.mu);
        return ret(s->legacy ? cudaErrorStreamCaptureImplicit : cudaErrorStreamCaptureUnsupported);
    }
    char what[160], sn[64];
    snprintf(what, sizeof what, "cudaStreamSynchronize of %s", stream_name(s, sn, sizeof sn));
    if (s->legacy) {
        /* The legacy stream's synchronize waits for the blocking streams too: a marker carries
         * its implicit ordering. */
        op_t *m = op_new(OP_MARK);
        enqueue_locked(s, m);
    }
    wait_done_locked(s, s->queued, what);
    pthread_mutex_unlock(&g.mu);
    return cudaSuccess;
}

EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t h, enum cudaStreamCaptureStatus *status)
{
    RUNTIME_ENTRY();
    struct CUstream_st *s;
    cudaError_t e = resolve(h, &s, "cudaStreamIsCapturing");
    if (e != cudaSuccess) return ret(e);
    pthread_mutex_lock(&g.mu);
    if (s->legacy && barred_locked()) {
        pthread_mutex_unlock(&g.mu);
        return ret(cudaErrorStreamCaptureImplicit);
    }
    *status = s->cap != NULL ? s->cap->status : cudaStreamCaptureStatusNone;
    pthread_mutex_unlock(&g.mu);
    return cudaSuccess;
}

EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t h, enum cudaStreamCaptureMode mode)
{
    RUNTIME_ENTRY();
    struct CUstream_st *s;
    cudaError_t e = resolve(h, &s, "cudaStreamBeginCapture");
    if (e != cudaSuccess) return ret(e);
    if (s->legacy) return ret(cudaErrorStreamCaptureUnsupported);
    capture_t *k = calloc(1, sizeof *k);
    struct CUgraph_st *gr = calloc(1, sizeof *gr);
    if (k == NULL || gr == NULL) die("out of host memory");
    k->s = s;
    k->mode = mode;
    k->status = cudaStreamCaptureStatusActive;
    k->owner = pthread_self();
    k->graph = gr;
    pthread_mutex_lock(&g.mu);
    if (s->cap != NULL) {
        pthread_mutex_unlock(&g.mu);
        free(k);
        free(gr);
        return ret(cudaErrorInvalidValue);
    }
    s->cap = k;
    k->next = g.captures;
    g.captures = k;
    pthread_mutex_unlock(&g.mu);
    return cudaSuccess;
}

EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t h, cudaGraph_t *graph)
{
    RUNTIME_ENTRY();
    struct CUstream_st *s = as_stream(h, "cudaStreamEndCapture");
    pthread_mutex_lock(&g.mu);
    capture_t *k = s->cap;
    if (k == NULL) {
        pthread_mutex_unlock(&g.mu);
        return ret(cudaErrorInvalidValue);
    }
    s->cap = NULL;
    for (capture_t **pp = &g.captures; *pp != NULL; pp = &(*pp)->next)
        if (*pp == k) {
            *pp = k->next;
            break;
        }
    int ok = k->status == cudaStreamCaptureStatusActive;
    pthread_mutex_unlock(&g.mu);
    *graph = ok ? k->graph : NULL;
    free(k);
    return ok ? cudaSuccess : ret(cudaErrorStreamCaptureInvalidated);
}

/* The nodes of a graph, or of its instance: each its own copy. Under mu. */
static void nodes_copy_locked(struct CUgraph_st *to, const struct CUgraph_st *from)
{
    to->head = to->tail = NULL;
    for (const op_t *n = from->head; n != NULL; n = n->next) {
        op_t *c = op_new(n->kind);
        *c = *n;
        c->next = NULL;
        if (c->ev != NULL) c->ev->refs++;
        if (to->tail != NULL)
            to->tail->next = c;
        else
            to->head = c;
        to->tail = c;
    }
}

static void nodes_free(struct CUgraph_st *gr)
{
    pthread_mutex_lock(&g.mu);
    for (op_t *n = gr->head, *next; n != NULL; n = next) {
        next = n->next;
        if (n->ev != NULL) event_unref_locked(n->ev);
        free(n);
    }
    gr->head = gr->tail = NULL;
    pthread_mutex_unlock(&g.mu);
}

EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                        unsigned long long flags)
{
    (void)flags;
    RUNTIME_ENTRY();
    struct CUgraphExec_st *x = calloc(1, sizeof *x);
    if (x == NULL) return ret(cudaErrorMemoryAllocation);
    pthread_mutex_lock(&g.mu);
    nodes_copy_locked(&x->g, graph);
    pthread_mutex_unlock(&g.mu);
    *exec = x;
    return cudaSuccess;
}

/* Replays the graph's nodes on the stream, in capture order: the same copies and kernels, a new
 * record of each event, the same waits (a word wait waits for the same value again). */
EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t h)
{
    RUNTIME_ENTRY();
    for (op_t *n = exec->g.head; n != NULL; n = n->next) {
        op_t *o = op_new(n->kind);
        *o = *n;
        o->pre = NULL;
        o->npre = 0;
        o->next = NULL;
        if (o->kind == OP_RECORD) o->gen = atomic_fetch_add(&o->ev->c->recorded, 1) + 1;
        if (o->kind == OP_COPY) copy_queued(o->dir);
        if (o->kind == OP_RECORD) o->ev->captured = NULL;
        cudaError_t e = submit(h, o, "cudaGraphLaunch");
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    if (exec == NULL) return cudaSuccess;
    nodes_free(&exec->g);
    free(exec);
    return cudaSuccess;
}

EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    if (graph == NULL) return cudaSuccess;
    nodes_free(graph);
    free(graph);
    return cudaSuccess;
}

/* ---- copies and kernels ---- */

EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                                   cudaStream_t h)
{
    (void)kind;
    RUNTIME_ENTRY();
    if (injected()) return ret(cudaErrorUnknown);
    if (n == 0) return cudaSuccess;
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    if (d != s && d < s + n && s < d + n)
        die("cudaMemcpyAsync of %zu bytes between overlapping ranges %p and %p", n, dst, src);
    int dd, sd;
    pthread_mutex_lock(&g.mu);
    int kd = kind_of(dst, n, &dd), ks = kind_of(src, n, &sd);
    pthread_mutex_unlock(&g.mu);
    char *to = reach(dst, n, 0, "copy destination");
    const char *from = reach(src, n, 0, "copy source");
    if (kd == MEM_PAGEABLE || ks == MEM_PAGEABLE) {
        /* Pageable host memory: the copy is done before the call returns, after the work
         * queued on the stream before it. */
        struct CUstream_st *st;
        cudaError_t e = resolve(h, &st, "cudaMemcpyAsync");
        if (e != cudaSuccess) return ret(e);
        pthread_mutex_lock(&g.mu);
        if (st->cap != NULL || barred_locked()) {
            if (st->cap != NULL) st->cap->status = cudaStreamCaptureStatusInvalidated;
            pthread_mutex_unlock(&g.mu);
            return ret(cudaErrorStreamCaptureUnsupported);
        }
        op_t *m = op_new(OP_MARK);
        enqueue_locked(st, m);
        char what[160], sn[64];
        snprintf(what, sizeof what, "a copy with pageable host memory on %s",
                 stream_name(st, sn, sizeof sn));
        wait_done_locked(st, st->queued, what);
        pthread_mutex_unlock(&g.mu);
        memcpy(to, from, n);
        return cudaSuccess;
    }
    op_t *o = op_new(OP_COPY);
    o->dir = ks == MEM_DEVICE && kd != MEM_DEVICE   ? D2H
             : kd == MEM_DEVICE && ks != MEM_DEVICE ? H2D
                                                    : OTHER;
    o->dst = to;
    o->src = from;
    o->n = n;
    int dir = o->dir;
    copy_queued(dir);
    cudaError_t e = submit(h, o, "cudaMemcpyAsync");
    if (e != cudaSuccess && dir != OTHER) atomic_fetch_sub(&copies.inflight[dir], 1);
    return e;
}

static size_t esize(hoop_dtype_t dt)
{
    static const unsigned char sizes[HOOP_DTYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
    return (unsigned)dt < HOOP_DTYPE_COUNT ? sizes[dt] : 0;
}

/* A kernel goes on a stream of the current device only (the programming guide's multi-device
 * rules: a launch on another device's stream fails). */
static cudaError_t kernel_stream(void *stream, struct CUstream_st **out)
{
    struct CUctx_st *c;
    cudaError_t e = need_ctx(&c);
    if (e != cudaSuccess) return e;
    e = resolve((cudaStream_t)stream, out, "kernel launch");
    if (e != cudaSuccess) return e;
    return (*out)->ctx == c ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

/* The module's kernels (kernels.h): queued on the stream, run as the CPU reductions. */
int hoop_cuda_launch_reduce(void *out, const void *a, const void *b, size_t count, hoop_dtype_t dt,
                            hoop_op_t op, int sms, void *stream)
{
    (void)sms;
    RUNTIME_ENTRY();
    if (injected()) return ret(cudaErrorUnknown);
    struct CUstream_st *s;
    cudaError_t e = kernel_stream(stream, &s);
    if (e != cudaSuccess) return ret(e);
    size_t es = esize(dt), n = count * es;
    if (((uintptr_t)out | (uintptr_t)a | (uintptr_t)b) % es != 0)
        die("reduction kernel: pointers %p %p %p not aligned to their %zu-byte element", out, a, b,
            es);
    op_t *o = op_new(OP_REDUCE);
    o->dst = reach(out, n, 1, "reduction output");
    o->src = reach(a, n, 1, "reduction input a");
    o->src2 = reach(b, n, 1, "reduction input b");
    o->n = count;
    o->dt = dt;
    o->rop = op;
    return submit(s, o, "kernel launch");
}

int hoop_cuda_launch_avg(void *buf, size_t count, hoop_dtype_t dt, int divisor, int sms,
                         void *stream)
{
    (void)sms;
    RUNTIME_ENTRY();
    if (injected()) return ret(cudaErrorUnknown);
    struct CUstream_st *s;
    cudaError_t e = kernel_stream(stream, &s);
    if (e != cudaSuccess) return ret(e);
    size_t es = esize(dt);
    if ((uintptr_t)buf % es != 0) die("average kernel: %p not aligned to its element", buf);
    op_t *o = op_new(OP_AVG);
    o->dst = reach(buf, count * es, 1, "average");
    o->n = count;
    o->dt = dt;
    o->divisor = divisor;
    return submit(s, o, "kernel launch");
}

EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t h, cudaHostFn_t fn, void *arg)
{
    RUNTIME_ENTRY();
    op_t *o = op_new(OP_HOST_FN);
    o->fn = fn;
    o->arg = arg;
    return submit(h, o, "cudaLaunchHostFunc");
}

/* ---- allocations ---- */

EXPORT cudaError_t cudaMalloc(void **p, size_t n)
{
    RUNTIME_ENTRY();
    struct CUctx_st *c;
    cudaError_t e = need_ctx(&c);
    if (e != cudaSuccess) return ret(e);
    if (barred()) return ret(cudaErrorStreamCaptureUnsupported);
    void *b = block_alloc(n, ALIGN, c->device, 0);
    if (b == NULL) return ret(cudaErrorMemoryAllocation);
    pthread_mutex_lock(&g.mu);
    barrier_locked(c);
    pthread_mutex_unlock(&g.mu);
    *p = b;
    return cudaSuccess;
}

EXPORT cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t h)
{
    RUNTIME_ENTRY();
    struct CUstream_st *s;
    cudaError_t e = resolve(h, &s, "cudaMallocAsync");
    if (e != cudaSuccess) return ret(e);
    void *b = block_alloc(n, ALIGN, s->ctx->device, 1);
    if (b == NULL) return ret(cudaErrorMemoryAllocation);
    *p = b;
    return cudaSuccess;
}

EXPORT cudaError_t cudaFreeAsync(void *p, cudaStream_t h)
{
    RUNTIME_ENTRY();
    if (p == NULL) return cudaSuccess;
    op_t *o = op_new(OP_FREE);
    o->dst = p;
    return submit(h, o, "cudaFreeAsync");
}

/* A free waits for the device: every stream of the current context. */
EXPORT cudaError_t cudaFree(void *p)
{
    RUNTIME_ENTRY();
    struct CUctx_st *c;
    cudaError_t e = need_ctx(&c);
    if (e != cudaSuccess) return ret(e);
    if (barred()) return ret(cudaErrorStreamCaptureUnsupported);
    pthread_mutex_lock(&g.mu);
    device_sync_locked(c, "cudaFree, which waits for the device");
    if (p != NULL) block_free(p, "cudaFree");
    pthread_mutex_unlock(&g.mu);
    return cudaSuccess;
}

EXPORT cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags)
{
    RUNTIME_ENTRY();
    struct CUctx_st *c;
    cudaError_t e = need_ctx(&c);
    if (e != cudaSuccess) return ret(e);
    if (barred()) return ret(cudaErrorStreamCaptureUnsupported);
    size_t size = n ? n : 1;
    char *m = NULL;
    if (posix_memalign((void **)&m, 4096, size) != 0) return ret(cudaErrorMemoryAllocation);
    pthread_mutex_lock(&g.mu);
    if (g.npinned == g.cappinned) {
        int ncap = g.cappinned ? 2 * g.cappinned : 64;
        pinned_t *np = realloc(g.pinned, (size_t)ncap * sizeof *np);
        if (np == NULL) die("out of host memory");
        g.pinned = np;
        g.cappinned = ncap;
    }
    g.pinned[g.npinned++] = (pinned_t){m, size, (flags & cudaHostAllocMapped) != 0};
    barrier_locked(c);
    pthread_mutex_unlock(&g.mu);
    *p = m;
    return cudaSuccess;
}

EXPORT cudaError_t cudaFreeHost(void *p)
{
    RUNTIME_ENTRY();
    struct CUctx_st *c;
    cudaError_t e = need_ctx(&c);
    if (e != cudaSuccess) return ret(e);
    if (barred()) return ret(cudaErrorStreamCaptureUnsupported);
    pthread_mutex_lock(&g.mu);
    device_sync_locked(c, "cudaFreeHost, which waits for the device");
    int i = 0;
    while (i < g.npinned && g.pinned[i].p != (char *)p) i++;
    if (i == g.npinned) die("cudaFreeHost of %p, which cudaHostAlloc did not give", p);
    g.pinned[i] = g.pinned[--g.npinned];
    pthread_mutex_unlock(&g.mu);
    free(p);
    return cudaSuccess;
}

EXPORT cudaError_t cudaHostGetDevicePointer(void **d, void *h, unsigned int flags)
{
    (void)flags;
    RUNTIME_ENTRY();
    pthread_mutex_lock(&g.mu);
    pinned_t *pp = pinned_of(h, 1);
    int ok = pp != NULL && pp->mapped;
    pthread_mutex_unlock(&g.mu);
    if (!ok) return ret(cudaErrorInvalidValue);
    *d = h; /* unified addressing: the same address */
    return cudaSuccess;
}

/* As CUDA: it needs a context, made on the current device when the thread has none. */
EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
    RUNTIME_ENTRY();
    struct CUctx_st *c;
    cudaError_t e = need_ctx(&c);
    if (e != cudaSuccess) return ret(e);
    memset(a, 0, sizeof *a);
    int d;
    pthread_mutex_lock(&g.mu);
    int k = kind_of(p, 1, &d);
    pthread_mutex_unlock(&g.mu);
    if (k == MEM_DEVICE) {
        a->type = cudaMemoryTypeDevice;
        a->device = d;
        a->devicePointer = (void *)p;
    } else if (k == MEM_PINNED) {
        a->type = cudaMemoryTypeHost;
        a->device = c->device;
        a->hostPointer = (void *)p;
        a->devicePointer = (void *)p;
    } else {
        a->type = cudaMemoryTypeUnregistered;
        a->device = -2;
    }
    return cudaSuccess;
}

/* ---- events ---- */

static struct CUevent_st *as_event(cudaEvent_t p, const char *what)
{
    struct CUevent_st *e = p;
    if (e == NULL || e->magic != EVENT_MAGIC)
        die("%s: %p is not a live event of the double", what, (void *)p);
    return e;
}

/* Under mu. */
static void event_unref_locked(struct CUevent_st *e)
{
    if (--e->refs > 0) return;
    if (e->c != &e->own) munmap(e->c, 4096);
    if (e->fd >= 0) close(e->fd);
    free(e);
}

static struct CUevent_st *event_new(struct CUctx_st *c)
{
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (e == NULL) return NULL;
    e->magic = EVENT_MAGIC;
    e->ctx = c;
    e->fd = -1;
    e->c = &e->own;
    e->refs = 1;
    return e;
}

EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned int flags)
{
    RUNTIME_ENTRY();
    struct CUctx_st *c;
    cudaError_t e = need_ctx(&c);
    if (e != cudaSuccess) return ret(e);
    struct CUevent_st *ev = event_new(c);
    if (ev == NULL) return ret(cudaErrorMemoryAllocation);
    if (flags & cudaEventInterprocess) {
        if (!(flags & cudaEventDisableTiming)) {
            free(ev);
            return ret(cudaErrorInvalidValue);
        }
        ev->interprocess = 1;
        ev->fd = memfd_create("hoop-cuda-double-event", MFD_CLOEXEC);
        void *page = MAP_FAILED;
        if (ev->fd >= 0 && ftruncate(ev->fd, 4096) == 0)
            page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, ev->fd, 0);
        if (page == MAP_FAILED) {
            if (ev->fd >= 0) close(ev->fd);
            free(ev);
            return ret(cudaErrorMemoryAllocation);
        }
        ev->c = page;
        pthread_mutex_lock(&g.mu);
        ev->serial = ++g.serial;
        pthread_mutex_unlock(&g.mu);
    }
    *out = ev;
    return cudaSuccess;
}

EXPORT cudaError_t cudaEventDestroy(cudaEvent_t h)
{
    RUNTIME_ENTRY();
    struct CUevent_st *e = as_event(h, "cudaEventDestroy");
    pthread_mutex_lock(&g.mu);
    e->magic = DEAD_MAGIC;
    event_unref_locked(e);
    pthread_mutex_unlock(&g.mu);
    return cudaSuccess;
}

/* The event and the stream must be of one device (the programming guide's multi-device rules):
 * so a record on the legacy stream goes to the calling thread's current device's. */
EXPORT cudaError_t cudaEventRecord(cudaEvent_t h, cudaStream_t sh)
{
    RUNTIME_ENTRY();
    if (injected()) return ret(cudaErrorUnknown);
    struct CUevent_st *e = as_event(h, "cudaEventRecord");
    if (e->opened)
        die("cudaEventRecord: %p is another process's IPC event (only its owner records)",
            (void *)h);
    struct CUstream_st *s;
    cudaError_t err = resolve(sh, &s, "cudaEventRecord");
    if (err != cudaSuccess) return ret(err);
    if (s->ctx != e->ctx) return ret(cudaErrorInvalidResourceHandle);
    op_t *o = op_new(OP_RECORD);
    o->ev = e;
    pthread_mutex_lock(&g.mu);
    if (legacy_barred_locked(s)) {
        pthread_mutex_unlock(&g.mu);
        free(o);
        return ret(cudaErrorStreamCaptureImplicit);
    }
    if (s->cap != NULL) {
        int c = captured_locked(s, o, &err);
        pthread_mutex_unlock(&g.mu);
        return c > 0 ? ret(err) : cudaSuccess;
    }
    o->gen = atomic_fetch_add(&e->c->recorded, 1) + 1;
    e->captured = NULL;
    enqueue_locked(s, o);
    pthread_mutex_unlock(&g.mu);
    return cudaSuccess;
}

/* Any device's event (the multi-device rules allow it). One whose latest record is in a capture
 * cannot be asked about: the query fails and the capture is invalidated. */
EXPORT cudaError_t cudaEventQuery(cudaEvent_t h)
{
    RUNTIME_ENTRY();
    struct CUevent_st *e = as_event(h, "cudaEventQuery");
    pthread_mutex_lock(&g.mu);
    capture_t *k = e->captured;
    int bar = barred_locked();
    if (k != NULL) {
        for (capture_t *c = g.captures; c != NULL; c = c->next)
            if (c == k) c->status = cudaStreamCaptureStatusInvalidated;
    }
    pthread_mutex_unlock(&g.mu);
    if (k != NULL || bar) return ret(cudaErrorStreamCaptureUnsupported);
    return atomic_load_explicit(&e->c->reached, memory_order_acquire) >=
                   atomic_load(&e->c->recorded)
               ? cudaSuccess
               : cudaErrorNotReady;
}

EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t sh, cudaEvent_t h, unsigned int flags)
{
    (void)flags;
    RUNTIME_ENTRY();
    if (injected()) return ret(cudaErrorUnknown);
    struct CUevent_st *e = as_event(h, "cudaStreamWaitEvent");
    struct CUstream_st *s;
    cudaError_t err = resolve(sh, &s, "cudaStreamWaitEvent");
    if (err != cudaSuccess) return ret(err);
    pthread_mutex_lock(&g.mu);
    if (e->captured != NULL && s->cap != e->captured) {
        e->captured->status = cudaStreamCaptureStatusInvalidated;
        pthread_mutex_unlock(&g.mu);
        return ret(cudaErrorStreamCaptureIsolation);
    }
    pthread_mutex_unlock(&g.mu);
    op_t *o = op_new(OP_WAIT_EVENT);
    o->ev = e;
    o->gen = atomic_load(&e->c->recorded);
    return submit(s, o, "cudaStreamWaitEvent");
}

/* ---- IPC ----
 * A handle names the arena's memfd through /proc/PID/fd/FD, with the allocation's offset, size,
 * device and a serial number, and its export record (xrec_t); opening it in another process maps
 * the pages holding that range twice, as the arena is (a PROT_NONE view handed out, an alias for
 * the double), and the records' table, where the opener writes its pid. */

typedef struct ipc_handle {
    uint64_t magic, serial;
    int64_t pid, fd;
    uint64_t off, size;
    int32_t device;
    int32_t xfd, xrec; /* the export records' memfd, and the allocation's record in it */
} ipc_handle_t;
_Static_assert(sizeof(ipc_handle_t) <= sizeof(cudaIpcMemHandle_t), "the handle must fit");
#define IPC_MAGIC 0x49504344424cull

EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *p)
{
    RUNTIME_ENTRY();
    pthread_mutex_lock(&g.mu);
    int k = in_arena(p) ? find(p, 0) : -1;
    if (k < 0 || g.dev + g.blocks[k].off != (char *)p || g.blocks[k].pool) {
        pthread_mutex_unlock(&g.mu);
        return ret(cudaErrorInvalidValue); /* not the start of a cudaMalloc allocation */
    }
    if (g.xrecs == NULL) {
        size_t len = XRECS * sizeof(xrec_t);
        g.xfd = memfd_create("cuda-double-exports", MFD_CLOEXEC);
        void *m = g.xfd >= 0 && ftruncate(g.xfd, (off_t)len) == 0
                      ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, g.xfd, 0)
                      : MAP_FAILED;
        if (m == MAP_FAILED) die("cannot make the IPC export records: %s", strerror(errno));
        g.xrecs = m;
    }
    if (g.blocks[k].xrec == 0) {
        if (g.nxrecs == XRECS) die("too many allocations exported over IPC");
        atomic_store(&g.xrecs[g.nxrecs].serial, g.serial + 1);
        g.blocks[k].xrec = ++g.nxrecs;
    }
    ipc_handle_t h = {.magic = IPC_MAGIC,
                      .xfd = g.xfd,
                      .xrec = g.blocks[k].xrec - 1,
                      .serial = ++g.serial,
                      .pid = getpid(),
                      .fd = g.fd,
                      .off = g.blocks[k].off,
                      .size = g.blocks[k].size,
                      .device = g.blocks[k].device};
    pthread_mutex_unlock(&g.mu);
    memset(handle, 0, sizeof *handle);
    memcpy(handle, &h, sizeof h);
    return cudaSuccess;
}

/* The memfd behind another process's handle, through /proc; -1 when it cannot be opened. */
static int peer_fd(int64_t pid, int64_t pfd)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%lld/fd/%lld", (long long)pid, (long long)pfd);
    return open(path, O_RDWR | O_CLOEXEC);
}

EXPORT cudaError_t cudaIpcOpenMemHandle(void **out, cudaIpcMemHandle_t handle, unsigned int flags)
{
    (void)flags;
    RUNTIME_ENTRY();
    struct CUctx_st *c;
    cudaError_t e = need_ctx(&c);
    if (e != cudaSuccess) return ret(e);
    if (barred()) return ret(cudaErrorStreamCaptureUnsupported);
    ipc_handle_t h;
    memcpy(&h, &handle, sizeof h);
    /* As CUDA: not in the process that made it. */
    if (h.magic != IPC_MAGIC || h.pid == getpid()) return ret(cudaErrorInvalidValue);
    if (h.xrec < 0 || h.xrec >= XRECS) return ret(cudaErrorInvalidValue);
    int xfd = peer_fd(h.pid, h.xfd);
    if (xfd < 0) return ret(cudaErrorInvalidValue);
    xrec_t *xmap = mmap(NULL, XRECS * sizeof(xrec_t), PROT_READ | PROT_WRITE, MAP_SHARED, xfd, 0);
    close(xfd);
    if (xmap == MAP_FAILED) return ret(cudaErrorMemoryAllocation);
    xrec_t *rec = &xmap[h.xrec];
    /* Taken before the memory is mapped, so that an exporter's free never misses it. */
    int slot = -1;
    for (int i = 0; i < XPIDS && slot < 0; i++) {
        int32_t zero = 0;
        if (atomic_compare_exchange_strong(&rec->pid[i], &zero, (int32_t)getpid())) slot = i;
    }
    if (slot < 0) die("cudaIpcOpenMemHandle: more than %d processes opened one handle", XPIDS);
    if (atomic_load(&rec->serial) == 0 || atomic_load(&rec->freed)) {
        atomic_store(&rec->pid[slot], 0);
        munmap(xmap, XRECS * sizeof(xrec_t));
        return ret(cudaErrorInvalidValue); /* freed by its exporter: the handle names nothing */
    }
    int fd = peer_fd(h.pid, h.fd);
    size_t pg = h.off / 4096 * 4096, len = (h.off + h.size + 4095) / 4096 * 4096 - pg;
    if (fd < 0) {
        atomic_store(&rec->pid[slot], 0);
        munmap(xmap, XRECS * sizeof(xrec_t));
        return ret(cudaErrorInvalidValue);
    }
    char *dev = mmap(NULL, len, PROT_NONE, MAP_SHARED, fd, (off_t)pg);
    char *alias = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)pg);
    close(fd);
    if (dev == MAP_FAILED || alias == MAP_FAILED) {
        if (dev != MAP_FAILED) munmap(dev, len);
        if (alias != MAP_FAILED) munmap(alias, len);
        atomic_store(&rec->pid[slot], 0);
        munmap(xmap, XRECS * sizeof(xrec_t));
        return ret(cudaErrorMemoryAllocation);
    }
    pthread_mutex_lock(&g.mu);
    if (g.nimports == (int)(sizeof g.imports / sizeof g.imports[0])) die("too many IPC handles");
    g.imports[g.nimports].map = dev;
    g.imports[g.nimports].dev = dev + (h.off - pg);
    g.imports[g.nimports].alias = alias + (h.off - pg);
    g.imports[g.nimports].size = h.size;
    g.imports[g.nimports].maplen = len;
    g.imports[g.nimports].device = h.device;
    g.imports[g.nimports].xmap = xmap;
    g.imports[g.nimports].rec = rec;
    g.imports[g.nimports].slot = slot;
    *out = g.imports[g.nimports].dev;
    g.nimports++;
    barrier_locked(c);
    pthread_mutex_unlock(&g.mu);
    return cudaSuccess;
}

EXPORT cudaError_t cudaIpcCloseMemHandle(void *p)
{
    RUNTIME_ENTRY();
    struct CUctx_st *c;
    cudaError_t e = need_ctx(&c);
    if (e != cudaSuccess) return ret(e);
    pthread_mutex_lock(&g.mu);
    device_sync_locked(c, "cudaIpcCloseMemHandle, which waits for the device");
    int i = import_of(p);
    if (i < 0 || g.imports[i].dev != (char *)p) die("cudaIpcCloseMemHandle of %p, not opened", p);
    munmap(g.imports[i].map, g.imports[i].maplen);
    munmap(g.imports[i].alias - (g.imports[i].dev - g.imports[i].map), g.imports[i].maplen);
    xrec_t *rec = g.imports[i].rec;
    atomic_store(&rec->pid[g.imports[i].slot], 0);
    munmap(g.imports[i].xmap, XRECS * sizeof(xrec_t));
    g.imports[i] = g.imports[--g.nimports];
    pthread_mutex_unlock(&g.mu);
    return cudaSuccess;
}

typedef struct ipc_event_handle {
    uint64_t magic, serial;
    int64_t pid, fd;
    int32_t device;
} ipc_event_handle_t;
_Static_assert(sizeof(ipc_event_handle_t) <= sizeof(cudaIpcEventHandle_t), "the handle must fit");
#define IPC_EVENT_MAGIC 0x49504345564eull

EXPORT cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *handle, cudaEvent_t h)
{
    RUNTIME_ENTRY();
    struct CUevent_st *e = as_event(h, "cudaIpcGetEventHandle");
    if (!e->interprocess) return ret(cudaErrorInvalidResourceHandle);
    ipc_event_handle_t x = {.magic = IPC_EVENT_MAGIC,
                            .serial = e->serial,
                            .pid = getpid(),
                            .fd = e->fd,
                            .device = e->ctx->device};
    memset(handle, 0, sizeof *handle);
    memcpy(handle, &x, sizeof x);
    return cudaSuccess;
}

EXPORT cudaError_t cudaIpcOpenEventHandle(cudaEvent_t *out, cudaIpcEventHandle_t handle)
{
    RUNTIME_ENTRY();
    struct CUctx_st *c;
    cudaError_t err = need_ctx(&c);
    if (err != cudaSuccess) return ret(err);
    ipc_event_handle_t h;
    memcpy(&h, &handle, sizeof h);
    if (h.magic != IPC_EVENT_MAGIC || h.pid == getpid()) return ret(cudaErrorInvalidValue);
    int fd = peer_fd(h.pid, h.fd);
    if (fd < 0) return ret(cudaErrorInvalidValue);
    void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    struct CUevent_st *e = page != MAP_FAILED ? event_new(c) : NULL;
    if (e == NULL) {
        if (page != MAP_FAILED) munmap(page, 4096);
        return ret(cudaErrorMemoryAllocation);
    }
    e->c = page;
    e->opened = 1;
    e->interprocess = 1;
    e->serial = h.serial;
    *out = e;
    return cudaSuccess;
}

/* ---- the driver's entry points ---- */

static CUresult drv_init(unsigned flags)
{
    (void)flags;
    init();
    g.initialized = 1;
    return CUDA_SUCCESS;
}

static CUresult drv_ctx_get_current(CUcontext *out)
{
    *out = tl_ctx;
    return CUDA_SUCCESS;
}

static CUresult drv_ctx_set_current(CUcontext c)
{
    tl_ctx = c;
    return CUDA_SUCCESS;
}

static CUresult drv_primary_retain(CUcontext *out, CUdevice d)
{
    init();
    pthread_mutex_lock(&g.mu);
    cudaError_t e = ctx_make(d, out);
    pthread_mutex_unlock(&g.mu);
    return e == cudaSuccess                   ? CUDA_SUCCESS
           : e == cudaErrorDevicesUnavailable ? (CUresult)46 /* CUDA_ERROR_DEVICES_UNAVAILABLE */
                                              : CUDA_ERROR_INVALID_DEVICE;
}

static CUresult drv_primary_release(CUdevice d)
{
    return d >= 0 && d < g.ndevices ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* Needs no context: a pointer's attributes are the driver's (unified addressing). */
static CUresult drv_pointer_attrs(unsigned n, CUpointer_attribute *attrs, void **data,
                                  CUdeviceptr ptr)
{
    init();
    if (!g.initialized) return CUDA_ERROR_NOT_INITIALIZED;
    const void *p = (const void *)(uintptr_t)ptr;
    int d;
    pthread_mutex_lock(&g.mu);
    int k = kind_of(p, 1, &d);
    uintptr_t base = 0;
    size_t size = 0;
    if (k == MEM_DEVICE && in_arena(p)) {
        int b = find(p, 0);
        if (b >= 0) {
            base = (uintptr_t)(g.dev + g.blocks[b].off);
            size = g.blocks[b].size;
        }
    } else if (k == MEM_DEVICE) {
        int i = import_of(p);
        base = (uintptr_t)g.imports[i].dev;
        size = g.imports[i].size;
    }
    pthread_mutex_unlock(&g.mu);
    for (unsigned i = 0; i < n; i++) switch (attrs[i]) {
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
            *(unsigned *)data[i] = k == MEM_DEVICE   ? CU_MEMORYTYPE_DEVICE
                                   : k == MEM_PINNED ? CU_MEMORYTYPE_HOST
                                                     : 0;
            break;
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data[i] = k == MEM_DEVICE ? d : -2; break;
        case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned char *)data[i] = 0; break;
        case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data[i] = base; break;
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data[i] = size; break;
        default: return CUDA_ERROR_INVALID_VALUE;
        }
    return CUDA_SUCCESS;
}

static CUresult drv_mem_range(CUdeviceptr *base, size_t *size, CUdeviceptr ptr)
{
    CUpointer_attribute at[2] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    void *data[2] = {base, size};
    CUresult r = drv_pointer_attrs(2, at, data, ptr);
    return r == CUDA_SUCCESS && *size == 0 ? CUDA_ERROR_INVALID_VALUE : r;
}

/* cuStreamWaitValue32: the stream waits until the mapped host word reaches value. */
static CUresult drv_wait_value(CUstream h, CUdeviceptr addr, cuuint32_t value, unsigned flags)
{
    if (flags != CU_STREAM_WAIT_VALUE_GEQ) return CUDA_ERROR_INVALID_VALUE;
    if (g.no_waitvalue) return CUDA_ERROR_NOT_SUPPORTED;
    if (injected()) return CUDA_ERROR_UNKNOWN;
    const uint32_t *word = (const uint32_t *)(uintptr_t)addr;
    pthread_mutex_lock(&g.mu);
    pinned_t *pp = pinned_of(word, sizeof *word);
    int ok = pp != NULL && pp->mapped;
    pthread_mutex_unlock(&g.mu);
    if (!ok) die("cuStreamWaitValue32: %p is not mapped pinned host memory", (const void *)word);
    op_t *o = op_new(OP_WAIT_WORD);
    o->word = word;
    o->value = value;
    cudaError_t e = submit((cudaStream_t)h, o, "cuStreamWaitValue32");
    return e == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

static CUresult drv_driver_version(int *v)
{
    init();
    *v = g.driver;
    return CUDA_SUCCESS;
}

EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn,
                                                    unsigned int version, unsigned long long flags,
                                                    enum cudaDriverEntryPointQueryResult *status)
{
    (void)version;
    (void)flags;
    RUNTIME_ENTRY();
    static const struct {
        const char *name;
        void *fn;
    } table[] = {
        {"cuInit", (void *)drv_init},
        {"cuDriverGetVersion", (void *)drv_driver_version},
        {"cuCtxGetCurrent", (void *)drv_ctx_get_current},
        {"cuCtxSetCurrent", (void *)drv_ctx_set_current},
        {"cuDevicePrimaryCtxRetain", (void *)drv_primary_retain},
        {"cuDevicePrimaryCtxRelease", (void *)drv_primary_release},
        {"cuPointerGetAttributes", (void *)drv_pointer_attrs},
        {"cuMemGetAddressRange", (void *)drv_mem_range},
        {"cuStreamWaitValue32", (void *)drv_wait_value},
    };
    *fn = NULL;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(symbol, table[i].name)) *fn = table[i].fn;
    if (status != NULL)
        *status = *fn != NULL ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
}

/* ---- for tests ---- */

/* The nth queued operation from now fails (0: none). */
EXPORT void hoop_cuda_double_fail_in(long n)
{
    init();
    pthread_mutex_lock(&g.mu);
    g.fail_in = n;
    pthread_mutex_unlock(&g.mu);
}

/* The counts of asynchronous copies since the process started: the most device-to-host copies
 * in flight at once, the most host-to-device ones, and how many were queued while one of the
 * other direction was in flight. */
EXPORT void hoop_cuda_double_copy_stats(long *most_d2h, long *most_h2d, long *crossed)
{
    *most_d2h = atomic_load(&copies.most[D2H]);
    *most_h2d = atomic_load(&copies.most[H2D]);
    *crossed = atomic_load(&copies.crossed);
}

/* Device memory of device 0 as the application's own runtime would make it, whatever driver the
 * double stands for (the module's runtime may find it too old). */
EXPORT void *hoop_cuda_double_app_alloc(size_t bytes) { return block_alloc(bytes, ALIGN, 0, 0); }

/* Primary contexts made on device in this process so far (0 or 1). */
EXPORT int hoop_cuda_double_contexts(int device)
{
    init();
    if (device < 0 || device >= MAX_DEVICES) return -1;
    pthread_mutex_lock(&g.mu);
    int n = g.made[device];
    pthread_mutex_unlock(&g.mu);
    return n;
}

/* The driver's classification, as libcuda has it: CU_POINTER_ATTRIBUTE_MEMORY_TYPE of device
 * memory, and CUDA_ERROR_INVALID_VALUE for memory it does not know. It needs no context. */
EXPORT int cuPointerGetAttribute(void *data, int attribute, unsigned long long ptr)
{
    init();
    if (attribute != CU_POINTER_ATTRIBUTE_MEMORY_TYPE) return CUDA_ERROR_INVALID_VALUE;
    int d;
    pthread_mutex_lock(&g.mu);
    int k = kind_of((const void *)(uintptr_t)ptr, 1, &d);
    pthread_mutex_unlock(&g.mu);
    if (k == MEM_PAGEABLE) return CUDA_ERROR_INVALID_VALUE;
    *(unsigned *)data = k == MEM_DEVICE ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    return CUDA_SUCCESS;
}
