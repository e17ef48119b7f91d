/* The tcp store's server, run by rank 0 on a thread of its own: one poll loop over the listening
 * sockets, a wake-up eventfd, the connections still authenticating (the gate of base/sock.h) and
 * the clients' non-blocking connections. A waiting get ('W', proto.h) of a key that is not there
 * yet stays at the head of its connection's input until the key is set or its hold is over, so
 * that p waiting ranks cost the server nothing until then instead of p polls with backoff. A
 * connection with a held request is watched only for its close, which drops the request with it:
 * one held request a connection, nothing left behind by a client that dies while it waits. */
#define HOOP__LOG_SUBSYS HOOP__SUB_RENDEZVOUS /* of its INFO and TRACE lines (base/log.h) */
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/sock.h"
#include "rendezvous/proto.h"
#include "rendezvous/server.h"
#include "rendezvous/store_ops.h"
#include "rendezvous/table.h"

#define MAX_LISTEN 8

typedef struct hoop__store_server server_t;

typedef struct conn {
    int fd;
    uint8_t *in;
    size_t in_len, in_cap;
    uint8_t *out;
    size_t out_len, out_off, out_cap;
    int held;          /* the request at the head of in is a 'W' waiting for its key */
    double held_until; /* when its hold is over (hoop__now) */
    char peer[64];
} conn_t;

struct hoop__store_server {
    int lfd[MAX_LISTEN];
    int nlfd;
    int wake_fd;
    conn_t *conns;
    size_t nconns, cap_conns;
    hoop__sock_gate_t gate; /* with a key: connections that have yet to authenticate */
    struct pollfd *pfds;
    size_t cap_pfds;
    hoop__store_table_t table;
    const hoop__log_t *log;
    char where[300];
    pthread_t thread;
    hoop__auth_key_t key; /* key.set: clients must authenticate */
    uint64_t auth_context;
    _Atomic unsigned auth_failures;
    int accept_exhausted; /* server_accept: out of descriptors since its last accept (warned once) */
    size_t nheld;         /* connections with a held request */
    int woken;            /* a key was set since the held requests were last looked at */
    unsigned long long served, accepted; /* requests parsed, connections accepted: said at stop */
};

static void conn_close(conn_t *c)
{
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    free(c->in);
    free(c->out);
    c->in = c->out = NULL;
    c->in_len = c->in_cap = c->out_len = c->out_off = c->out_cap = 0;
}

