/*
 * Jobs of forked rank processes and checked collectives for the agreement tests (agree_util.h).
 * The reference results are computed here element by element from the inputs' formula, with
 * integer arithmetic and an encoder per dtype, so a bug in the library's kernels or schedules
 * cannot hide in the reference.
 */
#include "agree_util.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../common/testing.h"

int ag_free_port(void) { return test_free_port(); }

const char *ag_code_name(int code) { return test_code_name(code); }

void ag_say(int fd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    test_vsay(fd, fmt, ap);
    va_end(ap);
}

void ag_clean_environment(void)
{
    static const char *const vars[] = {"RANK",
                                       "WORLD_SIZE",
                                       "LOCAL_RANK",
                                       "LOCAL_WORLD_SIZE",
                                       "MASTER_ADDR",
                                       "MASTER_PORT",
                                       "SLURM_PROCID",
                                       "SLURM_NTASKS",
                                       "OMPI_COMM_WORLD_RANK",
                                       "OMPI_COMM_WORLD_SIZE",
                                       "HOOP_JOB_ID",
                                       "TORCHELASTIC_RUN_ID",
                                       "SLURM_JOB_ID",
                                       "SLURM_STEP_ID",
                                       "PMIX_NAMESPACE",
                                       "OMPI_MCA_ess_base_jobid",
                                       "HOOP_AUTH_KEY",
                                       "HOOP_AUTH_KEY_FILE",
                                       "HOOP_ALGO",
                                       "HOOP_SMALL_BYTES",
                                       "HOOP_CHUNK_BYTES",
                                       "HOOP_TRANSPORT",
                                       "HOOP_SOCKETS_PER_PEER",
                                       "HOOP_SHM_RING_BYTES",
                                       "HOOP_SHM_CMA_BYTES",
                                       "HOOP_SHM_SPIN_US",
                                       "HOOP_HOSTID",
                                       "HOOP_DEBUG",
                                       "HOOP_DEBUG_FILE",
                                       "HOOP_DEBUG_SUBSYS",
                                       "HOOP_TRACE",
                                       "HOOP_TIMEOUT",
                                       "HOOP_SOCKET_IFNAME",
                                       "HOOP_RESTART_COUNT",
                                       "TORCHELASTIC_RESTART_COUNT"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}

uint32_t ag_job_salt(void)
{
    /* The job id as the launchers give it, in hoop's order of precedence. */
    char id[256] = "";
    const char *h = getenv("HOOP_JOB_ID"), *t = getenv("TORCHELASTIC_RUN_ID");
    const char *sj = getenv("SLURM_JOB_ID"), *ss = getenv("SLURM_STEP_ID");
    const char *px = getenv("PMIX_NAMESPACE"), *om = getenv("OMPI_MCA_ess_base_jobid");
    if (h != NULL && h[0])
        snprintf(id, sizeof id, "%s", h);
    else if (t != NULL && t[0])
        snprintf(id, sizeof id, "%s", t);
    else if (sj != NULL && sj[0])
        snprintf(id, sizeof id, "%s.%s", sj, ss != NULL ? ss : "");
    else if (px != NULL && px[0])
        snprintf(id, sizeof id, "%s", px);
    else if (om != NULL && om[0])
        snprintf(id, sizeof id, "%s", om);
    uint32_t x = 2166136261u;
    for (const char *p = id; *p; p++) x = (x ^ (uint8_t)*p) * 16777619u;
    return x;
}

/* ---- jobs ---- */

int ag_job_start(ag_job_t *j, int nproc, int port, ag_env_fn env, ag_rank_fn fn, void *ctx)
{
    memset(j, 0, sizeof *j);
    j->rfd = -1;
    if (nproc < 1 || nproc > AG_MAXPROC) return -1;
    snprintf(j->dir, sizeof j->dir, "/tmp/hoop-agree-XXXXXX");
    if (mkdtemp(j->dir) == NULL) return -1;
    int pfd[2];
    if (pipe(pfd) != 0) return -1;
    j->nproc = nproc;
    j->port = port;
    j->t_start = j->t_last = now_s();
    fflush(NULL); /* or the children would print the driver's buffered output again */
    for (int q = 0; q < nproc; q++) {
        pid_t pid = fork();
        if (pid < 0) {
            j->nproc = q;
            close(pfd[1]);
            j->rfd = pfd[0];
            return -1;
        }
        if (pid == 0) {
            char path[128], v[32];
            snprintf(path, sizeof path, "%s/slot%d.log", j->dir, q);
            int lf = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (lf >= 0) dup2(lf, 2);
            if (dup2(pfd[1], 3) != 3) _exit(102);
            /* Nothing of the driver's other jobs may stay open here: their pipes would not see
             * end-of-file while this process lives. */
            close_range(4, ~0u, 0);
            setenv("MASTER_ADDR", "127.0.0.1", 1);
            snprintf(v, sizeof v, "%d", port);
            setenv("MASTER_PORT", v, 1);
            env(ctx, q);
            int rc = fn(ctx, q, 3);
            fflush(NULL);
            _exit(rc);
        }
        j->pid[q] = pid;
    }
    close(pfd[1]);
    j->rfd = pfd[0];
    return 0;
}

static void reap(ag_job_t *j)
{
    for (int q = 0; q < j->nproc; q++) {
        if (j->exited[q] || j->pid[q] <= 0) continue;
        int st;
        if (waitpid(j->pid[q], &st, WNOHANG) == j->pid[q]) {
            j->exited[q] = 1;
            j->wstatus[q] = st;
        }
    }
}

static void job_read(ag_job_t *j)
{
    if (j->cap - j->len < 4096) {
        size_t cap = j->cap ? j->cap * 2 : 1 << 16;
        char *p = realloc(j->out, cap + 1);
        if (p == NULL) abort();
        j->out = p;
        j->cap = cap;
    }
    ssize_t got = read(j->rfd, j->out + j->len, j->cap - j->len);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (got <= 0) {
        close(j->rfd);
        j->rfd = -1;
        return;
    }
    j->len += (size_t)got;
    j->out[j->len] = '\0';
    j->t_last = now_s();
}

void ag_jobs_pump(ag_job_t **jobs, int n, int ms)
{
    struct pollfd pf[64];
    ag_job_t *who[64];
    int k = 0;
    for (int i = 0; i < n && k < 64; i++) {
        if (jobs[i] == NULL) continue;
        reap(jobs[i]);
        if (jobs[i]->rfd >= 0) {
            pf[k] = (struct pollfd){.fd = jobs[i]->rfd, .events = POLLIN};
            who[k++] = jobs[i];
        }
    }
    if (k == 0) {
        poll(NULL, 0, ms);
        return;
    }
    if (poll(pf, (nfds_t)k, ms) <= 0) return;
    for (int i = 0; i < k; i++)
        if (pf[i].revents != 0) job_read(who[i]);
}

int ag_job_done(const ag_job_t *j)
{
    for (int q = 0; q < j->nproc; q++)
        if (!j->exited[q]) return 0;
    return j->rfd < 0;
}

void ag_job_kill(ag_job_t *j)
{
    for (int q = 0; q < j->nproc; q++)
        if (!j->exited[q] && j->pid[q] > 0) kill(j->pid[q], SIGKILL);
    for (int q = 0; q < j->nproc; q++)
        if (!j->exited[q] && j->pid[q] > 0) {
            waitpid(j->pid[q], &j->wstatus[q], 0);
            j->exited[q] = 1;
        }
    while (j->rfd >= 0) job_read(j);
}

char *ag_job_next_line(ag_job_t *j)
{
    if (j->out == NULL || j->used >= j->len) return NULL;
    char *start = j->out + j->used, *nl = memchr(start, '\n', j->len - j->used);
    if (nl == NULL) return NULL;
    *nl = '\0';
    j->used = (size_t)(nl - j->out) + 1;
    return start;
}

void ag_job_log_path(const ag_job_t *j, int slot, char *buf, size_t n)
{
    snprintf(buf, n, "%s/slot%d.log", j->dir, slot);
}

void ag_job_dump_logs(ag_job_t *j, int print)
{
    if (j->dir[0] == '\0') return;
    for (int q = 0; q < j->nproc; q++) {
        char path[128], line[1200];
        ag_job_log_path(j, q, path, sizeof path);
        FILE *f = print ? fopen(path, "r") : NULL;
        int lines = 0;
        while (f != NULL && fgets(line, sizeof line, f) != NULL) {
            if (++lines > 40) {
                printf("      [slot %d log] ...\n", q);
                break;
            }
            printf("      [slot %d log] %s", q, line);
        }
        if (f != NULL) fclose(f);
        unlink(path);
    }
    rmdir(j->dir);
    j->dir[0] = '\0';
}

void ag_job_free(ag_job_t *j)
{
    if (j->rfd >= 0) close(j->rfd);
    j->rfd = -1;
    free(j->out);
    j->out = NULL;
}

static int has_alt(const char *line, const char *needle)
{
    char alt[256];
    snprintf(alt, sizeof alt, "%s", needle);
    for (char *tok = alt, *bar; tok != NULL; tok = bar) {
        bar = strchr(tok, '|');
        if (bar != NULL) *bar++ = '\0';
        if (*tok != '\0' && strstr(line, tok) != NULL) return 1;
    }
    return 0;
}

int ag_log_has_warn(const char *path, const char *const *needles, int n)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    char line[2048];
    int hit = 0;
    while (!hit && fgets(line, sizeof line, f) != NULL) {
        if (strstr(line, " hoop WARN ") == NULL) continue;
        hit = 1;
        for (int i = 0; i < n && hit; i++) hit = has_alt(line, needles[i]);
    }
    fclose(f);
    return hit;
}

