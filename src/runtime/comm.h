/* The communicator, its calls and its requests: the layout every layer from the runtime up shares
 * (api, lifecycle, sched, collectives, runtime), and the communicator's error state (comm.c). It
 * lives at the runtime's level so that no include goes upward: the core creates and drives what
 * is declared here, the algorithms and the runtime read it. */
#ifndef HOOP_COMM_H
#define HOOP_COMM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "base/agreed.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "base/tables.h"
#include "base/wire.h"
#include "hoop.h"
#include "runtime/mem.h"
#include "transport/transport.h"

/* A shrink listener's published address, NUL included ("host:port"). */
#define HOOP__SHRINK_ADDR_LEN 64

/* The algorithms that have a name on the wire (hoop__wire_algo_name); the planner chooses
 * (collectives/plan.c). */
typedef enum {
    HOOP__ALGO_AUTO = 0,
    HOOP__ALGO_RING,
    HOOP__ALGO_RD,         /* recursive doubling */
    HOOP__ALGO_PS,         /* parameter server: rank 0 reduces everything */
    HOOP__ALGO_PS_SHARDED, /* every rank serves 1/p of the buffer */
    HOOP__ALGO_IPC,        /* CUDA device buffers on one node: peers' memory through CUDA IPC */
    HOOP__ALGO_SHM,        /* every collective through an area all ranks map (one host) */
    HOOP__ALGO_P2P,        /* HOOP_ALGO only: auto's choice without the shared area */
    HOOP__ALGO_HIER,       /* inside each host, then across hosts, then inside (hier.c) */
    HOOP__ALGO_RABEN,      /* Rabenseifner's: recursive halving, then recursive doubling */
    HOOP__ALGO_COUNT
} hoop__algo_t;

/* Who runs a call: point-to-point schedules over transfers (src/collectives), or a one-host
 * engine (src/local). */
typedef enum {
    HOOP__ENGINE_P2P = 0,
    HOOP__ENGINE_SHM, /* the shared area every rank of the host maps (local/shm_coll.c) */
    HOOP__ENGINE_IPC, /* CUDA device buffers through the peers' device memory (local/ipc.c) */
    HOOP__ENGINE_COUNT
} hoop__engine_t;

/* The planner's answer for one call (collectives/plan.c): made as the call is posted, from what
 * every rank knows alike, and final once the agreement step has said what only the run can know.
 * All zero is the point-to-point engine running the call's one schedule: the core's own
 * exchanges (a split) are posted so. */
typedef struct hoop__plan {
    uint8_t engine; /* hoop__engine_t */
    uint8_t algo;   /* hoop__algo_t: the point-to-point schedule, under P2P and after a one-host
                     * engine declines (AUTO: the collective's own by size, or its one) */
    uint8_t why;    /* hoop__plan_why_t (collectives/plan.h): the reason, said by INFO and traces */
    uint8_t small;  /* the latency-bound variant: one step of the area, binomial trees */
    uint8_t agree;  /* P2P: the area's agreement step first; what it finds may change the plan */
    uint8_t ipc_stages; /* hierarchical: the stages inside a host may go over CUDA IPC */
    uint8_t forced;     /* the hoop__algo_t HOOP_ALGO named, AUTO for none */
    uint8_t sym;        /* SHM all-reduce: the zero-copy schedule where every rank's buffers are
                  * symmetric memory (local/sym.c), which its first step finds out */
    uint8_t cma;        /* SHM all-reduce: single copy, every rank reading its peers' buffers with
                  * process_vm_readv where the kernel lets every rank (local/shm_coll.c); the
                  * engine clears it where the call ran otherwise */
} hoop__plan_t;

