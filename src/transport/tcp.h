/*
 * TCP transport: non-blocking sockets driven by poll(), S sockets per peer (HOOP_SOCKETS_PER_PEER).
 *
 * A message is a 64-byte wire header followed by its payload. A payload of at least S * 64 KiB is cut
 * into S stripes, stripe k on socket k; the header travels on socket 0 ahead of stripe 0. Both sides
 * compute the same stripes from the length, so each socket stays an in-order stream. A receive only
 * starts reading the other sockets once the header on socket 0 has been checked, so a mismatched
 * message never writes into the caller's buffer beyond its first stripe.
 *
 * Connection set-up: rank r connects to every lower rank and accepts from every higher one; a
 * connect completes against the listen backlog, so nobody waits for an accept() and there is no
 * cycle. Each new socket starts with a hello (magic, communicator id, rank, socket index) and, with
 * a key (HOOP_AUTH_KEY), the handshake of auth.h bound to (communicator, both ranks, socket index).
 * Accepted connections identify themselves concurrently in the gate of base/sock.h, each within
 * HOOP__SOCK_AUTH_WINDOW seconds and at most HOOP__SOCK_PENDING_MAX at once: one that sends garbage,
 * a wrong hello or a wrong proof, or stays silent, is dropped with a warning naming its address,
 * and a socket slot is only given to a connection that has passed. Once every peer is connected the
 * listener closes.
 *
 * Abort: the first abort() sends every peer, on socket 0 and only between two messages (never into
 * the middle of one), a header of kind HOOP__K_ABORT whose payload is the reason and whose seq is
 * the number of collective calls this rank had finished, without waiting. A receiver reads
 * headers on socket 0 even while it has no receive posted from that peer (a header that is not an
 * abort is held for the receive that will take it), so it fails with "rank j aborted: <reason>"
 * instead of a bare lost connection. The notice comes after every message sent before it, so a
 * receiver has taken those in before it hears it.
 *
 * Settling: once every rank's connections are up, each sends every peer a ready notice (an abort
 * notice with no code, no reason and count 1: the first header on socket 0) and waits for one
 * from each; a rank whose connect() failed sends its reason instead, to the peers it is connected
 * with and, having made room, to the others, so every rank fails with that reason.
 *
 * Goodbye: close() ends each connection with a notice that has no code and no reason. A connection
 * that ends without one belongs to a process that died (or exited without destroying its
 * communicator), and fails the communicator at once, even if no transfer waits on that peer; one
 * that ends after it (the peer just finished first) only fails the transfers that still need it.
 *
 * Signals: every send() and sendmsg() on a socket here passes MSG_NOSIGNAL, so a peer that is
 * gone is an EPIPE, never a SIGPIPE; the only write() is to the wake eventfd, which cannot raise
 * one.
 *
 * tcp_setup.c holds listening and connection set-up, tcp.c the data path, settling, abort and
 * close; this header their shared state. Nothing else includes it.
 */
#ifndef HOOP_TCP_H
#define HOOP_TCP_H

#include <poll.h>
#include <sys/epoll.h>
#include <stdint.h>

#include "base/sock.h"
#include "transport/transport.h"

#define STRIPE_MIN (64 * 1024)
#define TCP_CAPS HOOP__TP_MEM(HOOP__MEM_HOST) /* host memory only, unregistered */
#define HELLO_SIZE 24
#define HELLO_MAGIC 0x4f4c4548504f4f48ull /* "HOOPHELO" */
/* Longest abort reason sent (it ends up in a 400-byte error sentence with "rank N aborted: "). */
#define ABORT_MAX 360
/* Seconds close() waits, for all peers together, for room in a full socket to say goodbye. */
#define GOODBYE_WAIT 0.5
/* A connect() that failed tells peers queued on its listener why (farewell()): for up to
 * FAREWELL_MAX seconds, until none has come for FAREWELL_GAP. */
#define FAREWELL_MAX 1.0
#define FAREWELL_GAP 0.1

