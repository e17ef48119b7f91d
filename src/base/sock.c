/* The socket layer: deadlines, connecting, listening, whole-buffer I/O, addresses and the gate of
 * accepted connections. The contracts are in sock.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/sock.h"

int hoop__sock_ms_left(double deadline)
{
    double left = deadline - hoop__now();
    if (left <= 0) return 0;
    if (left > 3600.0) return 3600 * 1000;
    return (int)(left * 1000.0) + 1;
}

int hoop__sock_wait(int fd, short events, double deadline)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, hoop__sock_ms_left(deadline));
        if (n > 0) return 1;
        if (n < 0 && errno != EINTR) return -1;
        /* A signal, or a wait cut short by the hour's cap or by rounding: look again. */
        if (n == 0 && hoop__sock_ms_left(deadline) == 0) return 0;
    }
}

void hoop__sock_tune(int fd)
{
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

int hoop__sock_stream(int family)
{
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) hoop__sock_tune(fd);
    return fd;
}

int hoop__sock_connect(int fd, const struct sockaddr *addr, socklen_t len, double deadline)
{
    if (connect(fd, addr, len) != 0) {
        if (errno != EINPROGRESS && errno != EINTR) return -1;
        int w = hoop__sock_wait(fd, POLLOUT, deadline);
        if (w <= 0) {
            if (w == 0) errno = ETIMEDOUT;
            return -1;
        }
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0) return -1;
        if (soerr != 0) {
            errno = soerr;
            return -1;
        }
    }
    struct sockaddr_storage a, b;
    socklen_t al = sizeof a, bl = sizeof b;
    if (getsockname(fd, (struct sockaddr *)&a, &al) == 0 &&
        getpeername(fd, (struct sockaddr *)&b, &bl) == 0 && al == bl && memcmp(&a, &b, al) == 0) {
        errno = ECONNREFUSED;
        return -1;
    }
    return 0;
}

