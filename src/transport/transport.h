/*
 * The transport interface. A transport moves messages (a wire header followed by a payload) between
 * the ranks of one communicator. The point-to-point schedules never see a transport's own file:
 * they post transfers through the runtime (runtime/xfer.c) to mux (mux.c), the one transport a
 * communicator drives, which hands each to the transport of the registry (registry.c) its peer
 * was given at init. The one-host engines (src/local) move nothing through a transport; they
 * drive it while they wait (progress, abort), so that notices from peers still arrive.
 *
 * Ordering: transfers to one peer in one direction complete in the order they were posted on both
 * sides; a posted receive takes the next message that arrives from its peer.
 */
#ifndef HOOP_TRANSPORT_H
#define HOOP_TRANSPORT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/config.h"
#include "base/log.h"
#include "base/memtype.h"
#include "base/tables.h"
#include "base/wire.h"
#include "hoop.h"

enum { HOOP__XFER_SEND = 1, HOOP__XFER_RECV = 2 };

/* Where a transfer's buffer lives: its memory type, and the registration of the memory that holds
 * it with the transport it is posted to (see reg in hoop__transport_ops_t). A zeroed descriptor is
 * host memory, unregistered. */
typedef struct hoop__mem_desc {
    hoop__mem_type_t type;
    void *
        reg; /* NULL, or what the reg() of this transport returned for a range holding the buffer */
} hoop__mem_desc_t;

/* Scratch of the transport a transfer is posted to, from post() until done, for its own
 * bookkeeping (tcp: stripes still to finish, whether the header was checked) through accessors of
 * its own. Posters and waiters neither read nor write it. */
typedef union hoop__tp_scratch {
    uint64_t u64[4];
    void *ptr[4];
    int32_t i32[8];
} hoop__tp_scratch_t;

/* One posted send or receive. The caller owns it and its buffer until done is set. */
typedef struct hoop__xfer {
    /* Set by the poster. */
    int dir; /* HOOP__XFER_SEND or HOOP__XFER_RECV */
    int peer;
    hoop__wire_hdr_t hdr; /* send: the header to send; recv: the header expected */
    void *buf;            /* payload (read-only for a send), in memory of type mem.type */
    size_t len;           /* payload bytes */
    hoop__mem_desc_t mem; /* where buf lives: a transport that cannot take its type refuses x */
    /* Set by the transport. */
    hoop__wire_hdr_t got; /* recv: the header that arrived (valid once done, also on mismatch) */
    hoop_result_t status; /* valid once done */
    int done;
    /* The waiter's (transports leave it alone): moved(peer) when it last looked. */
    uint64_t seen;
    /* The transport's (see hoop__tp_scratch_t). */
    hoop__tp_scratch_t tp_priv;
} hoop__xfer_t;

/* Capability bits of a transport (hoop__transport_ops_t.caps). */
#define HOOP__TP_MEM(type) (1u << (type)) /* moves buffers of this memory type directly */
#define HOOP__TP_WANTS_REG (1u << 16)     /* moves memory registered with reg() (faster, or only) */

typedef struct hoop__tp hoop__tp_t;

/* Out-of-band exchange, for connection data that does not fit one published address (queue pair
 * numbers, keys for every peer): what the communicator offers a transport from listen() until its
 * connect() returns, through the rendezvous store, so that transports never see it. Functions are
 * NULL where there is none (a communicator of one rank, one made by split). Rank 0 closes the
 * store only once its own connect() is through, and that waits for every peer's settle(): a
 * transport that uses this implements settle. Tags are unique per exchange within the
 * communicator (start them with the transport's name), at most HOOP__TP_OOB_TAG_MAX bytes, of
 * letters, digits, '-', '_' and '.'. A failure returns its code with the sentence in error(). */