int ag_log_line(const char *path, const char *needle, char *buf, size_t n)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    char line[2048];
    int hit = 0;
    while (!hit && fgets(line, sizeof line, f) != NULL)
        if (strstr(line, needle) != NULL) {
            line[strcspn(line, "\n")] = '\0';
            snprintf(buf, n, "%s", line);
            hit = 1;
        }
    fclose(f);
    return hit;
}

/* ---- values and references ---- */

const char *const ag_coll_names[AG_NCOLL] = {"allreduce",      "broadcast", "reduce",
                                             "allgather",      "gather",    "scatter",
                                             "reduce_scatter", "alltoall",  "barrier"};
const char *const ag_algo_names[AG_NALGO] = {"ring", "rd", "ps", "ps-sharded", "rabenseifner"};

static uint32_t mix(uint32_t a, uint32_t b, uint32_t c)
{
    uint32_t x = a * 0x9e3779b1u ^ (b + 0x7f4a7c15u) * 0x85ebca6bu ^ c * 0xc2b2ae35u;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    return x ^ (x >> 16);
}

int64_t ag_val(int vk, int rank, size_t j, uint32_t salt)
{
    uint32_t h = mix((uint32_t)rank + 1, (uint32_t)j ^ (uint32_t)(j >> 32), salt);
    switch (vk) {
    case AG_VK_SMALL: return h & 3;
    case AG_VK_SIGNED: return (int64_t)(h % 3 + 1) * ((h >> 8) & 1 ? -1 : 1);
    case AG_VK_MED: return (int64_t)(h & 0x1fffff) - 0x100000;
    default: return h;
    }
}

