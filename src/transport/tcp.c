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
 * Accepted connections identify themselves concurrently, each within AUTH_WINDOW seconds: one that
 * sends garbage, a wrong hello or a wrong proof, or stays silent, is dropped with a warning naming
 * its address, and a socket slot is only given to a connection that has passed. Once every peer is
 * connected the listener closes.
 *
 * Abort: the first abort() sends every peer, on socket 0 and only between two messages (never into
 * the middle of one), a header of kind HOOP_K_ABORT whose payload is the reason, without waiting.
 * A receiver reads headers on socket 0 even while it has no receive posted from that peer (a header
 * that is not an abort is held for the receive that will take it), so it fails with
 * "rank j aborted: <reason>" instead of a bare lost connection.
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
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/comm.h"
#include "transport/transport.h"

#define STRIPE_MIN (64 * 1024)
#define HELLO_SIZE 24
#define HELLO_MAGIC 0x4f4c4548504f4f48ull /* "HOOPHELO" */
/* Seconds an accepted connection has to send its hello and authenticate. */
#define AUTH_WINDOW 10.0
/* Accepted connections that may be identifying themselves at once; the oldest goes to make room. */
#define PENDING_MAX 64
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
    size_t off, len;  /* payload range carried on this socket */
    size_t pos;       /* bytes moved so far, header included */
    size_t hlen;      /* HOOP_WIRE_HDR_SIZE on stripe 0, 0 on the others */
    uint8_t hdr[HOOP_WIRE_HDR_SIZE];
    struct seg *next;
} seg_t;

typedef struct sock {
    int fd;
    seg_t *sq, *sq_tail; /* sends in order */
    seg_t *rq, *rq_tail; /* receives in order */
    int hup;             /* peer hung up while we had nothing to read: stop polling for it */
    /* Socket 0: the next header, read ahead of (or for) the receive it belongs to. */
    uint8_t hb[HOOP_WIRE_HDR_SIZE];
    size_t hb_len;
} sock_t;

typedef struct peer {
    sock_t *socks;
    int lost;
    int salvaging;            /* reading a last abort notice before declaring the peer lost */
    int bye;                  /* it said goodbye: it closed its communicator normally */
    uint64_t moved;           /* bytes sent to and received from it (see moved() in transport.h) */
    int ab_active;            /* reading the reason of an abort notice */
    size_t ab_need, ab_got;
    hoop_result_t ab_code;    /* HOOP_ERR_MISMATCH when the peer aborted on a disagreement */
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
    char conn_err[ABORT_MAX + 1]; /* why connect() failed, for the peers connected so far */
};

/* ---- addresses ---- */

static int ifname_matches(const char *spec, const char *name)
{
    /* NCCL-style: "eth,ib" prefixes; "^docker,lo" excludes; "=eth0" exact names. */
    int exclude = 0, exact = 0;
    if (*spec == '^') { exclude = 1; spec++; }
    if (*spec == '=') { exact = 1; spec++; }
    int hit = 0;
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", spec);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        if (exact ? strcmp(name, tok) == 0 : strncmp(name, tok, strlen(tok)) == 0) hit = 1;
    }
    return exclude ? !hit : hit;
}

static int pick_by_ifname(const char *spec, struct sockaddr_storage *ss, char *ifout, size_t iflen)
{
    struct ifaddrs *ifa0 = NULL;
    if (getifaddrs(&ifa0) != 0) return -1;
    int found = -1;
    for (int want = AF_INET; found < 0 && want != 0; want = want == AF_INET ? AF_INET6 : 0) {
        for (struct ifaddrs *i = ifa0; i != NULL; i = i->ifa_next) {
            if (i->ifa_addr == NULL || i->ifa_addr->sa_family != want) continue;
            if (!(i->ifa_flags & IFF_UP)) continue;
            if (!ifname_matches(spec, i->ifa_name)) continue;
            if (want == AF_INET6 &&
                IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr))
                continue;
            memset(ss, 0, sizeof(*ss));
            memcpy(ss, i->ifa_addr, want == AF_INET ? sizeof(struct sockaddr_in)
                                                    : sizeof(struct sockaddr_in6));
            snprintf(ifout, iflen, "%s", i->ifa_name);
            found = 0;
            break;
        }
    }
    freeifaddrs(ifa0);
    return found;
}

/* The local address the kernel would use to reach host: the interface facing the rendezvous. */
static int pick_by_route(const char *host, struct sockaddr_storage *ss)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_DGRAM;
    if (getaddrinfo(host, "9", &hints, &res) != 0 || res == NULL) return -1;
    int rc = -1;
    int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
        socklen_t sl = sizeof(*ss);
        if (getsockname(fd, (struct sockaddr *)ss, &sl) == 0) rc = 0;
    }
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
    return rc;
}

static void format_addr(const struct sockaddr_storage *ss, char *out, size_t n)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
        snprintf(out, n, "%s:%u", ip, ntohs(a->sin_port));
    } else {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
        snprintf(out, n, "[%s]:%u", ip, ntohs(a->sin6_port));
    }
}

static int parse_addr(const char *s, struct sockaddr_storage *ss, socklen_t *sl)
{
    char host[INET6_ADDRSTRLEN + 2];
    const char *colon = strrchr(s, ':');
    if (colon == NULL || (size_t)(colon - s) >= sizeof(host)) return -1;
    size_t hl = (size_t)(colon - s);
    memcpy(host, s, hl);
    host[hl] = '\0';
    char *h = host;
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h[hl - 1] = '\0';
        h++;
    }
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port <= 0 || port > 65535) return -1;
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, h, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        *sl = sizeof(*a4);
    } else if (inet_pton(AF_INET6, h, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        *sl = sizeof(*a6);
    } else {
        return -1;
    }
    return 0;
}

