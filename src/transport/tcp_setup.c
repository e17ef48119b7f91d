/* TCP transport: addresses, listening, connection set-up and its failures. How it works: tcp.h. */
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

#include "base/clock.h"
#include "transport/transport.h"

#include "transport/tcp.h"

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
int hoop__tcp_io_full(int fd, uint8_t *buf, size_t n, int writing, double deadline)
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
    if (parse_addr(addr, &ss, &sl) != 0) {
        snprintf(msg, sizeof(msg), "rank %d published a bad address \"%s\"", peer, addr);
        hoop__tcp_connect_report(tp, HOOP_ERR_INTERNAL, peer, msg);
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
            if (hoop__tcp_io_full(fd, hello, sizeof(hello), 1, deadline) == 0) {
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
    if (rc == 0 && hoop__tcp_io_full(fd, hello, sizeof(hello), 1, end) == 0 &&
        (!key->set || hoop__auth_handshake(fd, key, 0, auth_ctx(tp, (uint32_t)tp->p.rank, (uint32_t)j, 0),
                                           end, why, sizeof(why)) == HOOP_OK))
        (void)hoop__tcp_io_full(fd, notice, len, 1, end);
    close(fd);
}

/* Finishes the identification of an accepted connection (the rest of its hello, then the
 * handshake, or the rest of the one under way in a), sends it the notice and closes it. */
static void tell_accepted(hoop__tp_t *tp, int fd, uint8_t *hello, size_t got, hoop__auth_t *a,
                          uint8_t *notice, size_t len, double end)
{
    char why[256];
    int ok = got == HELLO_SIZE || hoop__tcp_io_full(fd, hello + got, HELLO_SIZE - got, 0, end) == 0;
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
    if (ok) (void)hoop__tcp_io_full(fd, notice, len, 1, end);
    close(fd);
}

/* The header of a control notice on socket 0 (kind HOOP_K_ABORT): an abort with its code and a
 * reason of len bytes, settle()'s ready notice (count 1), or close()'s goodbye (all zero). */
void hoop__tcp_notice_hdr(const hoop__tp_t *tp, hoop_result_t code, uint64_t count, uint64_t len,
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
 * descriptors of this instance's connections (told by hoop__tcp_abort already) are closed first, which
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
    hoop__tcp_notice_hdr(tp, tp->failed, len, len, notice);
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
hoop_result_t hoop__tcp_connect_failed(hoop__tp_t *tp, const char *const *addrs, hoop_result_t rc,
                                    struct pending *pend)
{
    if (!tp->failed) hoop__tcp_abort(tp, rc, tp->conn_err[0] ? tp->conn_err : NULL);
    tp->failed = rc;
    farewell(tp, addrs, tp->conn_err[0] ? tp->conn_err : hoop_error_string(rc), pend);
    return rc;
}

hoop_result_t hoop__tcp_connect(hoop__tp_t *tp, const char *const *addrs, double deadline)
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
            if (rc != HOOP_OK) return hoop__tcp_connect_failed(tp, addrs, rc, NULL);
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
        hoop__tcp_connect_report(tp, HOOP_ERR_NO_MEMORY, -1, "out of memory accepting peers");
        return hoop__tcp_connect_failed(tp, addrs, HOOP_ERR_NO_MEMORY, NULL);
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
            hoop__tcp_connect_report(tp, rc, -1, msg);
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
            hoop__tcp_connect_report(tp, HOOP_ERR_SYSTEM, -1, msg);
            rc = HOOP_ERR_SYSTEM;
            break;
        }
        for (int i = first_peer; i < n && !tp->failed; i++)
            if (pf[i].revents != 0) hoop__tcp_idle_read(tp, who[i]);
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
                hoop__tcp_connect_report(tp, HOOP_ERR_SYSTEM, -1, msg);
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
    if (rc != HOOP_OK) hoop__tcp_connect_failed(tp, addrs, rc, pend);
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

