/*
 * hoop_comm_shrink: the ranks that still run make a communicator of themselves, renumbered in the
 * old order, without the old communicator's transport (a peer's loss has closed it) and without a
 * store (init's is gone). Every rank listens for this from init on, on a socket of its own whose
 * address every rank learnt at init (or from the split or the shrink that made the
 * communicator); shrink meets the others there.
 *
 * The agreement (docs/reliability.md says where it is safe and where not):
 *   1. Each caller connects to every lower rank's shrink listener and sends JOIN. A rank whose
 *      listener refuses is gone; one that does not answer HERE within the join window (a quarter
 *      of the timeout) is not taking part (stopped, or elsewhere); a rank in shrink answers HERE
 *      at once and is waited for until it decides.
 *   2. The lowest rank that takes part is the coordinator: a rank decides it is one when every
 *      lower rank is gone, silent, or has sent it elsewhere (REDIRECT); it then says COORD to
 *      those that joined it. A rank that hears COORD from a lower rank joins that one and sends
 *      its own joiners on (REDIRECT), so that two coordinators never both hold a rank.
 *   3. The coordinator waits for every higher rank until it has joined, its listener refuses,
 *      or the join window passes; then it sends the members (old ranks, ascending) to each.
 *      Every member must have passed the same exclude list (a digest in each message).
 *   4. Each member opens its part of the new communicator and sends its addresses; the
 *      coordinator sends all of them back; each connects and says READY or why not; the
 *      coordinator says GO only when every member is ready. A member that dies or leaves on the
 *      way fails the shrink on every member (each may call it again).
 * Once a rank has shrunk, its old listener answers SHRUNK to any later caller (a rank that was
 * stopped through the shrink and calls it afterwards), which then fails at once, never joining.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/auth.h"
#include "base/sock.h"
#include "core/lifecycle.h"
#include "core/record.h"
#include "core/shrink.h"
#include "transport/transport.h"

#define ADDR_LEN HOOP__ADDR_LEN
#define SADDR_LEN HOOP__SHRINK_ADDR_LEN
/* ---- the listener ---- */

/* The local address facing host (the interface the kernel would route through), port 0. */
static int local_toward(const char *host, struct sockaddr_storage *ss, socklen_t *sl)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_DGRAM;
    if (host == NULL || host[0] == '\0' || getaddrinfo(host, "9", &hints, &res) != 0 || res == NULL)
        return -1;
    int rc = -1;
    int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    *sl = sizeof(*ss);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
        getsockname(fd, (struct sockaddr *)ss, sl) == 0)
        rc = 0;
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
    return rc;
}

static void *tomb_main(void *arg);

hoop_result_t hoop__shrink_open(hoop_comm_t *c, const char *toward, const char *like)
{
    c->shrink_addrs = calloc((size_t)c->size, SADDR_LEN);
    if (c->shrink_addrs == NULL) return HOOP_ERR_NO_MEMORY;
    if (c->size == 1) return HOOP_OK;
    struct sockaddr_storage ss;
    socklen_t sl = 0;
    int got = like != NULL && like[0] != '\0' ? hoop__sock_parse(like, &ss, &sl)
                                              : local_toward(toward, &ss, &sl);
    if (got != 0) {
        /* No rendezvous host to face: the loopback, which serves ranks of one host. */
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        memset(&ss, 0, sizeof(ss));
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
    if (ss.ss_family == AF_INET)
        ((struct sockaddr_in *)&ss)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)&ss)->sin6_port = 0;
    sl = ss.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    int fd = hoop__sock_listen((struct sockaddr *)&ss, sl, 0);
    if (fd < 0 || getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        int e = errno;
        char why[256];
        HOOP__WARN(&c->log, "cannot open the listener for hoop_comm_shrink: %s",
                   hoop__fd_error(e, why, sizeof(why)));
        if (fd >= 0) close(fd);
        errno = e;
        return HOOP_ERR_SYSTEM;
    }
    c->shrink_fd = fd;
    hoop__sock_format(&ss, c->shrink_addrs[c->rank], SADDR_LEN);
    return HOOP_OK;
}

void hoop__shrink_close(hoop_comm_t *c)
{
    if (c->tomb_running) {
        atomic_store(&c->tomb_stop, 1);
        pthread_join(c->tomb, NULL);
        c->tomb_running = 0;
    }
    if (c->shrink_fd >= 0) close(c->shrink_fd);
    c->shrink_fd = -1;
    free(c->shrink_addrs);
    c->shrink_addrs = NULL;
}

/* ---- messages ---- */

/* Under HOOP_AUTH_KEY every message is sealed with the key (base/auth.h: the sender's clock and
 * an HMAC over the message), so that a stranger who learnt a listener's address and the
 * communicator's id, which cross the network in the clear, cannot join a shrink, nor learn
 * anything from a listener. A seal is not bound to its connection: a message captured on the
 * network could be replayed within the seal's window (docs/reliability.md). */
