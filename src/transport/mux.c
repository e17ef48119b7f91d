/*
 * The per-peer transport choice: shared memory to ranks on the same host, TCP to the others.
 *
 * "Same host" means the same hostname, boot id, network namespace and pid namespace: two network
 * namespaces on one machine are treated as two hosts (they cannot reach each other's loopback, and
 * tests use them to stand in for a cluster), and shared memory needs a common pid namespace to
 * find the peer's segment. Every rank publishes that key with the addresses of both transports,
 * so both ends of a pair make the same choice from the same data. HOOP_TRANSPORT=tcp or shm forces
 * one transport for all peers (shm fails at connect if a peer is on another host).
 *
 * The engine sees one transport. When a rank has peers on both, it sleeps in TCP's poll(), which
 * also watches shared memory's bell: a pipe that shared-memory peers write a byte to when they
 * find this rank announced as sleeping (a millisecond at a time where there is no pipe).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "transport/transport.h"

enum { T_SHM = 0, T_TCP = 1, T_N = 2, T_SELF = 255 };

struct hoop__tp {
    hoop__tp_params_t p;
    const hoop__transport_ops_t *ops[T_N];
    hoop__tp_t *sub[T_N];
    int npeers[T_N];
    uint8_t *route; /* per peer: T_SHM, T_TCP or T_SELF */
    char key[17];
    int shm_wait;   /* shared memory's wait fd, which TCP's poll() also watches; -1 if none */
    char last[400]; /* the last failure either transport reported */
};

/* Both transports report through here: mux keeps the sentence, to tell TCP peers why shared
 * memory failed to connect (see mux_connect). */
static void mux_report(void *ctx, hoop_result_t code, int peer, const char *msg)
{
    hoop__tp_t *tp = ctx;
    snprintf(tp->last, sizeof(tp->last), "%s", msg);
    tp->p.report(tp->p.report_ctx, code, peer, msg);
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
        HOOP_INFO(log, "host identity %s: HOOP_HOSTID=%s", out, cfg->host_id);
        return 0;
    }
    gethostname(host, sizeof(host) - 1);
    int e = read_small("/proc/sys/kernel/random/boot_id", boot, sizeof(boot), 0);
    if (HOOP_FD_EXHAUSTED(e)) return e;
    read_small("/proc/self/ns/net", net, sizeof(net), 1);
    read_small("/proc/self/ns/pid", pid, sizeof(pid), 1);
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(fnv(fnv(fnv(h, host), boot), net), pid);
    snprintf(out, 17, "%016" PRIx64, h);
    HOOP_INFO(log, "host identity %s: host %s, boot %s, %s, %s", out, host, boot, net, pid);
    return 0;
}

static void mux_close(hoop__tp_t *tp)
{
    if (tp == NULL) return;
    for (int t = 0; t < T_N; t++)
        if (tp->sub[t] != NULL) tp->ops[t]->close(tp->sub[t]);
    free(tp->route);
    free(tp);
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
    const char *mode = p->cfg->transport;
    if (strcmp(mode, "tcp") != 0) tp->ops[T_SHM] = &hoop__shm_transport;
    if (strcmp(mode, "shm") != 0) tp->ops[T_TCP] = &hoop__tcp_transport;
    int e = host_key(p->cfg, p->log, tp->key);
    if (e != 0) {
        char msg[400], why[300];
        snprintf(msg, sizeof(msg), "cannot read this host's identity: %s", hoop__fd_error(e, why, sizeof(why)));
        p->report(p->report_ctx, HOOP_ERR_SYSTEM, -1, msg);
        return HOOP_ERR_SYSTEM;
    }
    char sub[T_N][160] = {"", ""};
    tp->shm_wait = -1;
    for (int t = 0; t < T_N; t++) {
        if (tp->ops[t] == NULL) continue;
        hoop__tp_params_t sp = *p;
        sp.report = mux_report;
        sp.report_ctx = tp;
        if (t == T_TCP) sp.also_poll = &tp->shm_wait;
        hoop_result_t rc = tp->ops[t]->listen(&sp, &tp->sub[t], sub[t], sizeof(sub[t]));
        if (rc != HOOP_OK) return rc;
        if (t == T_SHM && tp->ops[t]->wait_fd != NULL) tp->shm_wait = tp->ops[t]->wait_fd(tp->sub[t]);
    }
    int n = snprintf(addr, addrlen, "h=%s s=%s t=%s", tp->key, sub[T_SHM], sub[T_TCP]);
    if (n < 0 || (size_t)n >= addrlen) {
        p->report(p->report_ctx, HOOP_ERR_INTERNAL, -1, "transport addresses too long");
        return HOOP_ERR_INTERNAL;
    }
    return HOOP_OK;
}