static void tune_socket(int fd)
{
    int one = 1;
    /* Small messages (headers, latency-bound collectives) must not wait for Nagle. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* ---- listen / connect ---- */

static hoop_result_t tcp_listen(const hoop__tp_params_t *p, hoop__tp_t **out, char *addr,
                                size_t addrlen)
{
    hoop__tp_t *tp = calloc(1, sizeof(*tp));
    if (tp == NULL) return HOOP_ERR_NO_MEMORY;
    tp->p = *p;
    tp->nsock = p->cfg->sockets_per_peer > 0 ? p->cfg->sockets_per_peer : 1;
    tp->listen_fd = -1;
    tp->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    int wake_err = errno;
    tp->peers = calloc((size_t)p->size, sizeof(peer_t));
    size_t nfd = (size_t)p->size * (size_t)tp->nsock + 2;
    tp->pfds = calloc(nfd, sizeof(struct pollfd));
    tp->pfd_owner = calloc(nfd, sizeof(int));
    if (tp->wake_fd < 0 || tp->peers == NULL || tp->pfds == NULL || tp->pfd_owner == NULL) {
        int tp_wake_failed = tp->wake_fd < 0;
        if (tp->wake_fd >= 0) close(tp->wake_fd);
        free(tp->peers);
        free(tp->pfds);
        free(tp->pfd_owner);
        free(tp);
        if (tp_wake_failed) {
            char msg[320], why[256];
            snprintf(msg, sizeof(msg), "tcp: cannot create an eventfd: %s",
                     hoop__fd_error(wake_err, why, sizeof(why)));
            p->report(p->report_ctx, HOOP_ERR_SYSTEM, -1, msg);
            return HOOP_ERR_SYSTEM;
        }
        return HOOP_ERR_NO_MEMORY;
    }
    for (int i = 0; i < p->size; i++) {
        tp->peers[i].socks = calloc((size_t)tp->nsock, sizeof(sock_t));
        for (int k = 0; tp->peers[i].socks != NULL && k < tp->nsock; k++)
            tp->peers[i].socks[k].fd = -1;
    }

    struct sockaddr_storage ss;
    char ifname[64] = "";
    if (p->cfg->ifname[0] != '\0') {
        if (pick_by_ifname(p->cfg->ifname, &ss, ifname, sizeof(ifname)) != 0) {
            HOOP_WARN(p->log, "no usable interface matches HOOP_SOCKET_IFNAME=%s", p->cfg->ifname);
            p->report(p->report_ctx, HOOP_ERR_INVALID_ARGUMENT, -1,
                      "no network interface matches HOOP_SOCKET_IFNAME");
            tp->failed = HOOP_ERR_INVALID_ARGUMENT;
            *out = tp;
            return HOOP_ERR_INVALID_ARGUMENT;
        }
    } else if (p->route_hint == NULL || pick_by_route(p->route_hint, &ss) != 0) {
        if (pick_by_ifname("^lo,docker", &ss, ifname, sizeof(ifname)) != 0 &&
            pick_by_ifname("lo", &ss, ifname, sizeof(ifname)) != 0) {
            tp->failed = HOOP_ERR_SYSTEM;
            *out = tp;
            p->report(p->report_ctx, HOOP_ERR_SYSTEM, -1, "no network interface is up");
            return HOOP_ERR_SYSTEM;
        }
    }
    if (ss.ss_family == AF_INET)
        ((struct sockaddr_in *)&ss)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)&ss)->sin6_port = 0;

    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t sl = ss.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    char msg[320], why[256];
    if (fd < 0 || bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 1024) != 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        snprintf(msg, sizeof(msg), "cannot listen for peers: %s", hoop__fd_error(errno, why, sizeof(why)));
        if (fd >= 0) close(fd);
        p->report(p->report_ctx, HOOP_ERR_SYSTEM, -1, msg);
        tp->failed = HOOP_ERR_SYSTEM;
        *out = tp;
        return HOOP_ERR_SYSTEM;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    tp->listen_fd = fd;
    format_addr(&ss, addr, addrlen);
    HOOP_INFO(p->log, "tcp: listening on %s%s%s, %d socket(s) per peer, communicator %016" PRIx64, addr,
              ifname[0] ? " interface " : "", ifname, tp->nsock, p->comm_id);
    if (p->cfg->auth.set)
        HOOP_INFO(p->log, "tcp: peer connections are authenticated (HOOP_AUTH_KEY)");
    else
        HOOP_INFO(p->log, "tcp: no HOOP_AUTH_KEY, peer connections are not authenticated");
    *out = tp;
    return HOOP_OK;
}

static void put_hello(uint8_t *b, uint64_t comm_id, uint32_t rank, uint32_t k)
{
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(HELLO_MAGIC >> (8 * i));
    for (int i = 0; i < 8; i++) b[8 + i] = (uint8_t)(comm_id >> (8 * i));
    for (int i = 0; i < 4; i++) b[16 + i] = (uint8_t)(rank >> (8 * i));
    for (int i = 0; i < 4; i++) b[20 + i] = (uint8_t)(k >> (8 * i));
}

static uint64_t get_le(const uint8_t *b, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | b[i];
    return v;
}

static int wait_fd(int fd, short ev, double deadline)
{
    for (;;) {
        double left = deadline - hoop__now();
        if (left <= 0) return 0;
        struct pollfd pf = {.fd = fd, .events = ev};
        int rc = poll(&pf, 1, left > 1.0 ? 1000 : (int)(left * 1000) + 1);
        if (rc > 0) return 1;
        if (rc < 0 && errno != EINTR) return -1;
    }
}

/* Reads or writes exactly n bytes on a non-blocking socket before the deadline. */
static int io_full(int fd, uint8_t *buf, size_t n, int writing, double deadline)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = writing ? send(fd, buf + done, n - done, MSG_NOSIGNAL)
                            : recv(fd, buf + done, n - done, 0);
        if (r > 0) {
            done += (size_t)r;
        } else if (r == 0 && !writing) {
            return -1;
        } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (wait_fd(fd, writing ? POLLOUT : POLLIN, deadline) <= 0) return -1;
        } else {
            return -1;
        }
    }
    return 0;
}

/* The handshake context of socket k between client rank r and server rank j of this communicator. */
static uint64_t auth_ctx(const hoop__tp_t *tp, uint32_t r, uint32_t j, uint32_t k)
{
    return hoop__auth_context(tp->p.comm_id, r, j, k);
}

/* Reports a failure of connect() and keeps its sentence, which tcp_connect then sends to the
 * peers connected so far (see there). */
static void connect_report(hoop__tp_t *tp, hoop_result_t code, int peer, const char *msg)
{
    /* Truncated like any abort reason: send_abort sends at most ABORT_MAX bytes. */
    size_t n = strlen(msg) < ABORT_MAX ? strlen(msg) : ABORT_MAX;
    memcpy(tp->conn_err, msg, n);
    tp->conn_err[n] = '\0';
    tp->p.report(tp->p.report_ctx, code, peer, msg);
}

static hoop_result_t connect_one(hoop__tp_t *tp, int peer, int k, const char *addr, double deadline)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    char msg[400];
    if (parse_addr(addr, &ss, &sl) != 0) {
        snprintf(msg, sizeof(msg), "rank %d published a bad address \"%s\"", peer, addr);
        connect_report(tp, HOOP_ERR_INTERNAL, peer, msg);
        return HOOP_ERR_INTERNAL;
    }
    const hoop__auth_key_t *key = &tp->p.cfg->auth;
    double backoff = 0.001;
    for (;;) {
        int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) break;
        tune_socket(fd);
        int rc = connect(fd, (struct sockaddr *)&ss, sl);
        if (rc != 0 && errno == EINPROGRESS) {
            if (wait_fd(fd, POLLOUT, deadline) > 0) {
                int err = 0;
                socklen_t el = sizeof(err);
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
                rc = err == 0 ? 0 : -1;
                errno = err;
            } else {
                errno = ETIMEDOUT;
            }
        }
        if (rc == 0) {
            uint8_t hello[HELLO_SIZE];
            put_hello(hello, tp->p.comm_id, (uint32_t)tp->p.rank, (uint32_t)k);
            if (io_full(fd, hello, sizeof(hello), 1, deadline) == 0) {
                if (!key->set) {
                    tp->peers[peer].socks[k].fd = fd;
                    return HOOP_OK;
                }
                char why[256] = "";
                hoop_result_t a = hoop__auth_handshake(
                    fd, key, 0, auth_ctx(tp, (uint32_t)tp->p.rank, (uint32_t)peer, (uint32_t)k), deadline,
                    why, sizeof(why));
                if (a == HOOP_OK) {
                    tp->peers[peer].socks[k].fd = fd;
                    return HOOP_OK;
                }
                /* A closed connection is retried: the peer may have made room for others. A wrong
                 * key is final. */
                if (a != HOOP_ERR_PEER_LOST) {
                    close(fd);
                    snprintf(msg, sizeof(msg), "authentication with rank %d at %s failed: %s", peer, addr,
                             why);
                    if (a != HOOP_ERR_TIMEOUT) a = HOOP_ERR_AUTH;
                    connect_report(tp, a, peer, msg);
                    return a;
                }
                errno = ECONNRESET;
            }
        }
        int e = errno;
        close(fd);
        if (hoop__now() + backoff >= deadline) {
            snprintf(msg, sizeof(msg), "cannot connect to rank %d at %s: %s", peer, addr,
                     strerror(e));
            connect_report(tp, HOOP_ERR_TIMEOUT, peer, msg);
            return HOOP_ERR_TIMEOUT;
        }
        usleep((useconds_t)(backoff * 1e6));
        backoff = backoff < 0.1 ? backoff * 2 : 0.1;
    }
    char why[256];
    snprintf(msg, sizeof(msg), "tcp: cannot open a socket to rank %d: %s", peer,
             hoop__fd_error(errno, why, sizeof(why)));
    connect_report(tp, HOOP_ERR_SYSTEM, peer, msg);
    return HOOP_ERR_SYSTEM;
}

