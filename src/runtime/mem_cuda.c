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
 * The state is per communicator (hoop_comm.cuda, mem_cuda.h), made on first need; the
 * stream-ordered calls, staging's copies and the CUDA IPC path that use it are files of their own
 * (mem_cuda_order.c, mem_cuda_stage.c, mem_cuda_ipc.c). Testing only (test hooks,
 * docs/configuration.md): HOOP_TEST_CUDA_MODULE names another module (the test double),
 * HOOP_TEST_CUDA_DRIVER the library that counts as the driver. */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "runtime/mem_cuda.h"

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

void hoop__cuda_close(hoop_comm_t *c)
{
    struct hoop__cuda *st = atomic_load(&c->cuda);
    if (st == NULL) return;
    if (st->ctx != NULL) hoop__cuda_order_close(c, st);
    if (st->ctx != NULL) { /* staging drained them (hoop__stage_free) */
        for (int d = 0; d < 2; d++)
            if (st->copy_stream[d] != NULL) st->t->stream_destroy(st->ctx, st->copy_stream[d]);
        if (st->copy_gate != NULL && !st->copy_stuck) st->t->event_destroy(st->ctx, st->copy_gate);
    }
    /* The IPC stream and the peers' areas, then this rank's area once no peer has it open
     * (done already by hoop__mem_release, as the communicator goes). */
    hoop__cuda_ipc_release(c);
    if (st->ctx != NULL && st->peer != NULL)
        for (int q = 0; q < c->size; q++) {
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
    if (st->ipc_users != NULL) {
        munmap(st->ipc_users,
               sizeof(hoop__ipc_users_t) + (size_t)c->size * sizeof(hoop__ipc_user_t));
        close(st->ipc_users_fd);
    }
    /* An area a live peer still had open at the timeout stays, and so does what holds it. */
    if (st->ipc_area != NULL && !st->ipc_left) st->t->ipc_free(st->ctx, st->ipc_area);
    if (st->ctx != NULL && !st->ipc_left) st->t->close(st->ctx);
    if (st->dl != NULL && !st->ipc_left) dlclose(st->dl);
    pthread_mutex_destroy(&st->mu);
    free(st->deferred);
    free(st);
    atomic_store(&c->cuda, NULL);
}

/* ---- HOOP__MEM_CUDA: the memory layer's table over the module ---- */

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
    struct hoop__cuda *st = hoop__cuda_of(c);
    hoop__cuda_check(c, st, st->t->copy(st->ctx, dst, src, n, NULL), "copy");
}

static void cuda_move(const hoop__call_t *call, void *dst, const void *src, size_t n)
{
    hoop_comm_t *c = call->comm;
    struct hoop__cuda *st = hoop__cuda_of(c);
    hoop__cuda_check(c, st, st->t->move(st->ctx, dst, src, n, NULL), "copy");
}

static void cuda_reduce(const hoop__call_t *call, void *out, const void *a, const void *b,
                        size_t count, hoop_dtype_t dt, hoop_op_t op)
{
    hoop_comm_t *c = call->comm;
    struct hoop__cuda *st = hoop__cuda_of(c);
    hoop__cuda_check(c, st, st->t->reduce(st->ctx, out, a, b, count, dt, op, NULL), "reduction");
}

static void cuda_avg_finish(const hoop__call_t *call, void *buf, size_t count, hoop_dtype_t dt,
                            int divisor)
{
    hoop_comm_t *c = call->comm;
    struct hoop__cuda *st = hoop__cuda_of(c);
    hoop__cuda_check(c, st, st->t->avg_finish(st->ctx, buf, count, dt, divisor, NULL), "average");
}

static void *cuda_alloc(hoop_comm_t *c, size_t bytes)
{
    struct hoop__cuda *st = hoop__cuda_of(c);
    return st->t->alloc(st->ctx, bytes);
}

static void cuda_free(hoop_comm_t *c, void *p)
{
    struct hoop__cuda *st = hoop__cuda_of(c);
    st->t->free(st->ctx, p);
}

static void *cuda_host_alloc(hoop_comm_t *c, size_t bytes)
{
    struct hoop__cuda *st = hoop__cuda_of(c);
    return st->t->host_alloc(st->ctx, bytes);
}

static void cuda_host_free(hoop_comm_t *c, void *p)
{
    struct hoop__cuda *st = hoop__cuda_of(c);
    st->t->host_free(st->ctx, p);
}

void hoop__cuda_pause_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

int hoop__cuda_poll_event(struct hoop__cuda *st, void *ev, double seconds)
{
    double start = hoop__now();
    for (unsigned i = 0;; i++) {
        int q = st->t->event_query(st->ctx, ev);
        if (q != 0) return q;
        if ((i & 15) == 15 && hoop__now() - start > seconds) return 0;
        if (i > 64) hoop__cuda_pause_us(20); /* short waits spin, long ones sleep */
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
