/* The tcp store's kind: every rank, rank 0 included, is a client of the server that rank 0 starts
 * (server.c), over one connection at a time that it opens again when an exchange broke it off.
 * The wire is in proto.h. */
#define HOOP__LOG_SUBSYS HOOP__SUB_RENDEZVOUS /* of its INFO and TRACE lines (base/log.h) */
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/sock.h"
#include "rendezvous/proto.h"
#include "rendezvous/server.h"
#include "rendezvous/store_ops.h"

#define CONNECT_BACKOFF_MAX 0.25
/* One request/reply exchange may take this long even when the caller's deadline is nearer: a GET
 * that polls right up to its deadline must still read the reply of its last attempt. */
#define EXCHANGE_GRACE 1.0

typedef struct tcp_store {
    char host[256];
    int port;
    char where[300];
    int fd;                    /* -1 when not connected */
    int lost;                  /* the server went away: fail fast from now on */
    hoop__store_server_t *srv; /* rank 0 only */
    hoop__auth_key_t auth;     /* auth.set: prove it on every connection */
} tcp_store_t;

/* One connect attempt to ai, bounded by deadline. Returns the socket or -1 with errno set. */
static int try_connect(const struct addrinfo *ai, double deadline)
{
    int fd = hoop__sock_stream(ai->ai_family);
    if (fd < 0 || hoop__sock_connect(fd, ai->ai_addr, ai->ai_addrlen, deadline) == 0) return fd;
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
}

/* Connects t->fd, retrying with backoff until timeout_s: the server may start after us. */
static hoop_result_t client_connect(hoop__store_t *st, tcp_store_t *t, double timeout_s, char *err,
                                    size_t errlen)
{
    const double start = hoop__now();
    const double deadline = start + timeout_s;
    double backoff = 0.01;
    char why[320] = "no attempt was made";
    for (int attempt = 0;; attempt++) {
        struct addrinfo *res = NULL;
        int g = hoop__sock_resolve(t->host, t->port, &res);
        if (g == 0) {
            for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
                int fd = try_connect(ai, deadline);
                if (fd >= 0 && t->auth.set) {
                    /* A handshake needs a moment even when the caller's time is up. */
                    const double hs_deadline = deadline > hoop__now() + EXCHANGE_GRACE
                                                   ? deadline
                                                   : hoop__now() + EXCHANGE_GRACE;
                    char hwhy[256] = "";
                    hoop_result_t a = hoop__auth_handshake(
                        fd, &t->auth, 0, hoop__auth_context(HOOP__STORE_AUTH_TAG, 0, 0, 0),
                        hs_deadline, hwhy, sizeof hwhy);
                    if (a == HOOP_ERR_PEER_LOST) {
                        /* Dropped before the exchange was through: the server made room for
                         * others, or is closing (init again at once: this rank reached the last
                         * store, and the next comes up on the same port). Try again. */
                        close(fd);
                        snprintf(why, sizeof why, "authentication: %s", hwhy);
                        continue;
                    }
                    if (a != HOOP_OK) {
                        close(fd);
                        freeaddrinfo(res);
                        hoop__say(err, errlen,
                                  "authentication with the rendezvous store at %s failed: %s",
                                  t->where, hwhy);
                        return a == HOOP_ERR_TIMEOUT || a == HOOP_ERR_SYSTEM ? a : HOOP_ERR_AUTH;
                    }
                }
                if (fd >= 0) {
                    freeaddrinfo(res);
                    t->fd = fd;
                    HOOP__TRACE(st->log,
                                "connected to the rendezvous store at %s after %d attempt(s)",
                                t->where, attempt + 1);
                    return HOOP_OK;
                }
                snprintf(why, sizeof why, "%s", strerror(errno));
            }
            freeaddrinfo(res);
        } else if (g == EAI_NONAME || g == EAI_SERVICE || g == EAI_FAMILY) {
            /* A name that does not exist will not start to exist: say so now. */
            hoop__say(err, errlen,
                      "cannot resolve the rendezvous host \"%s\": %s (check MASTER_ADDR or the "
                      "init method)",
                      t->host, gai_strerror(g));
            return HOOP_ERR_SYSTEM;
        } else {
            snprintf(why, sizeof why, "%s", g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
        }
        const double now = hoop__now();
        if (now >= deadline) break;
        hoop__store_sleep(backoff < deadline - now ? backoff : deadline - now);
        backoff = backoff * 2 < CONNECT_BACKOFF_MAX ? backoff * 2 : CONNECT_BACKOFF_MAX;
    }
    hoop__say(err, errlen, "could not reach the rendezvous store at %s after %g s (%s)", t->where,
              timeout_s, why);
    return HOOP_ERR_TIMEOUT;
}

