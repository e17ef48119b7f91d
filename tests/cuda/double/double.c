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
 * (HOOP_TEST_CUDA_DRIVER) in tests of a libhoop that has no module.
 *
 * Streams are worker threads with random delays, events count records, a stream may wait for
 * an event or a host word, and IPC handles name the arena's memfd so that another process can
 * map the allocation (docs/cuda.md). It counts its asynchronous copies in flight, by direction
 * (hoop_cuda_double_copy_stats).
 *
 * Knobs, for error-path tests: HOOP_CUDA_DOUBLE_BYTES (arena size, default 2G),
 * HOOP_CUDA_DOUBLE_FAIL=N (the Nth operation fails with "injected failure"; also
 * hoop_cuda_double_fail_in(N) from a test), HOOP_CUDA_DOUBLE_NODRIVER=1 (classify fails as a
 * runtime without a usable driver does), HOOP_CUDA_DOUBLE_DELAY_US and HOOP_CUDA_DOUBLE_WAIT_S
 * (the streams' delays and waits). */
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
#include <time.h>
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
    int fd;          /* the arena's memfd, kept open: IPC handles name it (/proc/PID/fd/FD) */
    uint64_t serial; /* IPC allocations so far: a handle names one, never a successor */
    /* Peers' memory opened from IPC handles: a PROT_NONE view handed out and an alias, as the
     * arena has. */
    struct {
        char *dev, *alias;
        size_t size;
    } imports[1024];
    int nimports;
    long fail_in; /* operations until the injected failure; 0: none */
    int nodriver;
    /* HOOP_CUDA_DOUBLE_LEGACY=async: the legacy default stream is a stream of the double, with
     * its worker and delays, made at the first use (else it is always idle: see norm()). */
    int legacy_async;
    pthread_once_t legacy_once;
    void *legacy;
} g = {
    .once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER, .legacy_once = PTHREAD_ONCE_INIT};

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
    const char *l = getenv("HOOP_CUDA_DOUBLE_LEGACY");
    g.legacy_async = l != NULL && strcmp(l, "async") == 0;
    int fd = memfd_create("hoop-cuda-double", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)g.bytes) != 0) die("cannot make the device arena");
    g.dev = mmap(NULL, g.bytes, PROT_NONE, MAP_SHARED, fd, 0);
    g.alias = mmap(NULL, g.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (g.dev == MAP_FAILED || g.alias == MAP_FAILED) die("cannot map the device arena");
    g.fd = fd;
}

static void init(void) { pthread_once(&g.once, arena_init); }

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

