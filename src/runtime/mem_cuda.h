/* The CUDA memory type's state and what its files share (runtime-private): mem_cuda.c (the
 * driver's detection, the module's loading, the classification of buffers, HOOP__MEM_CUDA's
 * table), mem_cuda_order.c (stream-ordered calls), mem_cuda_stage.c (staging's copy streams) and
 * mem_cuda_ipc.c (the CUDA IPC path's areas, events and stream). */
#ifndef HOOP_RUNTIME_MEM_CUDA_H
#define HOOP_RUNTIME_MEM_CUDA_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/module.h"
#include "runtime/runtime.h"

enum { NO_DRIVER, READY, BROKEN };

/* An IPC area's users' page (mem_cuda_ipc.c): slot r says whether rank r has the area open. A
 * peer marks its slot open before it opens the area and closed after it closed it, so the owner
 * frees the area only once no live peer has it open (CUDA leaves freeing memory that another
 * process has open undefined). */
enum { IPC_UNUSED, IPC_OPEN, IPC_CLOSED };
typedef struct hoop__ipc_user {
    _Atomic int64_t pid;
    _Atomic uint32_t state;
    uint32_t pad;
} hoop__ipc_user_t;
typedef struct hoop__ipc_users {
    uint64_t magic, nonce, comm_id;
    int32_t size;
    _Atomic uint32_t closing; /* the owner is about to free the area: no open may begin */
    hoop__ipc_user_t rank[];
} hoop__ipc_users_t;
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
    /* Who has the area open: its users' page (a memfd the peers open through /proc, its address
     * after the handle), and whether a live peer kept the area open past the timeout at
     * destroy (then neither the area nor the context is ever freed). */
    hoop__ipc_users_t *ipc_users;
    int ipc_users_fd;
    int ipc_left;
    struct {
        void *p;
        hoop__ipc_users_t *users; /* its users' page, mapped here while p is open */
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

/* Calls reach these only after hoop__mem_detect gave their buffers this type: the module and
 * its context exist, and are not changed while the communicator lives. */
static inline struct hoop__cuda *hoop__cuda_of(hoop_comm_t *c)
{
    return atomic_load_explicit(&c->cuda, memory_order_acquire);
}

static inline void hoop__cuda_check(hoop_comm_t *c, struct hoop__cuda *st, int rc, const char *what)
{
    if (rc == 0) return;
    atomic_store(&st->failed, 1);
    hoop__comm_fail(c, HOOP_ERR_SYSTEM, "CUDA %s on rank %d failed: %s", what, c->rank,
                    st->t->error(st->ctx));
}

/* Sleeps us microseconds. */
void hoop__cuda_pause_us(long us);
/* Polls ev until reached, for at most seconds: 1, 0 when the time is up, -1 on an error. */
int hoop__cuda_poll_event(struct hoop__cuda *st, void *ev, double seconds);
/* At close: waits (one timeout for all) until the user's streams are past every slot, then frees
 * the slots' events and buffers (mem_cuda_order.c). */
void hoop__cuda_order_close(hoop_comm_t *c, struct hoop__cuda *st);

#endif