/* An accepted connection until it has identified itself (hello, then the handshake). */
typedef struct pending {
    int fd; /* -1: free */
    double deadline;
    uint8_t hello[HELLO_SIZE];
    size_t got;
    uint32_t rank, k;
    hoop__auth_t *auth; /* after the hello, with a key */
    short events;
    char from[64];
} pending_t;

static void pending_drop(hoop__tp_t *tp, pending_t *pd, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void pending_drop(hoop__tp_t *tp, pending_t *pd, const char *fmt, ...)
{
    char why[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    HOOP_WARN(tp->p.log, "tcp: dropped a connection from %s: %s", pd->from, why);
    close(pd->fd);
    pd->fd = -1;
    if (pd->auth != NULL) {
        hoop__auth_clear(pd->auth);
        free(pd->auth);
        pd->auth = NULL;
    }
}

/* Moves pd on. 1: it is a peer's socket now; 0: not yet; -1: dropped. *auth_failed counts proofs
 * that failed after a hello of this communicator (most likely a peer with another key). */
static int pending_step(hoop__tp_t *tp, pending_t *pd, const char *const *addrs, int *auth_failed)
{
    const uint32_t me = (uint32_t)tp->p.rank;
    if (pd->got < HELLO_SIZE) {
        for (;;) {
            ssize_t r = recv(pd->fd, pd->hello + pd->got, HELLO_SIZE - pd->got, 0);
            if (r > 0) {
                pd->got += (size_t)r;
                if (pd->got == HELLO_SIZE) break;
                continue;
            }
            if (r < 0 && errno == EINTR) continue;
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                pd->events = POLLIN;
                return 0;
            }
            pending_drop(tp, pd, "%s before it identified itself",
                         r == 0 ? "it closed the connection" : strerror(errno));
            return -1;
        }
        uint64_t magic = get_le(pd->hello, 8), cid = get_le(pd->hello + 8, 8);
        pd->rank = (uint32_t)get_le(pd->hello + 16, 4);
        pd->k = (uint32_t)get_le(pd->hello + 20, 4);
        if (magic != HELLO_MAGIC) {
            pending_drop(tp, pd, "it sent %zu bytes that are not a hoop hello", pd->got);
            return -1;
        }
        if (cid != tp->p.comm_id) {
            pending_drop(tp, pd, "its hello is for communicator %016" PRIx64 ", not %016" PRIx64, cid,
                         tp->p.comm_id);
            return -1;
        }
        if (pd->rank <= me || pd->rank >= (uint32_t)tp->p.size || pd->k >= (uint32_t)tp->nsock ||
            addrs[pd->rank] == NULL) {
            pending_drop(tp, pd, "its hello names rank %u socket %u, which does not connect here",
                         pd->rank, pd->k);
            return -1;
        }
        if (tp->p.cfg->auth.set) {
            pd->auth = malloc(sizeof(*pd->auth));
            if (pd->auth == NULL) {
                pending_drop(tp, pd, "out of memory");
                return -1;
            }
            hoop__auth_start(pd->auth, &tp->p.cfg->auth, 1, auth_ctx(tp, pd->rank, me, pd->k));
        }
    }
    if (pd->auth != NULL) {
        char why[256] = "";
        int st = hoop__auth_step(pd->auth, pd->fd, &pd->events, why, sizeof(why));
        if (st == HOOP_AUTH_MORE) return 0;
        if (st == HOOP_AUTH_FAILED) {
            if (pd->auth->code == HOOP_ERR_AUTH) (*auth_failed)++;
            pending_drop(tp, pd, "it claims to be rank %u but failed authentication: %s", pd->rank, why);
            return -1;
        }
        hoop__auth_clear(pd->auth);
        free(pd->auth);
        pd->auth = NULL;
    }
    sock_t *so = &tp->peers[pd->rank].socks[pd->k];
    if (so->fd >= 0) {
        pending_drop(tp, pd, "rank %u socket %u is connected already", pd->rank, pd->k);
        return -1;
    }
    so->fd = pd->fd;
    pd->fd = -1;
    return 1;
}

static void tcp_abort(hoop__tp_t *tp, hoop_result_t code, const char *reason);
static void idle_read(hoop__tp_t *tp, int peer);
static int is_ready(const hoop__wire_hdr_t *h);

/* Connects to lower rank j just to tell it why this rank gives up (notice: an abort notice). */
static void tell_one(hoop__tp_t *tp, int j, const char *addr, uint8_t *notice, size_t len, double end)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    if (parse_addr(addr, &ss, &sl) != 0) return;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    tune_socket(fd);
    int rc = connect(fd, (struct sockaddr *)&ss, sl);
    if (rc != 0 && errno == EINPROGRESS && wait_fd(fd, POLLOUT, end) > 0) {
        int err = 0;
        socklen_t el = sizeof(err);
        rc = getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0 ? 0 : -1;
    }
    uint8_t hello[HELLO_SIZE];
    char why[256];
    put_hello(hello, tp->p.comm_id, (uint32_t)tp->p.rank, 0);
    const hoop__auth_key_t *key = &tp->p.cfg->auth;
    if (rc == 0 && io_full(fd, hello, sizeof(hello), 1, end) == 0 &&
        (!key->set || hoop__auth_handshake(fd, key, 0, auth_ctx(tp, (uint32_t)tp->p.rank, (uint32_t)j, 0),
                                           end, why, sizeof(why)) == HOOP_OK))
        (void)io_full(fd, notice, len, 1, end);
    close(fd);
}

/* Finishes the identification of an accepted connection (the rest of its hello, then the
 * handshake, or the rest of the one under way in a), sends it the notice and closes it. */
static void tell_accepted(hoop__tp_t *tp, int fd, uint8_t *hello, size_t got, hoop__auth_t *a,
                          uint8_t *notice, size_t len, double end)
{
    char why[256];
    int ok = got == HELLO_SIZE || io_full(fd, hello + got, HELLO_SIZE - got, 0, end) == 0;
    ok = ok && get_le(hello, 8) == HELLO_MAGIC && get_le(hello + 8, 8) == tp->p.comm_id;
    uint32_t r = (uint32_t)get_le(hello + 16, 4), k = (uint32_t)get_le(hello + 20, 4);
    ok = ok && r < (uint32_t)tp->p.size && k < (uint32_t)tp->nsock;
    if (ok && a != NULL) {
        short ev = 0;
        int st;
        while ((st = hoop__auth_step(a, fd, &ev, why, sizeof(why))) == HOOP_AUTH_MORE)
            if (ev == 0 || wait_fd(fd, ev, end) <= 0) break;
        ok = st == HOOP_AUTH_DONE;
    } else if (ok && tp->p.cfg->auth.set) {
        ok = hoop__auth_handshake(fd, &tp->p.cfg->auth, 1, auth_ctx(tp, r, (uint32_t)tp->p.rank, k),
                                  end, why, sizeof(why)) == HOOP_OK;
    }
    if (ok) (void)io_full(fd, notice, len, 1, end);
    close(fd);
}

/* The header of a control notice on socket 0 (kind HOOP_K_ABORT): an abort with its code and a
 * reason of len bytes, settle()'s ready notice (count 1), or close()'s goodbye (all zero). */
static void notice_hdr(const hoop__tp_t *tp, hoop_result_t code, uint64_t count, uint64_t len,
                       uint8_t b[HOOP_WIRE_HDR_SIZE])
{
    hoop__wire_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.kind = HOOP_K_ABORT;
    h.flags = (uint8_t)code;
    h.root = -1;
    h.src = (uint32_t)tp->p.rank;
    h.comm_id = tp->p.comm_id;
    h.count = count;
    h.payload_len = len;
    hoop__wire_encode(&h, b);
}

/* connect() failed: tells the peers it has no connection with why, so that they fail with the
 * reason rather than wait for this rank until the deadline or meet a refused connection. The
 * descriptors of this instance's connections (told by tcp_abort already) are closed first, which
 * matters when it failed for want of them. Lower ranks it did not reach get a connection of their
 * own; higher ones identifying themselves (pend, PENDING_MAX of them, or NULL) or queued on the
 * listener are let finish and told, until none has come for FAREWELL_GAP seconds, FAREWELL_MAX in
 * all. A connection closed without a word would read as a peer without the key. */
