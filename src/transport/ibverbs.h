/*
 * RDMA verbs transport: one reliable-connected queue pair per peer on one port (ibv_dev.h picks
 * it), libibverbs reached only through the table of ibv_sym.h.
 *
 * Set-up: listen() loads the table, finds the port, and makes the protection domain, one
 * completion queue with its completion channel, and per peer a queue pair (still in RESET) with
 * its receive slots and send buffers, registered once. The address it publishes names the port
 * ("rxe0:1/::ffff:10.11.0.1"). connect() leaves each peer its queue pair's number, PSN, LID, GID,
 * MTU and the key and address of a probe word through the out-of-band exchange (per pair: put,
 * then get, through the authenticated rendezvous store), brings the queue pairs to RTS, and
 * exchanges a second word per pair so that nobody sends before every receiving queue pair is
 * ready. A communicator made by split has its exchange over the parent communicator
 * (lifecycle.c); without one (a communicator of one rank) the address is empty and no peer is
 * reached this way.
 *
 * Data path: a message below ZC_MIN is cut into fragments of at most SLOT_BYTES, each one SEND
 * into one of the peer's pre-posted receive slots; the first fragment carries the wire header. Its
 * payload is copied through the registered buffers both ways. Flow control: a sender holds one
 * credit per data slot of the peer (NSLOTS) and spends one per data fragment; the receiver gives a
 * credit back once it has copied a fragment out and posted the slot again, in the next fragment it
 * sends or, past CREDIT_BATCH owed, in a credit message. A fragment that arrives before its receive
 * is posted waits in its slot. Control messages (credits, ready, goodbye, abort, and zero copy's
 * answer and end) need no credit: NCTRL more slots are posted for them and taken back at once,
 * which bounds them (see ibverbs.c), so a receiver that is slow never makes a sender hit
 * receiver-not-ready.
 *
 * Zero copy, from ZC_MIN: the sender registers its buffer and sends only the header (FL_ZC); the
 * receiver, once that header matches its posted receive, registers the receive buffer and answers
 * with its address and key (F_CTS); the sender RDMA-writes the payload into it ZC_CHUNK at a time
 * and ends with F_FIN, which RC delivers after the writes. Registrations come from the cache of
 * ibv_mr.h, which checks before each reuse that the pages it pinned are still the buffer's (or,
 * where it cannot, registers per transfer); a transfer's use of one ends when it completes or
 * fails, before the buffer is handed back. Nothing else goes to that peer until F_FIN is posted, which keeps the order; where a buffer
 * cannot be registered the payload comes by copy instead (the receiver answers address 0).
 *
 * Completions: progress() polls the CQ, spins a little, then arms it (ibv_req_notify_cq), polls
 * again and sleeps in poll() on the channel's descriptor and the wake eventfd. wait_fd() is an
 * epoll set of both, for mux's one sleep.
 *
 * Failures: a completion with an error (retry or RNR retry exceeded, a flush after the queue pair
 * went to error) fails the peer with HOOP_ERR_PEER_LOST and the status text. A peer that died
 * leaves no completion behind on a rank that only receives from it, or waits on another rank, so
 * while any transfer waits, every peer with nothing in flight gets an 8-byte RDMA WRITE to its
 * probe word every PROBE_S seconds; the dead peer's is answered with retry exceeded. abort()
 * sends every peer its reason (best effort, without waiting) after the number of calls this rank
 * had finished (8 bytes), settle() a ready notice, close() a goodbye, as tcp does. A notice that
 * comes while data fragments of the peer wait for their receives is taken once they are: the peer
 * sent them first.
 *
 * ibverbs_setup.c holds listen, connect, settle and close; ibverbs.c the data path, completions,
 * waiting and abort; this header their shared state. Nothing else in the library includes it
 * (the verbs test double reads the fragment types).
 */
#ifndef HOOP_IBVERBS_H
#define HOOP_IBVERBS_H

#include <stdint.h>

#include "transport/ibv_dev.h"
#include "transport/ibv_mr.h"
#include "transport/ibv_sym.h"
#include "transport/transport.h"