/* One call, as an algorithm sees it. */
typedef struct hoop__call {
    hoop_comm_t *comm;
    hoop__kind_t kind;
    const void *sendbuf;
    void *recvbuf;
    size_t count; /* the caller's count argument */
    hoop_dtype_t dtype;
    hoop_op_t op;
    int root;             /* root, or the peer of a send/recv; -1 if neither */
    uint64_t seq;         /* call number on the communicator */
    hoop__algo_t algo;    /* the name its messages and steps carry, fixed when it is posted */
    hoop__plan_t plan;    /* who runs it, how and why (collectives/plan.c) */
    hoop__mem_type_t mem; /* where sendbuf and recvbuf live */
    int is_recv;          /* point-to-point: a receive */
    int order;            /* stream-ordered: its ordering slot + 1 (mem.h), 0 for none */
    int any_source;       /* a receive from any source: root is -1 until it is matched */
    int *source;          /* where such a receive writes its sender's rank (may be NULL) */
    uint64_t rec;         /* its flight recorder entry's record id + 1, 0 for none (record.h) */
    uint32_t rec_slot;    /* and where that entry is in the ring */
} hoop__call_t;

struct hoop_request {
    hoop__call_t call;
    hoop__xfer_t xfer; /* point-to-point requests only */
    hoop_result_t status;
    atomic_int done;
    int blocking; /* posted by a blocking call: freed by it */
    int detached; /* a blocking call ordered on a stream: returned once queued, freed as it ends */
    double held_since; /* a receive held behind one from any source: when it was held (sched.c) */
    struct hoop_request *next; /* queue link; free-list link while the slot is free */
    /* Slot bookkeeping (sched.c), never cleared: a request handed out lives in a slot of its
     * communicator until the communicator is freed, so a stale handle still points at memory the
     * communicator owns. Slots are 64-byte aligned; a handle is the slot's address plus its
     * generation modulo 64, so a handle outlived by its request no longer matches. */
    _Alignas(64) uint64_t magic;
    hoop_comm_t *owner;
    uint32_t gen; /* bumped each time the slot is released */
    int live;     /* handed out, not yet waited for */
};

struct hoop_comm {
    int rank, size;
    uint64_t id;
    hoop__config_t cfg;
    /* The settings every rank compared at init (agree.h): what algorithms read, never cfg. */
    hoop__agreed_t agreed;
    int algo;       /* agreed.algo parsed (hoop__wire_algo_parse), read on every call */
    uint32_t sched; /* digest of the agreed settings (agree.h), in every header */
    hoop__log_t log;
    double timeout_s;
    /* Waits poll without sleeping this long first: short operations finish without a wake-up.
     * Zero when ranks outnumber cores, where spinning only steals the CPU the peer needs. */
    double spin_s;
    /* Where they do, waits yield the core between looks for this long (HOOP_SHM_SPIN_US) before
     * they sleep: a sleeper wakes behind every runnable rank, a yielder as soon as its core's
     * other rank waits in turn. Zero otherwise. */
    double yield_s;
    char host[64];
    char
        route_hint[256]; /* the rendezvous host: the transport listens on the interface facing it */

    const hoop__transport_ops_t *tp_ops;
    hoop__tp_t *tp;

    /* Ring order: ring[i] is the rank at position i, ring_pos this rank's position. Ranks of one
     * host are kept together, so a ring crosses each host boundary once. */
    int *ring;
    int ring_pos;
    /* Hosts the ring spans, and the ranks each holds where every host holds as many (0 where
     * they differ): host h is ring positions h * local_size .. (h + 1) * local_size - 1. Set with
     * the ring, from what every rank published, so every rank sees the same. */
    int nhosts, local_size;
    /* Every rank published the same host identity and the agreed transport allows shared memory
     * (auto or shm): the shared-memory collectives are the default. Set with the ring, read on
     * every call. */
    int shm_auto;

    uint64_t seq; /* next collective call number */
    /* A thread is posting (or in a blocking call): the call numbers above are handed out in
     * posting order, which must be the same on every rank, so a second thread posting at the
     * same time is refused rather than allowed to reorder calls (sched.c). */
    atomic_int posting;
    uint64_t *p2p_send_seq; /* per peer */
    uint64_t *p2p_recv_seq;
    uint32_t splits; /* number of splits made from this communicator */

