/* The CUDA IPC path's areas, events and stream (src/local/ipc.c, runtime.h). */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/proc.h"
#include "runtime/mem_cuda.h"

/* ---- who has an area open ----
 * CUDA leaves freeing memory undefined while another process has it open from its IPC handle
 * (that process's next access faults, or reads memory allocated again), so the owner of an area
 * frees it only once every peer that opened it has closed it or died (its mappings go with its
 * process). Peers say so in the area's users' page: host shared memory, a memfd that they open
 * through /proc (as the shared-memory collectives' area is opened), whose address follows the
 * module's handle in the area's handle. */

#define USERS_MAGIC 0x5352455355435049ull /* "IPCUSERS" */

typedef struct users_addr {
    int32_t pid, fd;
    uint64_t nonce;
} users_addr_t;
_Static_assert(sizeof(users_addr_t) == HOOP__IPC_AREA_HANDLE - HOOP__IPC_HANDLE, "the address");

static size_t users_len(int size)
{
    return sizeof(hoop__ipc_users_t) + (size_t)size * sizeof(hoop__ipc_user_t);
}

static int users_make(hoop_comm_t *c, struct hoop__cuda *st)
{
    size_t len = users_len(c->size);
    int fd = memfd_create("hoop-ipc-users", MFD_CLOEXEC);
    void *m = fd >= 0 && ftruncate(fd, (off_t)len) == 0
                  ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                  : MAP_FAILED;
    if (m == MAP_FAILED) {
        if (fd >= 0) close(fd);
        return -1;
    }
    hoop__ipc_users_t *u = m;
    if (getrandom(&u->nonce, sizeof u->nonce, 0) != sizeof u->nonce)
        u->nonce = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)m;
    u->comm_id = c->id;
    u->size = c->size;
    u->magic = USERS_MAGIC;
    st->ipc_users = u;
    st->ipc_users_fd = fd;
    return 0;
}

/* Peer's users' page from the address in its area's handle, checked to be this communicator's. */
static hoop__ipc_users_t *users_open(hoop_comm_t *c, const users_addr_t *a)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)a->pid, (int)a->fd);
    int f = open(path, O_RDWR | O_CLOEXEC);
    if (f < 0) return NULL;
    size_t len = users_len(c->size);
    hoop__ipc_users_t h;
    int ok = pread(f, &h, sizeof h, 0) == (ssize_t)sizeof h && h.magic == USERS_MAGIC &&
             h.nonce == a->nonce && h.comm_id == c->id && h.size == c->size;
    void *m = ok ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0) : MAP_FAILED;
    close(f);
    return m != MAP_FAILED ? m : NULL;
}

static void users_unmap(hoop_comm_t *c, hoop__ipc_users_t *u)
{
    if (u != NULL) munmap(u, users_len(c->size));
}

/* This rank says in peer's page that it closed peer's area, and lets the page go. */
static void users_closed(hoop_comm_t *c, struct hoop__cuda *st, int peer)
{
    hoop__ipc_users_t *u = st->peer[peer].users;
    if (u == NULL) return;
    atomic_store(&u->rank[c->rank].state, IPC_CLOSED);
    users_unmap(c, u);
    st->peer[peer].users = NULL;
}

/* ---- CUDA IPC ---- */