static void farewell(hoop__tp_t *tp, const char *const *addrs, const char *reason, pending_t *pend)
{
    if (tp->listen_fd < 0) return;
    uint8_t *told = calloc((size_t)tp->p.size, 1);
    for (int j = 0; j < tp->p.size; j++)
        for (int k = 0; tp->peers[j].socks != NULL && k < tp->nsock; k++)
            if (tp->peers[j].socks[k].fd >= 0) {
                if (told != NULL) told[j] = 1;
                close(tp->peers[j].socks[k].fd);
                tp->peers[j].socks[k].fd = -1;
            }
    size_t len = strlen(reason) < ABORT_MAX ? strlen(reason) : ABORT_MAX;
    uint8_t notice[HOOP_WIRE_HDR_SIZE + ABORT_MAX];
    notice_hdr(tp, tp->failed, len, len, notice);
    memcpy(notice + HOOP_WIRE_HDR_SIZE, reason, len);
    double end = hoop__now() + FAREWELL_MAX;
    for (int j = 0; told != NULL && addrs != NULL && j < tp->p.rank; j++)
        if (!told[j] && addrs[j] != NULL) tell_one(tp, j, addrs[j], notice, HOOP_WIRE_HDR_SIZE + len, end);
    free(told);
    for (int i = 0; pend != NULL && i < PENDING_MAX; i++) {
        pending_t *pd = &pend[i];
        if (pd->fd < 0) continue;
        tell_accepted(tp, pd->fd, pd->hello, pd->got, pd->auth, notice, HOOP_WIRE_HDR_SIZE + len, end);
        pd->fd = -1;
        if (pd->auth != NULL) {
            hoop__auth_clear(pd->auth);
            free(pd->auth);
            pd->auth = NULL;
        }
    }
    for (;;) {
        double now = hoop__now(), left = end - now;
        if (left <= 0 || wait_fd(tp->listen_fd, POLLIN, now + (left < FAREWELL_GAP ? left : FAREWELL_GAP)) <= 0)
            break;
        int fd = accept4(tp->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0 && (errno == ECONNABORTED || errno == EINTR)) continue;
        if (fd < 0) break;
        tune_socket(fd);
        uint8_t hello[HELLO_SIZE];
        tell_accepted(tp, fd, hello, 0, NULL, notice, HOOP_WIRE_HDR_SIZE + len, end);
    }
}

/* connect() failed: tell the peers connected so far why (their accept loops watch those sockets),
 * and the others (farewell), so that they fail now with this rank's reason rather than time out
 * on its missing connections. */
static hoop_result_t connect_failed(hoop__tp_t *tp, const char *const *addrs, hoop_result_t rc,
                                    pending_t *pend)
{
    if (!tp->failed) tcp_abort(tp, rc, tp->conn_err[0] ? tp->conn_err : NULL);
    tp->failed = rc;
    farewell(tp, addrs, tp->conn_err[0] ? tp->conn_err : hoop_error_string(rc), pend);
    return rc;
}

static hoop_result_t tcp_connect(hoop__tp_t *tp, const char *const *addrs, double deadline)
{
    if (tp->failed) return tp->failed;
    int me = tp->p.rank, expected = 0;
    for (int j = 0; j < tp->p.size; j++) {
        if (j == me || addrs[j] == NULL) continue;
        if (j > me) {
            expected += tp->nsock;
            continue;
        }
        for (int k = 0; k < tp->nsock; k++) {
            hoop_result_t rc = connect_one(tp, j, k, addrs[j], deadline);
            if (rc != HOOP_OK) return connect_failed(tp, addrs, rc, NULL);
        }
    }
    /* Polled: the listener, the connections still identifying themselves, and socket 0 of the
     * peers connected already, whose abort notice or end fails this connect at once. */
    const int npf = 1 + PENDING_MAX + tp->p.size;
    pending_t *pend = expected > 0 ? calloc(PENDING_MAX, sizeof(*pend)) : NULL;
    struct pollfd *pf = expected > 0 ? calloc((size_t)npf, sizeof(*pf)) : NULL;
    int *who = expected > 0 ? calloc((size_t)npf, sizeof(*who)) : NULL;
    if (expected > 0 && (pend == NULL || pf == NULL || who == NULL)) {
        free(pend);
        free(pf);
        free(who);
        connect_report(tp, HOOP_ERR_NO_MEMORY, -1, "out of memory accepting peers");
        return connect_failed(tp, addrs, HOOP_ERR_NO_MEMORY, NULL);
    }
    for (int i = 0; pend != NULL && i < PENDING_MAX; i++) pend[i].fd = -1;
    int auth_failed = 0;
    hoop_result_t rc = HOOP_OK;
    while (expected > 0) {
        double now = hoop__now();
        double wake = deadline;
        for (int i = 0; i < PENDING_MAX; i++) {
            if (pend[i].fd < 0) continue;
            if (now >= pend[i].deadline)
                pending_drop(tp, &pend[i], "it did not identify itself%s within %g s",
                             tp->p.cfg->auth.set ? " and authenticate" : "", AUTH_WINDOW);
            else if (pend[i].deadline < wake)
                wake = pend[i].deadline;
        }
        if (now >= deadline) {
            char msg[400], missing[128] = "";
            size_t o = 0;
            int nmissing = 0;
            for (int j = me + 1; j < tp->p.size && o + 12 < sizeof(missing); j++) {
                int in = 0;
                for (int k = 0; k < tp->nsock; k++) in += tp->peers[j].socks[k].fd >= 0;
                if (addrs[j] != NULL && in < tp->nsock) {
                    o += (size_t)snprintf(missing + o, sizeof(missing) - o, "%s%d", o ? "," : "", j);
                    nmissing++;
                }
            }
            rc = HOOP_ERR_TIMEOUT;
            int n = snprintf(msg, sizeof(msg), "timed out waiting for rank%s %s to connect",
                             nmissing == 1 ? "" : "(s)", missing);
            if (auth_failed > 0 && n > 0 && (size_t)n < sizeof(msg)) {
                /* Connections that named a missing rank but had the wrong key: say that. */
                snprintf(msg + n, sizeof(msg) - (size_t)n,
                         "; %d connection(s) failed authentication (is HOOP_AUTH_KEY the same on every "
                         "rank?)",
                         auth_failed);
                rc = HOOP_ERR_AUTH;
            }
            connect_report(tp, rc, -1, msg);
            break;
        }
        int n = 0;
        pf[n].fd = tp->listen_fd;
        pf[n].events = POLLIN;
        who[n++] = -1;
        for (int i = 0; i < PENDING_MAX; i++) {
            if (pend[i].fd < 0) continue;
            pf[n].fd = pend[i].fd;
            pf[n].events = pend[i].events;
            who[n++] = i;
        }
        const int first_peer = n;
        for (int j = 0; j < tp->p.size; j++) {
            const sock_t *so = &tp->peers[j].socks[0];
            if (j == me || so->fd < 0 || so->hup || so->hb_len == HOOP_WIRE_HDR_SIZE) continue;
            pf[n].fd = so->fd;
            pf[n].events = POLLIN;
            who[n++] = j;
        }
        double left = wake - now;
        int ms = left > 1.0 ? 1000 : (int)(left * 1000.0) + 1;
        if (poll(pf, (nfds_t)n, ms) < 0) {
            if (errno == EINTR) continue;
            char msg[160];
            snprintf(msg, sizeof(msg), "waiting for peers to connect: poll: %s", strerror(errno));
            connect_report(tp, HOOP_ERR_SYSTEM, -1, msg);
            rc = HOOP_ERR_SYSTEM;
            break;
        }
        for (int i = first_peer; i < n && !tp->failed; i++)
            if (pf[i].revents != 0) idle_read(tp, who[i]);
        if (tp->failed) {
            rc = tp->failed;
            break;
        }
        for (int i = 1; i < first_peer && expected > 0; i++) {
            pending_t *pd = &pend[who[i]];
            if (pf[i].revents == 0 || pd->fd != pf[i].fd) continue;
            if (pending_step(tp, pd, addrs, &auth_failed) == 1) expected--;
        }
        for (int a = 0; a < 16 && expected > 0 && (pf[0].revents & POLLIN); a++) {
            struct sockaddr_storage from;
            socklen_t fl = sizeof(from);
            int fd = accept4(tp->listen_fd, (struct sockaddr *)&from, &fl, SOCK_CLOEXEC);
            if (fd < 0 && errno == ECONNABORTED) continue;
            if (fd < 0 && HOOP_FD_EXHAUSTED(errno)) {
                /* The connection stays queued and the listener readable: retrying would spin. */
                char msg[400], why[256];
                snprintf(msg, sizeof(msg), "tcp: cannot accept the connections of its peers: %s",
                         hoop__fd_error(errno, why, sizeof(why)));
                connect_report(tp, HOOP_ERR_SYSTEM, -1, msg);
                rc = HOOP_ERR_SYSTEM;
            }
            if (fd < 0) break;
            tune_socket(fd);
            int slot = -1, oldest = -1;
            for (int i = 0; i < PENDING_MAX && slot < 0; i++) {
                if (pend[i].fd < 0) slot = i;
                else if (oldest < 0 || pend[i].deadline < pend[oldest].deadline) oldest = i;
            }
            if (slot < 0) {
                pending_drop(tp, &pend[oldest],
                             "%d connections were identifying themselves at once; this was the oldest",
                             PENDING_MAX);
                slot = oldest;
            }
            pending_t *pd = &pend[slot];
            memset(pd, 0, sizeof(*pd));
            pd->fd = fd;
            now = hoop__now();
            pd->deadline = now + AUTH_WINDOW < deadline ? now + AUTH_WINDOW : deadline;
            pd->events = POLLIN;
            format_addr(&from, pd->from, sizeof(pd->from));
            if (pending_step(tp, pd, addrs, &auth_failed) == 1) expected--;
        }
        if (rc != HOOP_OK) break;
    }
    if (rc != HOOP_OK) connect_failed(tp, addrs, rc, pend);
    for (int i = 0; pend != NULL && i < PENDING_MAX; i++)
        if (pend[i].fd >= 0) pending_drop(tp, &pend[i], "it had not identified itself when every peer was connected");
    free(pend);
    free(pf);
    free(who);
    if (rc != HOOP_OK) return rc;
    /* Nobody else is expected: stop listening, so that nothing more can knock. */
    if (tp->listen_fd >= 0) close(tp->listen_fd);
    tp->listen_fd = -1;
    int npeers = 0;
    for (int j = 0; j < tp->p.size; j++) npeers += j != me && addrs[j] != NULL;
    HOOP_INFO(tp->p.log, "tcp: connected to %d peer(s)", npeers);
    return HOOP_OK;
}