/* Drops the connection; with fatal set, for good (the server is gone or is no store). */
static void client_drop(tcp_store_t *t, int fatal)
{
    close(t->fd);
    t->fd = -1;
    if (fatal) t->lost = 1;
}

/* Moves len bytes over t->fd within deadline (flags of hoop__sock_io). On failure the connection
 * is unusable (closed) and st->err says why. */
static hoop_result_t client_io(hoop__store_t *st, tcp_store_t *t, void *buf, size_t len, int flags,
                               double deadline)
{
    const hoop__sock_io_t io = hoop__sock_io(t->fd, buf, len, flags, deadline);
    hoop_result_t r;
    switch (io) {
    case HOOP__SOCK_DONE: return HOOP_OK;
    case HOOP__SOCK_CLOSED:
        r = HOOP_ERR_PEER_LOST;
        hoop__say(st->err, sizeof st->err,
                  "the rendezvous store at %s closed the connection (did rank 0 exit?)", t->where);
        break;
    case HOOP__SOCK_TIMEOUT:
        r = HOOP_ERR_TIMEOUT;
        hoop__say(st->err, sizeof st->err, "the rendezvous store at %s did not answer in time",
                  t->where);
        break;
    case HOOP__SOCK_WAIT_FAILED:
        r = HOOP_ERR_SYSTEM;
        hoop__say(st->err, sizeof st->err, "waiting on the rendezvous store at %s: %s", t->where,
                  strerror(errno));
        break;
    default:
        if (hoop__sock_gone(errno)) {
            r = HOOP_ERR_PEER_LOST;
            hoop__say(
                st->err, sizeof st->err,
                "the connection to the rendezvous store at %s was lost: %s (did rank 0 exit?)",
                t->where, strerror(errno));
        } else {
            r = HOOP_ERR_SYSTEM;
            hoop__say(st->err, sizeof st->err, "talking to the rendezvous store at %s: %s",
                      t->where, strerror(errno));
        }
        break;
    }
    client_drop(t, r == HOOP_ERR_PEER_LOST);
    return r;
}

/* One request and its reply. For a GET, copies at most cap bytes of the value into buf. */
static hoop_result_t client_request(hoop__store_t *st, uint8_t op, const char *key, size_t keylen,
                                    const void *val, size_t vallen, uint8_t *status, void *buf,
                                    size_t cap, size_t *len, double deadline)
{
    tcp_store_t *t = st->state;
    if (t->lost) return HOOP_ERR_PEER_LOST;
    const double min_deadline = hoop__now() + EXCHANGE_GRACE;
    if (t->fd < 0) {
        /* An earlier call timed out mid-request; the server keeps no per-connection state, so a new
         * connection is as good as the old one. */
        double left = deadline - hoop__now();
        hoop_result_t r = client_connect(st, t, left > 0 ? left : 0, st->err, sizeof st->err);
        if (r != HOOP_OK) return r;
    }
    if (deadline < min_deadline) deadline = min_deadline;
    uint8_t hdr[HOOP__STORE_REQ_HDR + HOOP__STORE_MAX_KEY];
    const size_t hlen = hoop__store_req_encode(hdr, op, key, keylen, vallen);
    hoop_result_t r = client_io(st, t, hdr, hlen,
                                HOOP__SOCK_SEND | (vallen > 0 ? HOOP__SOCK_MORE : 0), deadline);
    if (r == HOOP_OK && vallen > 0)
        r = client_io(st, t, (void *)(uintptr_t)val, vallen, HOOP__SOCK_SEND, deadline);
    uint8_t rep[HOOP__STORE_REP_HDR];
    if (r == HOOP_OK) r = client_io(st, t, rep, sizeof rep, 0, deadline);
    if (r != HOOP_OK) return r;
    uint32_t rlen = 0;
    const int check = hoop__store_rep_check(op, rep, &rlen);
    if (check == HOOP__STORE_REP_AUTH) {
        /* The server has a key and we have none. */
        hoop__say(
            st->err, sizeof st->err,
            "the rendezvous store at %s requires authentication: set the same HOOP_AUTH_KEY (or "
            "HOOP_AUTH_KEY_FILE) on every rank",
            t->where);
        client_drop(t, 1);
        return HOOP_ERR_AUTH;
    }
    if (check != HOOP__STORE_REP_VALID) {
        hoop__say(st->err, sizeof st->err,
                  "the rendezvous store at %s sent an invalid reply (is another program listening "
                  "on that port?)",
                  t->where);
        client_drop(t, 1);
        return HOOP_ERR_SYSTEM;
    }
    *status = rep[0];
    if (len != NULL) *len = rlen;
    size_t keep = rlen < cap ? rlen : cap;
    if (keep > 0) r = client_io(st, t, buf, keep, 0, deadline);
    /* Drain what does not fit so that the connection stays in step. */
    uint8_t sink[4096];
    for (size_t left = rlen - keep; r == HOOP_OK && left > 0;) {
        size_t n = left < sizeof sink ? left : sizeof sink;
        r = client_io(st, t, sink, n, 0, deadline);
        left -= n;
    }
    return r;
}