/* Half precision of an integer up to 2048 in magnitude: exact. */
static uint16_t half_of(int64_t v)
{
    if (v == 0) return 0;
    uint16_t sign = v < 0 ? 0x8000 : 0;
    uint64_t a = (uint64_t)(v < 0 ? -v : v);
    int e = 63 - __builtin_clzll(a);
    uint16_t mant = (uint16_t)((a << (10 - e)) & 0x3ff);
    return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | mant);
}

/* The bytes of integer v as dtype dt (wrapping for the integers, exact for the small values the
 * floating types get). */
static void enc(hoop_dtype_t dt, int64_t v, void *dst)
{
    switch (dt) {
    case HOOP_INT8:
    case HOOP_UINT8: {
        uint8_t b = (uint8_t)(uint64_t)v;
        memcpy(dst, &b, 1);
        break;
    }
    case HOOP_INT32:
    case HOOP_UINT32: {
        uint32_t w = (uint32_t)(uint64_t)v;
        memcpy(dst, &w, 4);
        break;
    }
    case HOOP_INT64:
    case HOOP_UINT64: {
        uint64_t w = (uint64_t)v;
        memcpy(dst, &w, 8);
        break;
    }
    case HOOP_FLOAT16: {
        uint16_t h = half_of(v);
        memcpy(dst, &h, 2);
        break;
    }
    case HOOP_BFLOAT16: {
        float f = (float)v;
        uint32_t bits;
        memcpy(&bits, &f, 4);
        uint16_t h = (uint16_t)(bits >> 16);
        memcpy(dst, &h, 2);
        break;
    }
    case HOOP_FLOAT32: {
        float f = (float)v;
        memcpy(dst, &f, 4);
        break;
    }
    case HOOP_FLOAT64: {
        double d = (double)v;
        memcpy(dst, &d, 8);
        break;
    }
    default: break;
    }
}