#define HOOP__TP_OOB_TAG_MAX 64
typedef struct hoop__tp_oob {
    /* Every rank calls it with the same tag and len (at most 1 MiB): all receives size * len
     * bytes, rank r's at r * len, this rank's copied from mine. Waits for the others until the
     * deadline (monotonic seconds). */
    hoop_result_t (*allgather)(void *ctx, const char *tag, const void *mine, void *all, size_t len,
                               double deadline);
    /* Leaves len bytes (at most 1 MiB) for peer under tag; never waits for the peer. */
    hoop_result_t (*put)(void *ctx, const char *tag, int peer, const void *buf, size_t len);
    /* What peer put() for this rank under tag: waits for it until the deadline, copies at most cap
     * bytes into buf, *len the full length. */
    hoop_result_t (*get)(void *ctx, const char *tag, int peer, void *buf, size_t cap, size_t *len,
                         double deadline);
    /* The sentence of the last failure. */
    const char *(*error)(void *ctx);
    void *ctx;
} hoop__tp_oob_t;

/* What a transport instance is created with. */
typedef struct hoop__tp_params {
    int rank, size;
    uint64_t comm_id;
    const hoop__config_t *cfg;
    const hoop__log_t *log;
    const char *route_hint; /* an address peers are known to reach (the store's host), or NULL */
    /* Called (on the progressing thread) with the first failure of a peer, and with each transfer
     * refused at post() (a memory type the transport cannot take): code and a sentence. */
    void (*report)(void *ctx, hoop_result_t code, int peer, const char *msg);
    /* Where set, called instead of report for a peer's abort notice: done is the number of
     * collective calls that peer had finished when it aborted (its calls_done, below), so that
     * its abort need not fail a call it did its part of. Else report is. */
    void (*report_notice)(void *ctx, hoop_result_t code, int peer, const char *msg, uint64_t done);
    void *report_ctx;
    /* Set to 1 where a peer's abort notice gives a timeout as its cause, which is reported as an
     * abort here: this rank's flight recorder then dumps too (core/record.c), and the notices
     * this rank sends on give a timeout as theirs. May be NULL. */
    atomic_int *peer_timed_out;
    /* The number of collective calls this rank has finished, or NULL (none): read by abort(),
     * whose notice carries it to the peers (their report_notice's done). */
    const _Atomic uint64_t *calls_done;
    hoop__tp_oob_t oob;
} hoop__tp_params_t;

/* The code an abort notice to a peer carries: code, but a timeout where this abort passes on a
 * peer's that a timeout caused, so that the next peers' flight recorders dump too (the peers fail
 * with HOOP_ERR_ABORTED all the same: a notice's code only tells a mismatch apart). */
static inline hoop_result_t hoop__tp_notice_code(const hoop__tp_params_t *p, hoop_result_t code)
{
    if (code == HOOP_ERR_ABORTED && p->peer_timed_out != NULL && atomic_load(p->peer_timed_out))
        return HOOP_ERR_TIMEOUT;
    return code;
}

/* What a transport instance holds (memory() below): shared memory it maps (its own segment and
 * the peers'), its heap state (per peer, per socket), and its open connections. */
typedef struct hoop__tp_mem {
    uint64_t shared, heap, conns;
} hoop__tp_mem_t;