/* ---- the kind's operations ---- */

static hoop_result_t tcp_check(const hoop__rdv_t *rdv, char *err, size_t errlen)
{
    if (rdv->port < 1 || rdv->port > 65535 || memchr(rdv->host, '\0', sizeof rdv->host) == NULL ||
        rdv->host[0] == '\0') {
        hoop__say(err, errlen, "internal error: the rendezvous has no valid host and port");
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    return HOOP_OK;
}

static hoop_result_t tcp_open(hoop__store_t *st, const hoop__rdv_t *rdv, char *err, size_t errlen)
{
    tcp_store_t *t = st->state;
    t->fd = -1;
    if (rdv->auth.set) t->auth = rdv->auth;
    snprintf(t->host, sizeof t->host, "%s", rdv->host);
    t->port = rdv->port;
    hoop__sock_hostport(t->where, sizeof t->where, t->host, t->port);
    if (t->auth.set)
        HOOP__INFO_IN(st->log, HOOP__SUB_AUTH,
                      "rendezvous store %s: connections are authenticated (HOOP_AUTH_KEY)",
                      t->where);
    else
        HOOP__INFO_IN(st->log, HOOP__SUB_AUTH,
                      "rendezvous store %s: no HOOP_AUTH_KEY, connections are not authenticated",
                      t->where);
    hoop_result_t r = HOOP_OK;
    if (rdv->rank == 0)
        r = hoop__store_server_start(t->host, t->port, &t->auth, st->log, &t->srv, err, errlen);
    if (r == HOOP_OK) r = client_connect(st, t, st->timeout_s, err, errlen);
    return r;
}

static hoop_result_t tcp_set(hoop__store_t *st, const char *key, size_t keylen, const void *val,
                             size_t len)
{
    uint8_t status = 0;
    return client_request(st, 'S', key, keylen, val, len, &status, NULL, 0, NULL,
                          hoop__now() + st->timeout_s);
}

static hoop_result_t tcp_claim(hoop__store_t *st, const char *key, size_t keylen, const void *val,
                               size_t len, int *taken, void *holder, size_t cap, size_t *holder_len)
{
    uint8_t status = 0;
    hoop_result_t r = client_request(st, 'C', key, keylen, val, len, &status, holder, cap,
                                     holder_len, hoop__now() + st->timeout_s);
    if (r == HOOP_OK) *taken = status == HOOP__STORE_REP_TAKEN;
    return r;
}

/* The server holds the request until the key is set or wait_s is over (at most its longest
 * hold): the reply comes as the key is set, with no polling. */
static hoop_result_t tcp_get(hoop__store_t *st, const char *key, size_t keylen, void *buf,
                             size_t cap, size_t *len, int *found, double wait_s, double deadline)
{
    uint8_t status = HOOP__STORE_REP_MISSING;
    const double ms = wait_s > 0 ? ceil(wait_s * 1e3) : 0;
    const uint32_t hold = ms < HOOP__STORE_MAX_HOLD_MS ? (uint32_t)ms : HOOP__STORE_MAX_HOLD_MS;
    uint8_t val[HOOP__STORE_HOLD_LEN];
    hoop__store_hold_encode(val, hold);
    /* The reply may take the whole hold, and then the exchange's own grace. */
    const double until = hoop__now() + hold / 1e3 + EXCHANGE_GRACE;
    hoop_result_t r = client_request(st, 'W', key, keylen, val, sizeof val, &status, buf, cap, len,
                                     until > deadline ? until : deadline);
    *found = r == HOOP_OK && status == HOOP__STORE_REP_OK;
    return r;
}

static unsigned tcp_auth_failures(const hoop__store_t *st)
{
    const tcp_store_t *t = st->state;
    return t->srv != NULL ? hoop__store_server_auth_failures(t->srv) : 0;
}

static void tcp_close(hoop__store_t *st)
{
    tcp_store_t *t = st->state;
    if (t->fd >= 0) close(t->fd);
    if (t->srv != NULL) hoop__store_server_stop(t->srv);
    hoop__auth_key_wipe(&t->auth);
}

const hoop__store_ops_t hoop__store_tcp_ops = {
    .method = "tcp",
    .state_size = sizeof(tcp_store_t),
    .check = tcp_check,
    .open = tcp_open,
    .set = tcp_set,
    .claim = tcp_claim,
    .get = tcp_get,
    .waits = 1,
    .auth_failures = tcp_auth_failures,
    .close = tcp_close,
};