/* Device memory: this process's arena, or a peer's memory opened from an IPC handle. */
static int in_device(const void *p)
{
    if (in_arena(p)) return 1;
    pthread_mutex_lock(&g.mu);
    int k = import_of(p);
    pthread_mutex_unlock(&g.mu);
    return k >= 0;
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
        pthread_mutex_lock(&g.mu);
        int i = import_of(p);
        char *a = NULL;
        if (i >= 0 && (const char *)p + n <= g.imports[i].dev + g.imports[i].size)
            a = g.imports[i].alias + ((const char *)p - g.imports[i].dev);
        pthread_mutex_unlock(&g.mu);
        if (i >= 0 && a == NULL)
            die("%s: %zu bytes at %p run past the peer's memory opened there", what, n, p);
        if (a != NULL) return a;
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
    if (!in_arena(p)) {
        if (in_device(p)) out->type = HOOP__CUDA_PTR_DEVICE; /* a peer's, opened here */
        return 0;
    }
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

static int stream_sync(hoop_cuda_ctx_t *ctx, void *stream);

/* The synchronous operations on a stream start after the work queued there: the double waits
 * for it, then runs them on the calling thread. The legacy default stream (NULL) has no queue
 * here by default: it is always idle, as the double's streams never wait for it nor it for them
 * (they behave as cudaStreamNonBlocking streams do). Under HOOP_CUDA_DOUBLE_LEGACY=async it is
 * a stream of the double like the others, so that work the application queued there and that a
 * call must wait for (its input's copy) can be late: a call that does not order itself after
 * the legacy stream then reads stale input. */
static void *stream_create(hoop_cuda_ctx_t *ctx);
static void legacy_make(void)
{
    hoop_cuda_ctx_t tmp = {0};
    g.legacy = stream_create(&tmp);
    if (g.legacy == NULL) die("cannot make the legacy default stream: %s", tmp.err);
}
/* cudaStreamLegacy and cudaStreamPerThread: the double's legacy default stream, NULL. */
static void *norm(void *stream)
{
    if ((uintptr_t)stream > 2) return stream;
    init();
    if (!g.legacy_async) return NULL;
    pthread_once(&g.legacy_once, legacy_make);
    return g.legacy;
}

static int after(hoop_cuda_ctx_t *ctx, void *stream)
{
    stream = norm(stream);
    return stream != NULL ? stream_sync(ctx, stream) : 0;
}

static int copy(hoop_cuda_ctx_t *ctx, void *dst, const void *src, size_t n, void *stream)
{
    if (after(ctx, stream) != 0 || injected(ctx)) return -1;
    if (n == 0) return 0;
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    if (d != s && d < s + n && s < d + n)
        die("copy of %zu bytes between overlapping ranges %p and %p", n, dst, src);
    memcpy(reach(dst, n, 0, "copy destination"), reach(src, n, 0, "copy source"), n);
    return 0;
}

static int move(hoop_cuda_ctx_t *ctx, void *dst, const void *src, size_t n, void *stream)
{
    if (after(ctx, stream) != 0 || injected(ctx)) return -1;
    if (n == 0) return 0;
    memmove(reach(dst, n, 0, "move destination"), reach(src, n, 0, "move source"), n);
    return 0;
}

static size_t esize(hoop_dtype_t dt)
{
    static const unsigned char sizes[HOOP_DTYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
    return (unsigned)dt < HOOP_DTYPE_COUNT ? sizes[dt] : 0;
}

/* The kernels on the double's own view of the memory: o = x op y, and p /= divisor. */
static void reduce_at(char *o, const char *x, const char *y, size_t count, hoop_dtype_t dt,
                      hoop_op_t op)
{
    size_t es = esize(dt), n = count * es;
    if (((uintptr_t)o | (uintptr_t)x | (uintptr_t)y) % es == 0) {
        hoop__reduce(o, x, y, count, dt, op);
        return;
    }
    /* Not aligned to the element: as the real module, through aligned copies. */
    char *t = malloc(3 * n);
    if (t == NULL) die("out of host memory");
    memcpy(t + n, x, n);
    memcpy(t + 2 * n, y, n);
    hoop__reduce(t, t + n, t + 2 * n, count, dt, op);
    memcpy(o, t, n);
    free(t);
}

static void avg_at(char *p, size_t count, hoop_dtype_t dt, int divisor)
{
    size_t es = esize(dt), n = count * es;
    if ((uintptr_t)p % es == 0) {
        hoop__reduce_avg_finish(p, count, dt, divisor);
        return;
    }
    char *t = malloc(n);
    if (t == NULL) die("out of host memory");
    memcpy(t, p, n);
    hoop__reduce_avg_finish(t, count, dt, divisor);
    memcpy(p, t, n);
    free(t);
}

static int reduce(hoop_cuda_ctx_t *ctx, void *out, const void *a, const void *b, size_t count,
                  hoop_dtype_t dt, hoop_op_t op, void *stream)
{
    if (after(ctx, stream) != 0 || injected(ctx)) return -1;
    if (count == 0) return 0;
    size_t n = count * esize(dt);
    reduce_at(reach(out, n, 1, "reduction output"), reach(a, n, 1, "reduction input a"),
              reach(b, n, 1, "reduction input b"), count, dt, op);
    return 0;
}

static int avg_finish(hoop_cuda_ctx_t *ctx, void *buf, size_t count, hoop_dtype_t dt, int divisor,
                      void *stream)
{
    if (after(ctx, stream) != 0 || injected(ctx)) return -1;
    if (count == 0) return 0;
    avg_at(reach(buf, count * esize(dt), 1, "average"), count, dt, divisor);
    return 0;
}

static void *alloc_aligned(hoop_cuda_ctx_t *ctx, size_t bytes, size_t align)
{
    init();
    size_t size = bytes ? bytes : 1;
    pthread_mutex_lock(&g.mu);
    /* First fit between live blocks; a gap of ALIGN after each, so that overruns of one block
     * never land in the next. */
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

static void *alloc(hoop_cuda_ctx_t *ctx, size_t bytes) { return alloc_aligned(ctx, bytes, ALIGN); }

static void dfree(hoop_cuda_ctx_t *ctx, void *p)
{
    (void)ctx;
    if (p == NULL) return;
    if (!in_arena(p)) die("free of %p, which is not device memory of this process", p);
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

/* ---- streams and events ----
 * A stream is a worker thread with a queue. Before each operation it sleeps a random while (up
 * to HOOP_CUDA_DOUBLE_DELAY_US, default 2000 us), so that work that is not properly ordered
 * after a stream's operations sees them not done yet, and a missing synchronization shows as a
 * wrong result rather than passing by luck. An event counts its records and the records
 * reached; waits on events and words poll, and give up (aborting, naming what) after
 * HOOP_CUDA_DOUBLE_WAIT_S seconds (default 120), so that a test that forgot to set what a
 * stream waits for fails instead of hanging. */

enum { OP_COPY, OP_REDUCE, OP_AVG, OP_RECORD, OP_WAIT_EVENT, OP_WAIT_WORD, OP_STOP };

/* The counters of an event: in the event itself, or for an IPC event in a page of its own memfd
 * that other processes map from its handle (so their waits and queries see its records). */
typedef struct ev_counts {
    _Atomic uint64_t recorded, reached;
} ev_counts_t;

typedef struct devent {
    uint32_t magic;
    int opened; /* another process's IPC event: only waited for and queried here */
    int fd;     /* an IPC event's memfd (its owner's), or -1 */
    uint64_t serial;
    ev_counts_t *c; /* &own, or the shared page */
    ev_counts_t own;
} devent_t;

typedef struct sop {
    int kind;
    int dir; /* OP_COPY: D2H, H2D or OTHER, for the counts below */
    void *dst;
    /* OP_REDUCE: dst = src op src2, count elements; OP_AVG: dst /= divisor */
    const void *src, *src2;
    size_t n;
    hoop_dtype_t dt;
    hoop_op_t op;
    int divisor;
    devent_t *ev;
    uint64_t gen;
    const uint32_t *word;
    uint32_t value;
    struct sop *next;
} sop_t;

typedef struct dstream {
    uint32_t magic;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sop_t *head, *tail;
    uint64_t queued, done;
    unsigned seed;
    pthread_t thread;
    atomic_int dying; /* destroyed: a wait that never ends gives up (a peer died, say) */
} dstream_t;

/* Asynchronous copies queued on streams and not done yet, by direction (device to host, host to
 * device), the most there were at once, and how many copies were queued while one of the other
 * direction was still in flight: what a test of the staging's pipelining reads
 * (hoop_cuda_double_copy_stats). */
enum { D2H, H2D, OTHER };
static struct {
    _Atomic long inflight[2], most[2], crossed;
} copies;

static void copy_queued(int dir)
{
    if (dir == OTHER) return;
    long now = atomic_fetch_add(&copies.inflight[dir], 1) + 1;
    long most = atomic_load(&copies.most[dir]);
    while (now > most && !atomic_compare_exchange_weak(&copies.most[dir], &most, now)) {
    }
    if (atomic_load(&copies.inflight[!dir]) > 0) atomic_fetch_add(&copies.crossed, 1);
}

#define STREAM_MAGIC 0x5354524du
#define EVENT_MAGIC 0x4556454eu

static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? atol(v) : dflt;
}

static void pause_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* Polls until the 64-bit counter reaches target (an event) or the word reaches value, or the
 * stream is destroyed (dying, NULL for none; then 0): CUDA lets a destroyed stream's work finish
 * on its own, and the double has no other way to end a wait for a process that went away; the
 * work queued after a wait given up is dropped, never run on memory that may be gone. */
static int wait_for(const char *what, _Atomic uint64_t *ctr, uint64_t target, const uint32_t *word,
                    uint32_t value, atomic_int *dying)
{
    long limit_us = env_long("HOOP_CUDA_DOUBLE_WAIT_S", 120) * 1000000, waited = 0;
    for (;;) {
        if (ctr != NULL && atomic_load_explicit(ctr, memory_order_acquire) >= target) return 1;
        if (word != NULL && (int32_t)(__atomic_load_n(word, __ATOMIC_ACQUIRE) - value) >= 0)
            return 1;
        if (dying != NULL && atomic_load(dying)) return 0;
        if (waited > limit_us)
            die("%s: still waiting after %ld s (nothing set what it waits for)", what,
                limit_us / 1000000);
        pause_us(20);
        waited += 20;
    }
}

static void *stream_main(void *arg)
{
    dstream_t *s = arg;
    long max_delay = env_long("HOOP_CUDA_DOUBLE_DELAY_US", 2000);
    int dropping = 0;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (s->head == NULL) pthread_cond_wait(&s->cv, &s->mu);
        sop_t *o = s->head;
        pthread_mutex_unlock(&s->mu);
        if (o->kind == OP_STOP) break;
        if (max_delay > 0 && !dropping) pause_us(rand_r(&s->seed) % (max_delay + 1));
        switch (dropping ? OP_STOP : o->kind) {
        case OP_COPY:
            memcpy(o->dst, o->src, o->n);
            if (o->dir != OTHER) atomic_fetch_sub(&copies.inflight[o->dir], 1);
            break;
        case OP_REDUCE: reduce_at(o->dst, o->src, o->src2, o->n, o->dt, o->op); break;
        case OP_AVG: avg_at(o->dst, o->n, o->dt, o->divisor); break;
        case OP_RECORD:
            atomic_store_explicit(&o->ev->c->reached, o->gen, memory_order_release);
            break;
        case OP_WAIT_EVENT:
            dropping = !wait_for("a stream's event wait", &o->ev->c->reached, o->gen, NULL, 0,
                                 &s->dying);
            break;
        case OP_WAIT_WORD:
            dropping = !wait_for("a stream's word wait", NULL, 0, o->word, o->value, &s->dying);
            break;
        }
        pthread_mutex_lock(&s->mu);
        s->head = o->next;
        if (s->head == NULL) s->tail = NULL;
        s->done++;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        free(o);
    }
    return NULL;
}

static dstream_t *as_stream(void *p, const char *what)
{
    dstream_t *s = p;
    if (s == NULL || s->magic != STREAM_MAGIC) die("%s: %p is not a stream of the double", what, p);
    return s;
}

static devent_t *as_event(void *p, const char *what)
{
    devent_t *e = p;
    if (e == NULL || e->magic != EVENT_MAGIC) die("%s: %p is not an event of the double", what, p);
    return e;
}

static void enqueue(dstream_t *s, sop_t o)
{
    sop_t *q = malloc(sizeof *q);
    if (q == NULL) die("out of host memory");
    *q = o;
    q->next = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->tail != NULL)
        s->tail->next = q;
    else
        s->head = q;
    s->tail = q;
    s->queued++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void *stream_create(hoop_cuda_ctx_t *ctx)
{
    init();
    dstream_t *s = calloc(1, sizeof *s);
    if (s == NULL) {
        snprintf(ctx->err, sizeof ctx->err, "out of host memory for a stream");
        return NULL;
    }
    s->magic = STREAM_MAGIC;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->seed = (unsigned)(uintptr_t)s ^ (unsigned)getpid() ^ (unsigned)time(NULL);
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
        snprintf(ctx->err, sizeof ctx->err, "cannot start a stream's thread");
        free(s);
        return NULL;
    }
    return s;
}

/* Lets the queued work finish first (CUDA also completes it after cudaStreamDestroy). */
static void stream_destroy(hoop_cuda_ctx_t *ctx, void *stream)
{
    (void)ctx;
    if (stream == NULL) return;
    dstream_t *s = as_stream(stream, "stream_destroy");
    atomic_store(&s->dying, 1);
    enqueue(s, (sop_t){.kind = OP_STOP});
    pthread_join(s->thread, NULL);
    free(s->head); /* the stop */
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    s->magic = 0;
    free(s);
}

static int stream_sync(hoop_cuda_ctx_t *ctx, void *stream)
{
    (void)ctx;
    stream = norm(stream);
    if (stream == NULL) return 0;
    dstream_t *s = as_stream(stream, "stream_sync");
    pthread_mutex_lock(&s->mu);
    uint64_t want = s->queued;
    while (s->done < want) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static int copy_async(hoop_cuda_ctx_t *ctx, void *dst, const void *src, size_t n, void *stream)
{
    stream = norm(stream);
    if (injected(ctx)) return -1;
    if (n == 0) return 0;
    uintptr_t d = (uintptr_t)dst, sr = (uintptr_t)src;
    if (d != sr && d < sr + n && sr < d + n)
        die("async copy of %zu bytes between overlapping ranges %p and %p", n, dst, src);
    /* Checked as it is queued; the pages stay reachable through the alias. */
    int to_dev = in_device(dst), from_dev = in_device(src);
    char *to = reach(dst, n, 0, "async copy destination");
    const char *from = reach(src, n, 0, "async copy source");
    if (stream == NULL) {
        memcpy(to, from, n);
        return 0;
    }
    int dir = from_dev && !to_dev ? D2H : to_dev && !from_dev ? H2D : OTHER;
    dstream_t *s = as_stream(stream, "copy_async");
    copy_queued(dir);
    enqueue(s, (sop_t){.kind = OP_COPY, .dir = dir, .dst = to, .src = from, .n = n});
    return 0;
}

static void *event_create(hoop_cuda_ctx_t *ctx)
{
    devent_t *e = calloc(1, sizeof *e);
    if (e == NULL) snprintf(ctx->err, sizeof ctx->err, "out of host memory for an event");
    if (e != NULL) {
        e->magic = EVENT_MAGIC;
        e->fd = -1;
        e->c = &e->own;
    }
    return e;
}

static void event_destroy(hoop_cuda_ctx_t *ctx, void *event)
{
    (void)ctx;
    if (event == NULL) return;
    devent_t *e = as_event(event, "event_destroy");
    e->magic = 0;
    if (e->c != &e->own) munmap(e->c, 4096);
    if (e->fd >= 0) close(e->fd);
    free(event);
}

static int event_record(hoop_cuda_ctx_t *ctx, void *event, void *stream)
{
    stream = norm(stream);
    if (injected(ctx)) return -1;
    devent_t *e = as_event(event, "event_record");
    if (e->opened)
        die("event_record: %p is another process's IPC event (only its owner records)", event);
    uint64_t gen = atomic_fetch_add(&e->c->recorded, 1) + 1;
    if (stream == NULL)
        atomic_store_explicit(&e->c->reached, gen, memory_order_release);
    else
        enqueue(as_stream(stream, "event_record"), (sop_t){.kind = OP_RECORD, .ev = e, .gen = gen});
    return 0;
}

static int event_query(hoop_cuda_ctx_t *ctx, void *event)
{
    (void)ctx;
    devent_t *e = as_event(event, "event_query");
    return atomic_load_explicit(&e->c->reached, memory_order_acquire) >=
           atomic_load(&e->c->recorded);
}

static int stream_wait_event(hoop_cuda_ctx_t *ctx, void *stream, void *event)
{
    stream = norm(stream);
    if (injected(ctx)) return -1;
    devent_t *e = as_event(event, "stream_wait_event");
    uint64_t gen = atomic_load(&e->c->recorded);
    if (stream == NULL)
        wait_for("a legacy stream's event wait", &e->c->reached, gen, NULL, 0, NULL);
    else
        enqueue(as_stream(stream, "stream_wait_event"),
                (sop_t){.kind = OP_WAIT_EVENT, .ev = e, .gen = gen});
    return 0;
}

static int stream_wait_word(hoop_cuda_ctx_t *ctx, void *stream, const uint32_t *word,
                            uint32_t value)
{
    stream = norm(stream);
    if (injected(ctx)) return -1;
    if (in_device(word))
        die("stream_wait_word: %p is device memory, not host memory", (void *)word);
    if (stream == NULL)
        wait_for("a legacy stream's word wait", NULL, 0, word, value, NULL);
    else
        enqueue(as_stream(stream, "stream_wait_word"),
                (sop_t){.kind = OP_WAIT_WORD, .word = word, .value = value});
    return 0;
}

/* ---- IPC ----
 * A handle names the arena's memfd through /proc/PID/fd/FD, with the allocation's offset and
 * size and a serial number; opening it in another process maps that range twice, as the arena
 * is (a PROT_NONE view handed out, an alias for the double). The range is page-aligned. */

typedef struct ipc_handle {
    uint64_t magic, serial;
    int64_t pid, fd;
    uint64_t off, size;
} ipc_handle_t;
_Static_assert(sizeof(ipc_handle_t) <= HOOP__CUDA_IPC_HANDLE, "the handle must fit");

#define IPC_MAGIC 0x49504344424cull

static void *ipc_alloc(hoop_cuda_ctx_t *ctx, size_t bytes, void *handle)
{
    size_t size = (bytes + 4095) / 4096 * 4096;
    char *p = alloc_aligned(ctx, size ? size : 4096, 4096);
    if (p == NULL) return NULL;
    pthread_mutex_lock(&g.mu);
    ipc_handle_t h = {.magic = IPC_MAGIC,
                      .serial = ++g.serial,
                      .pid = getpid(),
                      .fd = g.fd,
                      .off = (uint64_t)(p - g.dev),
                      .size = size ? size : 4096};
    pthread_mutex_unlock(&g.mu);
    memset(handle, 0, HOOP__CUDA_IPC_HANDLE);
    memcpy(handle, &h, sizeof h);
    return p;
}

static void ipc_free(hoop_cuda_ctx_t *ctx, void *p) { dfree(ctx, p); }

/* The memfd behind another process's handle (its pid and descriptor), opened through /proc;
 * -1 with the sentence in ctx->err. what: "device memory" or "event". */
static int peer_fd(hoop_cuda_ctx_t *ctx, int magic_ok, int64_t pid, int64_t pfd, const char *what)
{
    if (!magic_ok) {
        snprintf(ctx->err, sizeof ctx->err, "not an IPC %s handle of the CUDA test double", what);
        return -1;
    }
    if (pid == getpid()) {
        snprintf(ctx->err, sizeof ctx->err,
                 "an IPC %s handle cannot be opened in the process that made it (as CUDA's)", what);
        return -1;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%lld/fd/%lld", (long long)pid, (long long)pfd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        snprintf(ctx->err, sizeof ctx->err, "cannot open the peer's %s %s: %s", what, path,
                 strerror(errno));
    return fd;
}

static void *ipc_open(hoop_cuda_ctx_t *ctx, const void *handle)
{
    init();
    ipc_handle_t h;
    memcpy(&h, handle, sizeof h);
    int fd = peer_fd(ctx, h.magic == IPC_MAGIC, h.pid, h.fd, "device memory");
    if (fd < 0) return NULL;
    char *dev = mmap(NULL, h.size, PROT_NONE, MAP_SHARED, fd, (off_t)h.off);
    char *alias = mmap(NULL, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)h.off);
    close(fd);
    if (dev == MAP_FAILED || alias == MAP_FAILED) {
        if (dev != MAP_FAILED) munmap(dev, h.size);
        if (alias != MAP_FAILED) munmap(alias, h.size);
        snprintf(ctx->err, sizeof ctx->err, "cannot map the peer's device memory");
        return NULL;
    }
    pthread_mutex_lock(&g.mu);
    if (g.nimports == (int)(sizeof g.imports / sizeof g.imports[0])) {
        pthread_mutex_unlock(&g.mu);
        munmap(dev, h.size);
        munmap(alias, h.size);
        snprintf(ctx->err, sizeof ctx->err, "too many IPC handles open");
        return NULL;
    }
    g.imports[g.nimports].dev = dev;
    g.imports[g.nimports].alias = alias;
    g.imports[g.nimports].size = h.size;
    g.nimports++;
    pthread_mutex_unlock(&g.mu);
    return dev;
}

static void ipc_close(hoop_cuda_ctx_t *ctx, void *p)
{
    (void)ctx;
    if (p == NULL) return;
    pthread_mutex_lock(&g.mu);
    int i = import_of(p);
    if (i < 0 || g.imports[i].dev != (char *)p) die("ipc_close of %p, which was not opened", p);
    munmap(g.imports[i].dev, g.imports[i].size);
    munmap(g.imports[i].alias, g.imports[i].size);
    g.imports[i] = g.imports[--g.nimports];
    pthread_mutex_unlock(&g.mu);
}

/* ---- asynchronous kernels, IPC events ---- */

static int reduce_async(hoop_cuda_ctx_t *ctx, void *out, const void *a, const void *b, size_t count,
                        hoop_dtype_t dt, hoop_op_t op, void *stream)
{
    stream = norm(stream);
    if (stream == NULL) return reduce(ctx, out, a, b, count, dt, op, NULL);
    if (injected(ctx)) return -1;
    if (count == 0) return 0;
    size_t n = count * esize(dt);
    /* Checked as it is queued; the pages stay reachable through the alias. */
    enqueue(as_stream(stream, "reduce_async"),
            (sop_t){.kind = OP_REDUCE,
                    .dst = reach(out, n, 1, "async reduction output"),
                    .src = reach(a, n, 1, "async reduction input a"),
                    .src2 = reach(b, n, 1, "async reduction input b"),
                    .n = count,
                    .dt = dt,
                    .op = op});
    return 0;
}

static int avg_finish_async(hoop_cuda_ctx_t *ctx, void *buf, size_t count, hoop_dtype_t dt,
                            int divisor, void *stream)
{
    stream = norm(stream);
    if (stream == NULL) return avg_finish(ctx, buf, count, dt, divisor, NULL);
    if (injected(ctx)) return -1;
    if (count == 0) return 0;
    enqueue(as_stream(stream, "avg_finish_async"),
            (sop_t){.kind = OP_AVG,
                    .dst = reach(buf, count * esize(dt), 1, "async average"),
                    .n = count,
                    .dt = dt,
                    .divisor = divisor});
    return 0;
}

/* An IPC event's handle: its owner's memfd, through /proc, as the memory's. */
typedef struct ipc_event_handle {
    uint64_t magic, serial;
    int64_t pid, fd;
} ipc_event_handle_t;
_Static_assert(sizeof(ipc_event_handle_t) <= HOOP__CUDA_IPC_HANDLE, "the handle must fit");
#define IPC_EVENT_MAGIC 0x49504345564eull

static void *ipc_event_create(hoop_cuda_ctx_t *ctx, void *handle)
{
    init();
    devent_t *e = event_create(ctx);
    if (e == NULL) return NULL;
    e->fd = memfd_create("hoop-cuda-double-event", MFD_CLOEXEC);
    void *page = MAP_FAILED;
    if (e->fd >= 0 && ftruncate(e->fd, 4096) == 0)
        page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, e->fd, 0);
    if (page == MAP_FAILED) {
        snprintf(ctx->err, sizeof ctx->err, "cannot make an IPC event: %s", strerror(errno));
        event_destroy(ctx, e);
        return NULL;
    }
    e->c = page;
    pthread_mutex_lock(&g.mu);
    ipc_event_handle_t h = {
        .magic = IPC_EVENT_MAGIC, .serial = ++g.serial, .pid = getpid(), .fd = e->fd};
    pthread_mutex_unlock(&g.mu);
    e->serial = h.serial;
    memset(handle, 0, HOOP__CUDA_IPC_HANDLE);
    memcpy(handle, &h, sizeof h);
    return e;
}