static int send_msg(int fd, const hoop_comm_t *c, uint64_t digest, uint32_t type, int32_t arg,
                    uint64_t arg64, const void *payload, uint32_t len, double deadline)
{
    hoop__smsg_t m = {.magic = HOOP__SHRINK_MAGIC,
                      .comm_id = c->id,
                      .digest = digest,
                      .arg64 = arg64,
                      .type = type,
                      .rank = c->rank,
                      .len = len,
                      .arg = arg};
    size_t n = sizeof(m) + len, seal = c->cfg.auth.set ? HOOP__AUTH_SEAL_BYTES : 0;
    uint8_t *b = malloc(n + seal);
    if (b == NULL) return -1;
    memcpy(b, &m, sizeof(m));
    if (len > 0) memcpy(b + sizeof(m), payload, len);
    if (seal) hoop__auth_seal(&c->cfg.auth, 0, b, n, 0, b);
    int rc = hoop__sock_io(fd, b, n + seal, HOOP__SOCK_SEND, deadline) == HOOP__SOCK_DONE ? 0 : -1;
    free(b);
    return rc;
}

/* A message that came without the key's seal, or with a wrong one: logged, a few times. */
static void refuse(hoop_comm_t *c)
{
    unsigned n = atomic_fetch_add(&c->shrink_refused, 1) + 1;
    if (n <= 8 || (n & (n - 1)) == 0)
        HOOP__INFO_IN(&c->log, HOOP__SUB_AUTH,
                      "shrink listener: a message not sealed with HOOP_AUTH_KEY, or too old, "
                      "turned away (%u so far)",
                      n);
}

/* One message; its payload (if any) into *payload (malloc'd, the caller frees), at most cap
 * bytes. -1 when the stream ended, failed, timed out, carried something else or (under a key)
 * no right seal. */
static int recv_msg(int fd, hoop_comm_t *c, hoop__smsg_t *m, void **payload, size_t cap,
                    double deadline)
{
    if (payload != NULL) *payload = NULL;
    if (hoop__sock_io(fd, m, sizeof(*m), 0, deadline) != HOOP__SOCK_DONE) return -1;
    if (m->magic != HOOP__SHRINK_MAGIC || m->comm_id != c->id || m->rank < 0 ||
        m->rank >= c->size || m->len > cap || (m->len > 0 && payload == NULL))
        return -1;
    size_t n = sizeof(*m) + m->len, seal = c->cfg.auth.set ? HOOP__AUTH_SEAL_BYTES : 0;
    if (n + seal == sizeof(*m)) return 0;
    uint8_t *b = malloc(n + seal);
    if (b == NULL) return -1;
    memcpy(b, m, sizeof(*m));
    if (hoop__sock_io(fd, b + sizeof(*m), n + seal - sizeof(*m), 0, deadline) != HOOP__SOCK_DONE) {
        free(b);
        return -1;
    }
    if (seal && hoop__auth_unseal(&c->cfg.auth, 0, b, n + seal, 0, NULL) != 0) {
        refuse(c);
        free(b);
        return -1;
    }
    if (m->len > 0) {
        *payload = malloc(m->len);
        if (*payload != NULL) memcpy(*payload, b + sizeof(*m), m->len);
    }
    free(b);
    return m->len > 0 && *payload == NULL ? -1 : 0;
}

/* A connection to rank r's shrink listener; -1 when refused (its process is gone), failed, or
 * not made by the deadline; *refused tells the first apart. */