/* Splits "h=KEY s=SHM t=TCP" in place; a missing part comes back as "". */
static int parse(char *a, char **key, char **shm, char **tcp)
{
    char *h = strstr(a, "h="), *s = strstr(a, " s="), *t = strstr(a, " t=");
    if (h != a || s == NULL || t == NULL || t < s) return -1;
    *s = '\0';
    *t = '\0';
    *key = h + 2;
    *shm = s + 3;
    *tcp = t + 3;
    return 0;
}

void hoop__mux_host_key(const char *addr, char *out, size_t n)
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

static hoop_result_t mux_connect(hoop__tp_t *tp, const char *const *addrs, double deadline)
{
    int size = tp->p.size;
    char **copies = calloc((size_t)size, sizeof(char *));
    const char **sub[T_N];
    sub[T_SHM] = calloc((size_t)size, sizeof(char *));
    sub[T_TCP] = calloc((size_t)size, sizeof(char *));
    hoop_result_t rc = HOOP_OK;
    char msg[320], lists[T_N][200] = {"", ""};
    if (copies == NULL || sub[T_SHM] == NULL || sub[T_TCP] == NULL) {
        rc = HOOP_ERR_NO_MEMORY;
        goto out;
    }
    for (int j = 0; j < size && rc == HOOP_OK; j++) {
        tp->route[j] = T_SELF;
        if (j == tp->p.rank || addrs[j] == NULL) continue;
        char *key, *s, *t;
        copies[j] = strdup(addrs[j]);
        if (copies[j] == NULL || parse(copies[j], &key, &s, &t) != 0) {
            snprintf(msg, sizeof(msg), "rank %d published a bad address \"%s\"", j, addrs[j]);
            tp->p.report(tp->p.report_ctx, HOOP_ERR_INTERNAL, j, msg);
            rc = HOOP_ERR_INTERNAL;
            break;
        }
        int same_host = strcmp(key, tp->key) == 0;
        int route = same_host && tp->ops[T_SHM] != NULL && s[0] != '\0' ? T_SHM : T_TCP;
        if (route == T_TCP && (tp->ops[T_TCP] == NULL || t[0] == '\0')) {
            snprintf(msg, sizeof(msg), "HOOP_TRANSPORT=%s but rank %d is %s", tp->p.cfg->transport,
                     j, same_host ? "not using shared memory" : "on another host: use auto or tcp");
            tp->p.report(tp->p.report_ctx, HOOP_ERR_INVALID_ARGUMENT, j, msg);
            rc = HOOP_ERR_INVALID_ARGUMENT;
            break;
        }
        tp->route[j] = (uint8_t)route;
        sub[route][j] = route == T_SHM ? s : t;
        tp->npeers[route]++;
        append(lists[route], sizeof(lists[route]), j);
    }
    /* Shared memory first: it waits for nobody, so TCP's accept loop starts without delay. */
    int shm_failed = 0, connected[T_N] = {0, 0};
    if (rc == HOOP_OK && tp->sub[T_SHM] != NULL && tp->npeers[T_SHM] > 0) {
        rc = tp->ops[T_SHM]->connect(tp->sub[T_SHM], sub[T_SHM], deadline);
        shm_failed = rc != HOOP_OK;
        connected[T_SHM] = !shm_failed;
    }
    /* TCP connects even with no peer of its own: that closes its listener, which nobody else
     * may then knock on. And even when shared memory failed: its TCP peers would otherwise wait
     * for this rank's connections until the deadline; they are told why instead. */
    if ((rc == HOOP_OK || shm_failed) && tp->sub[T_TCP] != NULL) {
        char why[sizeof(tp->last)];
        snprintf(why, sizeof(why), "%s", tp->last);
        hoop_result_t trc = tp->ops[T_TCP]->connect(tp->sub[T_TCP], sub[T_TCP], deadline);
        connected[T_TCP] = trc == HOOP_OK && !shm_failed;
        if (shm_failed) tp->ops[T_TCP]->abort(tp->sub[T_TCP], rc, why);
        else rc = trc;
    }
    /* Every peer must know that every other connected (see settle in transport.h). TCP first:
     * every rank's TCP announcement goes out before it waits on shared memory. */
    static const int order[T_N] = {T_TCP, T_SHM};
    for (int i = 0; i < T_N && rc == HOOP_OK; i++) {
        int t = order[i];
        if (tp->sub[t] != NULL && tp->npeers[t] > 0 && tp->ops[t]->settle != NULL)
            rc = tp->ops[t]->settle(tp->sub[t], deadline);
    }
    /* A failure after a transport connected: its peers wait on this rank there; tell them why. */
    for (int t = 0; t < T_N && rc != HOOP_OK; t++)
        if (connected[t]) tp->ops[t]->abort(tp->sub[t], rc, tp->last);
    if (rc == HOOP_OK)
        HOOP_INFO(tp->p.log, "transport per peer: shm to rank(s) [%s], tcp to rank(s) [%s]",
                  lists[T_SHM], lists[T_TCP]);
out:
    if (copies != NULL)
        for (int j = 0; j < size; j++) free(copies[j]);
    free(copies);
    free(sub[T_SHM]);
    free(sub[T_TCP]);
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
    tp->ops[t]->post(tp->sub[t], x);
}