    /* Errors: the first fatal one aborts the communicator. */
    pthread_mutex_t err_mu;
    atomic_int aborted; /* hoop_result_t of the failure, 0 while healthy */
    /* The first collective call the failure fails (UINT64_MAX while healthy). A failure found
     * here fails the call in flight (0); a peer's abort notice, only the calls from the count it
     * had finished: the ranks still finishing a call that peer did its part of may end it. */
    _Atomic uint64_t fail_from;
    /* Collective calls this rank has finished (the number of the last that returned HOOP_OK,
     * plus one): an abort notice tells the peers (transport.h, calls_done). */
    _Atomic uint64_t calls_done;
    char fatal_msg[512];
    /* A failure's explanation (core/explain.c) with fatal_msg after it, "" until then: what
     * hoop_comm_last_error() keeps showing as later notices of the same failure come in. Under
     * err_mu. */
    char explained[1024];
    /* The last error's sentence (hoop_comm_last_error) in two slots: a writer fills the slot not
     * shown, under err_mu, then shows it, so that a thread reading it while another thread writes
     * sees a whole sentence (snprintf empties its buffer first). */
    char last_error[2][1024];
    atomic_int last_shown;

    /* Scheduler (sched.c). `mu` guards the queue; `exec` is held by whoever drives the transport. */
    pthread_mutex_t mu;
    pthread_cond_t cv;           /* for waiters: a request completed or the engine came free */
    pthread_cond_t tcv;          /* for the progress thread: work it may take */
    hoop_request_t *head, *tail; /* collectives waiting to run, in posting order */
    hoop_request_t *inflight;    /* point-to-point requests posted to the transport (under exec) */
    /* Receives not yet posted, in posting order (under exec): the first is from any source and
     * waits for a message to arrive; the receives posted after it wait behind it, since it may
     * match what they would. They count in n_inflight. */
    hoop_request_t *held, *held_tail;
    atomic_int n_held;        /* held's length, readable without exec */
    int next_source;          /* where the next match from any source starts looking */
    atomic_int n_inflight;    /* its length (and held's), readable without exec */
    double inflight_progress; /* when one of them last completed, or the first was posted */
    int busy;                 /* a queued or blocking call is running */
    int waiters;              /* threads in hoop_wait: they run queued calls themselves */
    int n_detached;           /* stream-ordered blocking calls not yet ended */
    int has_thread, stop;
    /* For the progress thread's naps (sched.c, under mu): calls queued and calls waiters ran, so
     * far; whether it sleeps now, for at most DEFER_S. */
    uint64_t n_queued, n_waiter_ran;
    int thread_looks_soon;
    int thread_polls;      /* the progress thread may be in the transport's poll, holding exec */
    atomic_int abort_told; /* the peers were told of the abort (sched.c's tell_abort) */
    pthread_t thread;
    pthread_mutex_t exec;
    /* Completes the point-to-point requests whose transfers have finished (sched.c): the runtime
     * calls it whenever it has driven the transport and some are in flight. Under exec. */
    void (*reap)(hoop_comm_t *c);

    /* Traffic counters (hoop_comm_stats), written by whoever drives the transport. */
    _Atomic uint64_t bytes_sent, bytes_received, messages_sent, messages_received;
    /* The flight recorder (core/record.h): the last calls, for hoop_comm_dump. Never NULL once
     * the communicator is made. */
    struct hoop__rec *rec;
    /* A call on it timed out: its dump is written as the failure reaches the caller (set by
     * hoop__comm_fail and the recorder, taken by hoop__rec_dump_due). */
    atomic_int rec_dump_due;
    /* The abort's cause is a timeout or a disagreement, here or at a peer (whose notice said so):
     * a dump is wanted once (rec_dumped), and the notices this rank sends on an abort a peer's
     * timeout caused say timeout too. */
    atomic_int abort_dumps, rec_dumped;
    /* The status socket, its answering thread and the peers' (core/explain.h); NULL for none. */
    struct hoop__explain *explain;
    /* Rank 0 of a communicator made over a tcp:// store: the store, kept serving for the
     * communicator's life so that hoop-status can read the ranks' addresses (lifecycle.c). */
    struct hoop__store *kept_store;
    int kept_port;
    /* The abort came first as a peer's notice of anything but a disagreement: a failure there
     * (a lost or silent rank) that this rank's explanation looks for too. */
    atomic_int notice_first;
    /* Schedule tracer (hoop_comm_set_trace), or NULL. */
    hoop_trace_fn trace_fn;
    void *trace_ctx;

