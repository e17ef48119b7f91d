/* The rendezvous store.
 *
 * tcp: rank 0 runs a small server thread (one poll loop over the listening sockets, a wake-up
 * eventfd and non-blocking client connections). It keeps no state about waiters: a GET of a key that
 * is not there yet answers "missing" and the client asks again with backoff, so a client that dies
 * while waiting leaves nothing behind. Every rank, rank 0 included, talks to the server as a client.
 *
 * file: one file per key under PATH.d, written to a temporary file and renamed into place so that a
 * reader sees either nothing or the whole value; GET polls with backoff.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "rendezvous/store.h"

#define REQ_HDR 9 /* op, keylen, vallen */
#define REP_HDR 5 /* status, vallen */
#define MAX_REQ ((size_t)REQ_HDR + HOOP_STORE_MAX_KEY + HOOP_STORE_MAX_VALUE)
#define REP_OK 0
#define REP_MISSING 1
#define REP_TAKEN 2 /* a claim found its key set: the value is the existing one */

#define MAX_LISTEN 8
/* The server refuses to hold more than this many bytes of values: a runaway client must not take
 * rank 0's memory with it. */
#define SERVER_MAX_BYTES ((uint64_t)1 << 30)
#define CONNECT_BACKOFF_MAX 0.25
#define GET_BACKOFF_FIRST 0.001
#define GET_BACKOFF_MAX 0.05
/* One request/reply exchange may take this long even when the caller's deadline is nearer: a GET
 * that polls right up to its deadline must still read the reply of its last attempt. */
#define EXCHANGE_GRACE 1.0
/* With a key, a new connection has this long to authenticate; at most AUTH_PENDING_MAX connections
 * may be authenticating at once (the oldest goes first), so strangers cannot hold the server. */
#define AUTH_WINDOW 10.0
#define AUTH_PENDING_MAX 64
/* Context of the store's handshakes: "STORE", apart from every communicator's. */
#define STORE_AUTH_TAG 0x45524f5453ull

/* ---------------------------------------------------------------------------------------------- */
/* Small helpers                                                                                  */

static void sleep_for(double s)
{
    if (!(s > 0)) return;
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Milliseconds left until deadline for poll(), rounded up so that a short wait does not spin. */
static int ms_left(double deadline)
{
    double left = deadline - hoop__now();
    if (left <= 0) return 0;
    if (left > 3600.0) return 3600 * 1000; /* callers loop and recheck the deadline */
    return (int)(left * 1000.0) + 1;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A key as it can appear in a message: printable, truncated. */
static const char *printable(const char *key, size_t n, char *buf, size_t cap)
{
    size_t j = 0;
    for (size_t i = 0; i < n && j + 4 < cap; i++) {
        unsigned char c = (unsigned char)key[i];
        buf[j++] = (c >= ' ' && c < 0x7f && c != '"') ? (char)c : '?';
        if (i == 79 && n > 80) {
            buf[j++] = '.';
            buf[j++] = '.';
            buf[j++] = '.';
            break;
        }
    }
    buf[j] = '\0';
    return buf;
}

/* "host:port", with brackets around an IPv6 address. */
static void format_where(char *buf, size_t cap, const char *host, int port)
{
    if (strchr(host, ':') != NULL)
        snprintf(buf, cap, "[%s]:%d", host, port);
    else
        snprintf(buf, cap, "%s:%d", host, port);
}

/* ---------------------------------------------------------------------------------------------- */
/* Protocol                                                                                       */

long hoop__store_parse(const uint8_t *buf, size_t len, hoop__store_req_t *req)
{
    if (len == 0) return 0;
    if (buf == NULL) return -1;
    const uint8_t op = buf[0];
    if (op != 'S' && op != 'G' && op != 'C') return -1;
    if (len < 5) return 0;
    const uint32_t keylen = get_u32(buf + 1);
    if (keylen == 0 || keylen > HOOP_STORE_MAX_KEY) return -1;
    if (len < REQ_HDR) return 0;
    const uint32_t vallen = get_u32(buf + 5);
    if (vallen > HOOP_STORE_MAX_VALUE) return -1;
    if (op == 'G' && vallen != 0) return -1;
    const size_t total = (size_t)REQ_HDR + keylen + vallen;
    if (len < total) return 0;
    /* Keys are C strings on every client. */
    if (memchr(buf + REQ_HDR, '\0', keylen) != NULL) return -1;
    if (req != NULL) {
        req->op = op;
        req->key = (const char *)(buf + REQ_HDR);
        req->keylen = keylen;
        req->val = buf + REQ_HDR + keylen;
        req->vallen = vallen;
    }
    return (long)total;
}

/* ---------------------------------------------------------------------------------------------- */
/* Server                                                                                         */

typedef struct entry {
    struct entry *next;
    uint64_t hash;
    uint8_t *val;
    uint32_t vallen;
    uint32_t keylen;
    char key[];
} entry_t;

typedef struct conn {
    int fd;
    uint8_t *in;
    size_t in_len, in_cap;
    uint8_t *out;
    size_t out_len, out_off, out_cap;
    char peer[64];
    hoop__auth_t *auth; /* until the client has proved the key; NULL after, or without a key */
    double auth_deadline;
    short auth_events;
} conn_t;

typedef struct server {
    int lfd[MAX_LISTEN];
    int nlfd;
    int wake_fd;
    conn_t *conns;
    size_t nconns, cap_conns;
    struct pollfd *pfds;
    size_t cap_pfds;
    entry_t **buckets;
    size_t nbuckets, nentries;
    uint64_t bytes;
    const hoop__log_t *log;
    char where[300];
    pthread_t thread;
    hoop__auth_key_t key; /* key.set: clients must authenticate */
    uint64_t auth_context;
    _Atomic unsigned auth_failures;
    int accept_exhausted; /* server_accept: out of descriptors since its last accept (warned once) */
} server_t;

static uint64_t hash_key(const char *k, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)k[i];
        h *= 1099511628211ull;
    }
    return h;
}

static entry_t *table_find(const server_t *s, const char *key, uint32_t keylen, uint64_t h)
{
    for (entry_t *e = s->buckets[h & (s->nbuckets - 1)]; e != NULL; e = e->next)
        if (e->hash == h && e->keylen == keylen && memcmp(e->key, key, keylen) == 0) return e;
    return NULL;
}

static int table_grow(server_t *s)
{
    size_t nb = s->nbuckets * 2;
    entry_t **b = calloc(nb, sizeof *b);
    if (b == NULL) return -1;
    for (size_t i = 0; i < s->nbuckets; i++) {
        entry_t *e = s->buckets[i];
        while (e != NULL) {
            entry_t *next = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
            e = next;
        }
    }
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = nb;
    return 0;
}

