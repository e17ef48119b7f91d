/* Transport conformance: the driver, and the helpers every case uses. How it works:
 * conformance.h. */
#include "conformance.h"

int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void sleep_s(double s)
{
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

void failf(const ctx_t *c, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "  FAIL [%s %s rank %d] line %d: %s\n", c->o->transport, c->cname, c->rank,
            line, msg);
    fflush(stderr);
    if (c->board != NULL) atomic_store(&c->board->v[B_FAILED], 1);
}

void notef(const ctx_t *c, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "  note [%s %s rank %d]: %s\n", c->o->transport, c->cname, c->rank, msg);
    fflush(stderr);
}

void on_report(void *ctx, hoop_result_t code, int peer, const char *msg)
{
    ctx_t *c = ctx;
    if (c->rep.n == 0) {
        c->rep.code = code;
        c->rep.peer = peer;
        snprintf(c->rep.msg, sizeof(c->rep.msg), "%s", msg != NULL ? msg : "(null)");
    }
    c->rep.n++;
    if (c->o->verbose)
        fprintf(stderr, "    report [%s rank %d]: %s, peer %d: %s\n", c->cname, c->rank,
                hoop_error_string(code), peer, msg != NULL ? msg : "(null)");
}

double lim(const ctx_t *c, double s) { return s * c->o->scale; }

/* Waits (not through the transport) until board slot k has all bits of want, or the limit. */
int board_wait(const ctx_t *c, int k, int64_t want, double limit_s)
{
    double end = now_s() + lim(c, limit_s);
    while ((atomic_load(&c->board->v[k]) & want) != want) {
        if (now_s() > end || atomic_load(&c->board->v[B_FAILED])) return -1;
        sleep_s(0.001);
    }
    return 0;
}

/* ---- payload patterns and headers ---- */

uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t seed_of(const ctx_t *c, int src, int dst, uint64_t seq)
{
    return mix(mix(c->o->seed ^ ((uint64_t)src << 48) ^ ((uint64_t)dst << 40)) ^ seq);
}

/* Word by word: both ends run on one host, so the byte order of a word needs no fixing. */
void fill(void *buf, size_t len, uint64_t seed)
{
    uint8_t *b = buf;
    size_t w = 0;
    for (; (w + 1) * 8 <= len; w++) {
        uint64_t v = mix(seed + w);
        memcpy(b + w * 8, &v, 8);
    }
    if (w * 8 < len) {
        uint64_t v = mix(seed + w);
        memcpy(b + w * 8, &v, len - w * 8);
    }
}

/* Offset of the first byte that differs from the pattern, or -1. */
long check_pattern(const void *buf, size_t len, uint64_t seed)
{
    const uint8_t *b = buf;
    for (size_t w = 0; w * 8 < len; w++) {
        uint64_t v = mix(seed + w), g = 0, e = 0;
        size_t n = len - w * 8 < 8 ? len - w * 8 : 8;
        memcpy(&g, b + w * 8, n);
        memcpy(&e, &v, n);
        if (g != e) {
            for (size_t i = 0; i < n; i++)
                if (((const uint8_t *)&g)[i] != ((const uint8_t *)&e)[i]) return (long)(w * 8 + i);
        }
    }
    return -1;
}

/* A receive buffer of len bytes plus a guard that must stay untouched. */
uint8_t *rbuf_new(size_t len)
{
    uint8_t *b = malloc(len + GUARD);
    if (b != NULL) memset(b, GUARD_BYTE, len + GUARD);
    return b;
}

int guard_ok(const uint8_t *b, size_t len)
{
    for (size_t i = 0; i < GUARD; i++)
        if (b[len + i] != GUARD_BYTE) return 0;
    return 1;
}

/* A header whose every field varies with i, so that a field lost on the way shows. Never the
 * abort kind, which a transport may treat as control. */
hoop__wire_hdr_t mkhdr(const ctx_t *c, int src, uint64_t seq, uint64_t i, size_t len)
{
    hoop__wire_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.kind = (uint8_t)(1 + i % HOOP__K_SPLIT);
    h.dtype = (uint8_t)(i % HOOP_DTYPE_COUNT);
    h.op = (uint8_t)((i / 3) % HOOP_OP_COUNT);
    h.root = (int32_t)(i % 5) - 1;
    h.src = (uint32_t)src;
    h.comm_id = c->comm_id;
    h.seq = seq;
    h.count = 0x0123456789abcdefull ^ (i * 0x10001ull) ^ len;
    h.payload_len = len;
    return h;
}