typedef struct seg {
    hoop__xfer_t *x;
    size_t off, len; /* payload range carried on this socket */
    size_t pos;      /* bytes moved so far, header included */
    size_t hlen;     /* HOOP__WIRE_HDR_SIZE on stripe 0, 0 on the others */
    uint8_t hdr[HOOP__WIRE_HDR_SIZE];
    struct seg *next;
} seg_t;

typedef struct sock {
    int fd;
    seg_t *sq, *sq_tail; /* sends in order */
    seg_t *rq, *rq_tail; /* receives in order */
    int hup;             /* peer hung up while we had nothing to read: stop polling for it */
    /* Socket 0: the next header, read ahead of (or for) the receive it belongs to. */
    uint8_t hb[HOOP__WIRE_HDR_SIZE];
    size_t hb_len;
    uint32_t ep_ev; /* the events it is in the epoll set with (tcp_arm), 0: not in it */
} sock_t;

typedef struct peer {
    sock_t *socks;
    int lost;
    int salvaging;  /* reading a last abort notice before declaring the peer lost */
    int bye;        /* it said goodbye: it closed its communicator normally */
    uint64_t moved; /* bytes sent to and received from it (see moved() in transport.h) */
    int ab_active;  /* reading the reason of an abort notice */
    size_t ab_need, ab_got;
    hoop_result_t ab_code; /* HOOP_ERR_MISMATCH when the peer aborted on a disagreement */
    uint64_t ab_done;      /* the calls it had finished, as its notice said */
    int ab_heard;          /* its failure is its notice: reported with ab_done */
    char ab_text[ABORT_MAX + 1];
} peer_t;

struct hoop__tp {
    hoop__tp_params_t p;
    int nsock;
    int listen_fd;
    int wake_fd;
    peer_t *peers;
    struct pollfd *pfds;
    int *pfd_owner; /* peer * nsock + socket index, -1 for the wake fd */
    seg_t *free_segs;
    hoop_result_t failed;
    int abort_sent;
    int settled; /* settle() succeeded: a peer's failure no longer aborts the whole transport */
    char conn_err[ABORT_MAX + 1]; /* why connect() failed, for the peers connected so far */
    /* Sleeping in another poll() (wait_fd, arm): the epoll set, made at the first such sleep. */
    int ep_state; /* 0 not made yet, 1 epfd is the set, -1 there is none */
    int epfd;
    int armed;               /* arm() announced a sleep that progress() has not taken yet */
    struct epoll_event *evs; /* nevs: every socket and the wake fd */
    int nevs;
};

/* tcp's scratch in a transfer (hoop__xfer_t.tp_priv): its stripes not finished yet, and whether
 * socket 0 has checked its header (the other stripes wait for that). */
static inline int32_t *tcp_parts_left(hoop__xfer_t *x) { return &x->tp_priv.i32[0]; }
static inline int32_t *tcp_hdr_ok(hoop__xfer_t *x) { return &x->tp_priv.i32[1]; }

/* Shared between tcp_setup.c and tcp.c. */
void hoop__tcp_idle_read(hoop__tp_t *tp, int peer);
int hoop__tcp_is_ready(const hoop__wire_hdr_t *h);
void hoop__tcp_abort(hoop__tp_t *tp, hoop_result_t code, const char *reason);
hoop_result_t hoop__tcp_listen(const hoop__tp_params_t *p, hoop__tp_t **out, char *addr,
                               size_t addrlen);
void hoop__tcp_connect_report(hoop__tp_t *tp, hoop_result_t code, int peer, const char *msg);
void hoop__tcp_notice_hdr(const hoop__tp_t *tp, hoop_result_t code, uint64_t count, uint64_t len,
                          uint8_t b[HOOP__WIRE_HDR_SIZE]);
hoop_result_t hoop__tcp_connect_failed(hoop__tp_t *tp, const char *const *addrs, hoop_result_t rc,
                                       hoop__sock_gate_t *gate);
hoop_result_t hoop__tcp_connect(hoop__tp_t *tp, const char *const *addrs, double deadline);

#endif
