/*
 * The per-peer transport choice, over the registry's table (registry.h): each peer gets the first
 * transport both ends use whose reach test passes. With the table as it is, that is shared memory
 * to ranks on the same host, and RDMA verbs (in a build with it, where both ends published a verbs
 * address) or else TCP to the others.
 *
 * "Same host" means the same hostname, boot id, network namespace and pid namespace: two network
 * namespaces on one machine are treated as two hosts (they cannot reach each other's loopback, and
 * tests use them to stand in for a cluster), and shared memory needs a common pid namespace to
 * find the peer's segment. Every rank publishes that key with the address of every transport it
 * uses ("h=KEY shm=ADDR tcp=ADDR"), so both ends of a pair make the same choice from the same
 * data. HOOP_TRANSPORT=NAME uses one transport for all peers (shm fails at connect if a peer is
 * on another host).
 *
 * The engine sees one transport. A rank whose peers all use one transport waits as that
 * transport waits alone (shared memory spins, then sleeps on a futex; TCP sleeps in its poll()).
 * A rank with peers on several sleeps in one place, here: every transport moves what it can and
 * announces the sleep (arm), then one poll() watches all their wait descriptors (a millisecond at
 * a time while one has none), and then each transport progresses once, which ends its announcement.
 */
#define HOOP__LOG_SUBSYS HOOP__SUB_TRANSPORT /* of its INFO and TRACE lines (base/log.h) */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "transport/registry.h"
#include "transport/transport.h"

/* How long a transport still connects, after another of this rank failed to, so that its peers
 * are told why rather than wait (mux_connect). */
#define COURTESY_S 1.0

#define ROW(t) (hoop__tp_registry[t])
#define T_SELF 255

struct hoop__tp {
    hoop__tp_params_t p;
    hoop__tp_t *sub[HOOP__TP_ROWS_MAX]; /* per row; NULL where this rank does not use it */
    int npeers[HOOP__TP_ROWS_MAX];
    int active[HOOP__TP_ROWS_MAX]; /* the rows with peers, in table order */
    int nactive;
    uint8_t *route; /* per peer: its row, or T_SELF */
    char key[17];
    char own[HOOP__TP_ROWS_MAX][160];     /* this rank's address of each row it uses */
    struct pollfd pfd[HOOP__TP_ROWS_MAX]; /* the one sleep's, and which row each is */
    int pfd_row[HOOP__TP_ROWS_MAX];
    char last[400]; /* the last failure any transport reported */
};

/* mux's registration: one per row that registers memory. */
typedef struct mux_reg {
    void *sub[HOOP__TP_ROWS_MAX];
} mux_reg_t;

/* Every transport reports through here: mux keeps the sentence, to tell the peers of the other
 * transports why one failed to connect (see mux_connect). */
static void mux_report(void *ctx, hoop_result_t code, int peer, const char *msg)
{
    hoop__tp_t *tp = ctx;
    snprintf(tp->last, sizeof(tp->last), "%s", msg);
    tp->p.report(tp->p.report_ctx, code, peer, msg);
}

static void mux_report_notice(void *ctx, hoop_result_t code, int peer, const char *msg,
                              uint64_t done)
{
    hoop__tp_t *tp = ctx;
    snprintf(tp->last, sizeof(tp->last), "%s", msg);
    hoop__tp_report_notice(&tp->p, code, peer, msg, done);
}

/* FNV-1a: a short fingerprint of the host identity, not a secret. */
static uint64_t fnv(uint64_t h, const char *s)
{
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return (h ^ 0xff) * 0x100000001b3ull;
}