static void mux_progress(hoop__tp_t *tp, int timeout_ms)
{
    int shm = tp->npeers[T_SHM] > 0, tcp = tp->npeers[T_TCP] > 0;
    if (shm && tcp) {
        tp->ops[T_SHM]->progress(tp->sub[T_SHM], 0);
        if (timeout_ms > 0 && tp->shm_wait >= 0) {
            /* One sleep for both: TCP's poll() also watches shared memory's bell. */
            if (!tp->ops[T_SHM]->arm(tp->sub[T_SHM]))
                tp->ops[T_TCP]->progress(tp->sub[T_TCP], timeout_ms);
            else
                tp->ops[T_TCP]->progress(tp->sub[T_TCP], 0);
        } else {
            /* No bell: sleep in TCP's poll() a millisecond at a time. */
            tp->ops[T_TCP]->progress(tp->sub[T_TCP], timeout_ms > 0 ? 1 : 0);
        }
        tp->ops[T_SHM]->progress(tp->sub[T_SHM], 0);
    } else if (shm || tcp) {
        int t = shm ? T_SHM : T_TCP;
        tp->ops[t]->progress(tp->sub[t], timeout_ms);
    } else if (timeout_ms > 0) {
        usleep(1000);
    }
}

static uint64_t mux_moved(hoop__tp_t *tp, int peer)
{
    int t = peer >= 0 && peer < tp->p.size ? tp->route[peer] : T_SELF;
    if (t == T_SELF || tp->sub[t] == NULL || tp->ops[t]->moved == NULL) return 0;
    return tp->ops[t]->moved(tp->sub[t], peer);
}

static void mux_wake(hoop__tp_t *tp)
{
    for (int t = 0; t < T_N; t++)
        if (tp->sub[t] != NULL) tp->ops[t]->wake(tp->sub[t]);
}

static void mux_abort(hoop__tp_t *tp, hoop_result_t code, const char *reason)
{
    for (int t = 0; t < T_N; t++)
        if (tp->sub[t] != NULL) tp->ops[t]->abort(tp->sub[t], code, reason);
}

const hoop__transport_ops_t hoop__mux_transport = {
    .name = "auto",
    .caps = HOOP_TP_MEM(HOOP__MEM_HOST), /* what every transport it routes to takes */
    .listen = mux_listen,
    .connect = mux_connect,
    .post = mux_post,
    .progress = mux_progress,
    .wake = mux_wake,
    .abort = mux_abort,
    .close = mux_close,
    .moved = mux_moved,
};