/* op over ranks 0..p-1 of element j, in the integers (sums and products wrap as the fixed-width
 * integer types do; the floating types only ever see values where this is exact). */
static int64_t fold(const ag_spec_t *s, int p, size_t j)
{
    uint64_t acc = (uint64_t)ag_val(s->vk, 0, j, s->salt);
    int64_t sacc = ag_val(s->vk, 0, j, s->salt);
    for (int r = 1; r < p; r++) {
        int64_t v = ag_val(s->vk, r, j, s->salt);
        switch (s->op) {
        case HOOP_SUM:
        case HOOP_AVG: acc += (uint64_t)v; break;
        case HOOP_PROD: acc *= (uint64_t)v; break;
        case HOOP_MIN: sacc = v < sacc ? v : sacc; break;
        case HOOP_MAX: sacc = v > sacc ? v : sacc; break;
        default: break;
        }
    }
    if (s->op == HOOP_MIN || s->op == HOOP_MAX) return sacc;
    if (s->op == HOOP_AVG) return (int64_t)acc / p; /* exact small sums; C truncates toward 0 */
    return (int64_t)acc;
}

static void send_recv_elems(int coll, size_t n, int p, size_t *ns, size_t *nr)
{
    size_t pn = n * (size_t)p;
    switch (coll) {
    case AG_ALLREDUCE:
    case AG_REDUCE:
        *ns = n;
        *nr = n;
        break;
    case AG_BROADCAST:
        *ns = 0;
        *nr = n;
        break;
    case AG_ALLGATHER:
    case AG_GATHER:
        *ns = n;
        *nr = pn;
        break;
    case AG_SCATTER:
    case AG_REDUCE_SCATTER:
        *ns = pn;
        *nr = n;
        break;
    case AG_ALLTOALL:
        *ns = pn;
        *nr = pn;
        break;
    default: *ns = *nr = 0; break;
    }
}

enum { GUARD = 64 };
static const uint8_t GUARD_BYTE = 0xA5, FILL_BYTE = 0x5A;

const char *ag_spec_describe(const ag_spec_t *s, char *buf, size_t n)
{
    int k = snprintf(buf, n, "%s(count=%zu, %s", ag_coll_names[s->coll], s->count,
                     hoop_dtype_name(s->dtype));
    if (k < 0 || (size_t)k >= n) return buf;
    if (s->coll == AG_ALLREDUCE || s->coll == AG_REDUCE || s->coll == AG_REDUCE_SCATTER)
        k += snprintf(buf + k, n - (size_t)k, ", %s", hoop_op_name(s->op));
    if ((size_t)k < n && (s->coll == AG_BROADCAST || s->coll == AG_REDUCE || s->coll == AG_GATHER ||
                          s->coll == AG_SCATTER))
        k += snprintf(buf + k, n - (size_t)k, ", root=%d", s->root);
    if ((size_t)k < n && s->algo >= 0)
        k += snprintf(buf + k, n - (size_t)k, ", algo=%s", ag_algo_names[s->algo]);
    if ((size_t)k < n) snprintf(buf + k, n - (size_t)k, ")%s", s->nonblocking ? " nb" : "");
    return buf;
}