/* 0 on success, -1 when the value cannot be stored (no memory, or over SERVER_MAX_BYTES). */
static int table_set(server_t *s, const char *key, uint32_t keylen, const uint8_t *val, uint32_t vallen)
{
    const uint64_t h = hash_key(key, keylen);
    entry_t *e = table_find(s, key, keylen, h);
    const uint64_t old = e != NULL ? e->vallen : 0;
    if (s->bytes - old + vallen > SERVER_MAX_BYTES) return -1;
    uint8_t *copy = malloc(vallen > 0 ? vallen : 1);
    if (copy == NULL) return -1;
    if (vallen > 0) memcpy(copy, val, vallen);
    if (e == NULL) {
        if (s->nentries >= s->nbuckets && table_grow(s) != 0) {
            free(copy);
            return -1;
        }
        e = malloc(sizeof *e + keylen);
        if (e == NULL) {
            free(copy);
            return -1;
        }
        e->hash = h;
        e->keylen = keylen;
        memcpy(e->key, key, keylen);
        e->val = NULL;
        e->vallen = 0;
        e->next = s->buckets[h & (s->nbuckets - 1)];
        s->buckets[h & (s->nbuckets - 1)] = e;
        s->nentries++;
    }
    free(e->val);
    e->val = copy;
    e->vallen = vallen;
    s->bytes = s->bytes - old + vallen;
    return 0;
}

static void conn_close(conn_t *c)
{
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    if (c->auth != NULL) {
        hoop__auth_clear(c->auth);
        free(c->auth);
        c->auth = NULL;
    }
    free(c->in);
    free(c->out);
    c->in = c->out = NULL;
    c->in_len = c->in_cap = c->out_len = c->out_off = c->out_cap = 0;
}

/* Sends what is pending without blocking. 0: all or part sent; -1: the connection is dead. */
static int conn_flush(conn_t *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            c->out_off += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return 0;
        } else {
            return -1;
        }
    }
    c->out_off = c->out_len = 0;
    return 0;
}

static int conn_reply(conn_t *c, uint8_t status, const uint8_t *val, uint32_t vallen)
{
    const size_t need = REP_HDR + (size_t)vallen;
    if (c->out_cap < need) {
        size_t cap = c->out_cap ? c->out_cap : 256;
        while (cap < need) cap *= 2;
        uint8_t *p = realloc(c->out, cap);
        if (p == NULL) return -1;
        c->out = p;
        c->out_cap = cap;
    }
    c->out[0] = status;
    put_u32(c->out + 1, vallen);
    if (vallen > 0) memcpy(c->out + REP_HDR, val, vallen);
    c->out_off = 0;
    c->out_len = need;
    return conn_flush(c);
}

/* Serves the complete requests in c->in, stopping while a reply is still queued (backpressure: a
 * client that does not read its replies is not read from). -1 drops the connection. */
static int conn_process(server_t *s, conn_t *c)
{
    size_t off = 0;
    int rc = 0;
    while (c->out_len == 0 && off < c->in_len) {
        hoop__store_req_t req;
        long n = hoop__store_parse(c->in + off, c->in_len - off, &req);
        if (n == 0) break;
        if (n < 0) {
            if (c->in[off] == 'H' && off == 0) {
                atomic_fetch_add(&s->auth_failures, 1);
                HOOP_WARN(s->log,
                          "rendezvous store %s: dropping client %s, which wants to authenticate: this store "
                          "has no key (is HOOP_AUTH_KEY set on rank 0 as on the other ranks?)",
                          s->where, c->peer);
            } else {
                HOOP_WARN(s->log, "rendezvous store %s: dropping client %s after a malformed request (op 0x%02x)",
                          s->where, c->peer, c->in[off]);
            }
            return -1;
        }
        char kbuf[100];
        if (req.op == 'S') {
            if (table_set(s, req.key, req.keylen, req.val, req.vallen) != 0) {
                HOOP_WARN(
                    s->log,
                    "rendezvous store %s: cannot store %u bytes for key \"%s\" from %s (out of memory or "
                    "over the %llu-byte limit); dropping the client",
                    s->where, (unsigned)req.vallen, printable(req.key, req.keylen, kbuf, sizeof kbuf),
                    c->peer, (unsigned long long)SERVER_MAX_BYTES);
                return -1;
            }
            HOOP_TRACE(s->log, "rendezvous store: set \"%s\" (%u bytes) from %s",
                       printable(req.key, req.keylen, kbuf, sizeof kbuf), (unsigned)req.vallen, c->peer);
            rc = conn_reply(c, REP_OK, NULL, 0);
        } else if (req.op == 'C') {
            /* One thread serves every connection, so look-then-set is atomic. */
            const entry_t *e = table_find(s, req.key, req.keylen, hash_key(req.key, req.keylen));
            if (e != NULL) {
                rc = conn_reply(c, REP_TAKEN, e->val, e->vallen);
            } else if (table_set(s, req.key, req.keylen, req.val, req.vallen) != 0) {
                HOOP_WARN(s->log, "rendezvous store %s: cannot store %u bytes for key \"%s\" from %s; "
                          "dropping the client", s->where, (unsigned)req.vallen,
                          printable(req.key, req.keylen, kbuf, sizeof kbuf), c->peer);
                return -1;
            } else {
                rc = conn_reply(c, REP_OK, NULL, 0);
            }
        } else {
            const entry_t *e = table_find(s, req.key, req.keylen, hash_key(req.key, req.keylen));
            rc = e != NULL ? conn_reply(c, REP_OK, e->val, e->vallen) : conn_reply(c, REP_MISSING, NULL, 0);
        }
        off += (size_t)n;
        if (rc != 0) return -1;
    }
    if (off > 0) {
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
    }
    return 0;
}

/* Reads what is available. -1 drops the connection (closed, error, malformed). */
static int conn_read(server_t *s, conn_t *c)
{
    for (int rounds = 0; rounds < 64 && c->out_len == 0; rounds++) {
        if (c->in_len == c->in_cap) {
            /* Grow to what the pending request needs, never past the largest valid request. */
            size_t want = c->in_cap ? c->in_cap * 2 : 4096;
            if (c->in_len >= REQ_HDR) {
                size_t total = (size_t)REQ_HDR + get_u32(c->in + 1) + get_u32(c->in + 5);
                if (total > want) want = total;
            }
            if (want > MAX_REQ) want = MAX_REQ;
            if (want <= c->in_cap) return -1; /* cannot happen: parse rejects longer requests */
            uint8_t *p = realloc(c->in, want);
            if (p == NULL) {
                HOOP_WARN(s->log, "rendezvous store %s: out of memory reading from %s; dropping it", s->where,
                          c->peer);
                return -1;
            }
            c->in = p;
            c->in_cap = want;
        }
        ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, MSG_DONTWAIT);
        if (n == 0) return -1;
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
            return -1;
        }
        c->in_len += (size_t)n;
        if (conn_process(s, c) != 0) return -1;
    }
    return 0;
}

static void describe_peer(int fd, char *buf, size_t cap)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char addr[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &a->sin_addr, addr, sizeof addr);
            port = ntohs(a->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &a->sin6_addr, addr, sizeof addr);
            port = ntohs(a->sin6_port);
        }
    }
    format_where(buf, cap, addr, port);
}