void xinit(hoop__xfer_t *x, int dir, int peer, const hoop__wire_hdr_t *h, void *buf, size_t len)
{
    memset(x, 0, sizeof(*x));
    x->dir = dir;
    x->peer = peer;
    x->hdr = *h;
    x->hdr.payload_len = len;
    x->buf = buf;
    x->len = len;
}

/* Progresses until every transfer is done, or fails naming the ones that are not. */
int drive(ctx_t *c, hoop__xfer_t *const *xs, int n, double limit_s, const char *what)
{
    double end = now_s() + lim(c, limit_s);
    for (;;) {
        int pending = 0;
        for (int i = 0; i < n; i++) pending += !xs[i]->done;
        if (pending == 0) return 0;
        if (atomic_load(&c->board->v[B_FAILED])) {
            fprintf(stderr, "  [%s %s rank %d] stopped waiting (%s): another rank failed\n",
                    c->o->transport, c->cname, c->rank, what);
            return 1;
        }
        if (now_s() > end) {
            for (int i = 0; i < n; i++)
                if (!xs[i]->done) {
                    failf(c, __LINE__,
                          "%s: %d of %d transfer(s) not done after %.1f s; first: "
                          "%s of %zu bytes with rank %d, seq %" PRIu64,
                          what, pending, n, lim(c, limit_s),
                          xs[i]->dir == HOOP__XFER_SEND ? "send" : "recv", xs[i]->len, xs[i]->peer,
                          xs[i]->hdr.seq);
                    break;
                }
            return 1;
        }
        c->ops->progress(c->tp, 50);
    }
}

int drive1(ctx_t *c, hoop__xfer_t *x, double limit_s, const char *what)
{
    return drive(c, &x, 1, limit_s, what);
}

/* A completed receive: status, every header field, the payload and the guard. */
int check_recv(ctx_t *c, const hoop__xfer_t *x, const hoop__wire_hdr_t *sent, uint64_t seed,
               const char *what)
{
    REQUIRE(c, x->done, "%s: not done", what);
    REQUIRE(c, x->status == HOOP_OK, "%s (%zu bytes from rank %d): %s", what, x->len, x->peer,
            hoop_error_string(x->status));
    const hoop__wire_hdr_t *g = &x->got;
    REQUIRE(c,
            g->kind == sent->kind && g->dtype == sent->dtype && g->op == sent->op &&
                g->root == sent->root && g->src == sent->src && g->comm_id == sent->comm_id &&
                g->seq == sent->seq && g->count == sent->count &&
                g->payload_len == sent->payload_len,
            "%s: header arrived as kind %d dtype %d op %d root %d src %u comm %" PRIx64
            " seq %" PRIu64 " count %" PRIx64 " len %" PRIu64
            ", sent kind %d dtype %d op %d root %d src %u comm %" PRIx64 " seq %" PRIu64
            " count %" PRIx64 " len %" PRIu64,
            what, g->kind, g->dtype, g->op, g->root, g->src, g->comm_id, g->seq, g->count,
            g->payload_len, sent->kind, sent->dtype, sent->op, sent->root, sent->src, sent->comm_id,
            sent->seq, sent->count, sent->payload_len);
    if (x->len > 0) {
        long bad = check_pattern(x->buf, x->len, seed);
        REQUIRE(c, bad < 0, "%s: payload of %zu bytes from rank %d differs at byte %ld", what,
                x->len, x->peer, bad);
        REQUIRE(c, guard_ok(x->buf, x->len), "%s: bytes written past the end of a %zu-byte receive",
                what, x->len);
    }
    return 0;
}

int is_fail_code(hoop_result_t r) { return r == HOOP_ERR_PEER_LOST || r == HOOP_ERR_ABORTED; }

/* ---- the out-of-band exchange, over the board ---- */