/* ---- data path ---- */

static seg_t *seg_new(hoop__tp_t *tp)
{
    seg_t *s = tp->free_segs;
    if (s != NULL) {
        tp->free_segs = s->next;
        return s;
    }
    return malloc(sizeof(seg_t));
}

static void seg_free(hoop__tp_t *tp, seg_t *s)
{
    s->next = tp->free_segs;
    tp->free_segs = s;
}

static void finish(hoop__xfer_t *x, hoop_result_t st)
{
    if (x->done) return;
    if (x->status == HOOP_OK) x->status = st;
    if (st != HOOP_OK || --x->parts_left == 0) x->done = 1;
}

static int stripes(const hoop__tp_t *tp, size_t len)
{
    return len >= (size_t)tp->nsock * STRIPE_MIN ? tp->nsock : 1;
}

static void fail_queue(hoop__tp_t *tp, seg_t **head, seg_t **tail, hoop_result_t code)
{
    for (seg_t *s = *head, *n; s != NULL; s = n) {
        n = s->next;
        s->x->status = s->x->status ? s->x->status : code;
        s->x->done = 1;
        seg_free(tp, s);
    }
    *head = *tail = NULL;
}

static void send_abort(hoop__tp_t *tp, int j, hoop_result_t code, const char *text, size_t len);
static void tcp_abort(hoop__tp_t *tp, hoop_result_t code, const char *reason);

/* Fails everything queued for peer with code, shuts its sockets and reports msg once. A peer whose
 * connection still works (it sent a mismatched message, say) is told msg first, so that it fails
 * with the cause too. The descriptors stay open until close(): closing a socket with unread data
 * would reset the connection, and the peer could lose that notice. The first failure of a peer
 * aborts the whole transport at once, telling the other peers msg: the communicator is aborted by
 * it anyway, and the others must hear why even if no later call reaches the transport. */
static void peer_fail(hoop__tp_t *tp, int peer, hoop_result_t code, const char *msg)
{
    peer_t *pe = &tp->peers[peer];
    if (pe->lost) return;
    pe->lost = 1;
    /* Not back to a peer whose own notice this is (ab_code is set once one came). */
    if (code != HOOP_ERR_PEER_LOST && code != HOOP_ERR_ABORTED && pe->ab_code == HOOP_OK) {
        size_t len = strlen(msg);
        send_abort(tp, peer, code, msg, len < ABORT_MAX ? len : ABORT_MAX);
    }
    for (int k = 0; k < tp->nsock; k++) {
        sock_t *s = &pe->socks[k];
        fail_queue(tp, &s->sq, &s->sq_tail, code);
        fail_queue(tp, &s->rq, &s->rq_tail, code);
        if (s->fd >= 0) shutdown(s->fd, SHUT_RDWR);
    }
    tp->p.report(tp->p.report_ctx, code, peer, msg);
    if (!tp->abort_sent) tcp_abort(tp, code, msg);
}

static void salvage_abort(hoop__tp_t *tp, int peer);

static void peer_lost(hoop__tp_t *tp, int peer, const char *why)
{
    peer_t *pe = &tp->peers[peer];
    if (pe->lost) return;
    char msg[256];
    snprintf(msg, sizeof(msg), "lost connection to rank %d (%s)", peer, why);
    /* A peer that aborted said why before its connections went: that is the error to report. */
    if (!pe->salvaging) {
        pe->salvaging = 1;
        salvage_abort(tp, peer);
        pe->salvaging = 0;
        if (pe->lost) return;
    }
    peer_fail(tp, peer, HOOP_ERR_PEER_LOST, msg);
}

/* Reads header bytes on socket 0 into so->hb until a whole header is there (1), the socket has no
 * more for now (0), or the peer is gone (-1). A peer that said goodbye and then closed, while
 * idle (no receive posted), only marks the socket hung up, for a receive that comes later to
 * report; without a goodbye it died, and is lost at once, as with any end while a receive waits. */
