/* CUDA device memory in the memory layer: whether a call's buffers are device memory, the CUDA
 * module (libhoop-cuda.so) loaded the first time they may be, and HOOP__MEM_CUDA's table, which
 * calls the module. libhoop links no CUDA library, so it loads and runs where there is none.
 *
 * Device memory exists only through the CUDA driver, libcuda.so.1, which the CUDA runtime opens
 * at its first call. Until the driver is in the process no pointer can be device memory, and a
 * call pays one look at the loader's count of loaded objects (dl_iterate_phdr, stopped at the
 * first object: tens of nanoseconds); the objects' names are searched for the driver only when
 * that count has changed. Buffers in the process's brk heap skip even that: the heap is one
 * mapping of host memory from its start to the current break, which no other mapping, device
 * memory included, can overlap. Once the driver is there, the module is loaded and asked about each
 * call's buffers (cudaPointerGetAttributes), with a small cache of device allocations.
 *
 * The state is per communicator (hoop_comm.cuda), made on first need. Testing only (test hooks,
 * docs/configuration.md): HOOP_TEST_CUDA_MODULE names another module (the test double),
 * HOOP_TEST_CUDA_DRIVER the library that counts as the driver. */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda/module.h"
#include "runtime/runtime.h"

enum { NO_DRIVER, READY, BROKEN };
#define RANGES 8
#define SLOTS 1024 /* stream-ordered calls in flight at once; one more waits for one to end */

/* One stream-ordered call (docs/cuda.md, "The mechanism"): its pinned buffer, which holds what
 * the call reads and writes while it runs on the host; the event recorded on the user's stream
 * after the copy in (the call starts once it is reached) and the one after the copy out (the
 * buffer and the word may be reused or freed once it is reached); the value the word takes when
 * the call ends, and the copy out that follows the stream's wait for it. */
typedef struct order_slot {
    void *ev_in, *ev_out;
    uint32_t value;
    int busy;       /* posted, not ended */
    int out_owed;   /* the copy out is not queued yet (or was queued and not known done) */
    int out_queued; /* the copy out and ev_out are queued */
    double since;   /* when the engine first found it at the head, waiting; 0 before */
    char *buf;      /* pinned, from host_alloc */
    size_t cap;
    void *stream;  /* the user's stream */
    void *dev_out; /* the copy out: buf + out_off to dev_out, out_len bytes */
    size_t out_off, out_len;
} order_slot_t;
#define NO_COUNT ULLONG_MAX /* a loader that keeps no count: look every time */

struct hoop__cuda {
    pthread_mutex_t mu;        /* all but the two atomics: the posting thread's, briefly */
    const hoop__config_t *cfg; /* the communicator's: its test hooks name the module and driver */
    atomic_int state;          /* NO_DRIVER, READY (the module answers) or BROKEN (why says) */
    atomic_int failed;         /* an operation on device memory failed (hoop__mem_failed) */
    _Atomic unsigned long long libs; /* NO_DRIVER: the loader's count when it was looked for */
    uintptr_t heap_lo;               /* where the brk heap starts; 0 if unknown */
    void *dl;
    const hoop_cuda_module_t *t;
    hoop_cuda_ctx_t *ctx; /* on the communicator's device, from its first device buffer on */
    int device;
    char why[400]; /* BROKEN: what is missing, for the sentence of a device buffer */
    /* BROKEN: the driver's own cuPointerGetAttribute, so that device buffers still get the
     * sentence rather than a crash, and host buffers still work. */
    int (*cu_attr)(void *data, int attribute, unsigned long long ptr);
    struct {
        uintptr_t base, end;
        int device;
    } range[RANGES];
    unsigned next;
    /* Stream-ordered calls, made by the first one: one pinned word per slot that the user's
     * streams wait for. The words only grow (a slot's next call waits for a larger value), so a
     * stream that reaches its wait after the slot was reused passes, rightly: its call ended
     * before the reuse. Slots [0, nslots) have been used. */
    uint32_t *words;
    order_slot_t slot[SLOTS];
    int nslots;
    /* Inside a group (hoop_group_start), the slots whose streams' waits and copies out are held
     * back until the group's end. */
    int *deferred;
    int ndeferred, capdeferred;
    /* Staging's copy streams (runtime.h), device to host [0] and host to device [1], and the
     * event that orders them after a call's stream; under exec. */
    void *copy_stream[2];
    void *copy_gate;
    int copy_stuck; /* a drain timed out: the gate may still be queued, so it is kept */
    /* The CUDA IPC path (runtime.h): this rank's area and handle, the peers' areas opened here
     * (by rank, with the handle each was opened from). */
    void *ipc_area;
    size_t ipc_cap;
    unsigned char ipc_handle[HOOP__CUDA_IPC_HANDLE];
    struct {
        void *p;
        unsigned char handle[HOOP__CUDA_IPC_HANDLE];
        void *ev[HOOP__IPC_EVENTS]; /* its events opened here, from ev_handle */
        unsigned char ev_handle[HOOP__IPC_EVENTS][HOOP__CUDA_IPC_HANDLE];
    } * peer;
    /* The path's stream, where a call's copies and kernels queue, this rank's events (their
     * handles go to the peers), and two local events: the gate that orders the stream after a
     * call's stream, and the one the end of a call polls. */
    void *ipc_stream, *ipc_gate, *ipc_fin;
    void *ipc_ev[HOOP__IPC_EVENTS];
    unsigned char ipc_ev_handle[HOOP__IPC_EVENTS][HOOP__CUDA_IPC_HANDLE];
};
_Static_assert(HOOP__IPC_HANDLE == HOOP__CUDA_IPC_HANDLE, "one handle size");

/* ---- is the driver in the process? ---- */

static int count_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    size_t need = offsetof(struct dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds;
    *(unsigned long long *)data = size >= need ? info->dlpi_adds : NO_COUNT;
    return 1;
}

static unsigned long long loaded_count(void)
{
    unsigned long long n = NO_COUNT;
    dl_iterate_phdr(count_cb, &n);
    return n;
}

typedef struct {
    const char *base; /* the file name looked for */
    char path[PATH_MAX];
} find_t;

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s != NULL ? s + 1 : p;
}

static int find_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    find_t *f = data;
    if (info->dlpi_name == NULL || strcmp(base_name(info->dlpi_name), f->base) != 0) return 0;
    snprintf(f->path, sizeof f->path, "%s", info->dlpi_name);
    return 1;
}

