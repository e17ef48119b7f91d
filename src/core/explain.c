/*
 * A timeout that explains itself (explain.h).
 *
 * Every communicator has a UDP socket and a thread that answers status requests on it from the
 * flight recorder: the newest collective call, its state and age. The thread blocks every signal
 * and touches nothing of the call path but the recorder's entries (read as a dump reads them), so
 * it answers while the caller sleeps in its own code, runs another collective or another
 * communicator, and it cannot stall a call. Datagrams rather than the transports' streams: a
 * request can neither wait behind a stuck transfer nor be taken for a message of a call, and a
 * peer whose socket is gone answers with a refusal at once.
 *
 * The rank whose call failed asks every peer from its caller's thread, as the call returns (the
 * transports are aborted by then and the call is over, so nothing waits on this): a peer that
 * answers is alive and says where it is; one whose socket refuses has closed it (dead, or gone
 * from the communicator); one that says nothing within ASK_S (less with a short timeout) is not
 * answering. On one host /proc
 * says first which peers are stopped or gone, and those are not waited for.
 */
#define HOOP__LOG_SUBSYS HOOP__SUB_COLL
#include "core/explain.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/auth.h"
#include "base/tables.h"
#include "base/wire.h"
#include "core/lifecycle.h"
#include "core/record.h"
#include "runtime/comm.h"

/* How long the asking rank waits for answers, at most (an eighth of the communicator's timeout
 * where that is less: the failed call returns only after the wait, and the ranks that go on,
 * to a shrink say, should meet within a fraction of the timeout), and when it asks the silent
 * ones again (a datagram may be lost). */
#define ASK_S 1.0
#define ASK_AGAIN_S 0.3
/* Under a key, the nonces of the last questions answered: a captured question replayed within
 * the seal's window gets no second answer. */
#define SEEN_NONCES 64
/* The longest datagram either side reads: a sealed one, and a byte more to tell a longer one. */
#define DGRAM_MAX (HOOP__STATUS_SIZE + HOOP__AUTH_SEAL_BYTES + 1)

typedef struct peer {
    struct sockaddr_in sa;
    int known;     /* sa is where the peer answers */
    int same_host; /* /proc can tell about pid */
    int pid;
} peer_t;