static hoop_result_t oob_put_to(ctx_t *c, const char *tag, int to, const void *buf, size_t len)
{
    if (len > OOB_DATA || strlen(tag) > HOOP__TP_OOB_TAG_MAX) {
        snprintf(c->oob_err, sizeof(c->oob_err), "out-of-band entry \"%s\" too large", tag);
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    for (int i = 0; i < OOB_ENTRIES; i++) {
        oob_entry_t *e = &c->board->oob[i];
        int free_ = 0;
        if (!atomic_compare_exchange_strong(&e->state, &free_, 1)) continue;
        e->from = c->p.rank;
        e->to = to;
        snprintf(e->tag, sizeof(e->tag), "%s", tag);
        e->len = len;
        memcpy(e->data, buf, len);
        atomic_store(&e->state, 2);
        return HOOP_OK;
    }
    snprintf(c->oob_err, sizeof(c->oob_err), "the board's out-of-band table is full");
    return HOOP_ERR_NO_MEMORY;
}

static hoop_result_t oob_get_from(ctx_t *c, const char *tag, int from, int to, void *buf,
                                  size_t cap, size_t *len, double deadline)
{
    for (;;) {
        for (int i = 0; i < OOB_ENTRIES; i++) {
            oob_entry_t *e = &c->board->oob[i];
            if (atomic_load(&e->state) != 2 || e->from != from || e->to != to ||
                strcmp(e->tag, tag) != 0)
                continue;
            *len = e->len;
            memcpy(buf, e->data, e->len < cap ? e->len : cap);
            return HOOP_OK;
        }
        if (now_s() > deadline) {
            snprintf(c->oob_err, sizeof(c->oob_err), "timed out waiting for rank %d's \"%s\"", from,
                     tag);
            return HOOP_ERR_TIMEOUT;
        }
        sleep_s(0.001);
    }
}

static hoop_result_t oob_put(void *ctx, const char *tag, int peer, const void *buf, size_t len)
{
    return oob_put_to(ctx, tag, peer, buf, len);
}

static hoop_result_t oob_get(void *ctx, const char *tag, int peer, void *buf, size_t cap,
                             size_t *len, double deadline)
{
    ctx_t *c = ctx;
    return oob_get_from(c, tag, peer, c->p.rank, buf, cap, len, deadline);
}

static hoop_result_t oob_allgather(void *ctx, const char *tag, const void *mine, void *all,
                                   size_t len, double deadline)
{
    ctx_t *c = ctx;
    hoop_result_t rc = oob_put_to(c, tag, -1, mine, len);
    for (int j = 0; j < c->p.size && rc == HOOP_OK; j++) {
        size_t got;
        rc = oob_get_from(c, tag, j, -1, (uint8_t *)all + (size_t)j * len, len, &got, deadline);
    }
    return rc;
}

static const char *oob_error(void *ctx) { return ((ctx_t *)ctx)->oob_err; }

void oob_over_board(ctx_t *c)
{
    c->p.oob = (hoop__tp_oob_t){
        .allgather = oob_allgather, .put = oob_put, .get = oob_get, .error = oob_error, .ctx = c};
}

/* ---- the driver ---- */

typedef struct case_def {
    const char *name;
    int (*fn)(ctx_t *);
    int ranks;
    int variants;
    int connect; /* 0: the case sets up its own instances */
    int dies;    /* this rank ends by _exit(0) or SIGKILL on purpose */
    int spin0;   /* run with shm_spin_us = 0 */
    double limit_s;
    int late; /* rank 1 connects late, and the ranks do not wait for each other after */
} case_def_t;

static const case_def_t cases[] = {
    {"exchange", case_exchange, 2, 1, 1, -1, 0, 60, 0},
    {"huge", case_huge, 2, 1, 1, -1, 0, 90, 0},
    {"many-small", case_many, 2, 1, 1, -1, 0, 90, 0},
    {"three-ranks", case_three, 3, 1, 1, -1, 0, 90, 0},
    {"mismatch", case_mismatch, 2, MM_N, 1, -1, 0, 30, 0},
    {"peer-exit", case_peer_exit, 2, 2, 1, 0, 0, 30, 0},
    {"peer-close", case_peer_close, 2, 1, 1, -1, 0, 30, 0},
    {"abort", case_abort, 2, 1, 1, -1, 0, 30, 0},
    {"no-peer", case_noconnect, 1, 1, 0, -1, 0, 60, 0},
    {"wake", case_wake, 2, 1, 1, -1, 0, 40, 0},
    {"wake-pending", case_wake_pending, 2, 1, 1, -1, 0, 30, 0},
    {"idle", case_idle, 2, 1, 1, -1, 1, 30, 0},
    {"close-queued", case_close, 2, 1, 1, -1, 0, 30, 0},
    {"bad-peer", case_badpeer, 2, 1, 1, -1, 0, 30, 0},
    {"memory", case_memory, 2, 1, 1, -1, 0, 30, 0},
    {"realloc", case_realloc, 2, 1, 1, -1, 0, 30, 0},
    {"late-connect", case_late, 2, 1, 1, -1, 0, 30, 1},
    {"probe", case_probe, 2, 1, 1, -1, 0, 60, 0},
};
#define NCASES ((int)(sizeof(cases) / sizeof(cases[0])))

static const char *variant_name(const case_def_t *cd, int v)
{
    if (cd->fn == case_mismatch) return mm_name[v];
    if (cd->fn == case_peer_exit) return v == 0 ? "exit" : "sigkill";
    return NULL;
}

static int read_full(int fd, void *buf, size_t n, double deadline)
{
    size_t got = 0;
    while (got < n) {
        double left = deadline - now_s();
        if (left <= 0) return -1;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int rc = poll(&pf, 1, (int)(left * 1000) + 1);
        if (rc < 0 && errno == EINTR) continue;
        if (rc <= 0) return -1;
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            return -1;
        }
        got += (size_t)r;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = write(fd, (const char *)buf + done, n - done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        done += (size_t)r;
    }
    return 0;
}

static void make_cfg(const opts_t *o, const case_def_t *cd, hoop__config_t *cfg)
{
    hoop__config_defaults(cfg);
    snprintf(cfg->transport, sizeof(cfg->transport), "%s", o->transport);
    if (o->sockets > 0) cfg->sockets_per_peer = o->sockets;
    if (o->ring >= 0) cfg->shm_ring_bytes = (size_t)o->ring;
    if (o->cma >= 0) cfg->shm_cma_bytes = (size_t)o->cma;
    if (cd->spin0) cfg->shm_spin_us = 0;
    if (o->verbose) cfg->log_level = HOOP__LOG_INFO;
}

static int rank_main(const opts_t *o, const case_def_t *cd, int variant, int rank, board_t *board,
                     int up, int down, uint64_t comm_id)
{
    static ctx_t c; /* static: the report callback must not see a dead frame, ever */
    memset(&c, 0, sizeof(c));
    c.o = o;
    c.rank = rank;
    c.size = cd->ranks;
    c.variant = variant;
    c.comm_id = comm_id;
    c.ops = o->ops;
    c.board = board;
    c.cname = cd->name;
    make_cfg(o, cd, &c.cfg);
    hoop__log_open(&c.log, c.cfg.log_level, "", rank);
    c.p.rank = rank;
    c.p.size = cd->ranks;
    c.p.comm_id = comm_id;
    c.p.cfg = &c.cfg;
    c.p.log = &c.log;
    c.p.route_hint = "127.0.0.1";
    c.p.report = on_report;
    c.p.report_ctx = &c;
    oob_over_board(&c);
    int rc = 1;
    if (!cd->connect) {
        rc = cd->fn(&c);
        hoop__log_close(&c.log);
        return rc;
    }
    hoop_result_t r = c.ops->listen(&c.p, &c.tp, c.addr, sizeof(c.addr));
    if (r != HOOP_OK) {
        failf(&c, __LINE__, "listen: %s: %s", hoop_error_string(r), c.rep.msg);
        goto out;
    }
    char table[MAX_RANKS][ADDR_MAX];
    if (write_full(up, c.addr, ADDR_MAX) != 0 ||
        read_full(down, table, (size_t)cd->ranks * ADDR_MAX, now_s() + lim(&c, 20)) != 0) {
        failf(&c, __LINE__, "address exchange through the parent failed");
        goto out;
    }
    const char *addrs[MAX_RANKS];
    for (int i = 0; i < cd->ranks; i++) addrs[i] = table[i];
    if (cd->late && rank == 1) sleep_s(0.3);
    r = c.ops->connect(c.tp, addrs, now_s() + lim(&c, 20));
    if (r != HOOP_OK) {
        failf(&c, __LINE__, "connect: %s: %s", hoop_error_string(r), c.rep.msg);
        goto out;
    }
    /* Every case starts with all ranks connected: what connect() itself promises about that is
     * the late-connect case's business. */
    atomic_fetch_or(&board->v[B_CONNECTED], 1 << rank);
    if (!cd->late && board_wait(&c, B_CONNECTED, (1 << cd->ranks) - 1, 20) != 0) {
        failf(&c, __LINE__, "the other ranks did not connect");
        goto out;
    }
    memset(&c.rep, 0, sizeof(c.rep));
    rc = cd->fn(&c);
out:
    if (c.tp != NULL) c.ops->close(c.tp);
    hoop__log_close(&c.log);
    return rc;
}

static int run_one(const opts_t *o, const case_def_t *cd, int variant, int index)
{
    int n = cd->ranks;
    board_t *board = mmap(NULL, sizeof(board_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                          -1, 0);
    if (board == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memset(board, 0, sizeof(*board));
    uint64_t comm_id = mix(o->seed ^ ((uint64_t)index << 8) ^ (uint64_t)variant) | 1;
    int up[MAX_RANKS][2], down[MAX_RANKS][2];
    pid_t pids[MAX_RANKS];
    for (int i = 0; i < n; i++) {
        if (pipe2(up[i], O_CLOEXEC) != 0 || pipe2(down[i], O_CLOEXEC) != 0) {
            perror("pipe");
            return 1;
        }
    }
    fflush(stdout);
    fflush(stderr);
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        if (pids[i] < 0) {
            perror("fork");
            for (int k = 0; k < i; k++) kill(pids[k], SIGKILL);
            return 1;
        }
        if (pids[i] == 0) {
            for (int k = 0; k < n; k++) {
                if (k != i) {
                    close(up[k][1]);
                    close(down[k][0]);
                }
                close(up[k][0]);
                close(down[k][1]);
            }
            int rc = rank_main(o, cd, variant, i, board, up[i][1], down[i][0], comm_id);
            /* exit(), not _exit(): the leak checkers run at exit. */
            exit(rc == 0 ? 0 : 1);
        }
    }
    for (int i = 0; i < n; i++) {
        close(up[i][1]);
        close(down[i][0]);
    }
    double deadline = t0 + cd->limit_s * o->scale;
    int failed = 0;
    if (cd->connect) {
        char table[MAX_RANKS][ADDR_MAX];
        for (int i = 0; i < n && !failed; i++) {
            if (read_full(up[i][0], table[i], ADDR_MAX, deadline) != 0) {
                fprintf(stderr, "  FAIL [%s %s]: rank %d sent no address\n", o->transport, cd->name,
                        i);
                failed = 1;
            }
        }
        for (int i = 0; i < n && !failed; i++)
            if (write_full(down[i][1], table, (size_t)n * ADDR_MAX) != 0) failed = 1;
    }
    for (int i = 0; i < n; i++) {
        close(up[i][0]);
        close(down[i][1]);
    }
    int left = n, status[MAX_RANKS], done[MAX_RANKS] = {0};
    while (left > 0) {
        for (int i = 0; i < n; i++) {
            if (done[i]) continue;
            pid_t r = waitpid(pids[i], &status[i], WNOHANG);
            if (r == pids[i]) {
                done[i] = 1;
                left--;
                int ok = WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0;
                if (i == cd->dies) ok = 1;
                /* The others get a moment to report what they saw, not the whole limit. */
                if (!ok && now_s() + 5 * o->scale < deadline) deadline = now_s() + 5 * o->scale;
            }
        }
        if (left == 0) break;
        if (failed || now_s() > deadline) {
            if (!failed)
                fprintf(stderr, "  FAIL [%s %s]: still running after %.0f s: killed\n",
                        o->transport, cd->name, cd->limit_s * o->scale);
            failed = 1;
            for (int i = 0; i < n; i++)
                if (!done[i]) kill(pids[i], SIGKILL);
            for (int i = 0; i < n; i++)
                if (!done[i]) waitpid(pids[i], &status[i], 0);
            for (int i = 0; i < n; i++) done[i] = 1;
            break;
        }
        sleep_s(0.002);
    }
    for (int i = 0; i < n && !failed; i++) {
        int st = status[i];
        int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        /* The rank that dies on purpose: any exit status (a leak checker may set one for the
         * buffers it abandons), or SIGKILL. */
        if (i == cd->dies && (WIFEXITED(st) || (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)))
            ok = 1;
        if (!ok) {
            failed = 1;
            if (WIFSIGNALED(st))
                fprintf(stderr, "  FAIL [%s %s]: rank %d killed by signal %d\n", o->transport,
                        cd->name, i, WTERMSIG(st));
        }
    }
    const char *vn = variant_name(cd, variant);
    printf("%s %s %s%s%s (%.2f s)\n", failed ? "FAIL" : "ok  ", o->transport, cd->name,
           vn ? "/" : "", vn ? vn : "", now_s() - t0);
    fflush(stdout);
    munmap(board, sizeof(*board));
    return failed;
}

static void usage(void)
{
    fprintf(stderr, "usage: conformance --transport ");
    for (int t = 0; t < hoop__tp_registry_n; t++) fprintf(stderr, "%s|", hoop__tp_registry[t].name);
    fprintf(stderr, "auto [--sockets N] [--ring BYTES] [--cma BYTES]\n       [--case NAME[,...]] "
                    "[--skip NAME[,...]] [--time-scale F] [--seed S] [--verbose] [--list]\n");
}

static int selected(const char *list, const char *name)
{
    if (list == NULL) return 1;
    size_t n = strlen(name);
    for (const char *p = list; *p != '\0';) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == n && strncmp(p, name, n) == 0) return 1;
        if (e == NULL) break;
        p = e + 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o = {.transport = NULL, .ring = -1, .cma = -1, .scale = 1.0, .seed = 0x600d5eed};
    const char *only = NULL, *skip = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(a, "--list") == 0) {
            for (int k = 0; k < NCASES; k++) printf("%s\n", cases[k].name);
            return 0;
        } else if (strcmp(a, "--verbose") == 0) {
            o.verbose = 1;
            continue;
        } else if (v == NULL) {
            usage();
            return 2;
        }
        i++;
        if (strcmp(a, "--transport") == 0) {
            o.transport = v;
        } else if (strcmp(a, "--sockets") == 0) {
            o.sockets = (int)strtol(v, &end, 10);
            if (*end != '\0' || o.sockets < 1 || o.sockets > 16) return usage(), 2;
        } else if (strcmp(a, "--ring") == 0) {
            o.ring = strtol(v, &end, 10);
            if (*end != '\0' || o.ring < 4096 || (o.ring & (o.ring - 1)) != 0) return usage(), 2;
        } else if (strcmp(a, "--cma") == 0) {
            o.cma = strtol(v, &end, 10);
            if (*end != '\0' || o.cma < 0) return usage(), 2;
        } else if (strcmp(a, "--case") == 0) {
            only = v;
        } else if (strcmp(a, "--skip") == 0) {
            skip = v;
        } else if (strcmp(a, "--time-scale") == 0) {
            o.scale = strtod(v, &end);
            if (*end != '\0' || !(o.scale >= 1.0)) return usage(), 2;
        } else if (strcmp(a, "--seed") == 0) {
            o.seed = strtoull(v, &end, 0);
            if (*end != '\0') return usage(), 2;
        } else {
            usage();
            return 2;
        }
    }
    if (o.transport == NULL) return usage(), 2;
    int row = hoop__tp_find(o.transport);
    if (row >= 0)
        o.ops = hoop__tp_registry[row].ops;
    else if (strcmp(o.transport, "auto") == 0)
        o.ops = &hoop__mux_transport;
    else
        return usage(), 2;
    /* A dead peer must not take the test down with it. */
    signal(SIGPIPE, SIG_IGN);

    int failed = 0, ran = 0;
    double t0 = now_s();
    for (int k = 0; k < NCASES; k++) {
        if (!selected(only, cases[k].name) || (skip != NULL && selected(skip, cases[k].name)))
            continue;
        for (int v = 0; v < cases[k].variants; v++) {
            failed += run_one(&o, &cases[k], v, k);
            ran++;
        }
    }
    if (ran == 0) {
        fprintf(stderr, "no case selected (see --list)\n");
        return 2;
    }
    printf("%s: %d of %d run(s) passed in %.1f s\n", o.transport, ran - failed, ran, now_s() - t0);
    return failed ? 1 : 0;
}