/* Moves c's handshake on. -1 drops the connection (it failed, with a warning). */
static int conn_auth(server_t *s, conn_t *c)
{
    char why[256] = "";
    int r = hoop__auth_step(c->auth, c->fd, &c->auth_events, why, sizeof why);
    if (r == HOOP_AUTH_MORE) return 0;
    if (r == HOOP_AUTH_DONE) {
        hoop__auth_clear(c->auth);
        free(c->auth);
        c->auth = NULL;
        HOOP_TRACE(s->log, "rendezvous store %s: client %s authenticated", s->where, c->peer);
        return 0;
    }
    atomic_fetch_add(&s->auth_failures, 1);
    HOOP_WARN(s->log, "rendezvous store %s: rejected client %s: authentication failed: %s", s->where,
              c->peer, why);
    return -1;
}

/* Starts the handshake of a new connection; makes room by dropping the oldest unauthenticated one
 * when AUTH_PENDING_MAX are waiting. -1: drop c. */
static int conn_auth_begin(server_t *s, conn_t *c)
{
    size_t pending = 0, oldest = SIZE_MAX;
    for (size_t i = 0; i < s->nconns; i++) {
        const conn_t *o = &s->conns[i];
        if (o == c || o->fd < 0 || o->auth == NULL) continue;
        pending++;
        if (oldest == SIZE_MAX || o->auth_deadline < s->conns[oldest].auth_deadline) oldest = i;
    }
    if (pending >= AUTH_PENDING_MAX && oldest != SIZE_MAX) {
        atomic_fetch_add(&s->auth_failures, 1);
        HOOP_WARN(s->log,
                  "rendezvous store %s: %zu connections are authenticating at once; dropping the oldest, "
                  "from %s",
                  s->where, pending, s->conns[oldest].peer);
        conn_close(&s->conns[oldest]);
    }
    c->auth = malloc(sizeof *c->auth);
    if (c->auth == NULL) {
        HOOP_WARN(s->log, "rendezvous store %s: out of memory accepting %s", s->where, c->peer);
        return -1;
    }
    hoop__auth_start(c->auth, &s->key, 1, s->auth_context);
    c->auth_deadline = hoop__now() + AUTH_WINDOW;
    return conn_auth(s, c);
}

/* Accepts pending connections. Returns 1 when out of descriptors (the caller pauses accepting). */
/* Why accept() failed for want of a descriptor, and what to raise: once until an accept works. */
static void accept_exhausted(server_t *s, int err)
{
    if (s->accept_exhausted) return;
    s->accept_exhausted = 1;
    struct rlimit rl;
    if (err == EMFILE && getrlimit(RLIMIT_NOFILE, &rl) == 0)
        HOOP_WARN(s->log, "rendezvous store %s: cannot accept a connection: %s: this process may have "
                  "%llu open; waiting for clients to leave (raise the limit: ulimit -n)", s->where,
                  strerror(err), (unsigned long long)rl.rlim_cur);
    else
        HOOP_WARN(s->log, "rendezvous store %s: cannot accept a connection: %s; waiting for clients to "
                  "leave%s", s->where, strerror(err),
                  err == ENFILE ? " (the system is out of file descriptors: fs.file-max)" : "");
}

static int server_accept(server_t *s, int lfd)
{
    for (int i = 0; i < 64; i++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* The connection stays queued: accepting pauses (the caller waits 50 ms) rather
                 * than spin; a client that leaves makes room. */
                accept_exhausted(s, errno);
                return 1;
            }
            return 0; /* EAGAIN, or an error of that one connection */
        }
        s->accept_exhausted = 0;
        if (s->nconns == s->cap_conns) {
            size_t cap = s->cap_conns ? s->cap_conns * 2 : 16;
            conn_t *p = realloc(s->conns, cap * sizeof *p);
            if (p == NULL) {
                close(fd);
                HOOP_WARN(s->log, "rendezvous store %s: out of memory accepting a connection", s->where);
                return 1;
            }
            s->conns = p;
            s->cap_conns = cap;
        }
        const int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        conn_t *c = &s->conns[s->nconns++];
        memset(c, 0, sizeof *c);
        c->fd = fd;
        describe_peer(fd, c->peer, sizeof c->peer);
        HOOP_TRACE(s->log, "rendezvous store %s: client %s connected", s->where, c->peer);
        if (s->key.set && conn_auth_begin(s, c) != 0) conn_close(c);
    }
    return 0;
}

/* Milliseconds until the earliest handshake deadline, at most cap. */
static int auth_wait_ms(const server_t *s, int cap)
{
    double first = 0;
    int any = 0;
    for (size_t i = 0; i < s->nconns; i++) {
        const conn_t *c = &s->conns[i];
        if (c->fd < 0 || c->auth == NULL) continue;
        if (!any || c->auth_deadline < first) first = c->auth_deadline;
        any = 1;
    }
    if (!any) return cap;
    int ms = ms_left(first);
    return ms < cap ? ms : cap;
}

static void *server_main(void *arg)
{
    server_t *s = arg;
    int accept_paused = 0;
    for (;;) {
        const size_t need = 1 + (size_t)s->nlfd + s->nconns;
        if (need > s->cap_pfds) {
            size_t cap = need * 2;
            struct pollfd *p = realloc(s->pfds, cap * sizeof *p);
            if (p == NULL) {
                HOOP_WARN(s->log, "rendezvous store %s: out of memory; retrying", s->where);
                struct pollfd w = {.fd = s->wake_fd, .events = POLLIN};
                if (poll(&w, 1, 50) > 0) break;
                continue;
            }
            s->pfds = p;
            s->cap_pfds = cap;
        }
        size_t np = 0;
        s->pfds[np++] = (struct pollfd){.fd = s->wake_fd, .events = POLLIN};
        const size_t first_listener = np;
        if (!accept_paused)
            for (int i = 0; i < s->nlfd; i++)
                s->pfds[np++] = (struct pollfd){.fd = s->lfd[i], .events = POLLIN};
        const size_t first_conn = np;
        const size_t nconns = s->nconns;
        for (size_t i = 0; i < nconns; i++) {
            const conn_t *c = &s->conns[i];
            short ev = c->auth != NULL ? c->auth_events : c->out_len > 0 ? POLLOUT : POLLIN;
            s->pfds[np++] = (struct pollfd){.fd = c->fd, .events = ev};
        }
        /* The timeout only bounds the wait; stopping goes through wake_fd. */
        int n = poll(s->pfds, (nfds_t)np, auth_wait_ms(s, accept_paused ? 50 : 1000));
        if (n < 0) {
            if (errno != EINTR) {
                HOOP_WARN(s->log, "rendezvous store %s: poll failed: %s", s->where, strerror(errno));
                sleep_for(0.01);
            }
            continue;
        }
        if (s->pfds[0].revents != 0) break;
        if (accept_paused) {
            accept_paused = 0;
        } else {
            for (size_t i = first_listener; i < first_conn; i++)
                if (s->pfds[i].revents & POLLIN) accept_paused |= server_accept(s, s->pfds[i].fd);
        }
        const double now = hoop__now();
        for (size_t i = 0; i < nconns; i++) {
            conn_t *c = &s->conns[i];
            const short ev = s->pfds[first_conn + i].revents;
            if (c->fd < 0) continue; /* dropped to make room for a newer connection */
            if (c->auth != NULL) {
                int dead = ev != 0 && conn_auth(s, c) != 0;
                if (!dead && c->auth != NULL && now >= c->auth_deadline) {
                    atomic_fetch_add(&s->auth_failures, 1);
                    HOOP_WARN(s->log, "rendezvous store %s: dropping client %s: it did not authenticate within %g s",
                              s->where, c->peer, AUTH_WINDOW);
                    dead = 1;
                }
                if (dead) conn_close(c);
                continue;
            }
            if (ev == 0) continue;
            int dead = 0;
            if (ev & POLLNVAL) {
                dead = 1;
            } else if (c->out_len > 0) {
                dead = conn_flush(c) != 0;
                /* Requests that arrived while the reply was queued. */
                if (!dead && c->out_len == 0) dead = conn_process(s, c) != 0;
            } else {
                dead = conn_read(s, c) != 0;
            }
            if (dead) {
                HOOP_TRACE(s->log, "rendezvous store %s: client %s disconnected", s->where, c->peer);
                conn_close(c);
            }
        }
        size_t j = 0;
        for (size_t i = 0; i < s->nconns; i++)
            if (s->conns[i].fd >= 0) s->conns[j++] = s->conns[i];
        s->nconns = j;
    }
    return NULL;
}