struct hoop__explain {
    int fd;
    int wake; /* an eventfd: the answering thread's stop, so that it sleeps without a timeout */
    int port;
    int loopback; /* bound to 127.x.x.x */
    pthread_t thread;
    int running;
    atomic_int stop;
    peer_t *peers; /* size entries, once hoop__explain_peers ran */
    atomic_int done;
    /* Under a key: questions turned away (unsealed, wrongly keyed, stale, replayed), and the
     * nonces of those answered (the answering thread's alone). */
    atomic_uint refused;
    uint64_t seen[SEEN_NONCES];
    unsigned seen_next;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- answering ---- */

static void answer(hoop_comm_t *c, int fd, const hoop__status_msg_t *q, const struct sockaddr *to,
                   socklen_t tolen)
{
    hoop__status_msg_t a = {.type = HOOP__STATUS_ANS,
                            .rank = (uint32_t)c->rank,
                            .pid = (uint32_t)getpid(),
                            .comm_id = c->id,
                            .nonce = q->nonce};
    hoop__rec_latest_t l;
    hoop__rec_latest(c, &l);
    if (l.off) a.flags |= HOOP__STATUS_REC_OFF;
    if (l.have) {
        a.flags |= HOOP__STATUS_HAS_CALL;
        a.seq = l.seq;
        a.count = l.count;
        a.kind = (uint8_t)l.kind;
        a.dtype = (uint8_t)l.dtype;
        a.engine = (uint8_t)(l.engine & 7);
        a.algo = (uint8_t)(l.algo & 31);
        a.small = (uint8_t)l.small;
        a.state = (uint8_t)(l.state & 0xff);
        a.code = (uint8_t)((l.state >> 8) & 0x3f);
        uint64_t ms = l.age_ns / 1000000;
        a.age_ms = ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
    }
    uint8_t b[HOOP__STATUS_SIZE + HOOP__AUTH_SEAL_BYTES];
    size_t len = HOOP__STATUS_SIZE;
    hoop__status_encode(&a, b);
    if (c->cfg.auth.set) {
        hoop__auth_seal(&c->cfg.auth, 1, b, HOOP__STATUS_SIZE, 0, b);
        len += HOOP__AUTH_SEAL_BYTES;
    }
    /* Never waits: an answer that does not fit is lost, and the asker says "not answering". */
    ssize_t w = sendto(fd, b, len, MSG_DONTWAIT | MSG_NOSIGNAL, to, tolen);
    (void)w;
}

/* Counts a question turned away; says the first few (the log is not the asker's to fill). */
static void refuse(hoop_comm_t *c, const char *why)
{
    unsigned n = atomic_fetch_add(&c->explain->refused, 1) + 1;
    if (n <= 8 || (n & (n - 1)) == 0)
        HOOP__INFO_IN(&c->log, HOOP__SUB_AUTH,
                      "status socket: no answer to %s (%u turned away so far)", why, n);
}

/* Under a key: whether b (n bytes) is a question sealed with it, recent enough. */
static int question_sealed(hoop_comm_t *c, const uint8_t *b, size_t n)
{
    if (n != HOOP__STATUS_SIZE + HOOP__AUTH_SEAL_BYTES) {
        refuse(c, "a datagram that is not sealed with HOOP_AUTH_KEY");
        return 0;
    }
    if (hoop__auth_unseal(&c->cfg.auth, 0, b, n, 0, NULL) != 0) {
        refuse(c, "a question sealed with another key, or too old");
        return 0;
    }
    return 1;
}

/* Whether nonce was answered already; remembers it otherwise. */
static int replayed(struct hoop__explain *x, uint64_t nonce)
{
    for (unsigned i = 0; i < SEEN_NONCES; i++)
        if (x->seen[i] == nonce && nonce != 0) return 1;
    x->seen[x->seen_next++ % SEEN_NONCES] = nonce;
    return 0;
}

static void *answer_main(void *arg)
{
    hoop_comm_t *c = arg;
    struct hoop__explain *x = c->explain;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    while (!atomic_load(&x->stop)) {
        struct pollfd pfd[2] = {{.fd = x->fd, .events = POLLIN}, {.fd = x->wake, .events = POLLIN}};
        if (poll(pfd, 2, -1) <= 0 || !(pfd[0].revents & POLLIN)) continue;
        uint8_t b[DGRAM_MAX];
        struct sockaddr_storage from;
        socklen_t fl = sizeof(from);
        ssize_t r = recvfrom(x->fd, b, sizeof(b), MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
        if (r < 0) continue;
        hoop__status_msg_t q;
        if (c->cfg.auth.set && !question_sealed(c, b, (size_t)r)) continue;
        size_t len = c->cfg.auth.set ? (size_t)r - HOOP__AUTH_SEAL_BYTES : (size_t)r;
        /* Garbage, an answer, another communicator's question: no answer. Rank is the asker's:
         * any rank of the communicator, or 0xffffffff for a tool outside it. */
        if (hoop__status_decode(b, len, &q) != HOOP_OK || q.type != HOOP__STATUS_REQ ||
            q.comm_id != c->id || (q.rank >= (uint32_t)c->size && q.rank != HOOP__STATUS_TOOL))
            continue;
        if (c->cfg.auth.set && replayed(x, q.nonce)) {
            refuse(c, "a question it answered already (replayed)");
            continue;
        }
        answer(c, x->fd, &q, (struct sockaddr *)&from, fl);
    }
    return NULL;
}

/* The value of part "name=" in a published address, up to the next space, into out. */
void hoop__explain_open(hoop_comm_t *c, char *addr, size_t n)
{
    struct hoop__explain *x = calloc(1, sizeof(*x));
    if (x == NULL) return;
    x->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    x->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    /* Bound where the TCP transport listens (the address peers on other hosts reach), else to
     * loopback (every peer on this host): never the wildcard, like every listener of hoop's. */
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    char part[160];
    int publish = 1;
    if (hoop__addr_part(addr, "tcp", part, sizeof(part)) == 0) {
        char *colon = strrchr(part, ':');
        if (colon != NULL) *colon = '\0';
        struct in_addr ip;
        /* An IPv6 one: peers on other hosts could not reach loopback, so none is published. */
        if (inet_pton(AF_INET, part, &ip) == 1)
            sa.sin_addr = ip;
        else
            publish = 0;
    }
    socklen_t sl = sizeof(sa);
    if (x->fd < 0 || x->wake < 0 || bind(x->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        getsockname(x->fd, (struct sockaddr *)&sa, &sl) != 0) {
        HOOP__INFO(&c->log, "no status socket (%s): a timeout will not say where the peers are",
                   strerror(errno));
        if (x->fd >= 0) close(x->fd);
        if (x->wake >= 0) close(x->wake);
        free(x);
        return;
    }
    x->port = ntohs(sa.sin_port);
    c->explain = x;
    if (pthread_create(&x->thread, NULL, answer_main, c) != 0) {
        HOOP__INFO(&c->log, "cannot start the status thread: a timeout will not say where this "
                            "rank is");
    } else {
        x->running = 1;
    }
    size_t o = strlen(addr);
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof(ip));
    /* No room: peers find no status address, and say this rank's place is unknown. */
    x->loopback = (ntohl(sa.sin_addr.s_addr) >> 24) == 127;
    if (x->running && publish && o < n)
        snprintf(addr + o, n - o, " x=%s:%d:%ld", ip, x->port, (long)getpid());
    if (strlen(addr) >= n - 1) addr[o] = '\0';
}

void hoop__explain_close(hoop_comm_t *c)
{
    struct hoop__explain *x = c->explain;
    if (x == NULL) return;
    atomic_store(&x->stop, 1);
    uint64_t one = 1;
    ssize_t w = write(x->wake, &one, sizeof(one));
    (void)w;
    if (x->running) pthread_join(x->thread, NULL);
    close(x->fd);
    close(x->wake);
    free(x->peers);
    free(x);
    c->explain = NULL;
}

void hoop__explain_peers(hoop_comm_t *c, const char *const *ptrs, const char *own)
{
    struct hoop__explain *x = c->explain;
    if (x == NULL || x->peers != NULL) return;
    x->peers = calloc((size_t)c->size, sizeof(peer_t));
    if (x->peers == NULL) return;
    char myhost[160] = "";
    hoop__addr_part(own, "h", myhost, sizeof(myhost));
    for (int j = 0; j < c->size; j++) {
        if (j == c->rank || ptrs[j] == NULL) continue;
        peer_t *p = &x->peers[j];
        char part[160], host[160], ip[INET_ADDRSTRLEN];
        int port = 0, pid = 0;
        /* "x=a.b.c.d:PORT:PID" */
        if (hoop__addr_part(ptrs[j], "x", part, sizeof(part)) != 0 ||
            sscanf(part, "%15[0-9.]:%d:%d", ip, &port, &pid) != 3 || port <= 0 || port > 65535 ||
            inet_pton(AF_INET, ip, &p->sa.sin_addr) != 1)
            continue;
        p->pid = pid;
        p->sa.sin_family = AF_INET;
        p->sa.sin_port = htons((uint16_t)port);
        p->same_host = hoop__addr_part(ptrs[j], "h", host, sizeof(host)) == 0 &&
                       strcmp(host, myhost) == 0 && myhost[0] != '\0';
        /* Asked where it said. A loopback address on another host is reachable only where this
         * rank is on loopback too (hosts told apart by HOOP_HOSTID alone); else it is another
         * host's loopback (a peer with no TCP, over verbs), and asking here would reach this
         * host's. */
        p->known = p->same_host || (ntohl(p->sa.sin_addr.s_addr) >> 24) != 127 || x->loopback;
    }
}

/* ---- asking ---- */

int hoop__explain_wanted(hoop_comm_t *c)
{
    struct hoop__explain *x = c->explain;
    if (x == NULL || atomic_load(&x->done)) return 0;
    int code = atomic_load(&c->aborted);
    /* A timeout here, a lost peer here, or an abort that came as a peer's notice (its cause a
     * timeout, a loss or an abort there; a disagreement's fails with HOOP_ERR_MISMATCH instead,
     * which names both calls already). Not this rank's own hoop_comm_abort or destroy. */
    return code == HOOP_ERR_TIMEOUT || code == HOOP_ERR_PEER_LOST ||
           (code == HOOP_ERR_ABORTED &&
            (atomic_load(&c->abort_dumps) || atomic_load(&c->notice_first)));
}

enum { P_SELF, P_ANSWERED, P_REFUSED, P_SILENT, P_UNKNOWN };

typedef struct seen {
    int how;
    hoop__status_msg_t a;
    char proc; /* /proc/PID/stat's state letter, 0 if not read, '-' if there is no such process */
} seen_t;

static char proc_state(int pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "re");
    if (f == NULL) return '-';
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* "pid (comm) S ...": the comm may hold spaces and parentheses, the state follows the last ')'. */
    char *rp = strrchr(buf, ')');
    return rp != NULL && rp[1] == ' ' && rp[2] != '\0' ? rp[2] : '?';
}

static void ask(hoop_comm_t *c, seen_t *s)
{
    struct hoop__explain *x = c->explain;
    int p = c->size;
    int *fds = malloc((size_t)p * sizeof(int));
    if (fds == NULL) return;
    uint64_t nonce = ((uint64_t)getpid() << 32) ^ (uint64_t)(now_s() * 1e9);
    hoop__status_msg_t q = {.type = HOOP__STATUS_REQ,
                            .rank = (uint32_t)c->rank,
                            .pid = (uint32_t)getpid(),
                            .comm_id = c->id,
                            .nonce = nonce};
    uint8_t req[HOOP__STATUS_SIZE + HOOP__AUTH_SEAL_BYTES];
    size_t req_len = HOOP__STATUS_SIZE;
    hoop__status_encode(&q, req);
    if (c->cfg.auth.set) {
        hoop__auth_seal(&c->cfg.auth, 0, req, HOOP__STATUS_SIZE, 0, req);
        req_len += HOOP__AUTH_SEAL_BYTES;
    }
    int waiting = 0;
    for (int j = 0; j < p; j++) {
        fds[j] = -1;
        if (s[j].how != P_SILENT) continue;
        if (x->peers == NULL || !x->peers[j].known) {
            s[j].how = P_UNKNOWN;
            continue;
        }
        /* On this host, a process that is gone, a zombie or stopped cannot answer: said at once,
         * rather than after the wait (the kernel also limits the refusals it sends back). */
        if (x->peers[j].same_host && x->peers[j].pid > 0) {
            char st = proc_state(x->peers[j].pid);
            if (st == '-' || st == 'Z' || st == 'X' || st == 'T' || st == 't') {
                s[j].proc = st;
                s[j].how = st == 'T' || st == 't' ? P_SILENT : P_REFUSED;
                continue;
            }
        }
        /* One connected socket per peer: a closed port comes back as ECONNREFUSED on it. */
        fds[j] = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fds[j] < 0 ||
            connect(fds[j], (struct sockaddr *)&x->peers[j].sa, sizeof(x->peers[j].sa)) != 0) {
            if (fds[j] >= 0) close(fds[j]);
            fds[j] = -1;
            s[j].how = P_UNKNOWN;
            continue;
        }
        if (send(fds[j], req, req_len, MSG_NOSIGNAL) < 0 && errno == ECONNREFUSED)
            s[j].how = P_REFUSED;
        else
            waiting++;
    }
    struct pollfd *pf = malloc((size_t)p * sizeof(struct pollfd));
    double t0 = now_s(), again = t0 + ASK_AGAIN_S;
    const double ask_s = c->timeout_s / 8 < ASK_S ? c->timeout_s / 8 : ASK_S;
    while (pf != NULL && waiting > 0) {
        double t = now_s();
        if (t >= t0 + ask_s) break;
        if (t >= again) {
            for (int j = 0; j < p; j++)
                if (s[j].how == P_SILENT && fds[j] >= 0) {
                    ssize_t w = send(fds[j], req, req_len, MSG_NOSIGNAL);
                    (void)w;
                }
            again = t + ASK_AGAIN_S;
        }
        int m = 0;
        for (int j = 0; j < p; j++)
            if (s[j].how == P_SILENT && fds[j] >= 0) pf[m++] = (struct pollfd){fds[j], POLLIN, 0};
        double until = again < t0 + ask_s ? again : t0 + ask_s;
        int ms = (int)((until - t) * 1e3) + 1;
        if (poll(pf, (nfds_t)m, ms) <= 0) continue;
        for (int i = 0; i < m; i++) {
            if (pf[i].revents == 0) continue;
            int j = 0;
            while (fds[j] != pf[i].fd) j++;
            uint8_t b[DGRAM_MAX];
            ssize_t r = recv(fds[j], b, sizeof(b), MSG_DONTWAIT);
            hoop__status_msg_t a;
            /* Under a key, only a sealed answer counts (a stranger's is dropped unread). */
            size_t len = (size_t)r;
            if (r >= 0 && c->cfg.auth.set)
                len = hoop__auth_unseal(&c->cfg.auth, 1, b, (size_t)r, 0, NULL) == 0
                          ? (size_t)r - HOOP__AUTH_SEAL_BYTES
                          : 0;
            if (r < 0 && errno == ECONNREFUSED) {
                s[j].how = P_REFUSED;
                waiting--;
            } else if (r >= 0 && hoop__status_decode(b, len, &a) == HOOP_OK &&
                       a.type == HOOP__STATUS_ANS && a.nonce == nonce && a.comm_id == c->id &&
                       a.rank == (uint32_t)j) {
                s[j].how = P_ANSWERED;
                s[j].a = a;
                waiting--;
            }
        }
    }
    for (int j = 0; j < p; j++)
        if (fds[j] >= 0) close(fds[j]);
    free(pf);
    free(fds);
    for (int j = 0; j < p; j++)
        if ((s[j].how == P_SILENT || s[j].how == P_REFUSED) && s[j].proc == 0 && x->peers != NULL &&
            x->peers[j].same_host && x->peers[j].pid > 0)
            s[j].proc = proc_state(x->peers[j].pid);
}