typedef struct hoop__transport_ops {
    const char *name;
    /* HOOP__TP_MEM(type) for every memory type post() takes, and HOOP__TP_WANTS_REG where reg()
     * should be called for the buffers of its transfers. */
    uint32_t caps;
    /* Creates the instance and starts listening; writes the address peers connect to (published
     * through the store) into addr. Blocks on nothing remote. */
    hoop_result_t (*listen)(const hoop__tp_params_t *p, hoop__tp_t **tp, char *addr,
                            size_t addrlen);
    /* Connects to every peer whose addrs[peer] is not NULL. Blocks until all are connected or the
     * deadline (monotonic seconds) passes: HOOP_ERR_TIMEOUT naming the missing peers. */
    hoop_result_t (*connect)(hoop__tp_t *tp, const char *const *addrs, double deadline);
    /* Queues x. Never blocks. A transport already failed completes x at once with its error; so
     * does one that cannot take x's memory (hoop__tp_refuse_mem: HOOP_ERR_UNSUPPORTED, or
     * HOOP_ERR_INVALID_ARGUMENT for a type that does not exist), reporting why. */
    void (*post)(hoop__tp_t *tp, hoop__xfer_t *x);
    /* Moves bytes of queued transfers; sleeps at most timeout_ms when nothing can move. A peer that
     * closes or resets fails its transfers with HOOP_ERR_PEER_LOST; a header that does not match the
     * posted receive fails it with HOOP_ERR_MISMATCH (got holds what arrived). A peer's failure
     * (its abort notice included, read only after everything it sent before it) fails that peer's
     * transfers alone and is reported: transfers with the other peers go on until abort(), which
     * is the communicator's to call, so that a call a failing peer had finished can still end. */
    void (*progress)(hoop__tp_t *tp, int timeout_ms);
    /* Makes a sleeping progress() return soon, and wait_fd() readable while armed. Any thread. */
    void (*wake)(hoop__tp_t *tp);
    /* Fails every queued transfer with code and shuts the connections so peers notice. The first
     * call also tells every reachable peer the reason (best effort, without blocking), so that they
     * fail with HOOP_ERR_ABORTED and "rank R aborted: <reason>" rather than a bare lost
     * connection; the notice carries p.calls_done as it is then. Repeated calls are cheap no-ops.
     * Any thread that drives progress. */
    void (*abort)(hoop__tp_t *tp, hoop_result_t code, const char *reason);
    /* Frees the instance. Queued transfers are dropped without completion. */
    void (*close)(hoop__tp_t *tp);
    /* Optional (NULL where absent), for sleeping outside this transport's progress(), in one
     * poll() with other transports (mux.c): wait_fd is an fd that turns readable when, after
     * arm() returned 0, something arrives, a queued transfer can move on, a peer fails or wake()
     * is called; -1 if there is none. arm() first moves what can move, as progress(0) would, then
     * announces the sleep; it returns 1 when something moved or can move already (do not sleep).
     * The next progress() ends the announcement (call it whether or not the fd turned readable). */
    int (*wait_fd)(hoop__tp_t *tp);
    int (*arm)(hoop__tp_t *tp);
    /* Optional (NULL where absent): bytes moved so far with peer, both directions, headers and
     * payload, counted on every partial read or write (not only when a transfer completes), so
     * that a wait can tell a slow transfer that keeps moving from a stuck one and restart its
     * deadline. Monotonic; cheap (a load); called by the thread that drives progress. */
    uint64_t (*moved)(hoop__tp_t *tp, int peer);
    /* Optional: called once connect() has succeeded on every transport of this rank. Tells every
     * peer so, then waits until each peer has said the same: a peer whose connect() failed says
     * why instead (connect() does that on failure), and settle() fails with its reason, so that
     * no rank goes on with a communicator another rank could not set up. Blocks until the
     * deadline at most; the peer's announcement must not depend on this call returning first. */
    hoop_result_t (*settle)(hoop__tp_t *tp, double deadline);
    /* Optional: the host identity inside an address this transport published ("" if there is
     * none): equal keys mean the same host, which is what orders the ring. */
    void (*host_key)(const char *addr, char *out, size_t n);
    /* Optional (NULL where the transport needs no registration): registers len bytes at buf, of
     * memory type type, for transfers; *reg is the handle for hoop__mem_desc_t.reg of transfers
     * within that range, valid until dereg(). A transport that needs nothing for that memory
     * may set *reg to NULL. Called by the thread that drives progress, between transfers on the
     * range. HOOP_OK, or an error with the sentence reported. */
    hoop_result_t (*reg)(hoop__tp_t *tp, void *buf, size_t len, hoop__mem_type_t type, void **reg);
    /* Undoes reg() (reg may be NULL). No transfer with it may be queued. */
    void (*dereg)(hoop__tp_t *tp, void *reg);
    /* Optional (NULL where absent; then receives from any source never match over it): whether
     * the next message from peer has arrived, at least its header, while no receive for peer is
     * queued here (a queued receive owns the next message). 1 with the header in *hdr as a
     * receive's got would hold it (src and comm_id filled in; a header that cannot be decoded
     * reads as a send of 0 bytes, so that the receive matched to it reports the mismatch), else 0.
     * Consumes nothing: the next receive posted for peer takes the message as if nobody had
     * looked. May read from the peer's connection into the transport's own buffer. Called by the
     * thread that drives progress. */
    int (*probe)(hoop__tp_t *tp, int peer, hoop__wire_hdr_t *hdr);
    /* Optional (NULL: nothing counted): adds what this instance holds to *m (hoop_comm_memory).
     * Reads sizes fixed once connect() is over; any thread. */
    void (*memory)(const hoop__tp_t *tp, hoop__tp_mem_t *m);
} hoop__transport_ops_t;