static int fill_hdr(hoop__tp_t *tp, int peer, sock_t *so, int idle)
{
    while (so->hb_len < HOOP_WIRE_HDR_SIZE) {
        ssize_t r = recv(so->fd, so->hb + so->hb_len, HOOP_WIRE_HDR_SIZE - so->hb_len, 0);
        if (r > 0) {
            so->hb_len += (size_t)r;
            tp->peers[peer].moved += (uint64_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        char why[128];
        snprintf(why, sizeof(why), "%s", r == 0 ? "connection closed by peer" : strerror(errno));
        if (idle && ((r == 0 && tp->peers[peer].bye) || tp->peers[peer].salvaging))
            so->hup = 1;
        else
            peer_lost(tp, peer, why);
        return -1;
    }
    return 1;
}

/* The header in hb is an abort notice from peer to this communicator. */
static int is_abort(const hoop__tp_t *tp, int peer, const uint8_t *hb, hoop__wire_hdr_t *h)
{
    return hoop__wire_decode(hb, UINT64_MAX, h) == HOOP_OK && h->kind == HOOP_K_ABORT &&
           h->comm_id == tp->p.comm_id && h->src == (uint32_t)peer;
}

static void finish_abort(hoop__tp_t *tp, int peer)
{
    peer_t *pe = &tp->peers[peer];
    pe->ab_active = 0;
    /* The reason is text from a peer: printable characters only. */
    for (size_t i = 0; i < pe->ab_got; i++) {
        unsigned char c = (unsigned char)pe->ab_text[i];
        if (c < ' ' || c >= 0x7f) pe->ab_text[i] = '?';
    }
    pe->ab_text[pe->ab_got] = '\0';
    /* The peers this rank still waited on: when the notice is a timeout that this rank's own wait
     * caused, they lead to the rank really at fault. */
    char waiting[96] = "";
    size_t o = 0;
    for (int j = 0; j < tp->p.size && o + 12 < sizeof(waiting); j++) {
        const peer_t *q = &tp->peers[j];
        if (j == peer || q->lost || q->socks == NULL) continue;
        int busy = 0;
        for (int k = 0; k < tp->nsock; k++) busy |= q->socks[k].rq != NULL || q->socks[k].sq != NULL;
        if (busy) o += (size_t)snprintf(waiting + o, sizeof(waiting) - o, "%s%d", o ? "," : "", j);
    }
    char msg[400];
    int n = snprintf(msg, sizeof(msg), "rank %d aborted: %s", peer,
                     pe->ab_got > 0 ? pe->ab_text : "(no reason given)");
    if (o > 0 && n > 0 && (size_t)n < sizeof(msg))
        snprintf(msg + n, sizeof(msg) - (size_t)n, "; rank %d was still waiting on rank(s) %s",
                 tp->p.rank, waiting);
    peer_fail(tp, peer, pe->ab_code, msg);
}

/* Peer said goodbye (see the top): a receive waiting for its next header will never get one. */
static void goodbye_in(hoop__tp_t *tp, int peer)
{
    peer_t *pe = &tp->peers[peer];
    pe->bye = 1;
    if (pe->socks[0].rq != NULL) peer_lost(tp, peer, "it closed its communicator");
}

/* Reads the reason of an abort notice on socket 0; fails the peer once it is in, or once the
 * connection ends (with as much of the reason as came). */
static void read_abort(hoop__tp_t *tp, int peer)
{
    peer_t *pe = &tp->peers[peer];
    sock_t *so = &pe->socks[0];
    while (pe->ab_got < pe->ab_need) {
        ssize_t r = recv(so->fd, pe->ab_text + pe->ab_got, pe->ab_need - pe->ab_got, 0);
        if (r > 0) {
            pe->ab_got += (size_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        break;
    }
    finish_abort(tp, peer);
}

static void start_abort(hoop__tp_t *tp, int peer, const hoop__wire_hdr_t *h)
{
    peer_t *pe = &tp->peers[peer];
    pe->socks[0].hb_len = 0;
    if (h->flags == HOOP_OK && h->payload_len == 0) {
        goodbye_in(tp, peer);
        return;
    }
    if (h->payload_len > ABORT_MAX) {
        char why[128];
        snprintf(why, sizeof(why), "it sent an abort notice of %" PRIu64 " bytes", h->payload_len);
        pe->salvaging = 1; /* nothing more to read from it */
        peer_lost(tp, peer, why);
        return;
    }
    pe->ab_active = 1;
    /* A disagreement stays one on every rank; any other cause is an abort here. */
    pe->ab_code = h->flags == HOOP_ERR_MISMATCH ? HOOP_ERR_MISMATCH : HOOP_ERR_ABORTED;
    pe->ab_need = (size_t)h->payload_len;
    pe->ab_got = 0;
    read_abort(tp, peer);
}

/* Socket 0 of peer while no receive of it is reading a payload: takes in the next header. An
 * abort notice fails the peer; any other header is held for the receive it belongs to. */
static void idle_read(hoop__tp_t *tp, int peer)
{
    peer_t *pe = &tp->peers[peer];
    sock_t *so = &pe->socks[0];
    if (pe->lost || so->fd < 0) return;
    if (pe->ab_active) {
        read_abort(tp, peer);
        return;
    }
    if (so->hb_len == HOOP_WIRE_HDR_SIZE || fill_hdr(tp, peer, so, 1) != 1) return;
    hoop__wire_hdr_t h;
    /* A ready notice (read while connecting) is held for settle(). */
    if (is_abort(tp, peer, so->hb, &h) && !is_ready(&h)) start_abort(tp, peer, &h);
}

static void salvage_abort(hoop__tp_t *tp, int peer)
{
    peer_t *pe = &tp->peers[peer];
    if (pe->socks == NULL) return;
    const sock_t *so = &pe->socks[0];
    /* In the middle of a message nothing else can come next. */
    if (so->fd < 0 || (so->rq != NULL && so->rq->pos != 0)) return;
    idle_read(tp, peer);
}

static void tcp_post(hoop__tp_t *tp, hoop__xfer_t *x)
{
    x->done = 0;
    x->status = HOOP_OK;
    x->hdr_ok = 0;
    int n = stripes(tp, x->len);
    x->parts_left = n;
    if (tp->failed || x->peer < 0 || x->peer >= tp->p.size || x->peer == tp->p.rank ||
        tp->peers[x->peer].lost) {
        x->status = tp->failed ? tp->failed : HOOP_ERR_PEER_LOST;
        x->done = 1;
        return;
    }
    peer_t *pe = &tp->peers[x->peer];
    for (int k = 0; k < n; k++) {
        seg_t *s = seg_new(tp);
        if (s == NULL) {
            /* Earlier stripes are queued already; the stream cannot be kept consistent. */
            x->status = HOOP_ERR_NO_MEMORY;
            peer_lost(tp, x->peer, "out of memory");
            return;
        }
        size_t off, len;
        size_t q = x->len / (size_t)n, r = x->len % (size_t)n;
        off = (size_t)k * q + ((size_t)k < r ? (size_t)k : r);
        len = q + ((size_t)k < r ? 1 : 0);
        s->x = x;
        s->off = off;
        s->len = len;
        s->pos = 0;
        s->hlen = k == 0 ? HOOP_WIRE_HDR_SIZE : 0;
        s->next = NULL;
        if (k == 0 && x->dir == HOOP_XFER_SEND) {
            x->hdr.payload_len = x->len;
            hoop__wire_encode(&x->hdr, s->hdr);
        }
        sock_t *so = &pe->socks[k];
        seg_t **head = x->dir == HOOP_XFER_SEND ? &so->sq : &so->rq;
        seg_t **tail = x->dir == HOOP_XFER_SEND ? &so->sq_tail : &so->rq_tail;
        if (*tail) (*tail)->next = s;
        else *head = s;
        *tail = s;
    }
}

/* Moves what can move on one socket without blocking. Returns 1 if any byte moved. */
static int sock_io(hoop__tp_t *tp, int peer, int k)
{
    sock_t *so = &tp->peers[peer].socks[k];
    int moved = 0;
    while (so->sq != NULL) {
        seg_t *s = so->sq;
        struct iovec iov[2];
        int cnt = 0;
        if (s->pos < s->hlen) {
            iov[cnt].iov_base = s->hdr + s->pos;
            iov[cnt++].iov_len = s->hlen - s->pos;
        }
        size_t pdone = s->pos > s->hlen ? s->pos - s->hlen : 0;
        if (pdone < s->len) {
            iov[cnt].iov_base = (uint8_t *)s->x->buf + s->off + pdone;
            iov[cnt++].iov_len = s->len - pdone;
        }
        if (cnt > 0) {
            struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
            ssize_t r = sendmsg(so->fd, &mh, MSG_NOSIGNAL);
            if (r < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
                char why[128];
                snprintf(why, sizeof(why), "%s", strerror(errno));
                peer_lost(tp, peer, why);
                return 1;
            }
            s->pos += (size_t)r;
            tp->peers[peer].moved += (uint64_t)r;
            moved = 1;
        }
        if (s->pos < s->hlen + s->len) break;
        so->sq = s->next;
        if (so->sq == NULL) so->sq_tail = NULL;
        finish(s->x, HOOP_OK);
        seg_free(tp, s);
    }
    if (k == 0 && tp->peers[peer].ab_active) {
        read_abort(tp, peer);
        return 1;
    }
    while (so->rq != NULL) {
        seg_t *s = so->rq;
        hoop__xfer_t *x = s->x;
        if (s->hlen == 0 && !x->hdr_ok) break; /* wait for socket 0 to check the header */
        ssize_t r;
        if (s->pos < s->hlen) {
            /* Headers come through hb, where one may already wait (read while idle). */
            int f = fill_hdr(tp, peer, so, 0);
            if (f < 0) return 1;
            if (f == 0) break;
            hoop__wire_hdr_t ab;
            if (is_abort(tp, peer, so->hb, &ab)) {
                start_abort(tp, peer, &ab);
                return 1;
            }
            memcpy(s->hdr, so->hb, HOOP_WIRE_HDR_SIZE);
            so->hb_len = 0;
            r = (ssize_t)(s->hlen - s->pos);
        } else {
            size_t pdone = s->pos - s->hlen;
            if (pdone == s->len) {
                r = 0;
                goto complete;
            }
            r = recv(so->fd, (uint8_t *)x->buf + s->off + pdone, s->len - pdone, 0);
            if (r > 0) tp->peers[peer].moved += (uint64_t)r;
        }
        if (r == 0) {
            peer_lost(tp, peer, "connection closed by peer");
            return 1;
        }
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
            char why[128];
            snprintf(why, sizeof(why), "%s", strerror(errno));
            peer_lost(tp, peer, why);
            return 1;
        }
        s->pos += (size_t)r;
        moved = 1;
        if (s->pos == s->hlen && s->hlen > 0) {
            hoop_result_t rc = hoop__wire_decode(s->hdr, UINT64_MAX, &x->got);
            if (rc == HOOP_OK) {
                hoop__wire_hdr_t want = x->hdr;
                want.payload_len = x->len;
                rc = hoop__wire_match(&want, &x->got);
            }
            if (rc != HOOP_OK) {
                /* The stream is out of step from here on: fail this transfer and the peer. */
                char msg[400];
                hoop__wire_hdr_t want = x->hdr;
                want.payload_len = x->len;
                hoop__wire_mismatch_msg(&want, &x->got, peer, tp->p.rank, msg, sizeof(msg));
                x->status = HOOP_ERR_MISMATCH;
                x->done = 1;
                so->rq = s->next;
                if (so->rq == NULL) so->rq_tail = NULL;
                seg_free(tp, s);
                peer_fail(tp, peer, HOOP_ERR_MISMATCH, msg);
                return 1;
            }
            x->hdr_ok = 1;
        }
        if (s->pos < s->hlen + s->len) continue;
    complete:
        so->rq = s->next;
        if (so->rq == NULL) so->rq_tail = NULL;
        finish(x, HOOP_OK);
        seg_free(tp, s);
    }
    return moved;
}

static void tcp_progress(hoop__tp_t *tp, int timeout_ms)
{
    int moved = 0;
    for (int j = 0; j < tp->p.size; j++) {
        if (tp->peers[j].lost) continue;
        for (int k = 0; k < tp->nsock; k++) {
            sock_t *so = &tp->peers[j].socks[k];
            if (so->fd >= 0 && (so->sq != NULL || so->rq != NULL)) moved |= sock_io(tp, j, k);
        }
    }
    if (moved || timeout_ms == 0) return;

    int n = 0;
    tp->pfds[n].fd = tp->wake_fd;
    tp->pfds[n].events = POLLIN;
    tp->pfd_owner[n++] = -1;
    if (tp->p.also_poll != NULL && *tp->p.also_poll >= 0) {
        tp->pfds[n].fd = *tp->p.also_poll;
        tp->pfds[n].events = POLLIN;
        tp->pfd_owner[n++] = -2;
    }
    for (int j = 0; j < tp->p.size; j++) {
        const peer_t *pe = &tp->peers[j];
        if (pe->lost) continue;
        for (int k = 0; k < tp->nsock; k++) {
            sock_t *so = &pe->socks[k];
            if (so->fd < 0) continue;
            short ev = 0;
            if (so->sq != NULL) ev |= POLLOUT;
            if (k == 0 && pe->ab_active) ev |= POLLIN;
            else if (so->rq != NULL && (so->rq->hlen > 0 || so->rq->x->hdr_ok)) ev |= POLLIN;
            /* Idle socket 0: watch for an abort notice (and take the next header in early). */
            else if (k == 0 && so->rq == NULL && !so->hup && so->hb_len < HOOP_WIRE_HDR_SIZE) ev |= POLLIN;
            else if (!so->hup) ev |= POLLRDHUP;
            if (ev == 0) continue;
            tp->pfds[n].fd = so->fd;
            tp->pfds[n].events = ev;
            tp->pfd_owner[n++] = j * tp->nsock + k;
        }
    }
    int rc = poll(tp->pfds, (nfds_t)n, timeout_ms);
    if (rc <= 0) return;
    for (int i = 0; i < n; i++) {
        short re = tp->pfds[i].revents;
        if (re == 0) continue;
        if (tp->pfd_owner[i] == -2) continue; /* the other transport's: it reads it */
        if (tp->pfd_owner[i] < 0) {
            uint64_t v;
            if (read(tp->wake_fd, &v, sizeof(v)) < 0) { /* nothing to do: only a wake-up */
            }
            continue;
        }
        int j = tp->pfd_owner[i] / tp->nsock, k = tp->pfd_owner[i] % tp->nsock;
        sock_t *so = &tp->peers[j].socks[k];
        if (tp->peers[j].lost) continue;
        if (k == 0 && (tp->peers[j].ab_active || so->rq == NULL) &&
            (re & (POLLIN | POLLRDHUP | POLLHUP | POLLERR))) {
            idle_read(tp, j);
            if (tp->peers[j].lost) continue;
        }
        if (so->sq == NULL && so->rq == NULL) {
            /* The peer closed while we expect nothing from it here (socket 0 decides whether it
             * said goodbye; see fill_hdr): a later transfer will notice. A reset means it ended
             * with bytes of ours unread, inside a call: that fails the communicator now. */
            int err = 0;
            socklen_t el = sizeof(err);
            if ((re & POLLERR) && getsockopt(so->fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err) {
                peer_lost(tp, j, strerror(err));
                continue;
            }
            if (re & (POLLRDHUP | POLLHUP | POLLERR)) so->hup = 1;
            continue;
        }
        sock_io(tp, j, k);
    }
}

/* The notice of settle(), and its test. */
static void ready_notice(const hoop__tp_t *tp, uint8_t *b)
{
    notice_hdr(tp, HOOP_OK, 1, 0, b);
}

static int is_ready(const hoop__wire_hdr_t *h)
{
    return h->flags == HOOP_OK && h->payload_len == 0 && h->count == 1;
}

static hoop_result_t tcp_settle(hoop__tp_t *tp, double deadline)
{
    if (tp->failed) return tp->failed;
    int n = tp->p.size, waiting = 0;
    uint8_t b[HOOP_WIRE_HDR_SIZE];
    ready_notice(tp, b);
    char *ready = calloc((size_t)n, 1);
    struct pollfd *pf = calloc((size_t)n, sizeof(*pf));
    int *who = calloc((size_t)n, sizeof(*who));
    if (ready == NULL || pf == NULL || who == NULL) {
        free(ready);
        free(pf);
        free(who);
        connect_report(tp, HOOP_ERR_NO_MEMORY, -1, "out of memory settling the connections");
        return connect_failed(tp, NULL, HOOP_ERR_NO_MEMORY, NULL);
    }
    hoop_result_t rc = HOOP_OK;
    char msg[400];
    for (int j = 0; j < n && rc == HOOP_OK; j++) {
        sock_t *so = &tp->peers[j].socks[0];
        if (j == tp->p.rank || so->fd < 0) {
            ready[j] = 1;
            continue;
        }
        waiting++;
        if (io_full(so->fd, b, sizeof(b), 1, deadline) != 0) {
            snprintf(msg, sizeof(msg), "lost connection to rank %d while connecting (%s)", j,
                     strerror(errno));
            connect_report(tp, HOOP_ERR_PEER_LOST, j, msg);
            rc = HOOP_ERR_PEER_LOST;
        }
    }
    while (rc == HOOP_OK && waiting > 0) {
        double left = deadline - hoop__now();
        if (left <= 0) {
            char missing[128] = "";
            size_t o = 0;
            for (int j = 0; j < n && o + 12 < sizeof(missing); j++)
                if (!ready[j]) o += (size_t)snprintf(missing + o, sizeof(missing) - o, "%s%d", o ? "," : "", j);
            snprintf(msg, sizeof(msg), "timed out waiting for rank(s) %s to finish connecting", missing);
            connect_report(tp, HOOP_ERR_TIMEOUT, -1, msg);
            rc = HOOP_ERR_TIMEOUT;
            break;
        }
        int m = 0, held = 0;
        for (int j = 0; j < n; j++)
            if (!ready[j]) {
                pf[m].fd = tp->peers[j].socks[0].fd;
                pf[m].events = POLLIN;
                held |= tp->peers[j].socks[0].hb_len == HOOP_WIRE_HDR_SIZE;
                who[m++] = j;
            }
        if (poll(pf, (nfds_t)m, held ? 0 : left > 1.0 ? 1000 : (int)(left * 1000) + 1) < 0 && errno != EINTR) {
            snprintf(msg, sizeof(msg), "settling the connections: poll: %s", strerror(errno));
            connect_report(tp, HOOP_ERR_SYSTEM, -1, msg);
            rc = HOOP_ERR_SYSTEM;
            break;
        }
        for (int i = 0; i < m && !tp->failed; i++) {
            int j = who[i];
            if (pf[i].revents == 0 && tp->peers[j].socks[0].hb_len < HOOP_WIRE_HDR_SIZE) continue;
            peer_t *pe = &tp->peers[j];
            sock_t *so = &pe->socks[0];
            if (pe->ab_active) {
                read_abort(tp, j);
                continue;
            }
            /* The header may be in already (read while connecting, see idle_read). */
            if (so->hb_len < HOOP_WIRE_HDR_SIZE && fill_hdr(tp, j, so, 0) != 1) continue;
            hoop__wire_hdr_t h;
            if (is_abort(tp, j, so->hb, &h) && is_ready(&h)) {
                so->hb_len = 0;
                ready[j] = 1;
                waiting--;
            } else if (is_abort(tp, j, so->hb, &h)) {
                start_abort(tp, j, &h); /* it failed to connect: its reason */
            } else {
                snprintf(msg, sizeof(msg), "rank %d sent a message before it finished connecting", j);
                connect_report(tp, HOOP_ERR_INTERNAL, j, msg);
                rc = HOOP_ERR_INTERNAL;
                break;
            }
        }
        if (tp->failed) rc = tp->failed;
    }
    free(ready);
    free(pf);
    free(who);
    return rc == HOOP_OK ? HOOP_OK : connect_failed(tp, NULL, rc, NULL);
}

static uint64_t tcp_moved(hoop__tp_t *tp, int peer)
{
    return peer >= 0 && peer < tp->p.size ? tp->peers[peer].moved : 0;
}

static void tcp_wake(hoop__tp_t *tp)
{
    uint64_t one = 1;
    if (write(tp->wake_fd, &one, sizeof(one)) < 0) { /* already pending: fine */
    }
}

/* Tells peer j why we abort, if its socket 0 is between two messages and has room: one send that
 * never waits. A half-sent notice ends in the close, and the peer reports what came. */
static void send_abort(hoop__tp_t *tp, int j, hoop_result_t code, const char *text, size_t len)
{
    sock_t *so = &tp->peers[j].socks[0];
    if (so->fd < 0 || (so->sq != NULL && so->sq->pos != 0)) return;
    uint8_t msg[HOOP_WIRE_HDR_SIZE + ABORT_MAX];
    notice_hdr(tp, code, len, len, msg);
    memcpy(msg + HOOP_WIRE_HDR_SIZE, text, len);
    if (send(so->fd, msg, HOOP_WIRE_HDR_SIZE + len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) { /* best effort */
    }
}

static void tcp_abort(hoop__tp_t *tp, hoop_result_t code, const char *reason)
{
    if (!tp->failed) tp->failed = code;
    const int first = !tp->abort_sent;
    tp->abort_sent = 1;
    const char *text = reason != NULL && reason[0] != '\0' ? reason : hoop_error_string(code);
    size_t len = strlen(text);
    if (len > ABORT_MAX) len = ABORT_MAX;
    for (int j = 0; j < tp->p.size; j++) {
        if (tp->peers[j].socks == NULL) continue;
        if (first && !tp->peers[j].lost && j != tp->p.rank) send_abort(tp, j, code, text, len);
        for (int k = 0; k < tp->nsock; k++) {
            sock_t *so = &tp->peers[j].socks[k];
            fail_queue(tp, &so->sq, &so->sq_tail, code);
            fail_queue(tp, &so->rq, &so->rq_tail, code);
            /* shutdown, not close: the fd stays valid for a concurrent poll(). */
            if (so->fd >= 0) shutdown(so->fd, SHUT_RDWR);
        }
        tp->peers[j].lost = 1;
    }
}

/* close()'s goodbye (see the top): after everything sent so far, on socket 0 of every peer still
 * connected, unless a message is half sent there. Not after an abort: the peers were told why. */
static void send_goodbyes(hoop__tp_t *tp)
{
    if (tp->failed) return;
    uint8_t b[HOOP_WIRE_HDR_SIZE];
    notice_hdr(tp, HOOP_OK, 0, 0, b);
    double deadline = hoop__now() + GOODBYE_WAIT;
    for (int j = 0; j < tp->p.size; j++) {
        const peer_t *pe = &tp->peers[j];
        if (j == tp->p.rank || pe->lost || pe->socks == NULL) continue;
        const sock_t *so = &pe->socks[0];
        if (so->fd < 0 || (so->sq != NULL && so->sq->pos != 0)) continue;
        /* Its peer normally reads whatever fills the socket; one that does not gets a bare close. */
        (void)io_full(so->fd, b, sizeof(b), 1, deadline);
    }
}

static void tcp_close(hoop__tp_t *tp)
{
    if (tp == NULL) return;
    send_goodbyes(tp);
    for (int j = 0; j < tp->p.size; j++) {
        if (tp->peers[j].socks == NULL) continue;
        for (int k = 0; k < tp->nsock; k++) {
            sock_t *so = &tp->peers[j].socks[k];
            for (seg_t *s = so->sq, *n; s != NULL; s = n) { n = s->next; free(s); }
            for (seg_t *s = so->rq, *n; s != NULL; s = n) { n = s->next; free(s); }
            if (so->fd >= 0) close(so->fd);
        }
        free(tp->peers[j].socks);
    }
    for (seg_t *s = tp->free_segs, *n; s != NULL; s = n) {
        n = s->next;
        free(s);
    }
    if (tp->listen_fd >= 0) close(tp->listen_fd);
    if (tp->wake_fd >= 0) close(tp->wake_fd);
    free(tp->peers);
    free(tp->pfds);
    free(tp->pfd_owner);
    free(tp);
}

const hoop__transport_ops_t hoop__tcp_transport = {
    .name = "tcp",
    .listen = tcp_listen,
    .connect = tcp_connect,
    .post = tcp_post,
    .progress = tcp_progress,
    .wake = tcp_wake,
    .abort = tcp_abort,
    .close = tcp_close,
    .moved = tcp_moved,
    .settle = tcp_settle,
};