static void server_free(server_t *s)
{
    if (s == NULL) return;
    for (int i = 0; i < s->nlfd; i++) close(s->lfd[i]);
    for (size_t i = 0; i < s->nconns; i++) {
        if (s->conns[i].fd >= 0 && s->conns[i].auth != NULL)
            HOOP_WARN(s->log, "rendezvous store %s: closing client %s, which never authenticated", s->where,
                      s->conns[i].peer);
        conn_close(&s->conns[i]);
    }
    hoop__auth_key_wipe(&s->key);
    if (s->wake_fd >= 0) close(s->wake_fd);
    if (s->buckets != NULL) {
        for (size_t i = 0; i < s->nbuckets; i++) {
            entry_t *e = s->buckets[i];
            while (e != NULL) {
                entry_t *next = e->next;
                free(e->val);
                free(e);
                e = next;
            }
        }
    }
    free(s->buckets);
    free(s->conns);
    free(s->pfds);
    free(s);
}

static int same_addr(const struct addrinfo *a, const struct addrinfo *b)
{
    return a->ai_family == b->ai_family && a->ai_addrlen == b->ai_addrlen &&
           memcmp(a->ai_addr, b->ai_addr, a->ai_addrlen) == 0;
}

/* Binds every address HOST resolves to (e.g. both ::1 and 127.0.0.1 for "localhost"), so that a
 * client may reach it through any of them. */
static hoop_result_t server_listen(server_t *s, const char *host, int port, char *err, size_t errlen)
{
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    struct addrinfo *res = NULL;
    int g = getaddrinfo(host, portstr, &hints, &res);
    if (g != 0) {
        hoop__say(err, errlen,
                "cannot resolve the rendezvous host \"%s\": %s (check MASTER_ADDR or the init method)", host,
                g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
        return HOOP_ERR_SYSTEM;
    }
    int last_errno = 0;
    for (const struct addrinfo *ai = res; ai != NULL && s->nlfd < MAX_LISTEN; ai = ai->ai_next) {
        int dup = 0;
        for (const struct addrinfo *p = res; p != ai; p = p->ai_next) dup |= same_addr(p, ai);
        if (dup) continue;
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            last_errno = errno;
            continue;
        }
        const int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        /* A v6 socket must not also claim the v4 port: the v4 address gets its own socket. */
        if (ai->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
            const int e = errno;
            close(fd);
            if (e == EADDRINUSE) {
                freeaddrinfo(res);
                hoop__say(err, errlen,
                        "port %d on %s is already in use (is another job running? set MASTER_PORT)", port,
                        host);
                return HOOP_ERR_SYSTEM;
            }
            last_errno = e;
            continue;
        }
        s->lfd[s->nlfd++] = fd;
        const int wild = (ai->ai_family == AF_INET &&
                          ((const struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr == htonl(INADDR_ANY)) ||
                         (ai->ai_family == AF_INET6 &&
                          IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)ai->ai_addr)->sin6_addr));
        if (wild)
            HOOP_WARN(s->log,
                      "rendezvous store: \"%s\" is a wildcard address: the store listens on every interface "
                      "(give MASTER_ADDR the address of one interface to avoid that)",
                      host);
    }
    freeaddrinfo(res);
    if (s->nlfd == 0) {
        char where[300];
        format_where(where, sizeof where, host, port);
        if (last_errno == EADDRNOTAVAIL)
            hoop__say(
                err, errlen,
                "cannot serve the rendezvous store on %s: %s (rank 0 must run on the machine that has this "
                "address; check MASTER_ADDR)",
                where, strerror(last_errno));
        else
            hoop__say(err, errlen, "cannot serve the rendezvous store on %s: %s", where,
                    strerror(last_errno ? last_errno : EINVAL));
        return HOOP_ERR_SYSTEM;
    }
    return HOOP_OK;
}

static hoop_result_t server_start(const char *host, int port, const hoop__auth_key_t *key,
                                  const hoop__log_t *log, server_t **out, char *err, size_t errlen)
{
    server_t *s = calloc(1, sizeof *s);
    if (s == NULL) {
        hoop__say(err, errlen, "out of memory starting the rendezvous store");
        return HOOP_ERR_NO_MEMORY;
    }
    s->wake_fd = -1;
    s->log = log;
    if (key != NULL && key->set) {
        s->key = *key;
        s->auth_context = hoop__auth_context(STORE_AUTH_TAG, 0, 0, 0);
    }
    format_where(s->where, sizeof s->where, host, port);
    s->nbuckets = 64;
    s->buckets = calloc(s->nbuckets, sizeof *s->buckets);
    if (s->buckets == NULL) {
        server_free(s);
        hoop__say(err, errlen, "out of memory starting the rendezvous store");
        return HOOP_ERR_NO_MEMORY;
    }
    hoop_result_t r = server_listen(s, host, port, err, errlen);
    if (r != HOOP_OK) {
        server_free(s);
        return r;
    }
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->wake_fd < 0) {
        hoop__say(err, errlen, "cannot start the rendezvous store: eventfd: %s", strerror(errno));
        server_free(s);
        return HOOP_ERR_SYSTEM;
    }
    /* Signals belong to the application's threads, not to the store's. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int e = pthread_create(&s->thread, NULL, server_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0) {
        hoop__say(err, errlen, "cannot start the rendezvous store thread: %s", strerror(e));
        server_free(s);
        return HOOP_ERR_SYSTEM;
    }
    HOOP_INFO(log, "rendezvous store serving on %s", s->where);
    *out = s;
    return HOOP_OK;
}

static void server_stop(server_t *s)
{
    const uint64_t one = 1;
    /* The eventfd counter cannot overflow from one write; retry only on a signal. */
    while (write(s->wake_fd, &one, sizeof one) < 0 && errno == EINTR) {
    }
    pthread_join(s->thread, NULL);
    server_free(s);
}