static hoop_result_t post(hoop_comm_t *c, const ag_spec_t *s, const void *sb, void *rb)
{
    size_t n = s->count;
    hoop_dtype_t dt = s->dtype;
    hoop_request_t *rq = NULL;
    hoop_result_t rc;
    int nb = s->nonblocking;
    switch (s->coll) {
    case AG_ALLREDUCE:
        rc = nb ? hoop_iallreduce(c, sb, rb, n, dt, s->op, &rq)
                : hoop_allreduce(c, sb, rb, n, dt, s->op);
        break;
    case AG_BROADCAST:
        rc = nb ? hoop_ibroadcast(c, rb, n, dt, s->root, &rq)
                : hoop_broadcast(c, rb, n, dt, s->root);
        break;
    case AG_REDUCE:
        rc = nb ? hoop_ireduce(c, sb, rb, n, dt, s->op, s->root, &rq)
                : hoop_reduce(c, sb, rb, n, dt, s->op, s->root);
        break;
    case AG_ALLGATHER:
        rc = nb ? hoop_iallgather(c, sb, rb, n, dt, &rq) : hoop_allgather(c, sb, rb, n, dt);
        break;
    case AG_GATHER:
        rc = nb ? hoop_igather(c, sb, rb, n, dt, s->root, &rq)
                : hoop_gather(c, sb, rb, n, dt, s->root);
        break;
    case AG_SCATTER:
        rc = nb ? hoop_iscatter(c, sb, rb, n, dt, s->root, &rq)
                : hoop_scatter(c, sb, rb, n, dt, s->root);
        break;
    case AG_REDUCE_SCATTER:
        rc = nb ? hoop_ireduce_scatter(c, sb, rb, n, dt, s->op, &rq)
                : hoop_reduce_scatter(c, sb, rb, n, dt, s->op);
        break;
    case AG_ALLTOALL:
        rc = nb ? hoop_ialltoall(c, sb, rb, n, dt, &rq) : hoop_alltoall(c, sb, rb, n, dt);
        break;
    case AG_BARRIER: rc = nb ? hoop_ibarrier(c, &rq) : hoop_barrier(c); break;
    default: return HOOP_ERR_INTERNAL;
    }
    if (rc == HOOP_OK && rq != NULL) rc = hoop_wait(rq);
    return rc;
}

/* Which rank's element, at which index, lands at recv element k (or -1: a reduction of all). */
static void source_of(const ag_spec_t *s, int me, size_t k, int *rank, size_t *j)
{
    size_t n = s->count;
    switch (s->coll) {
    case AG_BROADCAST:
        *rank = s->root;
        *j = k;
        break;
    case AG_ALLGATHER:
    case AG_GATHER:
        *rank = (int)(k / n);
        *j = k % n;
        break;
    case AG_SCATTER:
        *rank = s->root;
        *j = (size_t)me * n + k;
        break;
    case AG_REDUCE_SCATTER:
        *rank = -1;
        *j = (size_t)me * n + k;
        break;
    case AG_ALLTOALL:
        *rank = (int)(k / n);
        *j = (size_t)me * n + k % n;
        break;
    default:
        *rank = -1;
        *j = k;
        break;
    }
}

static int guards_ok(const uint8_t *base, size_t bytes)
{
    for (size_t i = 0; i < GUARD; i++)
        if (base[i] != GUARD_BYTE || base[GUARD + bytes + i] != GUARD_BYTE) return 0;
    return 1;
}

static uint8_t *given_send, *given_recv;
static size_t given_cap;

void ag_use_buffers(uint8_t *send, uint8_t *recv, size_t cap)
{
    given_send = send;
    given_recv = recv;
    given_cap = send != NULL && recv != NULL ? cap : 0;
}

static void release(uint8_t *sb, uint8_t *rb, uint8_t *sref)
{
    if (sb != given_send) free(sb);
    if (rb != given_recv) free(rb);
    free(sref);
}