/* Returns 0, or errno of an open that failed. */
static int read_small(const char *path, char *buf, size_t n, int link)
{
    buf[0] = '\0';
    if (link) {
        ssize_t r = readlink(path, buf, n - 1);
        buf[r > 0 ? r : 0] = '\0';
        return 0;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    ssize_t r = read(fd, buf, n - 1);
    buf[r > 0 ? r : 0] = '\0';
    close(fd);
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

/* Returns 0, or errno when the identity could not be read (no descriptor to open with): a key
 * made without the boot id would send this rank's peers to a transport they do not choose. */
static int host_key(const hoop__config_t *cfg, const hoop__log_t *log, char out[17])
{
    char host[256] = "", boot[64], net[64], pid[64];
    if (cfg->host_id[0] != '\0') {
        snprintf(out, 17, "%016" PRIx64, fnv(0xcbf29ce484222325ull, cfg->host_id));
        HOOP__INFO(log, "host identity %s: HOOP_HOSTID=%s", out, cfg->host_id);
        return 0;
    }
    gethostname(host, sizeof(host) - 1);
    int e = read_small("/proc/sys/kernel/random/boot_id", boot, sizeof(boot), 0);
    if (HOOP__FD_EXHAUSTED(e)) return e;
    read_small("/proc/self/ns/net", net, sizeof(net), 1);
    read_small("/proc/self/ns/pid", pid, sizeof(pid), 1);
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(fnv(fnv(fnv(h, host), boot), net), pid);
    snprintf(out, 17, "%016" PRIx64, h);
    HOOP__INFO(log, "host identity %s: host %s, boot %s, %s, %s", out, host, boot, net, pid);
    return 0;
}

static void mux_close(hoop__tp_t *tp)
{
    if (tp == NULL) return;
    for (int t = 0; t < hoop__tp_registry_n; t++)
        if (tp->sub[t] != NULL) ROW(t).ops->close(tp->sub[t]);
    free(tp->route);
    free(tp);
}

/* This rank uses row t: HOOP_TRANSPORT is auto or names it. */
static int used(const hoop__tp_params_t *p, int t)
{
    return strcmp(p->cfg->transport, "auto") == 0 || strcmp(p->cfg->transport, ROW(t).name) == 0;
}

static hoop_result_t mux_listen(const hoop__tp_params_t *p, hoop__tp_t **out, char *addr,
                                size_t addrlen)
{
    hoop__tp_t *tp = calloc(1, sizeof(*tp));
    if (tp == NULL) return HOOP_ERR_NO_MEMORY;
    tp->route = calloc((size_t)p->size, 1);
    if (tp->route == NULL) {
        free(tp);
        return HOOP_ERR_NO_MEMORY;
    }
    tp->p = *p;
    *out = tp;
    char msg[400];
    int any = 0;
    for (int t = 0; t < hoop__tp_registry_n; t++) any |= used(p, t);
    if (!any) {
        snprintf(msg, sizeof(msg), "HOOP_TRANSPORT=%s names no transport of this build",
                 p->cfg->transport);
        p->report(p->report_ctx, HOOP_ERR_INVALID_ARGUMENT, -1, msg);
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    int e = host_key(p->cfg, p->log, tp->key);
    if (e != 0) {
        char why[300];
        snprintf(msg, sizeof(msg), "cannot read this host's identity: %s",
                 hoop__fd_error(e, why, sizeof(why)));
        p->report(p->report_ctx, HOOP_ERR_SYSTEM, -1, msg);
        return HOOP_ERR_SYSTEM;
    }
    const char *own[HOOP__TP_ROWS_MAX] = {NULL};
    for (int t = 0; t < hoop__tp_registry_n; t++) {
        own[t] = tp->own[t];
        if (!used(p, t)) continue;
        hoop__tp_params_t sp = *p;
        sp.report = mux_report;
        sp.report_notice = mux_report_notice;
        sp.report_ctx = tp;
        hoop_result_t rc = ROW(t).ops->listen(&sp, &tp->sub[t], tp->own[t], sizeof(tp->own[t]));
        if (rc != HOOP_OK) return rc;
    }
    if (hoop__mux_addr(tp->key, own, addr, addrlen) != 0) {
        p->report(p->report_ctx, HOOP_ERR_INTERNAL, -1, "transport addresses too long");
        return HOOP_ERR_INTERNAL;
    }
    return HOOP_OK;
}

int hoop__mux_addr(const char *host, const char *const addrs[], char *out, size_t n)
{
    int w = snprintf(out, n, "h=%s", host);
    size_t o = w > 0 ? (size_t)w : 0;
    for (int t = 0; t < hoop__tp_registry_n && o < n; t++) {
        if (addrs[t] == NULL || addrs[t][0] == '\0') continue;
        w = snprintf(out + o, n - o, " %s=%s", ROW(t).name, addrs[t]);
        o += w > 0 ? (size_t)w : 0;
    }
    return w < 0 || o >= n ? -1 : 0;
}

int hoop__mux_addr_split(const char *addr, char *buf, size_t n, const char **host,
                         const char *addrs[HOOP__TP_ROWS_MAX])
{
    for (int t = 0; t < HOOP__TP_ROWS_MAX; t++) addrs[t] = "";
    if (addr == NULL || strncmp(addr, "h=", 2) != 0 || strlen(addr) >= n) return -1;
    strcpy(buf, addr);
    char *save = NULL, *tok = strtok_r(buf, " ", &save);
    *host = tok + 2;
    /* A part of a transport this build does not have is left out: nobody can use it here. */
    while ((tok = strtok_r(NULL, " ", &save)) != NULL) {
        char *eq = strchr(tok, '=');
        if (eq == NULL) return -1;
        *eq = '\0';
        int t = hoop__tp_find(tok);
        if (t >= 0) addrs[t] = eq + 1;
    }
    return 0;
}

static void mux_host_key(const char *addr, char *out, size_t n)
{
    if (n == 0) return;
    out[0] = '\0';
    if (addr == NULL || strncmp(addr, "h=", 2) != 0) return;
    size_t k = strcspn(addr + 2, " ");
    if (k >= n) k = n - 1;
    memcpy(out, addr + 2, k);
    out[k] = '\0';
}

static void append(char *list, size_t n, int j)
{
    size_t o = strlen(list);
    if (o + 12 < n) snprintf(list + o, n - o, "%s%d", o ? "," : "", j);
}

/* The row that carries this rank's transfers with peer j, which published host and parts, or -1
 * with the reason in msg. Both ends run this on the same data. */
static int choose(const hoop__tp_t *tp, int j, const char *host, const char *const parts[],
                  char *msg, size_t n)
{
    for (int t = 0; t < hoop__tp_registry_n; t++) {
        hoop__tp_pub_t me = {tp->key, tp->own[t]}, peer = {host, parts[t]};
        if (tp->sub[t] != NULL && parts[t][0] != '\0' && ROW(t).reaches(&me, &peer)) return t;
    }
    /* Said as the two rows did: a transport that reaches another host, or the one forced. */
    const char *mode = tp->p.cfg->transport;
    if (strcmp(host, tp->key) != 0) {
        char names[96] = "";
        size_t o = 0;
        for (int t = 0; t < hoop__tp_registry_n && o + 20 < sizeof(names); t++) {
            hoop__tp_pub_t me = {tp->key, tp->own[t]}, peer = {host, parts[t]};
            if (ROW(t).reaches(&me, &peer))
                o += (size_t)snprintf(names + o, sizeof(names) - o, " or %s", ROW(t).name);
        }
        snprintf(msg, n, "HOOP_TRANSPORT=%s but rank %d is on another host: use auto%s", mode, j,
                 names);
    } else {
        int f = hoop__tp_find(mode);
        snprintf(msg, n, "HOOP_TRANSPORT=%s but rank %d is not using %s", mode, j,
                 f >= 0 ? ROW(f).what : "any transport of this rank");
    }
    return -1;
}

/* Gives every peer its row (tp->route) and each row its peers' addresses (sub[row][peer]), from the
 * published addresses copied into copies. */
static hoop_result_t route_peers(hoop__tp_t *tp, const char *const *addrs, char **copies,
                                 const char **sub[], char lists[][200])
{
    int size = tp->p.size;
    char msg[320];
    for (int j = 0; j < size; j++) {
        tp->route[j] = T_SELF;
        if (j == tp->p.rank || addrs[j] == NULL) continue;
        const char *host, *parts[HOOP__TP_ROWS_MAX];
        size_t len = strlen(addrs[j]) + 1;
        copies[j] = malloc(len);
        if (copies[j] == NULL ||
            hoop__mux_addr_split(addrs[j], copies[j], len, &host, parts) != 0) {
            snprintf(msg, sizeof(msg), "rank %d published a bad address \"%s\"", j, addrs[j]);
            tp->p.report(tp->p.report_ctx, HOOP_ERR_INTERNAL, j, msg);
            return HOOP_ERR_INTERNAL;
        }
        int t = choose(tp, j, host, parts, msg, sizeof(msg));
        if (t < 0) {
            tp->p.report(tp->p.report_ctx, HOOP_ERR_INVALID_ARGUMENT, j, msg);
            return HOOP_ERR_INVALID_ARGUMENT;
        }
        tp->route[j] = (uint8_t)t;
        sub[t][j] = parts[t];
        tp->npeers[t]++;
        append(lists[t], sizeof(lists[t]), j);
    }
    return HOOP_OK;
}

static hoop_result_t mux_connect(hoop__tp_t *tp, const char *const *addrs, double deadline)
{
    const int size = tp->p.size, nrows = hoop__tp_registry_n;
    char **copies = calloc((size_t)size, sizeof(char *));
    const char **sub[HOOP__TP_ROWS_MAX] = {NULL};
    char lists[HOOP__TP_ROWS_MAX][200] = {""};
    hoop_result_t rc = copies != NULL ? HOOP_OK : HOOP_ERR_NO_MEMORY;
    for (int t = 0; t < nrows && rc == HOOP_OK; t++)
        if ((sub[t] = calloc((size_t)size, sizeof(char *))) == NULL) rc = HOOP_ERR_NO_MEMORY;
    if (rc == HOOP_OK) rc = route_peers(tp, addrs, copies, sub, lists);
    /* In table order (shared memory first: it waits for nobody, so TCP's accept loop starts
     * without delay). Every transport this rank uses connects, even one with no peer of its
     * own (TCP closes its listener then, which nobody else may then knock on), and even after
     * an earlier one failed: its peers would otherwise wait for this rank until the deadline;
     * they are told why instead. */
    int connected[HOOP__TP_ROWS_MAX] = {0}, failed = rc != HOOP_OK;
    char why[sizeof(tp->last)] = "";
    for (int t = 0; t < nrows && !failed; t++) {
        if (tp->sub[t] == NULL) continue;
        rc = ROW(t).ops->connect(tp->sub[t], sub[t], deadline);
        connected[t] = rc == HOOP_OK;
        if (rc != HOOP_OK) {
            failed = 1;
            snprintf(why, sizeof(why), "%s", tp->last);
            /* A courtesy, within a short while: peers that failed too (descriptors run out on
             * every rank alike) make the same one, and would otherwise wait for each other, each
             * retrying the listeners of ranks gone already, until the deadline. */
            double soon = hoop__now() + COURTESY_S;
            if (soon > deadline) soon = deadline;
            for (int u = t + 1; u < nrows; u++) {
                if (tp->sub[u] == NULL) continue;
                (void)ROW(u).ops->connect(tp->sub[u], sub[u], soon);
                ROW(u).ops->abort(tp->sub[u], rc, why);
            }
        }
    }
    /* Every peer must know that every other connected (see settle in transport.h). All ranks
     * settle in the same order, from the table's end: TCP's announcement goes out before this
     * rank waits on shared memory. */
    for (int t = nrows - 1; t >= 0 && rc == HOOP_OK; t--)
        if (tp->sub[t] != NULL && tp->npeers[t] > 0 && ROW(t).ops->settle != NULL)
            rc = ROW(t).ops->settle(tp->sub[t], deadline);
    /* A failure after a transport connected: its peers wait on this rank there; tell them why. */
    for (int t = 0; t < nrows && rc != HOOP_OK; t++)
        if (connected[t]) ROW(t).ops->abort(tp->sub[t], rc, tp->last);
    if (rc == HOOP_OK) {
        char line[HOOP__TP_ROWS_MAX * 220] = "";
        size_t o = 0;
        for (int t = 0; t < nrows; t++) {
            o += (size_t)snprintf(line + o, sizeof(line) - o, "%s%s to rank(s) [%s]", t ? ", " : "",
                                  ROW(t).name, lists[t]);
            if (tp->npeers[t] > 0) tp->active[tp->nactive++] = t;
        }
        HOOP__INFO(tp->p.log, "transport per peer: %s", line);
    }
    if (copies != NULL)
        for (int j = 0; j < size; j++) free(copies[j]);
    free(copies);
    for (int t = 0; t < nrows; t++) free(sub[t]);
    return rc;
}

static void mux_post(hoop__tp_t *tp, hoop__xfer_t *x)
{
    int t = x->peer >= 0 && x->peer < tp->p.size ? tp->route[x->peer] : T_SELF;
    if (t == T_SELF || tp->sub[t] == NULL) {
        x->done = 1;
        x->status = HOOP_ERR_INTERNAL;
        return;
    }
    /* The transport gets its own registration of the memory, not mux's. */
    if (x->mem.reg != NULL) x->mem.reg = ((mux_reg_t *)x->mem.reg)->sub[t];
    ROW(t).ops->post(tp->sub[t], x);
}

/* The one sleep of a rank with peers on several transports (see the top). Each transport is armed
 * in turn (arm() moves what it can) until one says something can move already; then, unless one
 * did, one poll() over the wait descriptors of those armed; then each progresses once, which ends
 * its announcement. A transport without a descriptor is looked at a millisecond at a time. */
static void sleep_all(hoop__tp_t *tp, int timeout_ms)
{
    int n = 0, ready = 0, nblind = 0, blind[HOOP__TP_ROWS_MAX];
    for (int i = 0; i < tp->nactive; i++) {
        int t = tp->active[i];
        const hoop__transport_ops_t *ops = ROW(t).ops;
        int fd = ops->arm != NULL && ops->wait_fd != NULL ? ops->wait_fd(tp->sub[t]) : -1;
        if (fd < 0) {
            blind[nblind++] = t;
            ops->progress(tp->sub[t], 0);
        } else if (ready) {
            ops->progress(tp->sub[t], 0); /* not armed: it moves all the same */
        } else {
            ready = ops->arm(tp->sub[t]);
            tp->pfd[n].fd = fd;
            tp->pfd[n].events = POLLIN;
            tp->pfd_row[n++] = t;
        }
    }
    if (!ready) (void)poll(tp->pfd, (nfds_t)n, nblind > 0 && timeout_ms > 1 ? 1 : timeout_ms);
    for (int i = 0; i < n; i++) ROW(tp->pfd_row[i]).ops->progress(tp->sub[tp->pfd_row[i]], 0);
    for (int i = 0; i < nblind; i++) ROW(blind[i]).ops->progress(tp->sub[blind[i]], 0);
}

static void mux_progress(hoop__tp_t *tp, int timeout_ms)
{
    if (tp->nactive == 1) {
        /* Peers on one transport only: it waits as it would alone. */
        ROW(tp->active[0]).ops->progress(tp->sub[tp->active[0]], timeout_ms);
    } else if (tp->nactive == 0) {
        if (timeout_ms > 0) usleep(1000);
    } else if (timeout_ms > 0) {
        sleep_all(tp, timeout_ms);
    } else {
        for (int i = 0; i < tp->nactive; i++)
            ROW(tp->active[i]).ops->progress(tp->sub[tp->active[i]], 0);
    }
}

static uint64_t mux_moved(hoop__tp_t *tp, int peer)
{
    int t = peer >= 0 && peer < tp->p.size ? tp->route[peer] : T_SELF;
    if (t == T_SELF || tp->sub[t] == NULL || ROW(t).ops->moved == NULL) return 0;
    return ROW(t).ops->moved(tp->sub[t], peer);
}

static void mux_memory(const hoop__tp_t *tp, hoop__tp_mem_t *m)
{
    m->heap += sizeof(*tp) + (size_t)tp->p.size;
    for (int t = 0; t < hoop__tp_registry_n; t++)
        if (tp->sub[t] != NULL && ROW(t).ops->memory != NULL) ROW(t).ops->memory(tp->sub[t], m);
}

static int mux_probe(hoop__tp_t *tp, int peer, hoop__wire_hdr_t *hdr)
{
    int t = peer >= 0 && peer < tp->p.size ? tp->route[peer] : T_SELF;
    if (t == T_SELF || tp->sub[t] == NULL || ROW(t).ops->probe == NULL) return 0;
    return ROW(t).ops->probe(tp->sub[t], peer, hdr);
}

static void mux_wake(hoop__tp_t *tp)
{
    for (int t = 0; t < hoop__tp_registry_n; t++)
        if (tp->sub[t] != NULL) ROW(t).ops->wake(tp->sub[t]);
}

static void mux_abort(hoop__tp_t *tp, hoop_result_t code, const char *reason)
{
    for (int t = 0; t < hoop__tp_registry_n; t++)
        if (tp->sub[t] != NULL) ROW(t).ops->abort(tp->sub[t], code, reason);
}

static void mux_dereg(hoop__tp_t *tp, void *reg)
{
    mux_reg_t *r = reg;
    if (r == NULL) return;
    for (int t = 0; t < hoop__tp_registry_n; t++)
        if (r->sub[t] != NULL) ROW(t).ops->dereg(tp->sub[t], r->sub[t]);
    free(r);
}

/* Registers the memory with every transport of this rank that registers memory: a transfer may
 * go to any of them. */
static hoop_result_t mux_reg(hoop__tp_t *tp, void *buf, size_t len, hoop__mem_type_t type,
                             void **reg)
{
    *reg = NULL;
    mux_reg_t *r = NULL;
    for (int t = 0; t < hoop__tp_registry_n; t++) {
        if (tp->sub[t] == NULL || ROW(t).ops->reg == NULL) continue;
        if (r == NULL && (r = calloc(1, sizeof(*r))) == NULL) return HOOP_ERR_NO_MEMORY;
        hoop_result_t rc = ROW(t).ops->reg(tp->sub[t], buf, len, type, &r->sub[t]);
        if (rc != HOOP_OK) {
            mux_dereg(tp, r);
            return rc;
        }
    }
    *reg = r;
    return HOOP_OK;
}

const hoop__transport_ops_t hoop__mux_transport = {
    .name = "auto",
    .caps = HOOP__TP_MEM(HOOP__MEM_HOST), /* what every transport of the table takes */
    .listen = mux_listen,
    .connect = mux_connect,
    .post = mux_post,
    .progress = mux_progress,
    .wake = mux_wake,
    .abort = mux_abort,
    .close = mux_close,
    .moved = mux_moved,
    .probe = mux_probe,
    .memory = mux_memory,
    .host_key = mux_host_key,
    .reg = mux_reg,
    .dereg = mux_dereg,
};