/* ---------------------------------------------------------------------------------------------- */
/* The store handle                                                                               */

enum { KIND_TCP, KIND_FILE };

struct hoop__store {
    int kind;
    int rank;
    double timeout_s;       /* bounds set() and reconnects */
    const hoop__log_t *log; /* borrowed; must outlive the store */
    pthread_mutex_t mu;     /* one request at a time on the connection */
    char err[512];
    /* tcp */
    char host[256];
    int port;
    char where[300];
    int fd;        /* -1 when not connected */
    int lost;      /* the server went away: fail fast from now on */
    server_t *srv; /* rank 0 only */
    hoop__auth_key_t auth; /* auth.set: prove it on every connection */
    /* file */
    char dir[PATH_MAX];
    int dir_ok; /* dir was created: only then may close clean it up */
};

/* One connect attempt to ai, bounded by deadline. Returns the socket or -1 with errno set. */
static int try_connect(const struct addrinfo *ai, double deadline)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) return -1;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS && errno != EINTR) goto fail;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int n;
        do {
            n = poll(&p, 1, ms_left(deadline));
        } while ((n < 0 && errno == EINTR) || (n == 0 && ms_left(deadline) > 0));
        if (n <= 0) {
            errno = n == 0 ? ETIMEDOUT : errno;
            goto fail;
        }
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0) goto fail;
        if (soerr != 0) {
            errno = soerr;
            goto fail;
        }
    }
    /* Connecting to a local port that nobody listens on can, when the port is in the ephemeral range,
     * end up connected to itself (TCP simultaneous open). That is no server: retry. */
    struct sockaddr_storage a, b;
    socklen_t al = sizeof a, bl = sizeof b;
    if (getsockname(fd, (struct sockaddr *)&a, &al) == 0 &&
        getpeername(fd, (struct sockaddr *)&b, &bl) == 0 && al == bl && memcmp(&a, &b, al) == 0) {
        errno = ECONNREFUSED;
        goto fail;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
fail:;
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
}

/* Connects st->fd, retrying with backoff until timeout_s: the server may start after us. */
static hoop_result_t client_connect(hoop__store_t *st, double timeout_s, char *err, size_t errlen)
{
    const double start = hoop__now();
    const double deadline = start + timeout_s;
    double backoff = 0.01;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", st->port);
    char why[320] = "no attempt was made";
    for (int attempt = 0;; attempt++) {
        struct addrinfo hints;
        memset(&hints, 0, sizeof hints);
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        struct addrinfo *res = NULL;
        int g = getaddrinfo(st->host, portstr, &hints, &res);
        if (g == 0) {
            for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
                int fd = try_connect(ai, deadline);
                if (fd >= 0 && st->auth.set) {
                    /* A handshake needs a moment even when the caller's time is up. */
                    const double hs_deadline = deadline > hoop__now() + EXCHANGE_GRACE ? deadline
                                                                                      : hoop__now() + EXCHANGE_GRACE;
                    char hwhy[256] = "";
                    hoop_result_t a = hoop__auth_handshake(fd, &st->auth, 0,
                                                           hoop__auth_context(STORE_AUTH_TAG, 0, 0, 0),
                                                           hs_deadline, hwhy, sizeof hwhy);
                    if (a == HOOP_ERR_PEER_LOST) {
                        /* Dropped after the server's hello: it may have made room for others. */
                        close(fd);
                        snprintf(why, sizeof why, "authentication: %s", hwhy);
                        continue;
                    }
                    if (a != HOOP_OK) {
                        close(fd);
                        freeaddrinfo(res);
                        hoop__say(err, errlen, "authentication with the rendezvous store at %s failed: %s",
                                st->where, hwhy);
                        return a == HOOP_ERR_TIMEOUT || a == HOOP_ERR_SYSTEM ? a : HOOP_ERR_AUTH;
                    }
                }
                if (fd >= 0) {
                    freeaddrinfo(res);
                    st->fd = fd;
                    HOOP_TRACE(st->log, "connected to the rendezvous store at %s after %d attempt(s)",
                               st->where, attempt + 1);
                    return HOOP_OK;
                }
                snprintf(why, sizeof why, "%s", strerror(errno));
            }
            freeaddrinfo(res);
        } else if (g == EAI_NONAME || g == EAI_SERVICE || g == EAI_FAMILY) {
            /* A name that does not exist will not start to exist: say so now. */
            hoop__say(err, errlen,
                    "cannot resolve the rendezvous host \"%s\": %s (check MASTER_ADDR or the init method)",
                    st->host, gai_strerror(g));
            return HOOP_ERR_SYSTEM;
        } else {
            snprintf(why, sizeof why, "%s", g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
        }
        const double now = hoop__now();
        if (now >= deadline) break;
        sleep_for(backoff < deadline - now ? backoff : deadline - now);
        backoff = backoff * 2 < CONNECT_BACKOFF_MAX ? backoff * 2 : CONNECT_BACKOFF_MAX;
    }
    hoop__say(err, errlen, "could not reach the rendezvous store at %s after %g s (%s)", st->where, timeout_s,
            why);
    return HOOP_ERR_TIMEOUT;
}

/* Moves len bytes over st->fd within deadline. On failure the connection is unusable (closed). */
static hoop_result_t client_io(hoop__store_t *st, void *buf, size_t len, int sending, int more,
                               double deadline)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n;
        if (sending)
            n = send(st->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT | (more ? MSG_MORE : 0));
        else
            n = recv(st->fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        hoop_result_t r;
        if (n == 0 && !sending) {
            r = HOOP_ERR_PEER_LOST;
            hoop__say(st->err, sizeof st->err,
                    "the rendezvous store at %s closed the connection (did rank 0 exit?)", st->where);
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pf = {.fd = st->fd, .events = sending ? POLLOUT : POLLIN};
            int k = poll(&pf, 1, ms_left(deadline));
            if (k > 0 || (k < 0 && errno == EINTR)) continue;
            if (k == 0 && ms_left(deadline) > 0) continue;
            if (k < 0) {
                r = HOOP_ERR_SYSTEM;
                hoop__say(st->err, sizeof st->err, "waiting on the rendezvous store at %s: %s", st->where,
                        strerror(errno));
            } else {
                r = HOOP_ERR_TIMEOUT;
                hoop__say(st->err, sizeof st->err, "the rendezvous store at %s did not answer in time",
                        st->where);
            }
        } else if (errno == ECONNRESET || errno == EPIPE || errno == ENOTCONN || errno == ECONNABORTED) {
            r = HOOP_ERR_PEER_LOST;
            hoop__say(st->err, sizeof st->err,
                    "the connection to the rendezvous store at %s was lost: %s (did rank 0 exit?)", st->where,
                    strerror(errno));
        } else {
            r = HOOP_ERR_SYSTEM;
            hoop__say(st->err, sizeof st->err, "talking to the rendezvous store at %s: %s", st->where,
                    strerror(errno));
        }
        close(st->fd);
        st->fd = -1;
        if (r == HOOP_ERR_PEER_LOST) st->lost = 1;
        return r;
    }
    return HOOP_OK;
}