/* Appends to buf (n bytes, used so far *o). */
static void put(char *buf, size_t n, size_t *o, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t n, size_t *o, const char *fmt, ...)
{
    if (*o >= n) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *o, n - *o, fmt, ap);
    va_end(ap);
    if (w > 0) *o = *o + (size_t)w < n ? *o + (size_t)w : n - 1;
}

/* "rank 3", "ranks 0-2, 5": the ranks j with pick[j], ranges joined. */
static void rank_list(const int *pick, int p, char *buf, size_t n)
{
    size_t o = 0;
    int count = 0;
    for (int j = 0; j < p; j++) count += pick[j] != 0;
    put(buf, n, &o, "%s ", count == 1 ? "rank" : "ranks");
    int first = 1;
    for (int j = 0; j < p; j++) {
        if (!pick[j]) continue;
        int k = j;
        while (k + 1 < p && pick[k + 1]) k++;
        put(buf, n, &o, "%s%d", first ? "" : ", ", j);
        if (k > j) put(buf, n, &o, "-%d", k);
        first = 0;
        j = k;
    }
}

static const char *kind_word(int kind)
{
    return kind == HOOP__K_SEND ? "send/recv" : hoop__kind_name(kind);
}

/* Where rank j is, after "rank J " (or "ranks J-K ", plural): what a peer that is not in the
 * call is doing. */