/* post()'s check of x's memory against caps, for every transport: 0 when it takes the type;
 * otherwise completes x with HOOP_ERR_UNSUPPORTED (a type it cannot take) or
 * HOOP_ERR_INVALID_ARGUMENT (no such type), reports the sentence through p, and returns 1. Host
 * memory costs one test. */
int hoop__tp_refuse(const char *name, uint32_t caps, const hoop__tp_params_t *p, hoop__xfer_t *x);
static inline int hoop__tp_refuse_mem(const char *name, uint32_t caps, const hoop__tp_params_t *p,
                                      hoop__xfer_t *x)
{
    if (x->mem.type == HOOP__MEM_HOST && (caps & HOOP__TP_MEM(HOOP__MEM_HOST))) return 0;
    return hoop__tp_refuse(name, caps, p, x);
}

/* probe()'s answer for a next message whose header cannot be decoded: a send of 0 bytes from
 * peer, so that the receive matched to it reports the mismatch. Returns 1, as probe() then does. */
static inline int hoop__tp_probe_unreadable(hoop__wire_hdr_t *hdr, int peer, uint64_t comm_id)
{
    memset(hdr, 0, sizeof(*hdr));
    hdr->kind = HOOP__K_SEND;
    hdr->src = (uint32_t)peer;
    hdr->comm_id = comm_id;
    return 1;
}

/* Reports a peer's abort notice through p (report_notice, or report where it has none). */
static inline void hoop__tp_report_notice(const hoop__tp_params_t *p, hoop_result_t code, int peer,
                                          const char *msg, uint64_t done)
{
    if (p->report_notice != NULL)
        p->report_notice(p->report_ctx, code, peer, msg, done);
    else
        p->report(p->report_ctx, code, peer, msg);
}

/* What an abort notice of this rank says it finished (p.calls_done). */
static inline uint64_t hoop__tp_calls_done(const hoop__tp_params_t *p)
{
    return p->calls_done != NULL ? atomic_load(p->calls_done) : 0;
}

/* Per peer the first transport of the registry (registry.h) that reaches it: shared memory to
 * peers on the same host, RDMA verbs (where built and both have a port) or TCP to the others
 * (HOOP_TRANSPORT forces one). */
extern const hoop__transport_ops_t hoop__mux_transport;
/* The sentence for a descriptor that could not be had (err EMFILE or ENFILE: "Too many open
 * files", this process's limit and what to raise); for any other err just strerror(err). Writes
 * into buf and returns it. */
const char *hoop__fd_error(int err, char *buf, size_t n);
/* The reason an abort() tells peers: reason, or the code's own string when there is none, cut to
 * max bytes (*len). */
static inline const char *hoop__tp_abort_text(hoop_result_t code, const char *reason, size_t max,
                                              size_t *len)
{
    const char *text = reason != NULL && reason[0] != '\0' ? reason : hoop__error_string(code);
    *len = strlen(text);
    if (*len > max) *len = max;
    return text;
}
/* err is running out of descriptors (EMFILE, ENFILE). */
#define HOOP__FD_EXHAUSTED(err) ((err) == EMFILE || (err) == ENFILE)

#endif