/* One request and its reply. For a GET, copies at most cap bytes of the value into buf. */
static hoop_result_t client_request(hoop__store_t *st, uint8_t op, const char *key, size_t keylen,
                                    const void *val, size_t vallen, uint8_t *status, void *buf, size_t cap,
                                    size_t *len, double deadline)
{
    if (st->lost) return HOOP_ERR_PEER_LOST;
    const double min_deadline = hoop__now() + EXCHANGE_GRACE;
    if (st->fd < 0) {
        /* An earlier call timed out mid-request; the server keeps no per-connection state, so a new
         * connection is as good as the old one. */
        double left = deadline - hoop__now();
        hoop_result_t r = client_connect(st, left > 0 ? left : 0, st->err, sizeof st->err);
        if (r != HOOP_OK) return r;
    }
    if (deadline < min_deadline) deadline = min_deadline;
    uint8_t hdr[REQ_HDR + HOOP_STORE_MAX_KEY];
    hdr[0] = op;
    put_u32(hdr + 1, (uint32_t)keylen);
    put_u32(hdr + 5, (uint32_t)vallen);
    memcpy(hdr + REQ_HDR, key, keylen);
    hoop_result_t r = client_io(st, hdr, REQ_HDR + keylen, 1, vallen > 0, deadline);
    if (r == HOOP_OK && vallen > 0) r = client_io(st, (void *)(uintptr_t)val, vallen, 1, 0, deadline);
    uint8_t rep[REP_HDR];
    if (r == HOOP_OK) r = client_io(st, rep, sizeof rep, 0, 0, deadline);
    if (r != HOOP_OK) return r;
    const uint32_t rlen = get_u32(rep + 1);
    if (memcmp(rep, "HOOPA", REP_HDR) == 0) {
        /* The start of the server's authentication hello: it has a key and we have none. */
        hoop__say(st->err, sizeof st->err,
                "the rendezvous store at %s requires authentication: set the same HOOP_AUTH_KEY (or "
                "HOOP_AUTH_KEY_FILE) on every rank",
                st->where);
        close(st->fd);
        st->fd = -1;
        st->lost = 1;
        return HOOP_ERR_AUTH;
    }
    const int claim_ok = op == 'C' && (rep[0] == REP_TAKEN || (rep[0] == REP_OK && rlen == 0));
    if ((op == 'C' && !claim_ok) || (op != 'C' && rep[0] != REP_OK && rep[0] != REP_MISSING) ||
        rlen > HOOP_STORE_MAX_VALUE || (rep[0] == REP_MISSING && rlen != 0) ||
        (op == 'S' && (rep[0] != REP_OK || rlen != 0))) {
        hoop__say(
            st->err, sizeof st->err,
            "the rendezvous store at %s sent an invalid reply (is another program listening on that port?)",
            st->where);
        close(st->fd);
        st->fd = -1;
        st->lost = 1;
        return HOOP_ERR_SYSTEM;
    }
    *status = rep[0];
    if (len != NULL) *len = rlen;
    size_t keep = rlen < cap ? rlen : cap;
    if (keep > 0) r = client_io(st, buf, keep, 0, 0, deadline);
    /* Drain what does not fit so that the connection stays in step. */
    uint8_t sink[4096];
    for (size_t left = rlen - keep; r == HOOP_OK && left > 0;) {
        size_t n = left < sizeof sink ? left : sizeof sink;
        r = client_io(st, sink, n, 0, 0, deadline);
        left -= n;
    }
    return r;
}

/* ---------------------------------------------------------------------------------------------- */
/* File store                                                                                     */