static void *ipc_event_open(hoop_cuda_ctx_t *ctx, const void *handle)
{
    init();
    ipc_event_handle_t h;
    memcpy(&h, handle, sizeof h);
    int fd = peer_fd(ctx, h.magic == IPC_EVENT_MAGIC, h.pid, h.fd, "event");
    if (fd < 0) return NULL;
    void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    devent_t *e = page != MAP_FAILED ? event_create(ctx) : NULL;
    if (e == NULL) {
        if (page != MAP_FAILED) munmap(page, 4096);
        snprintf(ctx->err, sizeof ctx->err, "cannot map the peer's event");
        return NULL;
    }
    e->c = page;
    e->opened = 1;
    e->serial = h.serial;
    return e;
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

/* Tests: the nth operation from now fails (0: none). */
EXPORT void hoop_cuda_double_fail_in(long n)
{
    init();
    pthread_mutex_lock(&g.mu);
    g.fail_in = n;
    pthread_mutex_unlock(&g.mu);
}

/* Tests: the counts of asynchronous copies since the process started (see copies above): the
 * most device-to-host copies in flight at once, the most host-to-device ones, and how many were
 * queued while one of the other direction was in flight. */
EXPORT void hoop_cuda_double_copy_stats(long *most_d2h, long *most_h2d, long *crossed)
{
    *most_d2h = atomic_load(&copies.most[D2H]);
    *most_h2d = atomic_load(&copies.most[H2D]);
    *crossed = atomic_load(&copies.crossed);
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