static int connect_rank(const hoop_comm_t *c, int r, double deadline, int *refused)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    *refused = 0;
    if (hoop__sock_parse(c->shrink_addrs[r], &ss, &sl) != 0) return -1;
    int fd = hoop__sock_stream(ss.ss_family);
    if (fd < 0) return -1;
    if (hoop__sock_connect(fd, (struct sockaddr *)&ss, sl, deadline) != 0) {
        *refused = errno == ECONNREFUSED || errno == ECONNRESET;
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- the fence: an old listener after its shrink ---- */

/* Answers SHRUNK to whoever comes to the old listener, until the communicator is freed: a rank
 * left out (stopped through the shrink) that calls shrink later fails at once. */
static void *tomb_main(void *arg)
{
    hoop_comm_t *c = arg;
    while (!atomic_load(&c->tomb_stop)) {
        if (hoop__sock_wait(c->shrink_fd, POLLIN, hoop__now() + 0.1) <= 0) continue;
        int fd = hoop__sock_accept(c->shrink_fd, NULL, 0);
        if (fd < 0) continue;
        hoop__smsg_t m;
        double dl = hoop__now() + 0.5;
        if (recv_msg(fd, c, &m, NULL, 0, dl) == 0)
            (void)send_msg(fd, c, 0, HOOP__SM_SHRUNK, 0, 0, NULL, 0, dl);
        close(fd);
    }
    return NULL;
}

/* ---- the agreement ---- */

enum { S_NONE = 0, S_WAIT, S_HERE, S_COORD, S_OUT };

typedef struct shrink {
    hoop_comm_t *c;
    uint64_t digest; /* of the exclude list (0: none; a bad one: its own value) */
    char *excluded;  /* per old rank */
    int *out;        /* per lower rank: our connection to it, -1 for none */
    int *ostate;     /* S_* for each lower rank */
    int *in;         /* per higher rank: its connection to us (it joined), -1 for none */
    int *probe;      /* per higher rank: the coordinator's unanswered probe, -1 for none */
    char *dead;      /* per rank: its listener refused */
    double t0, w, deadline;
    int coord;       /* the coordinator's old rank, -1 while undecided */
    int fenced;      /* a rank answered SHRUNK */
    int *members, n; /* old ranks, ascending */
    char err[512];
} shrink_t;

static void close_fd(int *fd)
{
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

/* A connection on our listener: a JOIN from a higher rank (kept, answered HERE or COORD), a
 * PROBE (answered HERE), anything else closed. */
static void take_joiner(shrink_t *s)
{
    hoop_comm_t *c = s->c;
    int fd = hoop__sock_accept(c->shrink_fd, NULL, 0);
    if (fd < 0) return;
    hoop__smsg_t m;
    double dl = hoop__now() + 0.5 < s->deadline ? hoop__now() + 0.5 : s->deadline;
    if (recv_msg(fd, c, &m, NULL, 0, dl) != 0) {
        close(fd);
        return;
    }
    if (m.type == HOOP__SM_JOIN && m.rank > c->rank) {
        int coord = s->coord == c->rank;
        if (send_msg(fd, c, s->digest, coord ? HOOP__SM_COORD : HOOP__SM_HERE, 0, 0, NULL, 0, dl) !=
            0) {
            close(fd);
            return;
        }
        close_fd(&s->in[m.rank]); /* an earlier try of the same rank */
        s->in[m.rank] = fd;
        s->dead[m.rank] = 0;
        if (m.digest != s->digest) s->fenced = -1; /* told at the members' step */
        return;
    }
    if (m.type == HOOP__SM_PROBE)
        (void)send_msg(fd, c, s->digest, HOOP__SM_HERE, 0, 0, NULL, 0, dl);
    close(fd);
}

/* A joiner of ours went away before the members were sent: gone, unless it comes back. */
static void drop_closed_joiners(shrink_t *s, struct pollfd *p, const int *who, int np)
{
    for (int i = 0; i < np; i++) {
        if (who[i] < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char b;
        ssize_t k = recv(p[i].fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            close_fd(&s->in[who[i]]);
            s->dead[who[i]] = 1;
        }
    }
}

/* Step 1: whom this rank joins, or whether it is the coordinator (s->coord). */
static hoop_result_t find_coordinator(shrink_t *s)
{
    hoop_comm_t *c = s->c;
    int me = c->rank, p = c->size;
    for (int k = 0; k < me; k++) {
        s->out[k] = -1;
        s->ostate[k] = S_OUT;
        if (s->excluded[k]) continue;
        int refused = 0;
        double dl = s->t0 + s->w;
        s->out[k] = connect_rank(c, k, dl < s->deadline ? dl : s->deadline, &refused);
        if (s->out[k] < 0) {
            s->dead[k] = (char)refused;
            continue;
        }
        if (send_msg(s->out[k], c, s->digest, HOOP__SM_JOIN, 0, 0, NULL, 0, s->deadline) != 0) {
            close_fd(&s->out[k]);
            continue;
        }
        s->ostate[k] = S_WAIT;
    }
    struct pollfd *pf = calloc((size_t)p + 1, sizeof(*pf));
    int *who = calloc((size_t)p + 1, sizeof(int));
    if (pf == NULL || who == NULL) {
        free(pf);
        free(who);
        return HOOP_ERR_NO_MEMORY;
    }
    for (;;) {
        /* Lowest first: a lower rank that takes part (or may, within the window) comes first. */
        int decided = 1;
        double now = hoop__now();
        for (int k = 0; k < me && decided; k++) {
            if (s->ostate[k] == S_COORD) {
                s->coord = k;
                break;
            }
            if (s->ostate[k] == S_WAIT && now >= s->t0 + s->w) {
                s->ostate[k] = S_OUT; /* silent through the window: not taking part */
                close_fd(&s->out[k]);
            }
            if (s->ostate[k] == S_WAIT || s->ostate[k] == S_HERE) decided = 0;
        }
        if (s->fenced > 0) break;
        if (decided) {
            if (s->coord < 0) s->coord = me;
            break;
        }
        if (now >= s->deadline) {
            snprintf(s->err, sizeof(s->err),
                     "a lower rank took part but named no coordinator within the timeout");
            free(pf);
            free(who);
            return HOOP_ERR_TIMEOUT;
        }
        int np = 0;
        pf[np] = (struct pollfd){.fd = c->shrink_fd, .events = POLLIN};
        who[np++] = -1;
        /* A coordinator's connection is left for its member list (read in follow). */
        for (int k = 0; k < me; k++)
            if (s->out[k] >= 0 && (s->ostate[k] == S_WAIT || s->ostate[k] == S_HERE)) {
                pf[np] = (struct pollfd){.fd = s->out[k], .events = POLLIN};
                who[np++] = k;
            }
        double until = s->deadline;
        for (int k = 0; k < me; k++)
            if (s->ostate[k] == S_WAIT && s->t0 + s->w < until) until = s->t0 + s->w;
        if (poll(pf, (nfds_t)np, hoop__sock_ms_left(until)) < 0 && errno != EINTR) break;
        if (pf[0].revents & POLLIN) take_joiner(s);
        for (int i = 1; i < np; i++) {
            if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            int k = who[i];
            hoop__smsg_t m;
            if (recv_msg(s->out[k], c, &m, NULL, 0, hoop__now() + 0.5) != 0 || m.rank != k) {
                s->ostate[k] = S_OUT;
                s->dead[k] = 1;
                close_fd(&s->out[k]);
            } else if (m.type == HOOP__SM_HERE) {
                s->ostate[k] = S_HERE;
            } else if (m.type == HOOP__SM_COORD) {
                s->ostate[k] = S_COORD;
            } else if (m.type == HOOP__SM_SHRUNK) {
                s->fenced = 1;
                snprintf(s->err, sizeof(s->err),
                         "rank %d says this communicator was already shrunk without this rank "
                         "(it did not take part in time: stopped, or late)",
                         k);
            } else {
                s->ostate[k] = S_OUT;
                close_fd(&s->out[k]);
            }
        }
    }
    free(pf);
    free(who);
    if (s->fenced > 0) return HOOP_ERR_PEER_LOST;
    HOOP__INFO(&c->log, "shrink: rank %d coordinates (after %.3f s)", s->coord,
               hoop__now() - s->t0);
    /* Every other lower connection goes; our joiners go to the coordinator, which they reach
     * themselves (they connect to every lower rank). */
    /* The other lower connections stay open: a fence's answer may come late (fence_heard). */
    if (s->coord != me)
        for (int r = me + 1; r < p; r++)
            if (s->in[r] >= 0) {
                (void)send_msg(s->in[r], c, s->digest, HOOP__SM_REDIRECT, s->coord, 0, NULL, 0,
                               hoop__now() + 0.5);
                close_fd(&s->in[r]);
            }
    return HOOP_OK;
}

/* Step 3, the coordinator: every higher rank joins, is gone, or the window passes. */
static hoop_result_t gather_members(shrink_t *s)
{
    hoop_comm_t *c = s->c;
    int me = c->rank, p = c->size;
    for (int r = me + 1; r < p; r++)
        if (s->in[r] >= 0 &&
            send_msg(s->in[r], c, s->digest, HOOP__SM_COORD, 0, 0, NULL, 0, hoop__now() + 0.5) != 0)
            close_fd(&s->in[r]);
    /* Whose process is gone, at once, rather than at the end of the window: a probe that a
     * rank in shrink answers HERE (it joins on its own), that a gone process refuses or resets,
     * and that a live rank elsewhere leaves unanswered (until it dies, which ends the wait). */
    int *probe = s->probe;
    struct pollfd *pf = calloc((size_t)(2 * p) + 1, sizeof(*pf));
    int *who = calloc((size_t)(2 * p) + 1, sizeof(int));
    if (pf == NULL || who == NULL) {
        free(pf);
        free(who);
        return HOOP_ERR_NO_MEMORY;
    }
    for (int r = me + 1; r < p; r++) {
        if (s->in[r] >= 0 || s->excluded[r]) continue;
        int refused = 0;
        probe[r] = connect_rank(c, r, hoop__now() + 0.5, &refused);
        if (probe[r] < 0) {
            s->dead[r] = (char)refused;
            continue;
        }
        if (send_msg(probe[r], c, s->digest, HOOP__SM_PROBE, 0, 0, NULL, 0, hoop__now() + 0.5) != 0)
            close_fd(&probe[r]);
    }
    double until = hoop__now() + s->w;
    if (until > s->deadline) until = s->deadline;
    for (;;) {
        int missing = 0;
        for (int r = me + 1; r < p; r++)
            if (!s->excluded[r] && s->in[r] < 0 && !s->dead[r]) missing++;
        if (missing == 0 || hoop__now() >= until || s->fenced > 0) break;
        int np = 0;
        pf[np] = (struct pollfd){.fd = c->shrink_fd, .events = POLLIN};
        who[np++] = -1;
        for (int r = me + 1; r < p; r++)
            if (s->in[r] >= 0) {
                pf[np] = (struct pollfd){.fd = s->in[r], .events = POLLIN};
                who[np++] = r;
            }
        int nj = np;
        for (int r = me + 1; r < p; r++)
            if (probe[r] >= 0) {
                pf[np] = (struct pollfd){.fd = probe[r], .events = POLLIN};
                who[np++] = r;
            }
        if (poll(pf, (nfds_t)np, hoop__sock_ms_left(until)) < 0 && errno != EINTR) break;
        if (pf[0].revents & POLLIN) take_joiner(s);
        drop_closed_joiners(s, pf, who, nj);
        for (int i = nj; i < np; i++) {
            if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            int r = who[i];
            hoop__smsg_t m;
            int got = recv_msg(probe[r], c, &m, NULL, 0, hoop__now() + 0.5);
            if (got == 0 && m.type == HOOP__SM_SHRUNK) {
                /* The others shrank without this rank (it was stopped, or late). */
                s->fenced = 1;
                snprintf(s->err, sizeof(s->err),
                         "rank %d says this communicator was already shrunk without this rank "
                         "(it did not take part in time: stopped, or late)",
                         r);
            } else if ((got != 0 || m.type != HOOP__SM_HERE) && s->in[r] < 0) {
                s->dead[r] = 1; /* gone: not joining */
            }
            close_fd(&probe[r]);
        }
    }
    /* Probes still unanswered stay open: a fence's answer may come late (fence_heard). */
    free(pf);
    free(who);
    s->n = 0;
    s->members[s->n++] = me;
    HOOP__INFO(&c->log, "shrink: members gathered after %.3f s", hoop__now() - s->t0);
    for (int r = me + 1; r < p; r++)
        if (s->in[r] >= 0) s->members[s->n++] = r;
    return HOOP_OK;
}

/* ---- the new communicator ---- */

static hoop_comm_t *open_new(shrink_t *s, int newrank, uint64_t id, char *addr, char *saddr)
{
    hoop_comm_t *c = s->c;
    hoop__config_t cfg = c->cfg;
    if (!c->log.own_out) cfg.log_file[0] = '\0';
    hoop_comm_t *nc = hoop__comm_alloc(&cfg, newrank, s->n);
    hoop__config_wipe(&cfg);
    if (nc == NULL) return NULL;
    nc->id = id;
    snprintf(nc->rec->name, sizeof(nc->rec->name), "%016llx", (unsigned long long)nc->id);
    nc->timeout_s = c->timeout_s;
    nc->sched = c->sched;
    nc->agreed = c->agreed;
    nc->algo = c->algo;
    nc->spin_s = c->spin_s;
    nc->yield_s = c->yield_s;
    memcpy(nc->route_hint, c->route_hint, sizeof(nc->route_hint));
    addr[0] = saddr[0] = '\0';
    if (hoop__comm_listen(nc, addr, NULL) != HOOP_OK) addr[0] = '\0';
    if (hoop__shrink_open(nc, NULL, c->shrink_addrs[c->rank]) == HOOP_OK && nc->size > 1)
        snprintf(saddr, SADDR_LEN, "%s", nc->shrink_addrs[newrank]);
    return nc;
}

/* Step 4 for every member: the addresses (all: n records of ADDR_LEN + SADDR_LEN, in the new
 * order), then connecting. */
static hoop_result_t connect_new(shrink_t *s, hoop_comm_t *nc, const char *all)
{
    const char **ptrs = calloc((size_t)s->n, sizeof(char *));
    if (ptrs == NULL) return HOOP_ERR_NO_MEMORY;
    const char *own = NULL;
    for (int i = 0; i < s->n; i++) {
        const char *a = all + (size_t)i * (ADDR_LEN + SADDR_LEN);
        if (i == nc->rank) own = a;
        ptrs[i] = i == nc->rank ? NULL : a;
        if (nc->size > 1) snprintf(nc->shrink_addrs[i], SADDR_LEN, "%s", a + ADDR_LEN);
        if (a[0] == '\0') {
            snprintf(s->err, sizeof(s->err),
                     "rank %d could not open its part of the new communicator", s->members[i]);
            free(ptrs);
            return HOOP_ERR_SYSTEM;
        }
    }
    hoop_result_t rc = nc->tp_ops->connect(nc->tp, ptrs, s->deadline);
    if (rc != HOOP_OK)
        snprintf(s->err, sizeof(s->err), "connecting the new communicator: %.400s",
                 hoop__comm_last(nc));
    else if (hoop__comm_set_ring(nc, ptrs, own) != HOOP_OK)
        rc = HOOP_ERR_NO_MEMORY;
    free(ptrs);
    return rc;
}

/* Whether a rank this one asked (a lower rank as a joiner, a probed one as the coordinator)
 * answered, perhaps late, that the communicator was shrunk without this rank: asked before the
 * last word (READY, GO), so that a fence slow to answer (a loaded host) still stops a rank that
 * was left out. Waits a little for the unanswered ones that are not members. */
static int fence_heard(shrink_t *s)
{
    hoop_comm_t *c = s->c;
    double until = hoop__now() + 0.1;
    for (int r = 0; r < c->size; r++) {
        int *fd = r < c->rank ? &s->out[r] : &s->probe[r];
        int member = 0; /* a member is busy in this shrink and answers nothing more */
        for (int i = 0; i < s->n && !member; i++) member = s->members[i] == r;
        if (member && r != s->coord) close_fd(fd);
        if (member || *fd < 0) continue;
        if (hoop__sock_wait(*fd, POLLIN, until) <= 0) continue;
        hoop__smsg_t m;
        if (recv_msg(*fd, c, &m, NULL, 0, hoop__now() + 0.1) == 0 && m.type == HOOP__SM_SHRUNK) {
            snprintf(s->err, sizeof(s->err),
                     "rank %d says this communicator was already shrunk without this rank (it "
                     "did not take part in time: stopped, or late)",
                     r);
            return 1;
        }
        close_fd(fd);
    }
    return 0;
}

/* The coordinator's side of steps 3 and 4. */
static hoop_result_t lead(shrink_t *s, hoop_comm_t **out)
{
    hoop_comm_t *c = s->c;
    hoop_result_t rc = gather_members(s);
    if (rc != HOOP_OK) return rc;
    int alive = 0; /* other ranks not excluded whose process is not known to be gone */
    for (int r = 0; r < c->size; r++)
        if (r != c->rank && !s->excluded[r] && !s->dead[r]) alive++;
    if (s->fenced > 0) {
        rc = HOOP_ERR_PEER_LOST; /* the sentence is the probe's */
    } else if (s->fenced < 0) {
        rc = HOOP_ERR_MISMATCH;
        snprintf(s->err, sizeof(s->err),
                 "the ranks passed different exclude lists (or an invalid one)");
    } else if (s->n == 1 && alive > 0) {
        /* Alone while others live: this rank is likely the one they left out (it was stopped
         * or late, and their fence is down), so it gets no communicator. */
        rc = HOOP_ERR_PEER_LOST;
        snprintf(s->err, sizeof(s->err),
                 "no other rank took part within the join window (%.3g s) though %d still "
                 "run: a communicator of this rank alone is not made",
                 s->w, alive);
    }
    uint64_t id = 0;
    if (getrandom(&id, sizeof(id), 0) != (ssize_t)sizeof(id)) id = c->id * 0x9e3779b97f4a7c15ull;
    id ^= c->id;
    int32_t *list = malloc((size_t)s->n * sizeof(int32_t));
    size_t rec = ADDR_LEN + SADDR_LEN;
    char *all = calloc((size_t)s->n, rec);
    if (list == NULL || all == NULL) rc = rc == HOOP_OK ? HOOP_ERR_NO_MEMORY : rc;
    for (int i = 0; list != NULL && i < s->n; i++) list[i] = s->members[i];
    /* The members, or the failure (arg). A joiner that cannot be told fails the shrink. */
    for (int i = 1; i < s->n; i++) {
        int r = s->members[i];
        if (send_msg(s->in[r], c, s->digest, rc == HOOP_OK ? HOOP__SM_MEMBERS : HOOP__SM_GO,
                     (int32_t)rc, id, rc == HOOP_OK ? list : NULL,
                     rc == HOOP_OK ? (uint32_t)(s->n * (int)sizeof(int32_t)) : 0,
                     s->deadline) != 0 &&
            rc == HOOP_OK) {
            rc = HOOP_ERR_PEER_LOST;
            snprintf(s->err, sizeof(s->err), "rank %d left during the shrink", r);
        }
    }
    free(list);
    if (rc != HOOP_OK) {
        free(all);
        return rc;
    }
    hoop_comm_t *nc = open_new(s, 0, id, all, all + ADDR_LEN);
    if (nc == NULL) rc = HOOP_ERR_NO_MEMORY;
    for (int i = 1; i < s->n && rc == HOOP_OK; i++) {
        int r = s->members[i];
        hoop__smsg_t m;
        void *pl = NULL;
        if (recv_msg(s->in[r], c, &m, &pl, rec, s->deadline) != 0 || m.type != HOOP__SM_ADDR ||
            m.len != rec) {
            rc = HOOP_ERR_PEER_LOST;
            snprintf(s->err, sizeof(s->err), "rank %d left during the shrink", r);
        } else {
            memcpy(all + (size_t)i * rec, pl, rec);
            all[(size_t)i * rec + ADDR_LEN - 1] = all[(size_t)i * rec + rec - 1] = '\0';
        }
        free(pl);
    }
    for (int i = 1; i < s->n; i++)
        (void)send_msg(s->in[s->members[i]], c, s->digest,
                       rc == HOOP_OK ? HOOP__SM_ADDRS : HOOP__SM_GO, (int32_t)rc, 0,
                       rc == HOOP_OK ? all : NULL,
                       rc == HOOP_OK ? (uint32_t)((size_t)s->n * rec) : 0, s->deadline);
    if (rc == HOOP_OK) rc = connect_new(s, nc, all);
    free(all);
    /* Everyone's READY, then GO or the first failure. */
    hoop_result_t mine = rc;
    for (int i = 1; i < s->n && mine == HOOP_OK; i++) {
        int r = s->members[i];
        hoop__smsg_t m;
        if (recv_msg(s->in[r], c, &m, NULL, 0, s->deadline) != 0 || m.type != HOOP__SM_READY) {
            rc = HOOP_ERR_PEER_LOST;
            snprintf(s->err, sizeof(s->err), "rank %d left during the shrink", r);
            break;
        }
        if (m.arg != 0 && rc == HOOP_OK) {
            rc = (hoop_result_t)m.arg;
            snprintf(s->err, sizeof(s->err), "rank %d could not connect the new communicator", r);
        }
    }
    if (rc == HOOP_OK && fence_heard(s)) rc = HOOP_ERR_PEER_LOST;
    for (int i = 1; i < s->n && mine == HOOP_OK; i++)
        (void)send_msg(s->in[s->members[i]], c, s->digest, HOOP__SM_GO, (int32_t)rc, 0, NULL, 0,
                       s->deadline);
    if (rc != HOOP_OK) {
        if (nc != NULL) hoop__comm_free(nc);
        return rc;
    }
    *out = nc;
    return HOOP_OK;
}

/* A member's side of steps 3 and 4. */
static hoop_result_t follow(shrink_t *s, hoop_comm_t **out)
{
    hoop_comm_t *c = s->c;
    int fd = s->out[s->coord];
    hoop__smsg_t m;
    void *pl = NULL;
    size_t rec = ADDR_LEN + SADDR_LEN;
    if (recv_msg(fd, c, &m, &pl, (size_t)c->size * sizeof(int32_t), s->deadline) != 0) {
        snprintf(s->err, sizeof(s->err), "the coordinator, rank %d, left during the shrink",
                 s->coord);
        return HOOP_ERR_PEER_LOST;
    }
    if (m.type == HOOP__SM_GO) {
        snprintf(s->err, sizeof(s->err), "the coordinator, rank %d, failed the shrink", s->coord);
        return m.arg != 0 ? (hoop_result_t)m.arg : HOOP_ERR_INTERNAL;
    }
    int newrank = -1;
    s->n = m.type == HOOP__SM_MEMBERS ? (int)(m.len / sizeof(int32_t)) : 0;
    for (int i = 0; i < s->n; i++) {
        int32_t r;
        memcpy(&r, (char *)pl + (size_t)i * sizeof(r), sizeof(r));
        s->members[i] = r;
        if (r == c->rank) newrank = i;
    }
    free(pl);
    pl = NULL; /* reused for the addresses, which a failed send never reads */
    if (newrank < 0) {
        snprintf(s->err, sizeof(s->err),
                 "the coordinator, rank %d, sent no member list with "
                 "this rank",
                 s->coord);
        return HOOP_ERR_INTERNAL;
    }
    char *mine = calloc(1, rec);
    if (mine == NULL) return HOOP_ERR_NO_MEMORY;
    hoop_comm_t *nc = open_new(s, newrank, m.arg64, mine, mine + ADDR_LEN);
    hoop_result_t rc = HOOP_OK;
    if (nc == NULL) mine[0] = '\0';
    if (send_msg(fd, c, s->digest, HOOP__SM_ADDR, 0, 0, mine, (uint32_t)rec, s->deadline) != 0 ||
        recv_msg(fd, c, &m, &pl, (size_t)s->n * rec, s->deadline) != 0) {
        rc = HOOP_ERR_PEER_LOST;
        snprintf(s->err, sizeof(s->err), "the coordinator, rank %d, left during the shrink",
                 s->coord);
    } else if (m.type != HOOP__SM_ADDRS || m.len != (size_t)s->n * rec) {
        rc = m.type == HOOP__SM_GO && m.arg != 0 ? (hoop_result_t)m.arg : HOOP_ERR_INTERNAL;
        snprintf(s->err, sizeof(s->err), "the coordinator, rank %d, failed the shrink", s->coord);
    }
    free(mine);
    if (rc == HOOP_OK) {
        char *all = pl;
        for (int i = 0; i < s->n; i++)
            all[(size_t)i * rec + ADDR_LEN - 1] = all[(size_t)i * rec + rec - 1] = '\0';
        rc = nc == NULL ? HOOP_ERR_NO_MEMORY : connect_new(s, nc, all);
        if (rc == HOOP_OK && fence_heard(s)) rc = HOOP_ERR_PEER_LOST;
        if (send_msg(fd, c, s->digest, HOOP__SM_READY, (int32_t)rc, 0, NULL, 0, s->deadline) != 0 ||
            recv_msg(fd, c, &m, NULL, 0, s->deadline) != 0 || m.type != HOOP__SM_GO) {
            if (rc == HOOP_OK) {
                rc = HOOP_ERR_PEER_LOST;
                snprintf(s->err, sizeof(s->err), "the coordinator, rank %d, left during the shrink",
                         s->coord);
            }
        } else if (m.arg != 0 && rc == HOOP_OK) {
            rc = (hoop_result_t)m.arg;
            snprintf(s->err, sizeof(s->err),
                     "another member could not connect the new communicator");
        }
    }
    free(pl);
    if (rc != HOOP_OK) {
        if (nc != NULL) hoop__comm_free(nc);
        return rc;
    }
    *out = nc;
    return HOOP_OK;
}

/* FNV-1a of the sorted, deduplicated exclude list (as a bitmap's set ranks, ascending). */
static uint64_t exclude_digest(const char *excluded, int p)
{
    uint64_t h = 1469598103934665603ull;
    int any = 0;
    for (int r = 0; r < p; r++)
        if (excluded[r]) {
            any = 1;
            for (int b = 0; b < 4; b++) {
                h ^= (uint64_t)((unsigned)r >> (8 * b) & 0xff);
                h *= 1099511628211ull;
            }
        }
    return any ? h : 0;
}

hoop_result_t hoop__comm_shrink(hoop_comm_t *c, const int *exclude, int n, hoop_comm_t **newcomm)
{
    int p = c->size;
    shrink_t s = {.c = c, .coord = -1, .t0 = hoop__now()};
    s.w = c->timeout_s / 4;
    s.deadline = s.t0 + c->timeout_s;
    s.excluded = calloc((size_t)p, 1);
    s.dead = calloc((size_t)p, 1);
    s.out = malloc((size_t)p * sizeof(int));
    s.in = malloc((size_t)p * sizeof(int));
    s.probe = malloc((size_t)p * sizeof(int));
    s.ostate = calloc((size_t)p, sizeof(int));
    s.members = calloc((size_t)p, sizeof(int));
    hoop_result_t rc = HOOP_OK;
    if (s.excluded == NULL || s.dead == NULL || s.out == NULL || s.in == NULL || s.probe == NULL ||
        s.ostate == NULL || s.members == NULL) {
        rc = HOOP_ERR_NO_MEMORY;
        snprintf(s.err, sizeof(s.err), "out of memory for the shrink of %d ranks", p);
        goto done;
    }
    for (int r = 0; r < p; r++) s.out[r] = s.in[r] = s.probe[r] = -1;
    /* A bad list still takes part, with a digest nobody else has, so that every rank fails. */
    int bad = n < 0 || (exclude == NULL && n > 0);
    for (int i = 0; i < n && !bad; i++) {
        if (exclude[i] < 0 || exclude[i] >= p)
            bad = 1;
        else
            s.excluded[exclude[i]] = 1;
    }
    if (bad) {
        memset(s.excluded, 0, (size_t)p);
        s.digest = 0x0badull ^ ((uint64_t)c->rank << 32);
    } else {
        s.digest = exclude_digest(s.excluded, p);
    }
    if (!bad && s.excluded[c->rank]) goto done; /* excluded: nothing to do, *newcomm NULL */
    if (c->shrink_addrs == NULL) {
        /* Not made by init, split or shrink: no rank of it has a listener. */
        rc = HOOP_ERR_UNSUPPORTED;
        snprintf(s.err, sizeof(s.err), "this communicator has no listener for shrink");
        goto done;
    }
    if (p > 1 && c->shrink_fd < 0) {
        rc = HOOP_ERR_SYSTEM;
        snprintf(s.err, sizeof(s.err),
                 "this rank could not open its listener for shrink when the communicator was "
                 "made (the reason was logged then)");
        goto done;
    }
    if (c->tomb_running) {
        rc = HOOP_ERR_INVALID_ARGUMENT;
        snprintf(s.err, sizeof(s.err), "this communicator was shrunk already");
        goto done;
    }
    rc = find_coordinator(&s);
    if (rc == HOOP_OK) rc = s.coord == c->rank ? lead(&s, newcomm) : follow(&s, newcomm);
    if (rc == HOOP_OK && bad) {
        rc = HOOP_ERR_INVALID_ARGUMENT;
        snprintf(s.err, sizeof(s.err), "an exclude entry is not a rank of the communicator");
    }
done:
    for (int r = 0; s.out != NULL && s.in != NULL && s.probe != NULL && r < p; r++) {
        close_fd(&s.out[r]);
        close_fd(&s.in[r]);
        close_fd(&s.probe[r]);
    }
    if (rc == HOOP_OK && *newcomm != NULL) {
        hoop__rec_register(*newcomm);
        HOOP__INFO(&c->log, "shrink: rank %d of %d -> rank %d of %d", c->rank, p, (*newcomm)->rank,
                   (*newcomm)->size);
        atomic_store(&c->tomb_stop, 0);
        if (p > 1 && pthread_create(&c->tomb, NULL, tomb_main, c) == 0) c->tomb_running = 1;
    }
    free(s.excluded);
    free(s.dead);
    free(s.out);
    free(s.in);
    free(s.probe);
    free(s.ostate);
    free(s.members);
    if (rc != HOOP_OK) {
        if (*newcomm != NULL) hoop__comm_free(*newcomm);
        *newcomm = NULL;
        return hoop__comm_error(c, rc, "hoop_comm_shrink on rank %d of %d: %s", c->rank, p, s.err);
    }
    return HOOP_OK;
}