/* Creates dir and its parents; an existing directory is fine. */
static int mkdir_p(const char *dir)
{
    char buf[PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        const char saved = buf[i];
        buf[i] = '\0';
        struct stat sb;
        /* Existing parents may answer EACCES or EROFS rather than EEXIST. */
        if (mkdir(buf, 0777) != 0 && errno != EEXIST && !(stat(buf, &sb) == 0 && S_ISDIR(sb.st_mode)))
            return -1;
        buf[i] = saved;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0) return -1;
    if (!S_ISDIR(sb.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* Escaped path of key below st->dir, and in *name_at the offset of its last component.
 * Characters outside [A-Za-z0-9_.-] become %XX, and so does a '.' that starts a component (no ".",
 * "..", or clash with the ".tmp." files). Names longer than one component allows are split into
 * directories whose names end in '+', which no escaped name contains, so that the mapping stays
 * one to one. */
#define NAME_CHUNK 200
static int key_path(const hoop__store_t *st, const char *key, char *out, size_t cap, size_t *name_at)
{
    static const char hex[] = "0123456789ABCDEF";
    int n = snprintf(out, cap, "%s/", st->dir);
    if (n < 0 || (size_t)n >= cap) return -1;
    size_t j = (size_t)n, comp = j;
    for (const unsigned char *k = (const unsigned char *)key; *k != '\0'; k++) {
        if (j - comp >= NAME_CHUNK) {
            if (j + 2 >= cap) return -1;
            out[j++] = '+';
            out[j++] = '/';
            comp = j;
        }
        if (j + 4 >= cap) return -1;
        const unsigned char c = *k;
        const int plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                          c == '_' || c == '-' || (c == '.' && j != comp);
        if (plain) {
            out[j++] = (char)c;
        } else {
            out[j++] = '%';
            out[j++] = hex[c >> 4];
            out[j++] = hex[c & 15];
        }
    }
    out[j] = '\0';
    *name_at = comp;
    return 0;
}

/* Writes val into a fresh temporary file beside key's path; path and tmp get both names. */
static hoop_result_t file_write_tmp(hoop__store_t *st, const char *key, const void *val, size_t len,
                                    char *path, char *tmp)
{
    size_t name_at;
    if (key_path(st, key, path, PATH_MAX, &name_at) != 0) {
        hoop__say(st->err, sizeof st->err, "the file store path for a key is too long (store directory %s)",
                st->dir);
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    /* Split names need their directories. */
    if (name_at > strlen(st->dir) + 1) {
        char d[PATH_MAX];
        memcpy(d, path, name_at - 1);
        d[name_at - 1] = '\0';
        if (mkdir_p(d) != 0) {
            hoop__say(st->err, sizeof st->err, "cannot create %s: %s", d, strerror(errno));
            return HOOP_ERR_SYSTEM;
        }
    }
    snprintf(tmp, PATH_MAX, "%.*s.tmp.XXXXXX", (int)name_at, path);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        hoop__say(st->err, sizeof st->err, "cannot create a file in the store directory %s: %s", st->dir,
                strerror(errno));
        return HOOP_ERR_SYSTEM;
    }
    const uint8_t *p = val;
    size_t left = len;
    while (left > 0) {
        ssize_t n = write(fd, p, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            hoop__say(st->err, sizeof st->err, "cannot write %s: %s", tmp,
                    n < 0 ? strerror(errno) : "short write");
            close(fd);
            unlink(tmp);
            return HOOP_ERR_SYSTEM;
        }
        p += n;
        left -= (size_t)n;
    }
    if (close(fd) != 0) {
        hoop__say(st->err, sizeof st->err, "cannot write %s: %s", tmp, strerror(errno));
        unlink(tmp);
        return HOOP_ERR_SYSTEM;
    }
    return HOOP_OK;
}

static hoop_result_t file_set(hoop__store_t *st, const char *key, const void *val, size_t len)
{
    char path[PATH_MAX], tmp[PATH_MAX];
    hoop_result_t r = file_write_tmp(st, key, val, len, path, tmp);
    if (r != HOOP_OK) return r;
    if (rename(tmp, path) != 0) {
        hoop__say(st->err, sizeof st->err, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
        return HOOP_ERR_SYSTEM;
    }
    return HOOP_OK;
}

/* 1 found, 0 not there yet, -1 error (st->err set). */
static int file_try_get(hoop__store_t *st, const char *path, void *buf, size_t cap, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR) return 0;
        hoop__say(st->err, sizeof st->err, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 0 ||
        (uint64_t)sb.st_size > HOOP_STORE_MAX_VALUE) {
        hoop__say(st->err, sizeof st->err, "%s is not a store value (not a regular file, or over %u bytes)",
                path, (unsigned)HOOP_STORE_MAX_VALUE);
        close(fd);
        return -1;
    }
    const size_t size = (size_t)sb.st_size;
    size_t want = size < cap ? size : cap, got = 0;
    while (got < want) {
        ssize_t n = read(fd, (uint8_t *)buf + got, want - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            hoop__say(st->err, sizeof st->err, "cannot read %s: %s", path,
                    n < 0 ? strerror(errno) : "file shrank");
            close(fd);
            return -1;
        }
        got += (size_t)n;
    }
    close(fd);
    if (len != NULL) *len = size;
    return 1;
}

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (type == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0; /* best effort: keep going */
}

/* ---------------------------------------------------------------------------------------------- */
/* API                                                                                            */

hoop_result_t hoop__store_open(const hoop__rdv_t *rdv, double timeout_s, const hoop__log_t *log,
                               hoop__store_t **out, char *err, size_t errlen)
{
    if (err != NULL && errlen > 0) err[0] = '\0';
    if (out == NULL || rdv == NULL) {
        hoop__say(err, errlen, "internal error: hoop__store_open needs a rendezvous and a place for the store");
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    *out = NULL;
    if (timeout_s != timeout_s || timeout_s > 1e9) {
        hoop__say(err, errlen, "invalid rendezvous timeout %g s", timeout_s);
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    if (timeout_s < 0) timeout_s = 0;
    const int is_tcp = strcmp(rdv->method, "tcp") == 0;
    const int is_file = strcmp(rdv->method, "file") == 0;
    if (!is_tcp && !is_file) {
        hoop__say(err, errlen, "internal error: unknown rendezvous method \"%.8s\"", rdv->method);
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    if (rdv->rank < 0) {
        hoop__say(err, errlen, "internal error: the rendezvous has no rank");
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    if (is_tcp && (rdv->port < 1 || rdv->port > 65535 || memchr(rdv->host, '\0', sizeof rdv->host) == NULL ||
                   rdv->host[0] == '\0')) {
        hoop__say(err, errlen, "internal error: the rendezvous has no valid host and port");
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    if (is_file && (memchr(rdv->path, '\0', sizeof rdv->path) == NULL || rdv->path[0] == '\0')) {
        hoop__say(err, errlen, "internal error: the rendezvous has no file path");
        return HOOP_ERR_INVALID_ARGUMENT;
    }

    hoop__store_t *st = calloc(1, sizeof *st);
    if (st == NULL) {
        hoop__say(err, errlen, "out of memory opening the rendezvous store");
        return HOOP_ERR_NO_MEMORY;
    }
    st->rank = rdv->rank;
    if (rdv->auth.set) st->auth = rdv->auth;
    st->timeout_s = timeout_s;
    st->log = log;
    st->fd = -1;
    if (pthread_mutex_init(&st->mu, NULL) != 0) {
        free(st);
        hoop__say(err, errlen, "cannot create a mutex for the rendezvous store");
        return HOOP_ERR_SYSTEM;
    }

    hoop_result_t r = HOOP_OK;
    if (is_file) {
        st->kind = KIND_FILE;
        int n = snprintf(st->dir, sizeof st->dir, "%s.d", rdv->path);
        if (n < 0 || (size_t)n >= sizeof st->dir) {
            hoop__say(err, errlen, "the file store path %s is too long", rdv->path);
            r = HOOP_ERR_INVALID_ARGUMENT;
        } else if (mkdir_p(st->dir) != 0) {
            hoop__say(err, errlen, "cannot create the file store directory %s: %s", st->dir, strerror(errno));
            r = HOOP_ERR_SYSTEM;
        } else {
            st->dir_ok = 1;
            HOOP_INFO(log, "rendezvous through the file store %s", st->dir);
        }
    } else {
        st->kind = KIND_TCP;
        snprintf(st->host, sizeof st->host, "%s", rdv->host);
        st->port = rdv->port;
        format_where(st->where, sizeof st->where, st->host, st->port);
        if (st->auth.set)
            HOOP_INFO(log, "rendezvous store %s: connections are authenticated (HOOP_AUTH_KEY)", st->where);
        else
            HOOP_INFO(log, "rendezvous store %s: no HOOP_AUTH_KEY, connections are not authenticated",
                      st->where);
        if (rdv->rank == 0) r = server_start(st->host, st->port, &st->auth, log, &st->srv, err, errlen);
        if (r == HOOP_OK) r = client_connect(st, timeout_s, err, errlen);
    }
    if (r != HOOP_OK) {
        hoop__store_close(st);
        return r;
    }
    *out = st;
    return HOOP_OK;
}

static hoop_result_t check_key(hoop__store_t *st, const char *key, size_t *keylen)
{
    if (key == NULL || key[0] == '\0') {
        hoop__say(st->err, sizeof st->err, "a store key must not be empty");
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    size_t n = strnlen(key, HOOP_STORE_MAX_KEY + 1);
    if (n > HOOP_STORE_MAX_KEY) {
        hoop__say(st->err, sizeof st->err, "store key \"%.40s...\" is longer than %d bytes", key,
                HOOP_STORE_MAX_KEY);
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    *keylen = n;
    return HOOP_OK;
}

hoop_result_t hoop__store_set(hoop__store_t *st, const char *key, const void *val, size_t len)
{
    if (st == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&st->mu);
    size_t keylen = 0;
    hoop_result_t r = check_key(st, key, &keylen);
    if (r == HOOP_OK && len > HOOP_STORE_MAX_VALUE) {
        hoop__say(st->err, sizeof st->err, "store value of %zu bytes is over the %u-byte limit", len,
                (unsigned)HOOP_STORE_MAX_VALUE);
        r = HOOP_ERR_INVALID_ARGUMENT;
    }
    if (r == HOOP_OK && val == NULL && len > 0) {
        hoop__say(st->err, sizeof st->err, "store value is NULL");
        r = HOOP_ERR_INVALID_ARGUMENT;
    }
    if (r == HOOP_OK) {
        if (st->kind == KIND_FILE) {
            r = file_set(st, key, val, len);
        } else {
            uint8_t status = 0;
            r = client_request(st, 'S', key, keylen, val, len, &status, NULL, 0, NULL,
                               hoop__now() + st->timeout_s);
        }
    }
    pthread_mutex_unlock(&st->mu);
    return r;
}

hoop_result_t hoop__store_claim(hoop__store_t *st, const char *key, const void *val, size_t len,
                                int *taken, void *holder, size_t cap, size_t *holder_len)
{
    if (st == NULL || taken == NULL || (holder == NULL && cap > 0)) return HOOP_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&st->mu);
    *taken = 0;
    if (holder_len != NULL) *holder_len = 0;
    size_t keylen = 0;
    hoop_result_t r = check_key(st, key, &keylen);
    if (r == HOOP_OK && (len > HOOP_STORE_MAX_VALUE || (val == NULL && len > 0))) {
        hoop__say(st->err, sizeof st->err, "invalid store value for a claim (%zu bytes)", len);
        r = HOOP_ERR_INVALID_ARGUMENT;
    }
    if (r == HOOP_OK && st->kind == KIND_FILE) {
        /* link(2) fails with EEXIST when the name exists: the file system decides. */
        char path[PATH_MAX], tmp[PATH_MAX];
        r = file_write_tmp(st, key, val, len, path, tmp);
        if (r == HOOP_OK) {
            if (link(tmp, path) == 0) {
                unlink(tmp);
            } else if (errno == EEXIST) {
                unlink(tmp);
                *taken = 1;
                int got = file_try_get(st, path, holder, cap, holder_len);
                if (got < 0) r = HOOP_ERR_SYSTEM;
            } else {
                hoop__say(st->err, sizeof st->err, "cannot link %s to %s: %s", tmp, path, strerror(errno));
                unlink(tmp);
                r = HOOP_ERR_SYSTEM;
            }
        }
    } else if (r == HOOP_OK) {
        uint8_t status = 0;
        r = client_request(st, 'C', key, keylen, val, len, &status, holder, cap, holder_len,
                           hoop__now() + st->timeout_s);
        if (r == HOOP_OK) *taken = status == REP_TAKEN;
    }
    pthread_mutex_unlock(&st->mu);
    return r;
}

hoop_result_t hoop__store_get(hoop__store_t *st, const char *key, void *buf, size_t cap, size_t *len,
                              double timeout_s)
{
    if (st == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&st->mu);
    size_t keylen = 0;
    hoop_result_t r = check_key(st, key, &keylen);
    if (r == HOOP_OK && buf == NULL && cap > 0) {
        hoop__say(st->err, sizeof st->err, "store get has a NULL buffer");
        r = HOOP_ERR_INVALID_ARGUMENT;
    }
    if (r == HOOP_OK && (timeout_s != timeout_s || timeout_s > 1e9)) {
        hoop__say(st->err, sizeof st->err, "invalid store timeout %g s", timeout_s);
        r = HOOP_ERR_INVALID_ARGUMENT;
    }
    /* Callers pass what is left of a deadline, which may have just passed: look once. */
    if (timeout_s < 0) timeout_s = 0;
    char path[PATH_MAX];
    size_t name_at;
    if (r == HOOP_OK && st->kind == KIND_FILE && key_path(st, key, path, sizeof path, &name_at) != 0) {
        hoop__say(st->err, sizeof st->err, "the file store path for a key is too long (store directory %s)",
                st->dir);
        r = HOOP_ERR_INVALID_ARGUMENT;
    }
    if (r != HOOP_OK) {
        pthread_mutex_unlock(&st->mu);
        return r;
    }
    const double deadline = hoop__now() + timeout_s;
    double backoff = GET_BACKOFF_FIRST;
    for (;;) {
        if (st->kind == KIND_FILE) {
            int got = file_try_get(st, path, buf, cap, len);
            if (got > 0) break;
            if (got < 0) {
                r = HOOP_ERR_SYSTEM;
                break;
            }
        } else {
            uint8_t status = REP_MISSING;
            r = client_request(st, 'G', key, keylen, NULL, 0, &status, buf, cap, len, deadline);
            if (r != HOOP_OK || status == REP_OK) break;
        }
        const double now = hoop__now();
        if (now >= deadline) {
            char kbuf[100];
            const unsigned rejected = hoop__store_auth_failures(st);
            hoop__say(st->err, sizeof st->err,
                    "key \"%s\" did not appear in the rendezvous store within %g s (has every rank started? "
                    "did one "
                    "fail?)",
                    printable(key, keylen, kbuf, sizeof kbuf), timeout_s);
            r = HOOP_ERR_TIMEOUT;
            if (rejected > 0) {
                /* Most likely a rank with another key: say so rather than just "timed out". */
                size_t used = strlen(st->err);
                hoop__say(st->err + used, sizeof st->err - used,
                        "; the store turned away %u connection(s) that failed authentication (is "
                        "HOOP_AUTH_KEY the same on every rank?)",
                        rejected);
                r = HOOP_ERR_AUTH;
            }
            break;
        }
        sleep_for(backoff < deadline - now ? backoff : deadline - now);
        backoff = backoff * 2 < GET_BACKOFF_MAX ? backoff * 2 : GET_BACKOFF_MAX;
    }
    pthread_mutex_unlock(&st->mu);
    return r;
}

unsigned hoop__store_auth_failures(const hoop__store_t *st)
{
    return st != NULL && st->srv != NULL ? atomic_load(&st->srv->auth_failures) : 0;
}

const char *hoop__store_error(const hoop__store_t *st)
{
    return st != NULL ? st->err : "";
}

void hoop__store_close(hoop__store_t *st)
{
    if (st == NULL) return;
    if (st->fd >= 0) close(st->fd);
    st->fd = -1;
    if (st->srv != NULL) server_stop(st->srv);
    st->srv = NULL;
    if (st->kind == KIND_FILE && st->rank == 0 && st->dir_ok)
        nftw(st->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    hoop__auth_key_wipe(&st->auth);
    pthread_mutex_destroy(&st->mu);
    free(st);
}