int hoop__cuda_ipc_area(hoop_comm_t *c, size_t want, void **area, size_t *cap, void *handle,
                        char *err, size_t errlen)
{
    struct hoop__cuda *st = hoop__cuda_of(c);
    if (st->ipc_area == NULL) {
        st->ipc_area = st->t->ipc_alloc(st->ctx, want, st->ipc_handle);
        if (st->ipc_area == NULL) {
            snprintf(err, errlen, "cannot allocate its %zu-byte CUDA IPC area: %s", want,
                     st->t->error(st->ctx));
            return -1;
        }
        st->ipc_cap = want;
    }
    if (st->ipc_users == NULL && users_make(c, st) != 0) {
        snprintf(err, errlen, "cannot make its CUDA IPC area's users' page: %s", strerror(errno));
        return -1;
    }
    *area = st->ipc_area;
    *cap = st->ipc_cap;
    users_addr_t a = {
        .pid = (int32_t)getpid(), .fd = st->ipc_users_fd, .nonce = st->ipc_users->nonce};
    memcpy(handle, st->ipc_handle, HOOP__CUDA_IPC_HANDLE);
    memcpy((unsigned char *)handle + HOOP__CUDA_IPC_HANDLE, &a, sizeof a);
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
    struct hoop__cuda *st = hoop__cuda_of(c);
    if (peers_made(c, st, err, errlen) != 0) return NULL;
    if (st->peer[peer].p != NULL) {
        if (memcmp(st->peer[peer].handle, handle, HOOP__CUDA_IPC_HANDLE) == 0)
            return st->peer[peer].p;
        st->t->ipc_close(st->ctx, st->peer[peer].p);
        st->peer[peer].p = NULL;
        users_closed(c, st, peer);
    }
    users_addr_t a;
    memcpy(&a, (const unsigned char *)handle + HOOP__CUDA_IPC_HANDLE, sizeof a);
    hoop__ipc_users_t *u = users_open(c, &a);
    if (u == NULL) {
        snprintf(err, errlen, "cannot open rank %d's CUDA IPC area's users' page (process %d)",
                 peer, (int)a.pid);
        return NULL;
    }
    /* Said before the open, and the owner's closing read after (both sequentially consistent):
     * either the owner sees this rank as a user, or this rank sees it freeing the area. */
    st->peer[peer].users = u;
    atomic_store(&u->rank[c->rank].pid, (int64_t)getpid());
    atomic_store(&u->rank[c->rank].state, IPC_OPEN);
    void *p = atomic_load(&u->closing) ? NULL : st->t->ipc_open(st->ctx, handle);
    if (p == NULL) {
        snprintf(err, errlen, "cannot open rank %d's CUDA IPC area: %s", peer,
                 atomic_load(&u->closing) ? "it is being freed" : st->t->error(st->ctx));
        users_closed(c, st, peer);
        return NULL;
    }
    st->peer[peer].p = p;
    memcpy(st->peer[peer].handle, handle, HOOP__CUDA_IPC_HANDLE);
    return p;
}

int hoop__cuda_ipc_events(hoop_comm_t *c, void *handles, char *err, size_t errlen)
{
    struct hoop__cuda *st = hoop__cuda_of(c);
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
    struct hoop__cuda *st = hoop__cuda_of(c);
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
    struct hoop__cuda *st = hoop__cuda_of(c);
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
    hoop__cuda_check(c, st, rc, "IPC stream");
}

void hoop__cuda_ipc_copy(const hoop__call_t *call, void *dst, const void *src, size_t n)
{
    struct hoop__cuda *st = hoop__cuda_of(call->comm);
    if (n > 0 && dst != src)
        hoop__cuda_check(call->comm, st, st->t->copy_async(st->ctx, dst, src, n, st->ipc_stream),
                         "copy");
}

void hoop__cuda_ipc_move(const hoop__call_t *call, void *dst, const void *src, size_t n)
{
    struct hoop__cuda *st = hoop__cuda_of(call->comm);
    /* Synchronous, after the stream's queued work: overlapping ranges need the module's
     * temporary. */
    hoop__cuda_check(call->comm, st, st->t->move(st->ctx, dst, src, n, st->ipc_stream), "copy");
}

void hoop__cuda_ipc_reduce(const hoop__call_t *call, void *out, const void *a, const void *b,
                           size_t count)
{
    struct hoop__cuda *st = hoop__cuda_of(call->comm);
    hoop__cuda_check(
        call->comm, st,
        st->t->reduce_async(st->ctx, out, a, b, count, call->dtype, call->op, st->ipc_stream),
        "reduction");
}

void hoop__cuda_ipc_avg(const hoop__call_t *call, void *buf, size_t count)
{
    struct hoop__cuda *st = hoop__cuda_of(call->comm);
    hoop__cuda_check(
        call->comm, st,
        st->t->avg_finish_async(st->ctx, buf, count, call->dtype, call->comm->size, st->ipc_stream),
        "average");
}