static void where(const seen_t *s, uint64_t my_seq, int my_kind, int plural, char *buf, size_t n)
{
    size_t o = 0;
    const char *is = plural ? "are" : "is";
    const hoop__status_msg_t *a = &s->a;
    switch (s->how) {
    case P_ANSWERED:
        if (!(a->flags & HOOP__STATUS_HAS_CALL)) {
            put(buf, n, &o, "%s alive and %s made no collective call%s", is,
                plural ? "have" : "has",
                (a->flags & HOOP__STATUS_REC_OFF) ? " on record (HOOP_RECORD=0)" : " yet");
            break;
        }
        if (a->seq == my_seq && (my_kind == 0 || a->kind == my_kind)) {
            put(buf, n, &o, "%s in #%" PRIu64, is, a->seq);
            break;
        }
        if (a->state == HOOP__REC_FINISHED) {
            put(buf, n, &o,
                "'s last call is #%" PRIu64 " %s, finished (alive, outside hoop for %.1f s)",
                a->seq, kind_word(a->kind), a->age_ms / 1e3);
        } else if (a->state == HOOP__REC_FAILED) {
            put(buf, n, &o, "'s last call is #%" PRIu64 " %s, failed (%s)", a->seq,
                kind_word(a->kind), hoop__error_name((hoop_result_t)a->code));
        } else {
            put(buf, n, &o, "%s in #%" PRIu64 " %s, %s %.1f s ago (alive)", is, a->seq,
                kind_word(a->kind), a->state == HOOP__REC_STARTED ? "started" : "posted",
                a->age_ms / 1e3);
        }
        break;
    case P_REFUSED:
        if (s->proc != 0 && s->proc != '-' && s->proc != 'Z' && s->proc != 'X')
            put(buf, n, &o, "%s left the communicator (alive)", plural ? "have" : "has");
        else
            put(buf, n, &o, "%s dead (connection lost)", is);
        break;
    case P_SILENT:
        if (s->proc == 'T' || s->proc == 't')
            put(buf, n, &o, "%s stopped (not answering: SIGSTOP, or a debugger)", is);
        else if (s->proc == '-' || s->proc == 'Z' || s->proc == 'X')
            put(buf, n, &o, "%s dead (the process is gone)", is);
        else
            put(buf, n, &o, "%s not answering (stopped, or stuck outside hoop)", is);
        break;
    default: put(buf, n, &o, "%s unknown (no status address)", is); break;
    }
}

