/* TCP transport: addresses, listening, connection set-up and its failures. How it works: tcp.h. */
#define HOOP__LOG_SUBSYS HOOP__SUB_TRANSPORT /* of its INFO and TRACE lines (base/log.h) */
#include <errno.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/sock.h"
#include "transport/transport.h"

#include "transport/tcp.h"

/* ---- addresses ---- */

static int ifname_matches(const char *spec, const char *name)
{
    /* NCCL-style: "eth,ib" prefixes; "^docker,lo" excludes; "=eth0" exact names. */
    int exclude = 0, exact = 0;
    if (*spec == '^') {
        exclude = 1;
        spec++;
    }
    if (*spec == '=') {
        exact = 1;
        spec++;
    }
    int hit = 0;
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", spec);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        if (exact ? strcmp(name, tok) == 0 : strncmp(name, tok, strlen(tok)) == 0) hit = 1;
    }
    return exclude ? !hit : hit;
}

/* 0, -1 where no interface matches, or -errno where out of descriptors (getifaddrs opens a
 * netlink socket), which is not a host without interfaces. */
static int pick_by_ifname(const char *spec, struct sockaddr_storage *ss, char *ifout, size_t iflen)
{
    struct ifaddrs *ifa0 = NULL;
    if (getifaddrs(&ifa0) != 0) return errno == EMFILE || errno == ENFILE ? -errno : -1;
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
            memcpy(ss, i->ifa_addr,
                   want == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
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

/* ---- listen / connect ---- */

hoop_result_t hoop__tcp_listen(const hoop__tp_params_t *p, hoop__tp_t **out, char *addr,
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
            HOOP__WARN(p->log, "no usable interface matches HOOP_SOCKET_IFNAME=%s", p->cfg->ifname);
            p->report(p->report_ctx, HOOP_ERR_INVALID_ARGUMENT, -1,
                      "no network interface matches HOOP_SOCKET_IFNAME");
            tp->failed = HOOP_ERR_INVALID_ARGUMENT;
            *out = tp;
            return HOOP_ERR_INVALID_ARGUMENT;
        }
    } else if (p->route_hint == NULL || pick_by_route(p->route_hint, &ss) != 0) {
        int r = pick_by_ifname("^lo,docker", &ss, ifname, sizeof(ifname));
        if (r != 0 && r != -EMFILE && r != -ENFILE)
            r = pick_by_ifname("lo", &ss, ifname, sizeof(ifname));
        if (r != 0) {
            char msg[320], why[256];
            if (r == -EMFILE || r == -ENFILE)
                snprintf(msg, sizeof(msg), "tcp: cannot list the network interfaces: %s",
                         hoop__fd_error(-r, why, sizeof(why)));
            else
                snprintf(msg, sizeof(msg), "no network interface is up");
            tp->failed = HOOP_ERR_SYSTEM;
            *out = tp;
            p->report(p->report_ctx, HOOP_ERR_SYSTEM, -1, msg);
            return HOOP_ERR_SYSTEM;
        }
    }
    if (ss.ss_family == AF_INET)
        ((struct sockaddr_in *)&ss)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)&ss)->sin6_port = 0;

    socklen_t sl = ss.ss_family == AF_INET ? sizeof(struct sockaddr_in)
                                           : sizeof(struct sockaddr_in6);
    int fd = hoop__sock_listen((struct sockaddr *)&ss, sl, 0);
    char msg[320], why[256];
    if (fd < 0 || getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        snprintf(msg, sizeof(msg), "cannot listen for peers: %s",
                 hoop__fd_error(errno, why, sizeof(why)));
        if (fd >= 0) close(fd);
        p->report(p->report_ctx, HOOP_ERR_SYSTEM, -1, msg);
        tp->failed = HOOP_ERR_SYSTEM;
        *out = tp;
        return HOOP_ERR_SYSTEM;
    }
    tp->listen_fd = fd;
    hoop__sock_format(&ss, addr, addrlen);
    HOOP__INFO(p->log, "tcp: listening on %s%s%s, %d socket(s) per peer, communicator %016" PRIx64,
               addr, ifname[0] ? " interface " : "", ifname, tp->nsock, p->comm_id);
    if (p->cfg->auth.set)
        HOOP__INFO_IN(p->log, HOOP__SUB_AUTH,
                      "tcp: peer connections are authenticated (HOOP_AUTH_KEY)");
    else
        HOOP__INFO_IN(p->log, HOOP__SUB_AUTH,
                      "tcp: no HOOP_AUTH_KEY, peer connections are not authenticated");
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

