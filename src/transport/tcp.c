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
 * cycle. Each new socket starts with a hello (magic, communicator id, rank, socket index); an
 * accepted socket with a wrong hello is closed and accepting goes on.
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
} sock_t;

typedef struct peer {
    sock_t *socks;
    int lost;
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
    tp->peers = calloc((size_t)p->size, sizeof(peer_t));
    size_t nfd = (size_t)p->size * (size_t)tp->nsock + 1;
    tp->pfds = calloc(nfd, sizeof(struct pollfd));
    tp->pfd_owner = calloc(nfd, sizeof(int));
    if (tp->wake_fd < 0 || tp->peers == NULL || tp->pfds == NULL || tp->pfd_owner == NULL) {
        if (tp->wake_fd >= 0) close(tp->wake_fd);
        free(tp->peers);
        free(tp->pfds);
        free(tp->pfd_owner);
        free(tp);
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
    char msg[256];
    if (fd < 0 || bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 1024) != 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        snprintf(msg, sizeof(msg), "cannot listen for peers: %s", strerror(errno));
        if (fd >= 0) close(fd);
        p->report(p->report_ctx, HOOP_ERR_SYSTEM, -1, msg);
        tp->failed = HOOP_ERR_SYSTEM;
        *out = tp;
        return HOOP_ERR_SYSTEM;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    tp->listen_fd = fd;
    format_addr(&ss, addr, addrlen);
    HOOP_INFO(p->log, "tcp: listening on %s%s%s, %d socket(s) per peer", addr,
              ifname[0] ? " interface " : "", ifname, tp->nsock);
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

static hoop_result_t connect_one(hoop__tp_t *tp, int peer, int k, const char *addr, double deadline)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    char msg[256];
    if (parse_addr(addr, &ss, &sl) != 0) {
        snprintf(msg, sizeof(msg), "rank %d published a bad address \"%s\"", peer, addr);
        tp->p.report(tp->p.report_ctx, HOOP_ERR_INTERNAL, peer, msg);
        return HOOP_ERR_INTERNAL;
    }
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
                tp->peers[peer].socks[k].fd = fd;
                return HOOP_OK;
            }
        }
        int e = errno;
        close(fd);
        if (hoop__now() + backoff >= deadline) {
            snprintf(msg, sizeof(msg), "cannot connect to rank %d at %s: %s", peer, addr,
                     strerror(e));
            tp->p.report(tp->p.report_ctx, HOOP_ERR_TIMEOUT, peer, msg);
            return HOOP_ERR_TIMEOUT;
        }
        usleep((useconds_t)(backoff * 1e6));
        backoff = backoff < 0.1 ? backoff * 2 : 0.1;
    }
    snprintf(msg, sizeof(msg), "socket() failed: %s", strerror(errno));
    tp->p.report(tp->p.report_ctx, HOOP_ERR_SYSTEM, peer, msg);
    return HOOP_ERR_SYSTEM;
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
            if (rc != HOOP_OK) return tp->failed = rc;
        }
    }
    while (expected > 0) {
        int w = wait_fd(tp->listen_fd, POLLIN, deadline);
        if (w <= 0) {
            char msg[256], missing[128] = "";
            size_t o = 0;
            for (int j = me + 1; j < tp->p.size && o + 12 < sizeof(missing); j++)
                if (addrs[j] != NULL && tp->peers[j].socks[tp->nsock - 1].fd < 0)
                    o += (size_t)snprintf(missing + o, sizeof(missing) - o, "%s%d", o ? "," : "", j);
            snprintf(msg, sizeof(msg), "timed out waiting for rank(s) %s to connect", missing);
            tp->p.report(tp->p.report_ctx, HOOP_ERR_TIMEOUT, -1, msg);
            return tp->failed = HOOP_ERR_TIMEOUT;
        }
        int fd = accept4(tp->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        tune_socket(fd);
        uint8_t hello[HELLO_SIZE];
        /* A stranger gets a short deadline so it cannot stall the job. */
        double d = hoop__now() + 2.0;
        if (io_full(fd, hello, sizeof(hello), 0, d < deadline ? d : deadline) != 0) {
            HOOP_WARN(tp->p.log, "tcp: dropped a connection that sent no valid hello");
            close(fd);
            continue;
        }
        uint64_t magic = get_le(hello, 8), cid = get_le(hello + 8, 8);
        uint32_t r = (uint32_t)get_le(hello + 16, 4), k = (uint32_t)get_le(hello + 20, 4);
        if (magic != HELLO_MAGIC || cid != tp->p.comm_id || r <= (uint32_t)me ||
            r >= (uint32_t)tp->p.size || k >= (uint32_t)tp->nsock || addrs[r] == NULL ||
            tp->peers[r].socks[k].fd >= 0) {
            HOOP_WARN(tp->p.log, "tcp: dropped a connection with an unexpected hello");
            close(fd);
            continue;
        }
        tp->peers[r].socks[k].fd = fd;
        expected--;
    }
    HOOP_INFO(tp->p.log, "tcp: connected to %d peer(s)", tp->p.size - 1);
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

/* Fails everything queued for peer with code, closes its sockets and reports msg once. */
static void peer_fail(hoop__tp_t *tp, int peer, hoop_result_t code, const char *msg)
{
    peer_t *pe = &tp->peers[peer];
    if (pe->lost) return;
    pe->lost = 1;
    for (int k = 0; k < tp->nsock; k++) {
        sock_t *s = &pe->socks[k];
        fail_queue(tp, &s->sq, &s->sq_tail, code);
        fail_queue(tp, &s->rq, &s->rq_tail, code);
        if (s->fd >= 0) close(s->fd);
        s->fd = -1;
    }
    tp->p.report(tp->p.report_ctx, code, peer, msg);
}

static void peer_lost(hoop__tp_t *tp, int peer, const char *why)
{
    char msg[256];
    snprintf(msg, sizeof(msg), "lost connection to rank %d (%s)", peer, why);
    peer_fail(tp, peer, HOOP_ERR_PEER_LOST, msg);
}

static void tcp_post(hoop__tp_t *tp, hoop__xfer_t *x)
{
    x->done = 0;
    x->status = HOOP_OK;
    x->hdr_ok = 0;
    int n = stripes(tp, x->len);
    x->parts_left = n;
    if (tp->failed || x->peer < 0 || x->peer >= tp->p.size || tp->peers[x->peer].lost) {
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
                peer_lost(tp, peer, strerror(errno));
                return 1;
            }
            s->pos += (size_t)r;
            moved = 1;
        }
        if (s->pos < s->hlen + s->len) break;
        so->sq = s->next;
        if (so->sq == NULL) so->sq_tail = NULL;
        finish(s->x, HOOP_OK);
        seg_free(tp, s);
    }
    while (so->rq != NULL) {
        seg_t *s = so->rq;
        hoop__xfer_t *x = s->x;
        if (s->hlen == 0 && !x->hdr_ok) break; /* wait for socket 0 to check the header */
        ssize_t r;
        if (s->pos < s->hlen) {
            r = recv(so->fd, s->hdr + s->pos, s->hlen - s->pos, 0);
        } else {
            size_t pdone = s->pos - s->hlen;
            if (pdone == s->len) {
                r = 0;
                goto complete;
            }
            r = recv(so->fd, (uint8_t *)x->buf + s->off + pdone, s->len - pdone, 0);
        }
        if (r == 0) {
            peer_lost(tp, peer, "connection closed by peer");
            return 1;
        }
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
            peer_lost(tp, peer, strerror(errno));
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
    for (int j = 0; j < tp->p.size; j++) {
        if (tp->peers[j].lost) continue;
        for (int k = 0; k < tp->nsock; k++) {
            sock_t *so = &tp->peers[j].socks[k];
            if (so->fd < 0) continue;
            short ev = 0;
            if (so->sq != NULL) ev |= POLLOUT;
            if (so->rq != NULL && (so->rq->hlen > 0 || so->rq->x->hdr_ok)) ev |= POLLIN;
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
        if (tp->pfd_owner[i] < 0) {
            uint64_t v;
            if (read(tp->wake_fd, &v, sizeof(v)) < 0) { /* nothing to do: only a wake-up */
            }
            continue;
        }
        int j = tp->pfd_owner[i] / tp->nsock, k = tp->pfd_owner[i] % tp->nsock;
        sock_t *so = &tp->peers[j].socks[k];
        if (tp->peers[j].lost) continue;
        if (so->sq == NULL && so->rq == NULL) {
            /* The peer left while we expect nothing from it; a later transfer will notice. */
            if (re & (POLLRDHUP | POLLHUP | POLLERR)) so->hup = 1;
            continue;
        }
        sock_io(tp, j, k);
    }
}

static void tcp_wake(hoop__tp_t *tp)
{
    uint64_t one = 1;
    if (write(tp->wake_fd, &one, sizeof(one)) < 0) { /* already pending: fine */
    }
}

static void tcp_abort(hoop__tp_t *tp, hoop_result_t code, const char *reason)
{
    (void)reason;
    if (!tp->failed) tp->failed = code;
    for (int j = 0; j < tp->p.size; j++) {
        if (tp->peers[j].socks == NULL) continue;
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

static void tcp_close(hoop__tp_t *tp)
{
    if (tp == NULL) return;
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
};