hoop_result_t ag_run(hoop_comm_t *c, const ag_spec_t *s, ag_outcome_t *o)
{
    memset(o, 0, sizeof *o);
    int p = hoop_comm_size(c), me = hoop_comm_rank(c);
    size_t es = hoop_dtype_size(s->dtype), ns, nr;
    send_recv_elems(s->coll, s->count, p, &ns, &nr);
    /* Rooted collectives: only the root's buffer of the kind it alone uses holds data. */
    size_t sbytes = ns * es, rbytes = nr * es;
    int given = sbytes + 2 * GUARD <= given_cap && rbytes + 2 * GUARD <= given_cap;
    uint8_t *sb = given ? given_send : malloc(sbytes + 2 * GUARD);
    uint8_t *rb = given ? given_recv : malloc(rbytes + 2 * GUARD);
    uint8_t *sref = malloc(sbytes + 1);
    if (sb == NULL || rb == NULL || sref == NULL) {
        release(sb, rb, sref);
        snprintf(o->why, sizeof o->why, "test out of memory");
        o->wrong = 1;
        return o->rc = HOOP_ERR_NO_MEMORY;
    }
    memset(sb, GUARD_BYTE, sbytes + 2 * GUARD);
    memset(rb, GUARD_BYTE, GUARD);
    memset(rb + GUARD, FILL_BYTE, rbytes);
    memset(rb + GUARD + rbytes, GUARD_BYTE, GUARD);
    for (size_t j = 0; j < ns; j++) {
        int src = s->coll == AG_SCATTER ? s->root : me;
        enc(s->dtype, ag_val(s->vk, src, j, s->salt), sb + GUARD + j * es);
    }
    if (s->coll == AG_BROADCAST && me == s->root)
        for (size_t j = 0; j < nr; j++)
            enc(s->dtype, ag_val(s->vk, me, j, s->salt), rb + GUARD + j * es);
    memcpy(sref, sb + GUARD, sbytes);

    if (s->algo >= 0 && s->algo < AG_NALGO) {
        hoop_result_t arc = hoop_comm_set_algo(c, ag_algo_names[s->algo]);
        if (arc != HOOP_OK) {
            o->rc = arc;
            snprintf(o->msg, sizeof o->msg, "hoop_comm_set_algo: %s", hoop_comm_last_error(c));
            release(sb, rb, sref);
            return arc;
        }
    }
    double t0 = now_s();
    o->rc = post(c, s, sb + GUARD, rb + GUARD);
    o->ms = (now_s() - t0) * 1e3;
    if (o->rc != HOOP_OK) snprintf(o->msg, sizeof o->msg, "%s", hoop_comm_last_error(c));

    /* Whatever the outcome, nothing outside the receive buffer may change. */
    if (!guards_ok(sb, sbytes) || !guards_ok(rb, rbytes)) {
        o->wrong = 1;
        snprintf(o->why, sizeof o->why, "a guard byte around a buffer was overwritten");
    } else if (memcmp(sb + GUARD, sref, sbytes) != 0) {
        o->wrong = 1;
        snprintf(o->why, sizeof o->why, "the send buffer was changed");
    }
    int check = o->rc == HOOP_OK && !o->wrong && s->coll != AG_BARRIER &&
                !((s->coll == AG_REDUCE || s->coll == AG_GATHER) && me != s->root);
    uint8_t want[16];
    for (size_t k = 0; check && k < nr; k++) {
        int src;
        size_t j;
        source_of(s, me, k, &src, &j);
        int64_t v = src < 0 ? fold(s, p, j) : ag_val(s->vk, src, j, s->salt);
        enc(s->dtype, v, want);
        if (memcmp(rb + GUARD + k * es, want, es) != 0) {
            uint64_t got = 0, w = 0;
            memcpy(&got, rb + GUARD + k * es, es < 8 ? es : 8);
            memcpy(&w, want, es < 8 ? es : 8);
            snprintf(o->why, sizeof o->why, "element %zu of %zu is 0x%llx, want 0x%llx", k, nr,
                     (unsigned long long)got, (unsigned long long)w);
            o->wrong = 1;
            check = 0;
        }
    }
    release(sb, rb, sref);
    return o->rc;
}