int hoop__sock_listen(const struct sockaddr *addr, socklen_t len, int flags)
{
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (flags & HOOP__SOCK_FIXED_PORT) {
        const int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (addr->sa_family == AF_INET6)
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    }
    if (bind(fd, addr, len) != 0 || listen(fd, 1024) != 0) {
        const int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int hoop__sock_accept(int lfd, char *peer, size_t cap)
{
    struct sockaddr_storage from;
    socklen_t fl;
    int fd;
    do {
        fl = sizeof from;
        fd = accept4(lfd, (struct sockaddr *)&from, &fl, SOCK_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return -1;
    hoop__sock_tune(fd);
    if (peer != NULL) hoop__sock_format(&from, peer, cap);
    return fd;
}

hoop__sock_io_t hoop__sock_io(int fd, void *buf, size_t n, int flags, double deadline)
{
    uint8_t *p = buf;
    const int sending = (flags & HOOP__SOCK_SEND) != 0;
    /* MSG_DONTWAIT: a caller's blocking socket must not outwait the deadline either. */
    const int sflags = MSG_NOSIGNAL | MSG_DONTWAIT | ((flags & HOOP__SOCK_MORE) ? MSG_MORE : 0);
    while (n > 0) {
        ssize_t got = sending ? send(fd, p, n, sflags) : recv(fd, p, n, MSG_DONTWAIT);
        if (got > 0) {
            p += got;
            n -= (size_t)got;
            continue;
        }
        if (got == 0 && !sending) return HOOP__SOCK_CLOSED;
        if (got == 0) {
            errno = EIO; /* send() moves at least one byte of a non-empty buffer or fails */
            return HOOP__SOCK_FAILED;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return HOOP__SOCK_FAILED;
        int w = hoop__sock_wait(fd, sending ? POLLOUT : POLLIN, deadline);
        if (w == 0) return HOOP__SOCK_TIMEOUT;
        if (w < 0) return HOOP__SOCK_WAIT_FAILED;
    }
    return HOOP__SOCK_DONE;
}

int hoop__sock_gone(int err)
{
    return err == ECONNRESET || err == EPIPE || err == ENOTCONN || err == ECONNABORTED;
}

/* ---- addresses ---- */

void hoop__sock_hostport(char *buf, size_t cap, const char *host, int port)
{
    if (strchr(host, ':') != NULL)
        snprintf(buf, cap, "[%s]:%d", host, port);
    else
        snprintf(buf, cap, "%s:%d", host, port);
}

void hoop__sock_format(const struct sockaddr_storage *ss, char *buf, size_t cap)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
        port = ntohs(a->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
        port = ntohs(a->sin6_port);
    }
    hoop__sock_hostport(buf, cap, ip, port);
}

int hoop__sock_parse(const char *s, struct sockaddr_storage *ss, socklen_t *sl)
{
    char host[INET6_ADDRSTRLEN + 2];
    const char *colon = strrchr(s, ':');
    if (colon == NULL || (size_t)(colon - s) >= sizeof host) return -1;
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
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, h, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        *sl = sizeof *a4;
    } else if (inet_pton(AF_INET6, h, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        *sl = sizeof *a6;
    } else {
        return -1;
    }
    return 0;
}

int hoop__sock_resolve(const char *host, int port, struct addrinfo **res)
{
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    *res = NULL;
    return getaddrinfo(host, portstr, &hints, res);
}

/* ---- the gate ---- */

void hoop__sock_gate_init(hoop__sock_gate_t *g)
{
    memset(g, 0, sizeof *g);
    for (int i = 0; i < HOOP__SOCK_PENDING_MAX; i++) g->slot[i].fd = -1;
}

hoop__sock_pending_t *hoop__sock_gate_room(hoop__sock_gate_t *g, int *full)
{
    hoop__sock_pending_t *oldest = NULL;
    *full = 0;
    for (int i = 0; i < HOOP__SOCK_PENDING_MAX; i++) {
        hoop__sock_pending_t *p = &g->slot[i];
        if (p->fd < 0) return p;
        if (oldest == NULL || p->deadline < oldest->deadline) oldest = p;
    }
    *full = 1;
    return oldest;
}

double hoop__sock_gate_next(const hoop__sock_gate_t *g, double none)
{
    double first = none;
    int any = 0;
    for (int i = 0; i < HOOP__SOCK_PENDING_MAX; i++) {
        const hoop__sock_pending_t *p = &g->slot[i];
        if (p->fd < 0 || (any && p->deadline >= first)) continue;
        first = p->deadline;
        any = 1;
    }
    return first;
}

void hoop__sock_pending_admit(hoop__sock_pending_t *p, int fd, const char *peer, double deadline)
{
    memset(p, 0, sizeof *p);
    p->fd = fd;
    p->deadline = deadline;
    p->events = POLLIN;
    snprintf(p->peer, sizeof p->peer, "%s", peer != NULL ? peer : "?");
}

int hoop__sock_pending_auth(hoop__sock_pending_t *p, const hoop__auth_key_t *key, int is_server,
                            uint64_t context)
{
    p->auth = malloc(sizeof *p->auth);
    if (p->auth == NULL) return -1;
    hoop__auth_start(p->auth, key, is_server, context);
    return 0;
}

static void pending_auth_free(hoop__sock_pending_t *p)
{
    if (p->auth == NULL) return;
    hoop__auth_clear(p->auth);
    free(p->auth);
    p->auth = NULL;
}

int hoop__sock_pending_step(hoop__sock_pending_t *p, char *why, size_t whylen)
{
    int r = hoop__auth_step(p->auth, p->fd, &p->events, why, whylen);
    if (r == HOOP__AUTH_DONE) pending_auth_free(p);
    return r;
}

int hoop__sock_pending_take(hoop__sock_pending_t *p)
{
    const int fd = p->fd;
    pending_auth_free(p);
    p->fd = -1;
    p->pre_got = 0;
    return fd;
}

void hoop__sock_pending_close(hoop__sock_pending_t *p)
{
    const int fd = hoop__sock_pending_take(p);
    if (fd >= 0) close(fd);
}