/* Sends what is pending without blocking. 0: all or part sent; -1: the connection is dead. */
static int conn_flush(conn_t *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
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
    const size_t need = HOOP__STORE_REP_HDR + (size_t)vallen;
    if (c->out_cap < need) {
        size_t cap = c->out_cap ? c->out_cap : 256;
        while (cap < need) cap *= 2;
        uint8_t *p = realloc(c->out, cap);
        if (p == NULL) return -1;
        c->out = p;
        c->out_cap = cap;
    }
    hoop__store_rep_encode(c->out, status, vallen);
    if (vallen > 0) memcpy(c->out + HOOP__STORE_REP_HDR, val, vallen);
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
    while (c->out_len == 0 && !c->held && off < c->in_len) {
        hoop__store_req_t req;
        long n = hoop__store_parse(c->in + off, c->in_len - off, &req);
        if (n == 0) break;
        if (n < 0) {
            if (c->in[off] == 'H' && off == 0) {
                atomic_fetch_add(&s->auth_failures, 1);
                HOOP__WARN(s->log,
                           "rendezvous store %s: dropping client %s, which wants to authenticate: "
                           "this store has no key (is HOOP_AUTH_KEY set on rank 0 as on the other "
                           "ranks?)",
                           s->where, c->peer);
                /* Said, so that the client fails at once instead of waiting for a store that
                 * closed under it to come back (auth.h); best effort, on an empty socket. */
                (void)send(c->fd, HOOP__AUTH_NO_KEY, sizeof HOOP__AUTH_NO_KEY - 1,
                           MSG_DONTWAIT | MSG_NOSIGNAL);
            } else {
                HOOP__WARN(
                    s->log,
                    "rendezvous store %s: dropping client %s after a malformed request (op 0x%02x)",
                    s->where, c->peer, c->in[off]);
            }
            return -1;
        }
        char kbuf[100];
        const uint8_t *val = NULL;
        uint32_t vallen = 0;
        s->served++;
        if (req.op == 'S') {
            if (hoop__store_table_set(&s->table, req.key, req.keylen, req.val, req.vallen) != 0) {
                HOOP__WARN(s->log,
                           "rendezvous store %s: cannot store %u bytes for key \"%s\" from %s "
                           "(out of memory or over the %llu-byte limit); dropping the client",
                           s->where, (unsigned)req.vallen,
                           hoop__store_printable(req.key, req.keylen, kbuf, sizeof kbuf), c->peer,
                           (unsigned long long)HOOP__STORE_TABLE_MAX_BYTES);
                return -1;
            }
            HOOP__TRACE(s->log, "rendezvous store: set \"%s\" (%u bytes) from %s",
                        hoop__store_printable(req.key, req.keylen, kbuf, sizeof kbuf),
                        (unsigned)req.vallen, c->peer);
            s->woken |= s->nheld > 0;
            rc = conn_reply(c, HOOP__STORE_REP_OK, NULL, 0);
        } else if (req.op == 'C') {
            /* One thread serves every connection, so look-then-set is atomic. */
            if (hoop__store_table_get(&s->table, req.key, req.keylen, &val, &vallen)) {
                rc = conn_reply(c, HOOP__STORE_REP_TAKEN, val, vallen);
            } else if (hoop__store_table_set(&s->table, req.key, req.keylen, req.val, req.vallen) !=
                       0) {
                HOOP__WARN(s->log,
                           "rendezvous store %s: cannot store %u bytes for key \"%s\" from %s; "
                           "dropping the client",
                           s->where, (unsigned)req.vallen,
                           hoop__store_printable(req.key, req.keylen, kbuf, sizeof kbuf), c->peer);
                return -1;
            } else {
                s->woken |= s->nheld > 0;
                rc = conn_reply(c, HOOP__STORE_REP_OK, NULL, 0);
            }
        } else if (hoop__store_table_get(&s->table, req.key, req.keylen, &val, &vallen)) {
            HOOP__TRACE(s->log, "rendezvous store: get \"%s\" (%u bytes) by %s",
                        hoop__store_printable(req.key, req.keylen, kbuf, sizeof kbuf),
                        (unsigned)vallen, c->peer);
            rc = conn_reply(c, HOOP__STORE_REP_OK, val, vallen);
        } else if (hoop__store_hold_ms(&req) > 0) { /* a get ('W'), the op left */
            /* Held where it is, unconsumed: held_answer() reads it again when it is answered. */
            c->held = 1;
            c->held_until = hoop__now() + hoop__store_hold_ms(&req) / 1e3;
            s->nheld++;
            break;
        } else {
            rc = conn_reply(c, HOOP__STORE_REP_MISSING, NULL, 0);
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

/* Answers c's held request if its key is there or its hold is over at now, then serves what
 * followed it. -1 drops the connection. */
static int held_answer(server_t *s, conn_t *c, double now)
{
    hoop__store_req_t req;
    const long n = hoop__store_parse(c->in, c->in_len, &req);
    if (n <= 0) return -1; /* cannot happen: it parsed when it was held */
    const uint8_t *val = NULL;
    uint32_t vallen = 0;
    const int found = hoop__store_table_get(&s->table, req.key, req.keylen, &val, &vallen);
    if (!found && now < c->held_until) return 0;
    c->held = 0;
    s->nheld--;
    if (found) {
        char kbuf[100];
        HOOP__TRACE(s->log, "rendezvous store: get \"%s\" (%u bytes) by %s, held until set",
                    hoop__store_printable(req.key, req.keylen, kbuf, sizeof kbuf), (unsigned)vallen,
                    c->peer);
    }
    /* The reply is copied out of the table before the request's bytes move. */
    int rc = found ? conn_reply(c, HOOP__STORE_REP_OK, val, vallen)
                   : conn_reply(c, HOOP__STORE_REP_MISSING, NULL, 0);
    memmove(c->in, c->in + n, c->in_len - (size_t)n);
    c->in_len -= (size_t)n;
    if (rc == 0 && c->out_len == 0) rc = conn_process(s, c);
    return rc;
}

/* Answers the held requests whose key was set or whose hold is over, again as long as serving
 * what followed them sets keys; returns the earliest hold still running (HUGE_VAL: none). */
static double serve_held(server_t *s)
{
    double next = HUGE_VAL;
    while (s->nheld > 0) {
        const int woken = s->woken;
        s->woken = 0;
        const double now = hoop__now();
        next = HUGE_VAL;
        for (size_t i = 0; i < s->nconns; i++) {
            conn_t *c = &s->conns[i];
            if (c->fd < 0 || !c->held) continue;
            if ((woken || now >= c->held_until) && held_answer(s, c, now) != 0) {
                HOOP__TRACE(s->log, "rendezvous store %s: client %s disconnected", s->where,
                            c->peer);
                if (c->held) s->nheld--;
                c->held = 0;
                conn_close(c);
                continue;
            }
            if (c->held && c->held_until < next) next = c->held_until;
        }
        if (!s->woken) break;
    }
    return next;
}

/* Reads what is available. -1 drops the connection (closed, error, malformed). */
static int conn_read(server_t *s, conn_t *c)
{
    for (int rounds = 0; rounds < 64 && c->out_len == 0 && !c->held; rounds++) {
        if (c->in_len == c->in_cap) {
            /* Grow to what the pending request needs, never past the largest valid request. */
            size_t want = c->in_cap ? c->in_cap * 2 : 4096;
            if (c->in_len >= HOOP__STORE_REQ_HDR) {
                size_t total = hoop__store_req_len(c->in);
                if (total > want) want = total;
            }
            if (want > HOOP__STORE_MAX_REQ) want = HOOP__STORE_MAX_REQ;
            if (want <= c->in_cap) return -1; /* cannot happen: parse rejects longer requests */
            uint8_t *p = realloc(c->in, want);
            if (p == NULL) {
                HOOP__WARN(s->log,
                           "rendezvous store %s: out of memory reading from %s; dropping it",
                           s->where, c->peer);
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

/* A new connection to serve. 0, or -1 when there is no memory for it (it is closed). */
static int conn_add(server_t *s, int fd, const char *peer)
{
    if (s->nconns == s->cap_conns) {
        size_t cap = s->cap_conns ? s->cap_conns * 2 : 16;
        conn_t *p = realloc(s->conns, cap * sizeof *p);
        if (p == NULL) {
            close(fd);
            HOOP__WARN(s->log, "rendezvous store %s: out of memory accepting a connection",
                       s->where);
            return -1;
        }
        s->conns = p;
        s->cap_conns = cap;
    }
    conn_t *c = &s->conns[s->nconns++];
    memset(c, 0, sizeof *c);
    c->fd = fd;
    snprintf(c->peer, sizeof c->peer, "%s", peer);
    return 0;
}

/* Moves the handshake of p on; once the client has proved the key it is served. */
static void pending_step(server_t *s, hoop__sock_pending_t *p)
{
    char why[256] = "";
    int r = hoop__sock_pending_step(p, why, sizeof why);
    if (r == HOOP__AUTH_MORE) return;
    if (r == HOOP__AUTH_DONE) {
        HOOP__TRACE_IN(s->log, HOOP__SUB_AUTH, "rendezvous store %s: client %s authenticated",
                       s->where, p->peer);
        (void)conn_add(s, hoop__sock_pending_take(p), p->peer);
        return;
    }
    atomic_fetch_add(&s->auth_failures, 1);
    HOOP__WARN(s->log, "rendezvous store %s: rejected client %s: authentication failed: %s",
               s->where, p->peer, why);
    hoop__sock_pending_close(p);
}

/* Starts the handshake of a new connection in the gate, making room by dropping the oldest one
 * when HOOP__SOCK_PENDING_MAX are waiting. */
static void pending_begin(server_t *s, int fd, const char *peer)
{
    int full;
    hoop__sock_pending_t *p = hoop__sock_gate_room(&s->gate, &full);
    if (full) {
        atomic_fetch_add(&s->auth_failures, 1);
        HOOP__WARN(
            s->log,
            "rendezvous store %s: %zu connections are authenticating at once; dropping the oldest, "
            "from %s",
            s->where, (size_t)HOOP__SOCK_PENDING_MAX, p->peer);
        hoop__sock_pending_close(p);
    }
    hoop__sock_pending_admit(p, fd, peer, hoop__now() + HOOP__SOCK_AUTH_WINDOW);
    if (hoop__sock_pending_auth(p, &s->key, 1, s->auth_context) != 0) {
        HOOP__WARN(s->log, "rendezvous store %s: out of memory accepting %s", s->where, peer);
        hoop__sock_pending_close(p);
        return;
    }
    pending_step(s, p);
}

/* Why accept() failed for want of a descriptor, and what to raise: once until an accept works. */
static void accept_exhausted(server_t *s, int err)
{
    if (s->accept_exhausted) return;
    s->accept_exhausted = 1;
    struct rlimit rl;
    if (err == EMFILE && getrlimit(RLIMIT_NOFILE, &rl) == 0)
        HOOP__WARN(s->log,
                   "rendezvous store %s: cannot accept a connection: %s: this process may have "
                   "%llu open; waiting for clients to leave (raise the limit: ulimit -n)",
                   s->where, strerror(err), (unsigned long long)rl.rlim_cur);
    else
        HOOP__WARN(s->log,
                   "rendezvous store %s: cannot accept a connection: %s; waiting for clients to "
                   "leave%s",
                   s->where, strerror(err),
                   err == ENFILE ? " (the system is out of file descriptors: fs.file-max)" : "");
}

/* Accepts pending connections. Returns 1 when out of descriptors (the caller pauses accepting). */
static int server_accept(server_t *s, int lfd)
{
    for (int i = 0; i < 64; i++) {
        char peer[64];
        int fd = hoop__sock_accept(lfd, peer, sizeof peer);
        if (fd < 0) {
            if (errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* The connection stays queued: accepting pauses (the caller waits 50 ms) rather
                 * than spin; a client that leaves makes room. */
                accept_exhausted(s, errno);
                return 1;
            }
            return 0; /* EAGAIN, or an error of that one connection */
        }
        s->accept_exhausted = 0;
        s->accepted++;
        HOOP__TRACE(s->log, "rendezvous store %s: client %s connected", s->where, peer);
        if (s->key.set)
            pending_begin(s, fd, peer);
        else if (conn_add(s, fd, peer) != 0)
            return 1;
    }
    return 0;
}

/* Milliseconds until the earliest handshake deadline, at most cap. */
static int auth_wait_ms(const server_t *s, int cap)
{
    int ms = hoop__sock_ms_left(hoop__sock_gate_next(&s->gate, HUGE_VAL));
    return ms < cap ? ms : cap;
}

static void *server_main(void *arg)
{
    server_t *s = arg;
    (void)pthread_setname_np(pthread_self(), "hoop-store");
    int accept_paused = 0;
    int slot_of[HOOP__SOCK_PENDING_MAX]; /* the gate's slot behind each polled handshake */
    double next_held = HUGE_VAL;         /* the earliest end of a held request's hold */
    for (;;) {
        const size_t need = 1 + (size_t)s->nlfd + HOOP__SOCK_PENDING_MAX + s->nconns;
        if (need > s->cap_pfds) {
            size_t cap = need * 2;
            struct pollfd *p = realloc(s->pfds, cap * sizeof *p);
            if (p == NULL) {
                HOOP__WARN(s->log, "rendezvous store %s: out of memory; retrying", s->where);
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
        const size_t first_pending = np;
        for (int i = 0; i < HOOP__SOCK_PENDING_MAX; i++) {
            const hoop__sock_pending_t *p = &s->gate.slot[i];
            if (p->fd < 0) continue;
            slot_of[np - first_pending] = i;
            s->pfds[np++] = (struct pollfd){.fd = p->fd, .events = p->events};
        }
        const size_t first_conn = np;
        const size_t nconns = s->nconns;
        for (size_t i = 0; i < nconns; i++) {
            const conn_t *c = &s->conns[i];
            /* A held request's connection is not read (one request at a time), only watched for
             * its client leaving. */
            const short events = c->held ? POLLRDHUP : c->out_len > 0 ? POLLOUT : POLLIN;
            s->pfds[np++] = (struct pollfd){.fd = c->fd, .events = events};
        }
        /* The timeout only bounds the wait; stopping goes through wake_fd. */
        int wait_ms = auth_wait_ms(s, accept_paused ? 50 : 1000);
        if (next_held < HUGE_VAL) {
            const int held_ms = hoop__sock_ms_left(next_held);
            if (held_ms < wait_ms) wait_ms = held_ms;
        }
        int n = poll(s->pfds, (nfds_t)np, wait_ms);
        if (n < 0) {
            if (errno != EINTR) {
                HOOP__WARN(s->log, "rendezvous store %s: poll failed: %s", s->where,
                           strerror(errno));
                hoop__store_sleep(0.01);
            }
            continue;
        }
        if (s->pfds[0].revents != 0) break;
        if (accept_paused) {
            accept_paused = 0;
        } else {
            for (size_t i = first_listener; i < first_pending; i++)
                if (s->pfds[i].revents & POLLIN) accept_paused |= server_accept(s, s->pfds[i].fd);
        }
        for (size_t i = first_pending; i < first_conn; i++) {
            hoop__sock_pending_t *p = &s->gate.slot[slot_of[i - first_pending]];
            /* Skip a slot whose connection went to make room for a newer one. */
            if (s->pfds[i].revents != 0 && p->fd == s->pfds[i].fd && p->auth != NULL)
                pending_step(s, p);
        }
        const double now = hoop__now();
        for (int i = 0; i < HOOP__SOCK_PENDING_MAX; i++) {
            hoop__sock_pending_t *p = &s->gate.slot[i];
            if (p->fd < 0 || now < p->deadline) continue;
            atomic_fetch_add(&s->auth_failures, 1);
            HOOP__WARN(
                s->log,
                "rendezvous store %s: dropping client %s: it did not authenticate within %g s",
                s->where, p->peer, HOOP__SOCK_AUTH_WINDOW);
            hoop__sock_pending_close(p);
        }
        for (size_t i = 0; i < nconns; i++) {
            conn_t *c = &s->conns[i];
            const short ev = s->pfds[first_conn + i].revents;
            if (ev == 0) continue;
            int dead = 0;
            if (ev & POLLNVAL || c->held) {
                dead = 1; /* a held request's client left, or broke the connection */
            } else if (c->out_len > 0) {
                dead = conn_flush(c) != 0;
                /* Requests that arrived while the reply was queued. */
                if (!dead && c->out_len == 0) dead = conn_process(s, c) != 0;
            } else {
                dead = conn_read(s, c) != 0;
            }
            if (dead) {
                HOOP__TRACE(s->log, "rendezvous store %s: client %s disconnected", s->where,
                            c->peer);
                if (c->held) s->nheld--;
                c->held = 0;
                conn_close(c);
            }
        }
        next_held = serve_held(s);
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
    for (int i = 0; i < HOOP__SOCK_PENDING_MAX; i++) {
        hoop__sock_pending_t *p = &s->gate.slot[i];
        if (p->fd < 0) continue;
        HOOP__WARN(s->log, "rendezvous store %s: closing client %s, which never authenticated",
                   s->where, p->peer);
        hoop__sock_pending_close(p);
    }
    for (size_t i = 0; i < s->nconns; i++) conn_close(&s->conns[i]);
    hoop__auth_key_wipe(&s->key);
    if (s->wake_fd >= 0) close(s->wake_fd);
    hoop__store_table_free(&s->table);
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
static hoop_result_t server_listen(server_t *s, const char *host, int port, char *err,
                                   size_t errlen)
{
    struct addrinfo *res = NULL;
    int g = hoop__sock_resolve(host, port, &res);
    if (g != 0) {
        hoop__say(
            err, errlen,
            "cannot resolve the rendezvous host \"%s\": %s (check MASTER_ADDR or the init method)",
            host, g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
        return HOOP_ERR_SYSTEM;
    }
    int last_errno = 0;
    for (const struct addrinfo *ai = res; ai != NULL && s->nlfd < MAX_LISTEN; ai = ai->ai_next) {
        int dup = 0;
        for (const struct addrinfo *p = res; p != ai; p = p->ai_next) dup |= same_addr(p, ai);
        if (dup) continue;
        /* A v6 socket does not also claim the v4 port: the v4 address gets its own socket. */
        int fd = hoop__sock_listen(ai->ai_addr, ai->ai_addrlen, HOOP__SOCK_FIXED_PORT);
        if (fd < 0) {
            const int e = errno;
            if (e == EADDRINUSE) {
                freeaddrinfo(res);
                hoop__say(
                    err, errlen,
                    "port %d on %s is already in use (is another job running? set MASTER_PORT)",
                    port, host);
                return HOOP_ERR_SYSTEM;
            }
            last_errno = e;
            continue;
        }
        s->lfd[s->nlfd++] = fd;
        const int wild =
            (ai->ai_family == AF_INET &&
             ((const struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr == htonl(INADDR_ANY)) ||
            (ai->ai_family == AF_INET6 &&
             IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)ai->ai_addr)->sin6_addr));
        if (wild)
            HOOP__WARN(s->log,
                       "rendezvous store: \"%s\" is a wildcard address: the store listens on every "
                       "interface (give MASTER_ADDR the address of one interface to avoid that)",
                       host);
    }
    freeaddrinfo(res);
    if (s->nlfd == 0) {
        char where[300];
        hoop__sock_hostport(where, sizeof where, host, port);
        if (last_errno == EADDRNOTAVAIL)
            hoop__say(err, errlen,
                      "cannot serve the rendezvous store on %s: %s (rank 0 must run on the machine "
                      "that has this address; check MASTER_ADDR)",
                      where, strerror(last_errno));
        else
            hoop__say(err, errlen, "cannot serve the rendezvous store on %s: %s", where,
                      strerror(last_errno ? last_errno : EINVAL));
        return HOOP_ERR_SYSTEM;
    }
    return HOOP_OK;
}

hoop_result_t hoop__store_server_start(const char *host, int port, const hoop__auth_key_t *key,
                                       const hoop__log_t *log, server_t **out, char *err,
                                       size_t errlen)
{
    server_t *s = calloc(1, sizeof *s);
    if (s == NULL) {
        hoop__say(err, errlen, "out of memory starting the rendezvous store");
        return HOOP_ERR_NO_MEMORY;
    }
    hoop__sock_gate_init(&s->gate);
    s->wake_fd = -1;
    s->log = log;
    if (key != NULL && key->set) {
        s->key = *key;
        s->auth_context = hoop__auth_context(HOOP__STORE_AUTH_TAG, 0, 0, 0);
    }
    hoop__sock_hostport(s->where, sizeof s->where, host, port);
    if (hoop__store_table_init(&s->table) != 0) {
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
    HOOP__INFO(log, "rendezvous store serving on %s", s->where);
    *out = s;
    return HOOP_OK;
}

unsigned hoop__store_server_auth_failures(const server_t *s)
{
    return atomic_load(&s->auth_failures);
}

void hoop__store_server_stop(server_t *s)
{
    const uint64_t one = 1;
    /* The eventfd counter cannot overflow from one write; retry only on a signal. */
    while (write(s->wake_fd, &one, sizeof one) < 0 && errno == EINTR) {
    }
    pthread_join(s->thread, NULL);
    /* What a job's init cost the store, which grows with the ranks (docs/performance.md). */
    HOOP__INFO(s->log, "rendezvous store %s: served %llu requests over %llu connections", s->where,
               s->served, s->accepted);
    server_free(s);
}