static const char *driver_name(const struct hoop__cuda *st)
{
    const char *d = st->cfg->test_cuda_driver;
    return d[0] != '\0' ? d : "libcuda.so.1";
}

/* ---- loading the module ---- */

/* libhoop-cuda.so beside the libhoop this code is in, else the loader's search. */
static void module_path(const struct hoop__cuda *st, char *out, size_t n)
{
    const char *m = st->cfg->test_cuda_module;
    if (m[0] != '\0') {
        snprintf(out, n, "%s", m);
        return;
    }
    Dl_info di;
    if (dladdr((void *)hoop__mem_detect, &di) != 0 && di.dli_fname != NULL &&
        strchr(di.dli_fname, '/') != NULL) {
        int dir = (int)(base_name(di.dli_fname) - di.dli_fname);
        snprintf(out, n, "%.*slibhoop-cuda.so", dir, di.dli_fname);
        if (access(out, F_OK) == 0) return;
    }
    snprintf(out, n, "libhoop-cuda.so");
}

/* Leaves st READY, or BROKEN with the reason in why. Under mu. */
static void load_module(struct hoop__cuda *st, const char *driver)
{
    char path[PATH_MAX];
#ifndef HOOP__CUDA_BUILT
    if (st->cfg->test_cuda_module[0] == '\0') {
        snprintf(st->why, sizeof st->why,
                 "this libhoop was built without CUDA (no nvcc at build time: rebuild with "
                 "-Dcuda=enabled)");
        goto broken;
    }
#endif
    module_path(st, path, sizeof path);
    /* Never unloaded (RTLD_NODELETE): its CUDA runtime does not survive being unloaded and
     * loaded again in one process; a communicator's dlclose only drops its reference. */
    st->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (st->dl == NULL) {
        snprintf(st->why, sizeof st->why, "the CUDA module cannot be loaded: %.360s", dlerror());
        goto broken;
    }
    hoop_cuda_entry_fn entry = (hoop_cuda_entry_fn)dlsym(st->dl, HOOP__CUDA_ENTRY);
    const hoop_cuda_module_t *t = entry != NULL ? entry() : NULL;
    if (t == NULL || t->abi != HOOP__CUDA_ABI || t->size < sizeof(hoop_cuda_module_t)) {
        snprintf(st->why, sizeof st->why,
                 "%.250s is not a CUDA module of this libhoop (interface %u, this libhoop's is %u)",
                 path, t != NULL ? t->abi : 0, HOOP__CUDA_ABI);
        goto broken;
    }
    st->t = t;
    atomic_store_explicit(&st->state, READY, memory_order_release);
    return;
broken:;
    /* The driver's own classification, from the copy already loaded. */
    void *drv = dlopen(driver, RTLD_LAZY | RTLD_NOLOAD);
    if (drv != NULL) {
        *(void **)&st->cu_attr = dlsym(drv, "cuPointerGetAttribute");
        dlclose(drv); /* RTLD_NOLOAD took a reference; the driver stays loaded by its user */
    }
    atomic_store_explicit(&st->state, BROKEN, memory_order_release);
}

/* A module whose runtime cannot classify (a driver older than the runtime, say) is as good as
 * none: the driver's classification takes over. Under mu. */
static void module_failed(struct hoop__cuda *st, const char *err)
{
    /* t stays: calls already given device memory may still be queued and use it. */
    snprintf(st->why, sizeof st->why, "%.60s: %.330s", st->t->name, err);
    void *drv = dlopen(driver_name(st), RTLD_LAZY | RTLD_NOLOAD);
    if (drv != NULL) {
        *(void **)&st->cu_attr = dlsym(drv, "cuPointerGetAttribute");
        dlclose(drv);
    }
    atomic_store_explicit(&st->state, BROKEN, memory_order_release);
}

/* NO_DRIVER: looks for the driver among the loaded objects once their count has changed, and
 * loads the module if it is there. Under mu. */
static void probe(struct hoop__cuda *st)
{
    unsigned long long now = loaded_count();
    if (now != NO_COUNT && now == atomic_load_explicit(&st->libs, memory_order_relaxed)) return;
    find_t f = {.base = base_name(driver_name(st))};
    if (dl_iterate_phdr(find_cb, &f) == 0) {
        atomic_store_explicit(&st->libs, now, memory_order_relaxed);
        return;
    }
    load_module(st, f.path);
}

/* ---- classification ---- */

enum { IS_HOST = -1, UNKNOWN = -2 };

/* The device of the allocation holding p, IS_HOST, or UNKNOWN (err says why). Under mu. */
static int device_of(struct hoop__cuda *st, const void *p, char *err, size_t errlen)
{
    uintptr_t a = (uintptr_t)p;
    for (int i = 0; i < RANGES; i++)
        if (a >= st->range[i].base && a < st->range[i].end) return st->range[i].device;
    if (atomic_load_explicit(&st->state, memory_order_relaxed) == READY) {
        hoop_cuda_ptr_t info;
        if (st->t->classify(p, &info, err, errlen) != 0) {
            module_failed(st, err);
            return device_of(st, p, err, errlen); /* BROKEN now: the driver says */
        }
        if (info.type != HOOP__CUDA_PTR_DEVICE) return IS_HOST;
        /* Device allocations are cached by extent: the driver keeps their address ranges
         * reserved, so an address it called device memory does not turn into host memory. */
        if (info.size > 0) {
            unsigned k = st->next++ % RANGES;
            st->range[k].base = info.base;
            st->range[k].end = info.base + info.size;
            st->range[k].device = info.device;
        }
        return info.device;
    }
    /* BROKEN: the driver says (CU_POINTER_ATTRIBUTE_MEMORY_TYPE); an error (host memory it
     * does not know, a driver never initialized) means host. */
    unsigned type = 0;
    if (st->cu_attr == NULL) return IS_HOST;
    if (st->cu_attr(&type, 2, (unsigned long long)a) != 0) return IS_HOST;
    return type == 2 /* CU_MEMORYTYPE_DEVICE */ || type == 4 /* UNIFIED */ ? 0 : IS_HOST;
}