static void human_bytes(uint64_t b, char *buf, size_t n)
{
    if (b >= 1000000000)
        snprintf(buf, n, "%.1f GB", b / 1e9);
    else if (b >= 1000000)
        snprintf(buf, n, "%.1f MB", b / 1e6);
    else if (b >= 1000)
        snprintf(buf, n, "%.1f kB", b / 1e3);
    else
        snprintf(buf, n, "%" PRIu64 " B", b);
}

void hoop__explain_due(hoop_comm_t *c)
{
    if (!hoop__explain_wanted(c)) return;
    struct hoop__explain *x = c->explain;
    if (atomic_exchange(&x->done, 1)) return;
    int p = c->size;
    seen_t *s = calloc((size_t)p, sizeof(seen_t));
    int *pick = calloc((size_t)p, sizeof(int));
    int *grouped = calloc((size_t)p, sizeof(int));
    char *line = malloc(1024);
    if (s == NULL || pick == NULL || grouped == NULL || line == NULL) {
        free(s);
        free(pick);
        free(grouped);
        free(line);
        return;
    }
    for (int j = 0; j < p; j++) s[j].how = j == c->rank ? P_SELF : P_SILENT;
    hoop__rec_latest_t me;
    hoop__rec_latest((const hoop_comm_t *)c, &me);
    ask(c, s);

    size_t o = 0, n = 1024;
    /* The call that failed: this rank's newest, or, where that one finished (the failure came
     * between calls, and the next one failed at its start), the next. */
    int between = me.have && (me.state & 0xff) == HOOP__REC_FINISHED;
    uint64_t seq = me.seq + (uint64_t)between;
    int kind = between ? 0 : me.kind;
    if (between) {
        put(line, n, &o, "the call after #%" PRIu64 " %s (call #%" PRIu64 ")", me.seq,
            kind_word(me.kind), seq);
    } else if (me.have) {
        char size[32];
        human_bytes(me.count * (uint64_t)hoop__dtype_size((hoop_dtype_t)me.dtype), size,
                    sizeof(size));
        put(line, n, &o, "%s #%" PRIu64 " (%s, %s, %s)", kind_word(me.kind), me.seq,
            hoop__dtype_name((hoop_dtype_t)me.dtype), size, me.schedule);
    } else {
        put(line, n, &o, "a call (no collective on record%s)", me.off ? ": HOOP_RECORD=0" : "");
    }
    /* In the call: this rank and every peer that answered with the same one. */
    char list[256], w[256];
    int missing = 0, in_call = 0;
    for (int j = 0; j < p; j++) {
        int in = j == c->rank ||
                 (me.have && s[j].how == P_ANSWERED && (s[j].a.flags & HOOP__STATUS_HAS_CALL) &&
                  s[j].a.seq == seq && (kind == 0 || s[j].a.kind == kind));
        pick[j] = !in;
        grouped[j] = in;
        missing += !in;
        in_call += in;
    }
    if (missing > 0) {
        rank_list(pick, p, list, sizeof(list));
        put(line, n, &o, " waits for %s", list);
    } else {
        put(line, n, &o, " failed with every rank in it");
    }
    /* The missing ranks, those in the same place said once. */
    for (int j = 0; j < p; j++) {
        if (grouped[j]) continue;
        where(&s[j], seq, kind, 0, w, sizeof(w));
        memset(pick, 0, (size_t)p * sizeof(int));
        int same = 0;
        for (int k = j; k < p; k++) {
            char wk[256];
            if (grouped[k]) continue;
            where(&s[k], seq, kind, 0, wk, sizeof(wk));
            if (strcmp(wk, w) == 0) {
                pick[k] = grouped[k] = 1;
                same++;
            }
        }
        where(&s[j], seq, kind, same > 1, w, sizeof(w));
        rank_list(pick, p, list, sizeof(list));
        put(line, n, &o, "; %s%s%s", list, w[0] == '\'' ? "" : " ", w);
    }
    if (me.have && missing > 0 && in_call > 0) {
        for (int j = 0; j < p; j++)
            pick[j] = j == c->rank ||
                      (s[j].how == P_ANSWERED && (s[j].a.flags & HOOP__STATUS_HAS_CALL) &&
                       s[j].a.seq == seq && (kind == 0 || s[j].a.kind == kind));
        rank_list(pick, p, list, sizeof(list));
        put(line, n, &o, "; %s %s in #%" PRIu64, list, in_call == 1 ? "is" : "are", seq);
    }
    HOOP__WARN(&c->log, "%s", line);
    hoop__comm_explained(c, line);
    free(s);
    free(pick);
    free(grouped);
    free(line);
}