#define NSLOTS 16              /* data slots per peer: the credits a sender starts with */
#define NCTRL 10               /* slots for control messages, beyond the credits */
#define NRECV (NSLOTS + NCTRL) /* receive slots per peer */
#define NSEND (NSLOTS + NCTRL) /* send buffers per peer */
#define SLOT_BYTES (32 * 1024) /* one fragment, its header included */
#define FRAG_HDR 16
#define CREDIT_BATCH (NSLOTS / 2) /* credits owed that are worth a message of their own */
#define SPIN_US 50                /* polling before sleeping on the channel */
#define PROBE_S 0.25              /* liveness probe of the peers while a transfer waits */
#define ABORT_MAX 360
#define GOODBYE_WAIT 0.5 /* seconds close() waits for the goodbyes to leave */
#define IBV_CAPS HOOP__TP_MEM(HOOP__MEM_HOST)
#define ZC_MIN (256 * 1024)    /* messages from this size go zero copy */
#define ZC_CHUNK (1024 * 1024) /* one RDMA WRITE of a zero-copy message */
#define ZC_WR 8                /* RDMA WRITEs in flight per peer */

/* Fragment types (the first byte of a slot). */
enum { F_DATA = 1, F_CREDIT, F_READY, F_BYE, F_ABORT, F_CTS, F_FIN };
/* Flags of a data fragment: it starts a message (the wire header follows), and that message comes
 * zero copy (no payload here: the receiver answers with F_CTS, the sender writes and sends F_FIN). */
enum { FL_FIRST = 1, FL_ZC = 2 };

/* wr_id: peer << 32 | what << 24 | index. */
enum { W_RECV = 0, W_SEND = 1, W_PROBE = 2, W_WRITE = 3 };
#define WR_ID(peer, what, i) (((uint64_t)(peer) << 32) | ((uint64_t)(what) << 24) | (uint64_t)(i))

/* What each end of a pair leaves the other through the out-of-band exchange. */
typedef struct conn_info {
    uint64_t magic;
    uint64_t comm_id;
    uint64_t probe_addr;
    uint32_t rank, qpn, psn, probe_rkey;
    uint32_t nslots, slot_bytes;
    uint16_t lid;
    uint8_t mtu; /* enum ibv_mtu */
    uint8_t pad;
    uint8_t gid[16];
} conn_info_t;
#define CONN_MAGIC 0x4e4f4356504f4f48ull /* "HOOPVCON" */

typedef struct peer {
    struct ibv_qp *qp;
    int used; /* connect() was given an address for it */
    int up;   /* its queue pair is in RTS */
    int lost, bye, ready, gone;
    hoop_result_t ab_code; /* set once its abort notice came */
    /* Its abort notice, held while data fragments it sent before wait (ab_held), then taken */
    int ab_held, ab_heard;
    uint64_t ab_done; /* the calls it had finished, as its notice said */
    char ab_msg[ABORT_MAX + 64];
    uint64_t moved;
    /* receive slots: rbuf[i * SLOT_BYTES]; arrived data fragments in order, not yet taken */
    uint8_t *rbuf;
    struct ibv_mr *rmr;
    int arr[NRECV];
    int arr_head, arr_n;
    /* send buffers: sbuf[i * SLOT_BYTES]; sfree the free ones; sx[i] the send that completes with it */
    uint8_t *sbuf;
    struct ibv_mr *smr;
    int sfree[NSEND];
    int nsfree;
    hoop__xfer_t *sx[NSEND];
    int credits;  /* data fragments it can take now */
    int owed;     /* credits to give back */
    int inflight; /* send work requests posted, not completed */
    /* transfers in order; a send leaves sq once its last fragment is posted */
    hoop__xfer_t *sq, *sq_tail, *rq, *rq_tail;
    int probing;
    double next_probe;
    /* zero copy, sending: zx waits for the receiver's buffer (zx_state 0), is being written
     * (1) or waits for its F_FIN to complete (2); nothing else goes to this peer meanwhile */
    hoop__xfer_t *zx;
    struct ibv_mr *zx_mr;
    int zx_ref; /* zx_mr's entry in the registration cache (ibv_mr.h), -1 its own */
    int zx_state, zx_wr;
    size_t zx_off;
    uint64_t zx_addr;
    uint32_t zx_rkey;
    /* zero copy, receiving: the head of rq waits for F_FIN, its buffer registered as zr_mr */
    struct ibv_mr *zr_mr;
    int zr_ref;
    conn_info_t remote;
} peer_t;