    /* Scratch space for algorithms (staging buffers), in memory of type scratch_mem; used under
     * exec only (runtime/mem.c). */
    void *scratch;
    size_t scratch_len;
    hoop__mem_type_t scratch_mem;
    /* A copy of a call's input where it overlaps the output (sched.c, runtime/mem.c): the
     * same way, under exec only. */
    void *in_copy;
    size_t in_copy_len;
    hoop__mem_type_t in_copy_mem;
    /* Device memory (runtime/mem_cuda.c): the CUDA module's state, made by the first call that
     * looks for the driver (any thread that posts; atomic for that); NULL before. */
    _Atomic(struct hoop__cuda *) cuda;
    /* The CUDA stream that device calls are ordered on (hoop_comm_set_stream), or NULL; read by
     * the posting thread only. */
    void *stream;
    int group; /* hoop_group_start's depth: stream waits held back until the outermost end */
    /* Host buffers that transfers of device memory go through (runtime/stage.c, under exec). */
    struct hoop__stage *stage;

    /* The one-host engines' state (local/local.h: the shared area, CUDA IPC's), made by the
     * first call that needs it; NULL before. Used under exec. */
    struct hoop__local *local;
    /* The last plans INFO said, per kind (collectives/plan.c): each is said once while it is
     * among them. Under exec. */
#define HOOP__PLANS_SAID 4
    uint32_t plan_said[HOOP__K_COUNT][HOOP__PLANS_SAID];

    /* Request slots (sched.c, under mu): chunks made on demand and freed with the communicator;
     * released slots queue first in, first out, so that a slot is reused as late as possible. */
    struct hoop__req_chunk *req_chunks;
    hoop_request_t *req_free, *req_free_tail;

    /* Survivors' shrink (core/shrink.c): this rank's listener for it, open from creation to free
     * (-1: none), and every rank's address ("" where unknown). Once shrunk, a thread (tomb)
     * answers on the listener that it is too late, until the communicator is freed. */
    int shrink_fd;
    char (*shrink_addrs)[HOOP__SHRINK_ADDR_LEN];
    pthread_t tomb;
    int tomb_running;
    atomic_int tomb_stop;
    atomic_uint shrink_refused; /* connections to the listener that failed the key's proof */
};

/* Error state (comm.c), for every layer. Records the first fatal error and aborts the
 * communicator (transport closed, calls fail). */
void hoop__comm_fail(hoop_comm_t *c, hoop_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The failure's explanation (core/explain.c): hoop_comm_last_error() says line, then the
 * fatal error's sentence in parentheses, from now on. */
void hoop__comm_explained(hoop_comm_t *c, const char *line);
/* Makes hoop_comm_last_error() say the fatal error: its explanation where there is one. */
void hoop__comm_show_fatal(hoop_comm_t *c);
/* As hoop__comm_fail, for a peer's abort notice: fails the calls from number from on (fail_from)
 * rather than the one in flight too. */
void hoop__comm_fail_from(hoop_comm_t *c, hoop_result_t code, uint64_t from, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Lowers fail_from to from (it only goes down): for a failure after the first, whose sentence is
 * not the communicator's. */
void hoop__comm_fail_calls(hoop_comm_t *c, uint64_t from);
/* The last error's sentence, and setting it (any thread). */
const char *hoop__comm_last(const hoop_comm_t *c);
void hoop__comm_set_last(hoop_comm_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Sets the last-error detail of a call that failed without aborting (bad arguments). */
hoop_result_t hoop__comm_error(hoop_comm_t *c, hoop_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