void hoop__cuda_ipc_record(const hoop__call_t *call, int which)
{
    struct hoop__cuda *st = hoop__cuda_of(call->comm);
    hoop__cuda_check(call->comm, st,
                     st->t->event_record(st->ctx, st->ipc_ev[which], st->ipc_stream), "IPC event");
}

void hoop__cuda_ipc_wait(const hoop__call_t *call, int peer, int which)
{
    struct hoop__cuda *st = hoop__cuda_of(call->comm);
    hoop__cuda_check(call->comm, st,
                     st->t->stream_wait_event(st->ctx, st->ipc_stream, st->peer[peer].ev[which]),
                     "IPC event wait");
}

hoop_result_t hoop__cuda_ipc_end(const hoop__call_t *call, int (*watch)(void *), void *arg)
{
    hoop_comm_t *c = call->comm;
    struct hoop__cuda *st = hoop__cuda_of(c);
    if (st->ipc_stream == NULL || st->ipc_fin == NULL) return hoop__mem_failed(c);
    if (st->t->event_record(st->ctx, st->ipc_fin, st->ipc_stream) != 0) {
        hoop__cuda_check(c, st, -1, "IPC event");
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
            hoop__cuda_check(c, st, -1, "IPC event");
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
        if (i > 64) hoop__cuda_pause_us(20); /* short waits spin, long ones sleep */
    }
}

/* ---- at destroy ---- */

/* A peer whose slot says it has the area open and whose process still runs (a dead one's
 * mappings went with it): 1 with *who, or 0. */
static int users_left(const hoop_comm_t *c, hoop__ipc_users_t *u, int *who)
{
    for (int q = 0; q < c->size; q++) {
        if (q == c->rank || atomic_load(&u->rank[q].state) != IPC_OPEN) continue;
        if (hoop__process_gone((pid_t)atomic_load(&u->rank[q].pid))) continue;
        *who = q;
        return 1;
    }
    return 0;
}

void hoop__cuda_ipc_release(hoop_comm_t *c)
{
    struct hoop__cuda *st = atomic_load(&c->cuda);
    if (st == NULL || st->ctx == NULL || st->ipc_left) return;
    /* The stream first: work still queued there (a call that failed while its stream waited
     * for a dead peer) reads the areas and waits for the events; CUDA releases a destroyed
     * stream's resources once the device is done with them, and closing an area waits for the
     * device. */
    if (st->ipc_stream != NULL) st->t->stream_destroy(st->ctx, st->ipc_stream);
    st->ipc_stream = NULL;
    for (int q = 0; q < c->size && st->peer != NULL; q++) {
        if (st->peer[q].p != NULL) st->t->ipc_close(st->ctx, st->peer[q].p);
        st->peer[q].p = NULL;
        users_closed(c, st, q);
    }
    if (st->ipc_area == NULL) return;
    /* No handle went out without the users' page: with none, nobody can have the area open. */
    hoop__ipc_users_t *u = st->ipc_users;
    int who = -1, left = 0;
    if (u != NULL) {
        atomic_store(&u->closing, 1);
        double start = hoop__now();
        while ((left = users_left(c, u, &who)) != 0 && hoop__now() - start < c->timeout_s)
            hoop__cuda_pause_us(1000);
    }
    if (left) {
        /* Freeing it would be undefined in CUDA, and the peer's next access would fault: the
         * area and the context that holds it stay until the process ends. */
        st->ipc_left = 1;
        HOOP__WARN(&c->log,
                   "hoop_comm_destroy on rank %d: rank %d (process %" PRId64 ") still had this "
                   "rank's CUDA IPC area open after %.1f s (HOOP_TIMEOUT), so the area is left "
                   "allocated until this process ends",
                   c->rank, who, (int64_t)atomic_load(&u->rank[who].pid), c->timeout_s);
        return;
    }
    st->t->ipc_free(st->ctx, st->ipc_area);
    st->ipc_area = NULL;
}