struct hoop__tp {
    hoop__tp_params_t p;
    hoop__ibv_t v;
    int loaded;
    hoop__ibv_port_t port;
    char where[HOOP__IBV_NAME_MAX + 8]; /* "rxe0:1", for sentences */
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq;
    uint64_t *probe_word; /* the word peers' probes write into */
    struct ibv_mr *probe_mr;
    hoop__ibv_mrc_t mrc; /* registrations of user buffers for zero copy */
    peer_t *peers;
    int npeers; /* peers with a queue pair in use */
    int wake_fd, epfd;
    int armed;  /* arm() announced a sleep; the next progress() ends it */
    int notify; /* the CQ is armed: its next completion is an event on ch */
    int abort_sent;
    int settled; /* settle() succeeded: a peer's failure no longer aborts the whole transport */
    hoop_result_t failed;
    /* The first failure was the abort notice of a peer that had said ready: that peer is through
     * settle(), so every rank has entered it and had this rank's ready notice; the connection is
     * made, and its first call fails with the reason. */
    int aborted_ready;
    char conn_err[ABORT_MAX + 1];
};

/* ibverbs' scratch in a transfer: payload bytes done, whether the header went or came, the link. */
static inline uint64_t *ibt_off(hoop__xfer_t *x) { return &x->tp_priv.u64[0]; }
static inline int32_t *ibt_hdr(hoop__xfer_t *x) { return &x->tp_priv.i32[2]; }
static inline hoop__xfer_t **ibt_next(hoop__xfer_t *x)
{
    return (hoop__xfer_t **)&x->tp_priv.ptr[3];
}

/* Little-endian fragment header: type, flags (an abort's code), credits, payload bytes. */
static inline void frag_put(uint8_t *b, int type, int flags, uint32_t credits, uint32_t len)
{
    b[0] = (uint8_t)type;
    b[1] = (uint8_t)flags;
    b[2] = b[3] = 0;
    for (int i = 0; i < 4; i++) {
        b[4 + i] = (uint8_t)(credits >> (8 * i));
        b[8 + i] = (uint8_t)(len >> (8 * i));
        b[12 + i] = 0;
    }
}
static inline uint32_t frag_u32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* Shared between ibverbs_setup.c and ibverbs.c. */
hoop_result_t hoop__ibt_listen(const hoop__tp_params_t *p, hoop__tp_t **out, char *addr,
                               size_t addrlen);
hoop_result_t hoop__ibt_connect(hoop__tp_t *tp, const char *const *addrs, double deadline);
hoop_result_t hoop__ibt_settle(hoop__tp_t *tp, double deadline);
void hoop__ibt_close(hoop__tp_t *tp);
void hoop__ibt_abort(hoop__tp_t *tp, hoop_result_t code, const char *reason);
/* Posts a receive into slot i of peer j: 0, or the errno of ibv_post_recv. */
int hoop__ibt_post_slot(hoop__tp_t *tp, int j, int i);
/* Sends a control fragment (no credit needed): 0, or -1 with no buffer or a failed post. */
int hoop__ibt_send_ctrl(hoop__tp_t *tp, int j, int type, int flags, const void *body, size_t len);
/* Deregisters the user memory of peer j's zero-copy transfers. */
void hoop__ibt_zc_drop(hoop__tp_t *tp, int j);
/* Polls the CQ once and handles what came: 1 if anything did. */
int hoop__ibt_poll(hoop__tp_t *tp);
void hoop__ibt_report(hoop__tp_t *tp, hoop_result_t code, int peer, const char *msg);
const char *hoop__ibt_where(const hoop__tp_t *tp);
void hoop__ibt_progress(hoop__tp_t *tp, int timeout_ms);

#endif