/* The handshake context of socket k between client rank r and server rank j of this communicator. */
static uint64_t auth_ctx(const hoop__tp_t *tp, uint32_t r, uint32_t j, uint32_t k)
{
    return hoop__auth_context(tp->p.comm_id, r, j, k);
}

/* Reports a failure of connect() and keeps its sentence, which hoop__tcp_connect then sends to the
 * peers connected so far (see there). */
void hoop__tcp_connect_report(hoop__tp_t *tp, hoop_result_t code, int peer, const char *msg)
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
    if (hoop__sock_parse(addr, &ss, &sl) != 0) {
        snprintf(msg, sizeof(msg), "rank %d published a bad address \"%s\"", peer, addr);
        hoop__tcp_connect_report(tp, HOOP_ERR_INTERNAL, peer, msg);
        return HOOP_ERR_INTERNAL;
    }
    const hoop__auth_key_t *key = &tp->p.cfg->auth;
    double backoff = 0.001;
    for (;;) {
        int fd = hoop__sock_stream(ss.ss_family);
        if (fd < 0) break;
        int rc = hoop__sock_connect(fd, (struct sockaddr *)&ss, sl, deadline);
        if (rc == 0) {
            uint8_t hello[HELLO_SIZE];
            put_hello(hello, tp->p.comm_id, (uint32_t)tp->p.rank, (uint32_t)k);
            if (hoop__sock_io(fd, hello, sizeof(hello), HOOP__SOCK_SEND, deadline) ==
                HOOP__SOCK_DONE) {
                if (!key->set) {
                    tp->peers[peer].socks[k].fd = fd;
                    return HOOP_OK;
                }
                char why[256] = "";
                hoop_result_t a = hoop__auth_handshake(
                    fd, key, 0, auth_ctx(tp, (uint32_t)tp->p.rank, (uint32_t)peer, (uint32_t)k),
                    deadline, why, sizeof(why));
                if (a == HOOP_OK) {
                    tp->peers[peer].socks[k].fd = fd;
                    return HOOP_OK;
                }
                /* A closed connection is retried: the peer may have made room for others. A wrong
                 * key is final. */
                if (a != HOOP_ERR_PEER_LOST) {
                    close(fd);
                    snprintf(msg, sizeof(msg), "authentication with rank %d at %s failed: %s", peer,
                             addr, why);
                    if (a != HOOP_ERR_TIMEOUT) a = HOOP_ERR_AUTH;
                    hoop__tcp_connect_report(tp, a, peer, msg);
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
            hoop__tcp_connect_report(tp, HOOP_ERR_TIMEOUT, peer, msg);
            return HOOP_ERR_TIMEOUT;
        }
        usleep((useconds_t)(backoff * 1e6));
        backoff = backoff < 0.1 ? backoff * 2 : 0.1;
    }
    char why[256];
    snprintf(msg, sizeof(msg), "tcp: cannot open a socket to rank %d: %s", peer,
             hoop__fd_error(errno, why, sizeof(why)));
    hoop__tcp_connect_report(tp, HOOP_ERR_SYSTEM, peer, msg);
    return HOOP_ERR_SYSTEM;
}

/* Accepted connections identify themselves in the gate of sock.h: the hello first, read into the
 * slot's pre[], then, with a key, the handshake. */
static uint32_t hello_rank(const uint8_t *hello) { return (uint32_t)get_le(hello + 16, 4); }
static uint32_t hello_sock(const uint8_t *hello) { return (uint32_t)get_le(hello + 20, 4); }

static void pending_drop(hoop__tp_t *tp, hoop__sock_pending_t *pd, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void pending_drop(hoop__tp_t *tp, hoop__sock_pending_t *pd, const char *fmt, ...)
{
    char why[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    HOOP__WARN(tp->p.log, "tcp: dropped a connection from %s: %s", pd->peer, why);
    hoop__sock_pending_close(pd);
}

/* Moves pd on. 1: it is a peer's socket now; 0: not yet; -1: dropped. *auth_failed counts proofs
 * that failed after a hello of this communicator (most likely a peer with another key). */
static int pending_step(hoop__tp_t *tp, hoop__sock_pending_t *pd, const char *const *addrs,
                        int *auth_failed)
{
    const uint32_t me = (uint32_t)tp->p.rank;
    int hello_now = 0;
    while (pd->pre_got < HELLO_SIZE) {
        ssize_t r = recv(pd->fd, pd->pre + pd->pre_got, HELLO_SIZE - pd->pre_got, 0);
        if (r > 0) {
            pd->pre_got += (size_t)r;
            hello_now = pd->pre_got == HELLO_SIZE;
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
    const uint32_t rank = hello_rank(pd->pre), k = hello_sock(pd->pre);
    if (hello_now) {
        uint64_t magic = get_le(pd->pre, 8), cid = get_le(pd->pre + 8, 8);
        if (magic != HELLO_MAGIC) {
            pending_drop(tp, pd, "it sent %zu bytes that are not a hoop hello", pd->pre_got);
            return -1;
        }
        if (cid != tp->p.comm_id) {
            pending_drop(tp, pd, "its hello is for communicator %016" PRIx64 ", not %016" PRIx64,
                         cid, tp->p.comm_id);
            return -1;
        }
        if (rank <= me || rank >= (uint32_t)tp->p.size || k >= (uint32_t)tp->nsock ||
            addrs[rank] == NULL) {
            pending_drop(tp, pd, "its hello names rank %u socket %u, which does not connect here",
                         rank, k);
            return -1;
        }
        if (tp->p.cfg->auth.set &&
            hoop__sock_pending_auth(pd, &tp->p.cfg->auth, 1, auth_ctx(tp, rank, me, k)) != 0) {
            pending_drop(tp, pd, "out of memory");
            return -1;
        }
    }
    if (pd->auth != NULL) {
        char why[256] = "";
        int st = hoop__sock_pending_step(pd, why, sizeof(why));
        if (st == HOOP__AUTH_MORE) return 0;
        if (st == HOOP__AUTH_FAILED) {
            if (pd->auth->code == HOOP_ERR_AUTH) (*auth_failed)++;
            pending_drop(tp, pd, "it claims to be rank %u but failed authentication: %s", rank,
                         why);
            return -1;
        }
    }
    sock_t *so = &tp->peers[rank].socks[k];
    if (so->fd >= 0) {
        pending_drop(tp, pd, "rank %u socket %u is connected already", rank, k);
        return -1;
    }
    so->fd = hoop__sock_pending_take(pd);
    return 1;
}

/* Connects to lower rank j just to tell it why this rank gives up (notice: an abort notice). */
static void tell_one(hoop__tp_t *tp, int j, const char *addr, uint8_t *notice, size_t len,
                     double end)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    if (hoop__sock_parse(addr, &ss, &sl) != 0) return;
    int fd = hoop__sock_stream(ss.ss_family);
    if (fd < 0) return;
    int rc = hoop__sock_connect(fd, (struct sockaddr *)&ss, sl, end);
    uint8_t hello[HELLO_SIZE];
    char why[256];
    put_hello(hello, tp->p.comm_id, (uint32_t)tp->p.rank, 0);
    const hoop__auth_key_t *key = &tp->p.cfg->auth;
    if (rc == 0 &&
        hoop__sock_io(fd, hello, sizeof(hello), HOOP__SOCK_SEND, end) == HOOP__SOCK_DONE &&
        (!key->set ||
         hoop__auth_handshake(fd, key, 0, auth_ctx(tp, (uint32_t)tp->p.rank, (uint32_t)j, 0), end,
                              why, sizeof(why)) == HOOP_OK))
        (void)hoop__sock_io(fd, notice, len, HOOP__SOCK_SEND, end);
    close(fd);
}

/* Finishes the identification of an accepted connection (the rest of its hello, then the
 * handshake, or the rest of the one under way), sends it the notice and closes it. */
static void tell_accepted(hoop__tp_t *tp, hoop__sock_pending_t *pd, uint8_t *notice, size_t len,
                          double end)
{
    char why[256];
    const int fd = pd->fd;
    int ok = pd->pre_got == HELLO_SIZE ||
             hoop__sock_io(fd, pd->pre + pd->pre_got, HELLO_SIZE - pd->pre_got, 0, end) ==
                 HOOP__SOCK_DONE;
    ok = ok && get_le(pd->pre, 8) == HELLO_MAGIC && get_le(pd->pre + 8, 8) == tp->p.comm_id;
    uint32_t r = hello_rank(pd->pre), k = hello_sock(pd->pre);
    ok = ok && r < (uint32_t)tp->p.size && k < (uint32_t)tp->nsock;
    if (ok && pd->auth != NULL) {
        int st;
        while ((st = hoop__sock_pending_step(pd, why, sizeof(why))) == HOOP__AUTH_MORE)
            if (pd->events == 0 || hoop__sock_wait(fd, pd->events, end) <= 0) break;
        ok = st == HOOP__AUTH_DONE;
    } else if (ok && tp->p.cfg->auth.set) {
        ok = hoop__auth_handshake(fd, &tp->p.cfg->auth, 1, auth_ctx(tp, r, (uint32_t)tp->p.rank, k),
                                  end, why, sizeof(why)) == HOOP_OK;
    }
    if (ok) (void)hoop__sock_io(fd, notice, len, HOOP__SOCK_SEND, end);
    hoop__sock_pending_close(pd);
}

/* The header of a control notice on socket 0 (kind HOOP__K_ABORT): an abort with its code and a
 * reason of len bytes, settle()'s ready notice (count 1), or close()'s goodbye (all zero). */
void hoop__tcp_notice_hdr(const hoop__tp_t *tp, hoop_result_t code, uint64_t count, uint64_t len,
                          uint8_t b[HOOP__WIRE_HDR_SIZE])
{
    hoop__wire_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.kind = HOOP__K_ABORT;
    h.flags = (uint8_t)code;
    h.root = -1;
    h.src = (uint32_t)tp->p.rank;
    h.comm_id = tp->p.comm_id;
    h.count = count;
    h.payload_len = len;
    h.seq = hoop__tp_calls_done(&tp->p);
    hoop__wire_encode(&h, b);
}

/* connect() failed: tells the peers it has no connection with why, so that they fail with the
 * reason rather than wait for this rank until the deadline or meet a refused connection. The
 * descriptors of this instance's connections (told by hoop__tcp_abort already) are closed first, which
 * matters when it failed for want of them. Lower ranks it did not reach get a connection of their
 * own; higher ones identifying themselves (in gate, or NULL) or queued on the
 * listener are let finish and told, until none has come for FAREWELL_GAP seconds, FAREWELL_MAX in
 * all. A connection closed without a word would read as a peer without the key. */
static void farewell(hoop__tp_t *tp, const char *const *addrs, const char *reason,
                     hoop__sock_gate_t *gate)
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
    uint8_t notice[HOOP__WIRE_HDR_SIZE + ABORT_MAX];
    hoop__tcp_notice_hdr(tp, tp->failed, len, len, notice);
    memcpy(notice + HOOP__WIRE_HDR_SIZE, reason, len);
    double end = hoop__now() + FAREWELL_MAX;
    for (int j = 0; told != NULL && addrs != NULL && j < tp->p.rank; j++)
        if (!told[j] && addrs[j] != NULL)
            tell_one(tp, j, addrs[j], notice, HOOP__WIRE_HDR_SIZE + len, end);
    free(told);
    for (int i = 0; gate != NULL && i < HOOP__SOCK_PENDING_MAX; i++)
        if (gate->slot[i].fd >= 0)
            tell_accepted(tp, &gate->slot[i], notice, HOOP__WIRE_HDR_SIZE + len, end);
    for (;;) {
        double now = hoop__now(), left = end - now;
        if (left <= 0 || hoop__sock_wait(tp->listen_fd, POLLIN,
                                         now + (left < FAREWELL_GAP ? left : FAREWELL_GAP)) <= 0)
            break;
        int fd = hoop__sock_accept(tp->listen_fd, NULL, 0);
        if (fd < 0 && errno == ECONNABORTED) continue;
        if (fd < 0) break;
        hoop__sock_pending_t fresh;
        hoop__sock_pending_admit(&fresh, fd, NULL, end);
        tell_accepted(tp, &fresh, notice, HOOP__WIRE_HDR_SIZE + len, end);
    }
}

/* connect() failed: tell the peers connected so far why (their accept loops watch those sockets),
 * and the others (farewell), so that they fail now with this rank's reason rather than time out
 * on its missing connections. */
hoop_result_t hoop__tcp_connect_failed(hoop__tp_t *tp, const char *const *addrs, hoop_result_t rc,
                                       hoop__sock_gate_t *gate)
{
    if (!tp->failed) hoop__tcp_abort(tp, rc, tp->conn_err[0] ? tp->conn_err : NULL);
    tp->failed = rc;
    farewell(tp, addrs, tp->conn_err[0] ? tp->conn_err : hoop__error_string(rc), gate);
    return rc;
}

/* The step of connect that dials: this rank dials every lower rank, nsock connections each.
 * *expected: the connections the higher ranks will dial in. */
static hoop_result_t dial_lower(hoop__tp_t *tp, const char *const *addrs, double deadline,
                                int *expected)
{
    int me = tp->p.rank;
    *expected = 0;
    for (int j = 0; j < tp->p.size; j++) {
        if (j == me || addrs[j] == NULL) continue;
        if (j > me) {
            *expected += tp->nsock;
            continue;
        }
        for (int k = 0; k < tp->nsock; k++) {
            hoop_result_t rc = connect_one(tp, j, k, addrs[j], deadline);
            if (rc != HOOP_OK) return rc;
        }
    }
    return HOOP_OK;
}

/* What the accepting step keeps between its polls. */
typedef struct accepting {
    const char *const *addrs;
    double deadline;
    int expected;    /* connections not yet identified */
    int auth_failed; /* connections that named a missing rank with the wrong key */
    hoop__sock_gate_t gate;
    /* Polled: the listener, the connections still identifying themselves, and socket 0 of the
     * peers connected already, whose abort notice or end fails this connect at once. */
    struct pollfd *pf;
    int *who; /* pf[i]'s pending slot (connections identifying themselves) or peer */
    int n, first_peer;
} accepting_t;

/* The deadline passed: the sentence names the ranks that never connected. */
static hoop_result_t accept_timed_out(hoop__tp_t *tp, const accepting_t *ac)
{
    char msg[400], missing[128] = "";
    size_t o = 0;
    int nmissing = 0;
    for (int j = tp->p.rank + 1; j < tp->p.size && o + 12 < sizeof(missing); j++) {
        int in = 0;
        for (int k = 0; k < tp->nsock; k++) in += tp->peers[j].socks[k].fd >= 0;
        if (ac->addrs[j] != NULL && in < tp->nsock) {
            o += (size_t)snprintf(missing + o, sizeof(missing) - o, "%s%d", o ? "," : "", j);
            nmissing++;
        }
    }
    hoop_result_t rc = HOOP_ERR_TIMEOUT;
    int n = snprintf(msg, sizeof(msg), "timed out waiting for rank%s %s to connect",
                     nmissing == 1 ? "" : "(s)", missing);
    if (ac->auth_failed > 0 && n > 0 && (size_t)n < sizeof(msg)) {
        /* Connections that named a missing rank but had the wrong key: say that. */
        snprintf(msg + n, sizeof(msg) - (size_t)n,
                 "; %d connection(s) failed authentication (is HOOP_AUTH_KEY the same on every "
                 "rank?)",
                 ac->auth_failed);
        rc = HOOP_ERR_AUTH;
    }
    hoop__tcp_connect_report(tp, rc, -1, msg);
    return rc;
}

/* What the next poll watches (accepting_t.pf). */
static void poll_set(hoop__tp_t *tp, accepting_t *ac)
{
    int n = 0;
    ac->pf[n].fd = tp->listen_fd;
    ac->pf[n].events = POLLIN;
    ac->who[n++] = -1;
    for (int i = 0; i < HOOP__SOCK_PENDING_MAX; i++) {
        if (ac->gate.slot[i].fd < 0) continue;
        ac->pf[n].fd = ac->gate.slot[i].fd;
        ac->pf[n].events = ac->gate.slot[i].events;
        ac->who[n++] = i;
    }
    ac->first_peer = n;
    for (int j = 0; j < tp->p.size; j++) {
        const sock_t *so = &tp->peers[j].socks[0];
        if (j == tp->p.rank || so->fd < 0 || so->hup || so->hb_len == HOOP__WIRE_HDR_SIZE) continue;
        ac->pf[n].fd = so->fd;
        ac->pf[n].events = POLLIN;
        ac->who[n++] = j;
    }
    ac->n = n;
}

/* Takes the connections the listener holds into the gate, where they identify themselves. */
static hoop_result_t accept_new(hoop__tp_t *tp, accepting_t *ac)
{
    hoop_result_t rc = HOOP_OK;
    for (int a = 0; a < 16 && ac->expected > 0; a++) {
        char from[64];
        int fd = hoop__sock_accept(tp->listen_fd, from, sizeof(from));
        if (fd < 0 && errno == ECONNABORTED) continue;
        if (fd < 0 && HOOP__FD_EXHAUSTED(errno)) {
            /* The connection stays queued and the listener readable: retrying would spin. */
            char msg[400], why[256];
            snprintf(msg, sizeof(msg), "tcp: cannot accept the connections of its peers: %s",
                     hoop__fd_error(errno, why, sizeof(why)));
            hoop__tcp_connect_report(tp, HOOP_ERR_SYSTEM, -1, msg);
            rc = HOOP_ERR_SYSTEM;
        }
        if (fd < 0) break;
        int full;
        hoop__sock_pending_t *pd = hoop__sock_gate_room(&ac->gate, &full);
        if (full)
            pending_drop(tp, pd,
                         "%d connections were identifying themselves at once; this was the oldest",
                         HOOP__SOCK_PENDING_MAX);
        const double window_end = hoop__now() + HOOP__SOCK_AUTH_WINDOW;
        hoop__sock_pending_admit(pd, fd, from,
                                 window_end < ac->deadline ? window_end : ac->deadline);
        if (pending_step(tp, pd, ac->addrs, &ac->auth_failed) == 1) ac->expected--;
    }
    return rc;
}

/* One round of the accepting step: drop the connections whose window closed, poll, read the
 * peers' notices, move the pending connections on, accept new ones. */
static hoop_result_t accept_round(hoop__tp_t *tp, accepting_t *ac)
{
    double now = hoop__now();
    for (int i = 0; i < HOOP__SOCK_PENDING_MAX; i++)
        if (ac->gate.slot[i].fd >= 0 && now >= ac->gate.slot[i].deadline)
            pending_drop(tp, &ac->gate.slot[i], "it did not identify itself%s within %g s",
                         tp->p.cfg->auth.set ? " and authenticate" : "", HOOP__SOCK_AUTH_WINDOW);
    double wake = hoop__sock_gate_next(&ac->gate, ac->deadline);
    if (wake > ac->deadline) wake = ac->deadline;
    if (now >= ac->deadline) return accept_timed_out(tp, ac);
    poll_set(tp, ac);
    double left = wake - now;
    int ms = left > 1.0 ? 1000 : (int)(left * 1000.0) + 1;
    if (poll(ac->pf, (nfds_t)ac->n, ms) < 0) {
        if (errno == EINTR) return HOOP_OK;
        char msg[160];
        snprintf(msg, sizeof(msg), "waiting for peers to connect: poll: %s", strerror(errno));
        hoop__tcp_connect_report(tp, HOOP_ERR_SYSTEM, -1, msg);
        return HOOP_ERR_SYSTEM;
    }
    for (int i = ac->first_peer; i < ac->n && !tp->failed; i++)
        if (ac->pf[i].revents != 0) hoop__tcp_idle_read(tp, ac->who[i]);
    if (tp->failed) return tp->failed;
    for (int i = 1; i < ac->first_peer && ac->expected > 0; i++) {
        hoop__sock_pending_t *pd = &ac->gate.slot[ac->who[i]];
        if (ac->pf[i].revents == 0 || pd->fd != ac->pf[i].fd) continue;
        if (pending_step(tp, pd, ac->addrs, &ac->auth_failed) == 1) ac->expected--;
    }
    if (ac->expected > 0 && (ac->pf[0].revents & POLLIN)) return accept_new(tp, ac);
    return HOOP_OK;
}

/* The step of connect that accepts: the expected connections of the higher ranks, each admitted
 * to the gate, where it must identify itself (and authenticate) within its window. */
static hoop_result_t accept_higher(hoop__tp_t *tp, const char *const *addrs, double deadline,
                                   int expected)
{
    if (expected == 0) return HOOP_OK;
    const int npf = 1 + HOOP__SOCK_PENDING_MAX + tp->p.size;
    accepting_t *ac = calloc(1, sizeof(*ac));
    if (ac != NULL) {
        ac->pf = calloc((size_t)npf, sizeof(*ac->pf));
        ac->who = calloc((size_t)npf, sizeof(*ac->who));
    }
    if (ac == NULL || ac->pf == NULL || ac->who == NULL) {
        if (ac != NULL) {
            free(ac->pf);
            free(ac->who);
        }
        free(ac);
        hoop__tcp_connect_report(tp, HOOP_ERR_NO_MEMORY, -1, "out of memory accepting peers");
        return hoop__tcp_connect_failed(tp, addrs, HOOP_ERR_NO_MEMORY, NULL);
    }
    ac->addrs = addrs;
    ac->deadline = deadline;
    ac->expected = expected;
    hoop__sock_gate_init(&ac->gate);
    hoop_result_t rc = HOOP_OK;
    while (ac->expected > 0 && rc == HOOP_OK) rc = accept_round(tp, ac);
    if (rc != HOOP_OK) hoop__tcp_connect_failed(tp, addrs, rc, &ac->gate);
    for (int i = 0; i < HOOP__SOCK_PENDING_MAX; i++)
        if (ac->gate.slot[i].fd >= 0)
            pending_drop(tp, &ac->gate.slot[i],
                         "it had not identified itself when every peer was connected");
    free(ac->pf);
    free(ac->who);
    free(ac);
    return rc;
}

hoop_result_t hoop__tcp_connect(hoop__tp_t *tp, const char *const *addrs, double deadline)
{
    if (tp->failed) return tp->failed;
    int expected;
    hoop_result_t rc = dial_lower(tp, addrs, deadline, &expected);
    if (rc != HOOP_OK) return hoop__tcp_connect_failed(tp, addrs, rc, NULL);
    if ((rc = accept_higher(tp, addrs, deadline, expected)) != HOOP_OK) return rc;
    /* Nobody else is expected: stop listening, so that nothing more can knock. */
    if (tp->listen_fd >= 0) close(tp->listen_fd);
    tp->listen_fd = -1;
    int npeers = 0;
    for (int j = 0; j < tp->p.size; j++) npeers += j != tp->p.rank && addrs[j] != NULL;
    HOOP__INFO(tp->p.log, "tcp: connected to %d peer(s)", npeers);
    return HOOP_OK;
}