/* The start of the brk heap ("start_brk", field 47 of /proc/self/stat), or 0. */
static uintptr_t heap_start(void)
{
    FILE *f = fopen("/proc/self/stat", "re");
    if (f == NULL) return 0;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* Fields from the third on follow the last ')' (the command's name may hold any). */
    const char *p = strrchr(buf, ')');
    if (p == NULL) return 0;
    p++;
    for (int field = 3; field <= 47; field++) {
        while (*p == ' ') p++;
        if (field == 47) {
            char *end;
            unsigned long long v = strtoull(p, &end, 10);
            return end != p ? (uintptr_t)v : 0;
        }
        while (*p != ' ' && *p != '\0') p++;
        if (*p == '\0') return 0;
    }
    return 0;
}

/* Whether p is NULL or in the brk heap as it is now: host memory, whatever was loaded. */
static int in_heap(const struct hoop__cuda *st, const void *p)
{
    uintptr_t a = (uintptr_t)p;
    return p == NULL || (st->heap_lo != 0 && a >= st->heap_lo && a < (uintptr_t)sbrk(0));
}

static struct hoop__cuda *state_of(hoop_comm_t *c)
{
    struct hoop__cuda *st = atomic_load_explicit(&c->cuda, memory_order_acquire);
    if (st != NULL) return st;
    st = calloc(1, sizeof *st);
    if (st == NULL) return NULL;
    pthread_mutex_init(&st->mu, NULL);
    st->cfg = &c->cfg;
    atomic_init(&st->state, NO_DRIVER);
    atomic_init(&st->failed, 0);
    atomic_init(&st->libs, NO_COUNT);
    st->heap_lo = heap_start();
    struct hoop__cuda *none = NULL;
    if (!atomic_compare_exchange_strong(&c->cuda, &none, st)) { /* another thread was first */
        pthread_mutex_destroy(&st->mu);
        free(st);
        return none;
    }
    return st;
}

/* Once per process, at HOOP_DEBUG=INFO: the module, and the driver its runtime needs. */
static void say_floor(hoop_comm_t *c, const struct hoop__cuda *st)
{
    static atomic_int said;
    if (st->t == NULL || atomic_exchange(&said, 1)) return;
    int rt = 0, dv = 0;
    st->t->versions(&rt, &dv);
    HOOP__INFO(&c->log,
               "CUDA module %s: CUDA runtime %d.%d, which needs a driver for CUDA %d.%d or newer "
               "(R580 or later for 13.0); the driver here is for CUDA %d.%d%s",
               st->t->name, rt / 1000, rt % 1000 / 10, rt / 1000, rt % 1000 / 10, dv / 1000,
               dv % 1000 / 10, dv >= rt ? "" : ": too old, device buffers will be refused");
}

static hoop_result_t detect_locked(hoop_comm_t *c, struct hoop__cuda *st, const void *s,
                                   const void *r, hoop__mem_type_t *type, const char *fn)
{
    if (atomic_load_explicit(&st->state, memory_order_relaxed) == NO_DRIVER) {
        probe(st);
        say_floor(c, st);
    }
    if (atomic_load_explicit(&st->state, memory_order_relaxed) == NO_DRIVER) return HOOP_OK;
    char err[400] = "";
    int ds = s != NULL ? device_of(st, s, err, sizeof err) : IS_HOST;
    int dr = r == s ? ds : r != NULL ? device_of(st, r, err, sizeof err) : IS_HOST;
    if (ds == IS_HOST && dr == IS_HOST) return HOOP_OK;
    const char *which = ds != IS_HOST ? (r != NULL && s != r ? "sendbuf" : "the buffer")
                                      : "recvbuf";
    if (atomic_load_explicit(&st->state, memory_order_relaxed) == BROKEN)
        return hoop__comm_error(c, HOOP_ERR_UNSUPPORTED, "%s: %s is CUDA device memory, but %s", fn,
                                which, st->why);
    if ((s != NULL && ds == IS_HOST) || (r != NULL && dr == IS_HOST))
        return hoop__comm_error(c, HOOP_ERR_UNSUPPORTED,
                                "%s: %s is CUDA device memory and %s host memory: a call's "
                                "buffers must be all host or all device memory",
                                fn, ds != IS_HOST ? "sendbuf" : "recvbuf",
                                ds != IS_HOST ? "recvbuf" : "sendbuf");
    int dev = ds != IS_HOST ? ds : dr;
    if (s != NULL && r != NULL && ds != dr)
        return hoop__comm_error(c, HOOP_ERR_UNSUPPORTED,
                                "%s: sendbuf is on CUDA device %d and recvbuf on device %d", fn, ds,
                                dr);
    if (st->ctx == NULL) {
        st->ctx = st->t->open(dev, err, sizeof err);
        if (st->ctx == NULL)
            return hoop__comm_error(c, HOOP_ERR_UNSUPPORTED, "%s: %s: %s", fn, st->t->name, err);
        st->device = dev;
    } else if (dev != st->device) {
        return hoop__comm_error(c, HOOP_ERR_UNSUPPORTED,
                                "%s: %s is on CUDA device %d, and this communicator's device "
                                "buffers so far were on device %d (one device per communicator)",
                                fn, which, dev, st->device);
    }
    *type = HOOP__MEM_CUDA;
    return HOOP_OK;
}

hoop_result_t hoop__mem_detect(hoop_comm_t *c, const void *s, const void *r, hoop__mem_type_t *type,
                               const char *fn)
{
    *type = HOOP__MEM_HOST;
    if (s == NULL && r == NULL) return HOOP_OK;
    struct hoop__cuda *st = state_of(c);
    if (st == NULL) return HOOP_OK; /* no memory for the state: nothing was loaded either */
    /* The fast paths of host calls: buffers in the heap; no driver, and nothing loaded since
     * it was missed. */
    if (in_heap(st, s) && in_heap(st, r)) return HOOP_OK;
    if (atomic_load_explicit(&st->state, memory_order_acquire) == NO_DRIVER) {
        unsigned long long now = loaded_count();
        if (now != NO_COUNT && now == atomic_load_explicit(&st->libs, memory_order_relaxed))
            return HOOP_OK;
    }
    pthread_mutex_lock(&st->mu);
    hoop_result_t rc = detect_locked(c, st, s, r, type, fn);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

static void order_close(hoop_comm_t *c, struct hoop__cuda *st);

void hoop__cuda_close(hoop_comm_t *c)
{
    struct hoop__cuda *st = atomic_load(&c->cuda);
    if (st == NULL) return;
    if (st->ctx != NULL) order_close(c, st);
    if (st->ctx != NULL) { /* staging drained them (hoop__stage_free) */
        for (int d = 0; d < 2; d++)
            if (st->copy_stream[d] != NULL) st->t->stream_destroy(st->ctx, st->copy_stream[d]);
        if (st->copy_gate != NULL && !st->copy_stuck) st->t->event_destroy(st->ctx, st->copy_gate);
    }
    /* The IPC stream first: work still queued there (a call that failed while its stream
     * waited for a dead peer) reads the areas and waits for the events; CUDA releases a
     * destroyed stream's and event's resources once the device is done with them. */
    if (st->ctx != NULL && st->ipc_stream != NULL) st->t->stream_destroy(st->ctx, st->ipc_stream);
    if (st->ctx != NULL && st->peer != NULL)
        for (int q = 0; q < c->size; q++) {
            if (st->peer[q].p != NULL) st->t->ipc_close(st->ctx, st->peer[q].p);
            for (int k = 0; k < HOOP__IPC_EVENTS; k++)
                if (st->peer[q].ev[k] != NULL) st->t->event_destroy(st->ctx, st->peer[q].ev[k]);
        }
    free(st->peer);
    if (st->ctx != NULL) {
        for (int k = 0; k < HOOP__IPC_EVENTS; k++)
            if (st->ipc_ev[k] != NULL) st->t->event_destroy(st->ctx, st->ipc_ev[k]);
        if (st->ipc_gate != NULL) st->t->event_destroy(st->ctx, st->ipc_gate);
        if (st->ipc_fin != NULL) st->t->event_destroy(st->ctx, st->ipc_fin);
    }
    if (st->ipc_area != NULL) st->t->ipc_free(st->ctx, st->ipc_area);
    if (st->ctx != NULL) st->t->close(st->ctx);
    if (st->dl != NULL) dlclose(st->dl);
    pthread_mutex_destroy(&st->mu);
    free(st->deferred);
    free(st);
    atomic_store(&c->cuda, NULL);
}

/* ---- HOOP__MEM_CUDA: the memory layer's table over the module ---- */

/* Calls reach these only after hoop__mem_detect gave their buffers this type: the module and
 * its context exist, and are not changed while the communicator lives. */
static struct hoop__cuda *cu(hoop_comm_t *c)
{
    return atomic_load_explicit(&c->cuda, memory_order_acquire);
}

static void check(hoop_comm_t *c, struct hoop__cuda *st, int rc, const char *what)
{
    if (rc == 0) return;
    atomic_store(&st->failed, 1);
    hoop__comm_fail(c, HOOP_ERR_SYSTEM, "CUDA %s on rank %d failed: %s", what, c->rank,
                    st->t->error(st->ctx));
}

hoop_result_t hoop__mem_failed(hoop_comm_t *c)
{
    struct hoop__cuda *st = atomic_load_explicit(&c->cuda, memory_order_acquire);
    return st != NULL && atomic_load(&st->failed) ? HOOP_ERR_SYSTEM : HOOP_OK;
}

/* Calls on device memory follow the legacy default stream (the module's stream NULL), after
 * the work the application queued there. A stream-ordered call never gets here: it runs on the
 * host (see "stream-ordered calls" below). */

static void cuda_copy(const hoop__call_t *call, void *dst, const void *src, size_t n)
{
    hoop_comm_t *c = call->comm;
    struct hoop__cuda *st = cu(c);
    check(c, st, st->t->copy(st->ctx, dst, src, n, NULL), "copy");
}

static void cuda_move(const hoop__call_t *call, void *dst, const void *src, size_t n)
{
    hoop_comm_t *c = call->comm;
    struct hoop__cuda *st = cu(c);
    check(c, st, st->t->move(st->ctx, dst, src, n, NULL), "copy");
}

static void cuda_reduce(const hoop__call_t *call, void *out, const void *a, const void *b,
                        size_t count, hoop_dtype_t dt, hoop_op_t op)
{
    hoop_comm_t *c = call->comm;
    struct hoop__cuda *st = cu(c);
    check(c, st, st->t->reduce(st->ctx, out, a, b, count, dt, op, NULL), "reduction");
}

static void cuda_avg_finish(const hoop__call_t *call, void *buf, size_t count, hoop_dtype_t dt,
                            int divisor)
{
    hoop_comm_t *c = call->comm;
    struct hoop__cuda *st = cu(c);
    check(c, st, st->t->avg_finish(st->ctx, buf, count, dt, divisor, NULL), "average");
}

static void *cuda_alloc(hoop_comm_t *c, size_t bytes)
{
    struct hoop__cuda *st = cu(c);
    return st->t->alloc(st->ctx, bytes);
}

static void cuda_free(hoop_comm_t *c, void *p)
{
    struct hoop__cuda *st = cu(c);
    st->t->free(st->ctx, p);
}

static void *cuda_host_alloc(hoop_comm_t *c, size_t bytes)
{
    struct hoop__cuda *st = cu(c);
    return st->t->host_alloc(st->ctx, bytes);
}

static void cuda_host_free(hoop_comm_t *c, void *p)
{
    struct hoop__cuda *st = cu(c);
    st->t->host_free(st->ctx, p);
}

/* ---- stream-ordered calls ----
 * A call ordered on a user's stream runs on the host, on a pinned copy of its buffers, so that
 * the stream's wait for its word depends on host work only. Were the call's copies and kernels
 * queued on the device instead, after the stream's wait was queued, they could land on a hardware
 * queue behind that wait (streams share CUDA_DEVICE_MAX_CONNECTIONS queues; one with 1) and
 * the wait would never end. At posting, on the user's stream: a copy of what the call reads into
 * the slot's buffer, then ev_in. When the call is queued: the wait for the word, the copy of what
 * it wrote back into the user's buffers, then ev_out. The engine runs the call on host memory
 * once ev_in is reached and sets the word when it ends. docs/cuda.md, "The mechanism". */

static void pause_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

/* Polls ev until reached, for at most seconds: 1, 0 when the time is up, -1 on an error. */
static int poll_event(struct hoop__cuda *st, void *ev, double seconds)
{
    double start = hoop__now();
    for (unsigned i = 0;; i++) {
        int q = st->t->event_query(st->ctx, ev);
        if (q != 0) return q;
        if ((i & 15) == 15 && hoop__now() - start > seconds) return 0;
        if (i > 64) pause_us(20); /* short waits spin, long ones sleep */
    }
}

/* The user's streams may still be about to read a word or a buffer: wait until each slot's copy
 * out has passed (every call has ended by now, so its word is set) before they go. One timeout
 * for them all: a stream that never gets there holds up the others' slots too. */
static void order_close(hoop_comm_t *c, struct hoop__cuda *st)
{
    int keep = 0;
    double start = hoop__now();
    for (int k = 0; k < st->nslots; k++) {
        order_slot_t *o = &st->slot[k];
        double left = c->timeout_s - (hoop__now() - start);
        int kept = o->out_queued && poll_event(st, o->ev_out, left > 0 ? left : 0) != 1;
        keep |= kept;
        if (o->ev_in != NULL) st->t->event_destroy(st->ctx, o->ev_in);
        if (o->ev_out != NULL) st->t->event_destroy(st->ctx, o->ev_out);
        /* A stream that never got there (its own earlier work hangs) could still copy from the
         * buffer: it is left allocated rather than freed under it. */
        if (o->buf != NULL && !kept) st->t->host_free(st->ctx, o->buf);
    }
    if (st->words != NULL && !keep) st->t->host_free(st->ctx, st->words);
}

/* Whether slot k may take a new call: its call ended and its copy out is done. Under mu. */
static int slot_free(struct hoop__cuda *st, int k)
{
    order_slot_t *o = &st->slot[k];
    if (o->busy || (o->out_owed && !o->out_queued)) return 0;
    if (o->out_queued && st->t->event_query(st->ctx, o->ev_out) != 1) return 0;
    o->out_owed = o->out_queued = 0;
    return 1;
}

/* A slot for a call that needs bytes of pinned buffer: a free one whose buffer is large enough,
 * else the free one with the largest, else a new one; -1 when none is free, -2 when events
 * cannot be made. Under mu. */
static int slot_take(struct hoop__cuda *st, size_t bytes)
{
    int best = -1;
    for (int k = 0; k < st->nslots; k++) {
        if (!slot_free(st, k)) continue;
        if (st->slot[k].cap >= bytes) {
            best = k;
            break;
        }
        if (best < 0 || st->slot[k].cap > st->slot[best].cap) best = k;
    }
    if (best < 0 && st->nslots < SLOTS) best = st->nslots++;
    if (best < 0) return -1;
    order_slot_t *o = &st->slot[best];
    if (o->ev_in == NULL) o->ev_in = st->t->event_create(st->ctx);
    if (o->ev_out == NULL) o->ev_out = st->t->event_create(st->ctx);
    if (o->ev_in == NULL || o->ev_out == NULL) return -2;
    return best;
}

/* Gives slot k a buffer of at least bytes: the old one is kept until the communicator goes (a
 * free of pinned memory waits for the whole device). Made at posting, before the call's own wait
 * is queued. Under mu. */
static int slot_buffer(struct hoop__cuda *st, order_slot_t *o, size_t bytes)
{
    if (o->cap >= bytes) return 0;
    size_t cap = o->cap * 2 > bytes ? o->cap * 2 : bytes;
    if (cap < 4096) cap = 4096;
    char *b = st->t->host_alloc(st->ctx, cap);
    if (b == NULL) return -1;
    if (o->buf != NULL) st->t->host_free(st->ctx, o->buf);
    o->buf = b;
    o->cap = cap;
    return 0;
}

/* The stream's capture, refused before anything is queued on it. */
static hoop_result_t refuse_capture(hoop_comm_t *c, struct hoop__cuda *st, void *stream,
                                    const char *fn)
{
    int cap = st->t->stream_capturing(st->ctx, stream);
    if (cap == 0) return HOOP_OK;
    if (cap < 0)
        return hoop__comm_error(c, HOOP_ERR_UNSUPPORTED,
                                "%s: cannot tell whether stream %p is being captured into a CUDA "
                                "graph: %s",
                                fn, stream, st->t->error(st->ctx));
    return hoop__comm_error(c, HOOP_ERR_UNSUPPORTED,
                            "%s: stream %p is being captured into a CUDA graph, and hoop's "
                            "stream-ordered calls cannot be captured: their work runs on the "
                            "host, which a replay of the graph would not run again. Call it "
                            "outside the captured region (torch.compile: a mode other than "
                            "\"reduce-overhead\", or keep the collective out of the graph)",
                            fn, stream);
}

hoop_result_t hoop__mem_order_post(hoop_comm_t *c, hoop__call_t *call, void *stream, const char *fn)
{
    struct hoop__cuda *st = cu(c);
    const hoop_cuda_module_t *t = st->t;
    hoop_result_t rc = refuse_capture(c, st, stream, fn);
    if (rc != HOOP_OK) return rc;
    size_t rd, wr;
    hoop__call_extents(call, &rd, &wr);
    /* The buffer's layout keeps the call's own: what it reads and writes, where the two overlap
     * (in place), one range at the same offsets. */
    uintptr_t s = (uintptr_t)call->sendbuf, r = (uintptr_t)call->recvbuf;
    int overlap = (rd > 0 && wr > 0 && s < r + wr && r < s + rd) || (s == r && s != 0);
    uintptr_t lo = overlap ? (s < r ? s : r) : 0;
    size_t span = overlap ? (s + rd > r + wr ? s + rd : r + wr) - lo : 0;
    size_t s_off = overlap ? s - lo : 0, r_off = overlap ? r - lo : (rd + 255) / 256 * 256;
    size_t bytes = overlap ? span : r_off + wr;
    double start = hoop__now();
    pthread_mutex_lock(&st->mu);
    if (st->words == NULL) {
        st->words = t->host_alloc(st->ctx, SLOTS * sizeof(uint32_t));
        if (st->words != NULL) memset(st->words, 0, SLOTS * sizeof(uint32_t));
    }
    int k = st->words != NULL ? slot_take(st, bytes) : -2;
    while (k == -1) { /* SLOTS calls in flight: the oldest ends soon, on the progress thread */
        if (st->ndeferred >= SLOTS) {
            /* Every slot is held by this group until its end, which only this thread can
             * reach: none would come free. */
            pthread_mutex_unlock(&st->mu);
            return hoop__comm_error(c, HOOP_ERR_UNSUPPORTED,
                                    "%s: a group (hoop_group_start) holds at most %d "
                                    "stream-ordered calls until hoop_group_end, and this would be "
                                    "one more: end the group first",
                                    fn, SLOTS);
        }
        pthread_mutex_unlock(&st->mu);
        if (hoop__now() - start > c->timeout_s)
            return hoop__comm_error(c, HOOP_ERR_TIMEOUT,
                                    "%s: %d stream-ordered calls were in flight and none ended "
                                    "within %.1f s",
                                    fn, SLOTS, c->timeout_s);
        pause_us(50);
        pthread_mutex_lock(&st->mu);
        k = slot_take(st, bytes);
    }
    order_slot_t *o = k >= 0 ? &st->slot[k] : NULL;
    if (o == NULL || slot_buffer(st, o, bytes) != 0) {
        pthread_mutex_unlock(&st->mu);
        return hoop__comm_error(c, HOOP_ERR_SYSTEM,
                                "%s: cannot set up the stream ordering on rank %d: %s", fn, c->rank,
                                t->error(st->ctx));
    }
    o->busy = 1;
    o->out_owed = 1;
    o->out_queued = 0;
    o->since = 0;
    o->value = __atomic_load_n(&st->words[k], __ATOMIC_RELAXED) + 1;
    o->stream = stream;
    o->dev_out = wr > 0 ? call->recvbuf : NULL;
    o->out_off = r_off;
    o->out_len = wr;
    /* What the call reads, once the stream's earlier work wrote it (all of an in-place span: the
     * call may keep what it does not write). */
    int e = 0;
    if (overlap && rd > 0)
        e = t->copy_async(st->ctx, o->buf, (const void *)lo, span, stream);
    else if (rd > 0)
        e = t->copy_async(st->ctx, o->buf + s_off, call->sendbuf, rd, stream);
    if (e == 0) e = t->event_record(st->ctx, o->ev_in, stream);
    if (e != 0) o->out_owed = o->busy = 0;
    pthread_mutex_unlock(&st->mu);
    if (e != 0) {
        return hoop__comm_error(c, HOOP_ERR_SYSTEM,
                                "%s: cannot order the call on stream %p on rank %d: %s", fn, stream,
                                c->rank, t->error(st->ctx));
    }
    call->order = k + 1;
    call->mem = HOOP__MEM_HOST;
    if (call->sendbuf != NULL) call->sendbuf = o->buf + s_off;
    if (call->recvbuf != NULL) call->recvbuf = o->buf + r_off;
    return HOOP_OK;
}

/* The stream's wait for slot k's word, the copy out and ev_out. Under mu. */
static int queue_out(struct hoop__cuda *st, int k)
{
    order_slot_t *o = &st->slot[k];
    const hoop_cuda_module_t *t = st->t;
    int e = t->stream_wait_word(st->ctx, o->stream, &st->words[k], o->value);
    if (e == 0 && o->out_len > 0)
        e = t->copy_async(st->ctx, o->dev_out, o->buf + o->out_off, o->out_len, o->stream);
    if (e == 0) e = t->event_record(st->ctx, o->ev_out, o->stream);
    /* Queued or not, the slot is reusable once ev_out says so (a failure is the
     * communicator's, which goes). */
    o->out_queued = e == 0;
    if (e != 0) o->out_owed = 0;
    return e;
}

hoop_result_t hoop__mem_order_queued(hoop_comm_t *c, const hoop__call_t *call, const char *fn)
{
    struct hoop__cuda *st = cu(c);
    int k = call->order - 1;
    pthread_mutex_lock(&st->mu);
    int e = 0;
    if (c->group > 0) {
        /* In a group, no call waits for another of the group: the stream's waits come at its
         * end, after every call's copy in (a receive before a send on one stream would
         * otherwise hold the send until the receive is done, on every rank of a ring). */
        if (st->ndeferred == st->capdeferred) {
            int ncap = st->capdeferred ? 2 * st->capdeferred : 16;
            int *nd = realloc(st->deferred, (size_t)ncap * sizeof *nd);
            if (nd == NULL) {
                pthread_mutex_unlock(&st->mu);
                hoop__comm_fail(c, HOOP_ERR_NO_MEMORY, "%s: out of memory", fn);
                return HOOP_ERR_NO_MEMORY;
            }
            st->deferred = nd;
            st->capdeferred = ncap;
        }
        st->deferred[st->ndeferred++] = k;
    } else {
        e = queue_out(st, k);
    }
    pthread_mutex_unlock(&st->mu);
    /* The call is queued: a stream that does not wait for it would run ahead of its result, so
     * the communicator fails, and every rank learns why. */
    if (e != 0) {
        hoop__comm_fail(c, HOOP_ERR_SYSTEM,
                        "%s: cannot make stream %p wait for the call on rank %d: %s", fn,
                        st->slot[k].stream, c->rank, st->t->error(st->ctx));
        return HOOP_ERR_SYSTEM;
    }
    return HOOP_OK;
}

hoop_result_t hoop__mem_group_end(hoop_comm_t *c)
{
    struct hoop__cuda *st = cu(c);
    if (st == NULL) return HOOP_OK;
    pthread_mutex_lock(&st->mu);
    int rc = 0;
    for (int i = 0; i < st->ndeferred; i++) {
        int r = queue_out(st, st->deferred[i]);
        if (r != 0 && rc == 0) rc = r;
    }
    st->ndeferred = 0;
    pthread_mutex_unlock(&st->mu);
    if (rc != 0) {
        hoop__comm_fail(c, HOOP_ERR_SYSTEM,
                        "hoop_group_end: cannot make a stream wait for the group's calls on rank "
                        "%d: %s",
                        c->rank, st->t->error(st->ctx));
        return HOOP_ERR_SYSTEM;
    }
    return HOOP_OK;
}

int hoop__mem_order_ready(const hoop__call_t *call)
{
    hoop_comm_t *c = call->comm;
    struct hoop__cuda *st = cu(c);
    order_slot_t *o = &st->slot[call->order - 1];
    if (st->t->event_query(st->ctx, o->ev_in) != 0) return 1; /* reached, or an error to report */
    double now = hoop__now();
    if (o->since == 0) o->since = now;
    return now - o->since > c->timeout_s; /* then hoop__mem_order_start says so */
}

hoop_result_t hoop__mem_order_start(const hoop__call_t *call)
{
    hoop_comm_t *c = call->comm;
    struct hoop__cuda *st = cu(c);
    order_slot_t *o = &st->slot[call->order - 1];
    double left = c->timeout_s - (o->since > 0 ? hoop__now() - o->since : 0);
    int q = poll_event(st, o->ev_in, left > 0 ? left : 0);
    if (q == 1) return HOOP_OK;
    char what[128];
    hoop__call_describe(call, what, sizeof what);
    if (q == 0)
        hoop__comm_fail(c, HOOP_ERR_TIMEOUT,
                        "%s (call #%llu) on rank %d: the work queued on its stream before it did "
                        "not finish within %.1f s",
                        what, (unsigned long long)call->seq, c->rank, c->timeout_s);
    else
        hoop__comm_fail(c, HOOP_ERR_SYSTEM, "%s (call #%llu) on rank %d: CUDA event: %s", what,
                        (unsigned long long)call->seq, c->rank, st->t->error(st->ctx));
    return (hoop_result_t)atomic_load(&c->aborted);
}

/* Sets the call's word, so that its stream moves on, and frees its slot; cancelled: the call was
 * never queued, so no copy back is owed. */
static void order_release(hoop__call_t *call, int cancelled)
{
    if (call->order == 0) return;
    struct hoop__cuda *st = cu(call->comm);
    pthread_mutex_lock(&st->mu);
    order_slot_t *o = &st->slot[call->order - 1];
    /* Ended: the call's results are in the slot's buffer, for the stream's copy back. */
    __atomic_store_n(&st->words[call->order - 1], o->value, __ATOMIC_RELEASE);
    o->busy = 0;
    if (cancelled && !o->out_queued) o->out_owed = 0;
    pthread_mutex_unlock(&st->mu);
    call->order = 0;
}

void hoop__mem_order_end(hoop__call_t *call) { order_release(call, 0); }

void hoop__mem_order_cancel(hoop__call_t *call) { order_release(call, 1); }

/* ---- staging's copies ---- */

int hoop__cuda_stage_begin(const hoop__call_t *call)
{
    hoop_comm_t *c = call->comm;
    struct hoop__cuda *st = cu(c);
    const hoop_cuda_module_t *t = st->t;
    int rc = 0;
    for (int d = 0; d < 2 && rc == 0; d++)
        if (st->copy_stream[d] == NULL && (st->copy_stream[d] = t->stream_create(st->ctx)) == NULL)
            rc = -1;
    if (rc == 0 && st->copy_gate == NULL && (st->copy_gate = t->event_create(st->ctx)) == NULL)
        rc = -1;
    /* The streams never wait for the legacy default stream by themselves (they are made
     * cudaStreamNonBlocking): without this a copy could read a send buffer before the
     * application's kernel wrote it, or write a receive buffer it still reads. */
    if (rc == 0) rc = t->event_record(st->ctx, st->copy_gate, NULL);
    for (int d = 0; d < 2 && rc == 0; d++)
        rc = t->stream_wait_event(st->ctx, st->copy_stream[d], st->copy_gate);
    check(c, st, rc, "staging stream");
    return rc;
}

int hoop__cuda_stage_copy(const hoop__call_t *call, int to_device, void *dst, const void *src,
                          size_t n, void **ev)
{
    hoop_comm_t *c = call->comm;
    struct hoop__cuda *st = cu(c);
    const hoop_cuda_module_t *t = st->t;
    void *s = st->copy_stream[to_device != 0];
    int rc = 0;
    if (*ev == NULL && (*ev = t->event_create(st->ctx)) == NULL) rc = -1;
    if (rc == 0) rc = t->copy_async(st->ctx, dst, src, n, s);
    if (rc == 0) rc = t->event_record(st->ctx, *ev, s);
    check(c, st, rc, "copy");
    return rc;
}

int hoop__cuda_stage_query(hoop_comm_t *c, void *ev)
{
    struct hoop__cuda *st = cu(c);
    int q = st->t->event_query(st->ctx, ev);
    if (q < 0) check(c, st, -1, "copy");
    return q < 0 ? -1 : q != 0;
}

int hoop__cuda_stage_drain(hoop_comm_t *c, double seconds)
{
    struct hoop__cuda *st = cu(c);
    if (st == NULL || st->copy_gate == NULL) return 1;
    double start = hoop__now();
    for (int d = 0; d < 2; d++) {
        if (st->copy_stream[d] == NULL) continue;
        if (st->t->event_record(st->ctx, st->copy_gate, st->copy_stream[d]) != 0) return -1;
        double left = seconds - (hoop__now() - start);
        int q = poll_event(st, st->copy_gate, left > 0 ? left : 0);
        if (q != 1) {
            st->copy_stuck = 1;
            return q;
        }
    }
    return 1;
}

void hoop__cuda_stage_event_free(hoop_comm_t *c, void *ev)
{
    struct hoop__cuda *st = cu(c);
    st->t->event_destroy(st->ctx, ev);
}

/* ---- CUDA IPC ---- */

int hoop__cuda_ipc_area(hoop_comm_t *c, size_t want, void **area, size_t *cap, void *handle,
                        char *err, size_t errlen)
{
    struct hoop__cuda *st = cu(c);
    if (st->ipc_area == NULL) {
        st->ipc_area = st->t->ipc_alloc(st->ctx, want, st->ipc_handle);
        if (st->ipc_area == NULL) {
            snprintf(err, errlen, "cannot allocate its %zu-byte CUDA IPC area: %s", want,
                     st->t->error(st->ctx));
            return -1;
        }
        st->ipc_cap = want;
    }
    *area = st->ipc_area;
    *cap = st->ipc_cap;
    memcpy(handle, st->ipc_handle, HOOP__CUDA_IPC_HANDLE);
    return 0;
}

static int peers_made(hoop_comm_t *c, struct hoop__cuda *st, char *err, size_t errlen)
{
    if (st->peer == NULL && (st->peer = calloc((size_t)c->size, sizeof *st->peer)) == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

void *hoop__cuda_ipc_peer(hoop_comm_t *c, int peer, const void *handle, char *err, size_t errlen)
{
    struct hoop__cuda *st = cu(c);
    if (peers_made(c, st, err, errlen) != 0) return NULL;
    if (st->peer[peer].p != NULL) {
        if (memcmp(st->peer[peer].handle, handle, HOOP__CUDA_IPC_HANDLE) == 0)
            return st->peer[peer].p;
        st->t->ipc_close(st->ctx, st->peer[peer].p);
        st->peer[peer].p = NULL;
    }
    void *p = st->t->ipc_open(st->ctx, handle);
    if (p == NULL) {
        snprintf(err, errlen, "cannot open rank %d's CUDA IPC area: %s", peer,
                 st->t->error(st->ctx));
        return NULL;
    }
    st->peer[peer].p = p;
    memcpy(st->peer[peer].handle, handle, HOOP__CUDA_IPC_HANDLE);
    return p;
}

int hoop__cuda_ipc_events(hoop_comm_t *c, void *handles, char *err, size_t errlen)
{
    struct hoop__cuda *st = cu(c);
    for (int k = 0; k < HOOP__IPC_EVENTS; k++)
        if (st->ipc_ev[k] == NULL &&
            (st->ipc_ev[k] = st->t->ipc_event_create(st->ctx, st->ipc_ev_handle[k])) == NULL) {
            snprintf(err, errlen, "cannot make its CUDA IPC events: %s", st->t->error(st->ctx));
            return -1;
        }
    memcpy(handles, st->ipc_ev_handle, sizeof st->ipc_ev_handle);
    return 0;
}

int hoop__cuda_ipc_peer_events(hoop_comm_t *c, int peer, const void *handles, char *err,
                               size_t errlen)
{
    struct hoop__cuda *st = cu(c);
    if (peers_made(c, st, err, errlen) != 0) return -1;
    for (int k = 0; k < HOOP__IPC_EVENTS; k++) {
        const unsigned char *h = (const unsigned char *)handles + k * HOOP__CUDA_IPC_HANDLE;
        if (st->peer[peer].ev[k] != NULL) {
            if (memcmp(st->peer[peer].ev_handle[k], h, HOOP__CUDA_IPC_HANDLE) == 0) continue;
            st->t->event_destroy(st->ctx, st->peer[peer].ev[k]);
        }
        st->peer[peer].ev[k] = st->t->ipc_event_open(st->ctx, h);
        if (st->peer[peer].ev[k] == NULL) {
            snprintf(err, errlen, "cannot open rank %d's CUDA IPC events: %s", peer,
                     st->t->error(st->ctx));
            return -1;
        }
        memcpy(st->peer[peer].ev_handle[k], h, HOOP__CUDA_IPC_HANDLE);
    }
    return 0;
}

void hoop__cuda_ipc_begin(const hoop__call_t *call)
{
    hoop_comm_t *c = call->comm;
    struct hoop__cuda *st = cu(c);
    const hoop_cuda_module_t *t = st->t;
    int rc = 0;
    if (st->ipc_stream == NULL && (st->ipc_stream = t->stream_create(st->ctx)) == NULL) rc = -1;
    if (rc == 0 && st->ipc_gate == NULL && (st->ipc_gate = t->event_create(st->ctx)) == NULL)
        rc = -1;
    if (rc == 0 && st->ipc_fin == NULL && (st->ipc_fin = t->event_create(st->ctx)) == NULL) rc = -1;
    /* The stream never waits for the legacy default stream by itself: without this a copy
     * could read an input before the application's kernel wrote it. */
    if (rc == 0) rc = t->event_record(st->ctx, st->ipc_gate, NULL);
    if (rc == 0) rc = t->stream_wait_event(st->ctx, st->ipc_stream, st->ipc_gate);
    check(c, st, rc, "IPC stream");
}

void hoop__cuda_ipc_copy(const hoop__call_t *call, void *dst, const void *src, size_t n)
{
    struct hoop__cuda *st = cu(call->comm);
    if (n > 0 && dst != src)
        check(call->comm, st, st->t->copy_async(st->ctx, dst, src, n, st->ipc_stream), "copy");
}

void hoop__cuda_ipc_move(const hoop__call_t *call, void *dst, const void *src, size_t n)
{
    struct hoop__cuda *st = cu(call->comm);
    /* Synchronous, after the stream's queued work: overlapping ranges need the module's
     * temporary. */
    check(call->comm, st, st->t->move(st->ctx, dst, src, n, st->ipc_stream), "copy");
}

void hoop__cuda_ipc_reduce(const hoop__call_t *call, void *out, const void *a, const void *b,
                           size_t count)
{
    struct hoop__cuda *st = cu(call->comm);
    check(call->comm, st,
          st->t->reduce_async(st->ctx, out, a, b, count, call->dtype, call->op, st->ipc_stream),
          "reduction");
}

void hoop__cuda_ipc_avg(const hoop__call_t *call, void *buf, size_t count)
{
    struct hoop__cuda *st = cu(call->comm);
    check(
        call->comm, st,
        st->t->avg_finish_async(st->ctx, buf, count, call->dtype, call->comm->size, st->ipc_stream),
        "average");
}

void hoop__cuda_ipc_record(const hoop__call_t *call, int which)
{
    struct hoop__cuda *st = cu(call->comm);
    check(call->comm, st, st->t->event_record(st->ctx, st->ipc_ev[which], st->ipc_stream),
          "IPC event");
}

void hoop__cuda_ipc_wait(const hoop__call_t *call, int peer, int which)
{
    struct hoop__cuda *st = cu(call->comm);
    check(call->comm, st,
          st->t->stream_wait_event(st->ctx, st->ipc_stream, st->peer[peer].ev[which]),
          "IPC event wait");
}

hoop_result_t hoop__cuda_ipc_end(const hoop__call_t *call, int (*watch)(void *), void *arg)
{
    hoop_comm_t *c = call->comm;
    struct hoop__cuda *st = cu(c);
    if (st->ipc_stream == NULL || st->ipc_fin == NULL) return hoop__mem_failed(c);
    if (st->t->event_record(st->ctx, st->ipc_fin, st->ipc_stream) != 0) {
        check(c, st, -1, "IPC event");
        return HOOP_ERR_SYSTEM;
    }
    /* The stream may wait for an event that a dead peer never records: watch says so (and
     * fails the communicator), as does an abort. Then the call ends and the stream is left
     * (a failed call's buffers are undefined, as for any failed call). */
    double start = hoop__now(), next_watch = start;
    for (unsigned i = 0;; i++) {
        int q = st->t->event_query(st->ctx, st->ipc_fin);
        if (q == 1) return hoop__mem_failed(c);
        if (q < 0) {
            check(c, st, -1, "IPC event");
            return HOOP_ERR_SYSTEM;
        }
        double now = hoop__now();
        if (atomic_load(&c->aborted) || (now >= next_watch && watch(arg) != 0))
            return (hoop_result_t)atomic_load(&c->aborted);
        if (now >= next_watch) next_watch = now + 0.001;
        if (now - start > c->timeout_s) {
            char what[128];
            hoop__call_describe(call, what, sizeof what);
            hoop__comm_fail(c, HOOP_ERR_TIMEOUT,
                            "%s (call #%llu) over CUDA IPC on rank %d: its device work did not "
                            "finish within %.1f s",
                            what, (unsigned long long)call->seq, c->rank, c->timeout_s);
            return HOOP_ERR_TIMEOUT;
        }
        if (i > 64) pause_us(20); /* short waits spin, long ones sleep */
    }
}

const hoop__mem_ops_t hoop__mem_cuda = {
    .name = "CUDA device",
    .copy = cuda_copy,
    .move = cuda_move,
    .reduce = cuda_reduce,
    .avg_finish = cuda_avg_finish,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
};
