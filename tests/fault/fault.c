/*
 * Fault injection: one job per run, started by this program itself (not hooprun, which stops the
 * whole job when a rank dies, so survivors could not report).
 *
 *   fault --mode MODE [--coll NAME] [--what KIND] [--ranks N] [--transport T] [--seed S]
 *         [--mib M] [--count C] [--timeout S] [--names direct|chain|any] [--victim R]
 *         [--calls mixed|blocking|nonblocking] [--expect mismatch|timeout] [--detect S]
 *         [--hosts ID,ID,...] [--netns NS,NS,...] [--master-addr A] [--sleeper partner]
 *         [--verbose]
 *
 * MODE
 *   kill        every rank loops over one collective on M MiB (blocking and nonblocking calls in
 *               turn, or only one kind with --calls); after two rounds the driver sends
 *               SIGKILL to a random rank at a random moment. Every survivor must fail with
 *               HOOP_ERR_PEER_LOST or HOOP_ERR_ABORTED within 5 s of the kill.
 *   stop        as kill, but SIGSTOP: survivors run with a short timeout (--timeout, default 2 s)
 *               and must fail with HOOP_ERR_TIMEOUT (or learn it from a peer) within timeout + 5 s;
 *               then the stopped rank is continued and must fail and exit on its own.
 *   early-exit  a random rank exits before calling hoop_init: the others' hoop_init must fail
 *               within the init timeout (HOOP_TIMEOUT = --timeout) plus 5 s.
 *   init-kill   a random rank kills itself 0-15 ms after starting hoop_init: the others fail in
 *               hoop_init or in the first collectives, within the timeout plus 5 s.
 *   mismatch    after a correct all-reduce, one rank makes a different call (--what coll, count,
 *               dtype, root, root-none or op) with --count elements: every rank must fail within
 *               5 s, in that call or, where its part needed nothing from the others (a root that
 *               only sends), in the next one; at least one rank must say HOOP_ERR_MISMATCH and
 *               show the difference. Where every rank's first step is to wait for another
 *               (root-none: the root believes another rank is the root), nobody sends, so only
 *               the timeout (--timeout) can tell: --expect timeout. The shared-memory
 *               collectives compare every call before they wait on data, so they tell even
 *               then (--expect mismatch).
 *
 * Kill and stop: with --names direct every survivor's message must name the faulty rank; with
 * chain (the default) it may instead name a survivor whose message leads back to it; with any
 * (for a stop, where the first rank to time out may be waiting on a survivor stuck behind the
 * stopped one) each message need only name some other rank. Every mode: a call after the failure must
 * fail at once, naming itself; every rank must exit by itself; no new hoop entry may be left in
 * /dev/shm. Results of calls that succeed are checked element by element.
 *
 * Layout: by default every rank is on one host. --hosts gives rank r the r-th HOOP_HOSTID of the
 * list (fake hosts: shared memory between equal ids, TCP between the others); --netns starts rank r
 * in the r-th network namespace of the list (real hosts as the kernel sees them; the store then
 * binds --master-addr, an address of the first namespace). --detect bounds the time from a kill
 * to every survivor's failure (default 5 s). With --sleeper partner (kill), a rank on the faulty
 * rank's host (the next rank on a single host) sleeps 2 s outside the library from the round the
 * kill falls in: the others, blocked behind it, must still learn of the death within --detect,
 * whether or not a transfer of theirs waits on the dead rank; the sleeper within --detect of
 * waking.
 *
 * No survivor may end by a signal, whatever the mode: a library must never raise one (SIGPIPE from
 * a write to a peer that is gone, say) in its user's process.
 *
 * The transport comes from --transport or HOOP_TRANSPORT. If the library does not accept it (a
 * transport not built yet), the test is skipped (exit 77).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hoop.h"
#include "../common/colls.h"
#include "../common/testing.h"
#include "../cuda/devbuf.h"

/* Up to 32 (named_ranks keeps a bit per rank); beyond 17 a host takes the shm transport's lazy
 * path (more than 16 local peers). */
#define MAX_RANKS 24
#define DETECT_MAX 5.0 /* seconds from the fault to every survivor's failure */
#define LOOP_MAX 60.0

enum mode { M_KILL, M_STOP, M_EARLY, M_INITKILL, M_MISMATCH };
static const char *const MODE_NAME[] = {"kill", "stop", "early-exit", "init-kill", "mismatch"};

enum { NAMES_DIRECT, NAMES_CHAIN, NAMES_ANY };
static const char *const NAMES_NAME[] = {"direct", "chain", "any"};
enum { CALLS_MIXED, CALLS_BLOCKING, CALLS_NONBLOCKING };
static const char *const CALLS_NAME[] = {"mixed", "blocking", "nonblocking"};

enum what { W_COLL, W_COUNT, W_DTYPE, W_ROOT, W_ROOT_NONE, W_OP, W_N };
static const char *const WHAT_NAME[] = {"coll", "count", "dtype", "root", "root-none", "op"};

typedef struct opts {
    enum mode mode;
    enum test_coll coll;
    enum what what;
    int ranks;
    const char *transport;
    uint64_t seed;
    int seed_given;
    double mib;
    size_t count;       /* mismatch: elements of the mismatched call */
    double timeout;     /* stop: collective timeout; early-exit/init-kill: init timeout */
    int names;          /* NAMES_* */
    int calls;          /* CALLS_* */
    int expect_timeout; /* mismatch: the calls wait on each other, nothing is sent */
    int expect_given;   /* --expect was given: root-none's default (timeout) does not apply */
    int verbose;
    double detect;           /* kill: seconds from the kill to every survivor's failure */
    const char *hosts;       /* HOOP_HOSTID per rank, comma-separated, or NULL */
    const char *netns;       /* network namespace per rank, comma-separated, or NULL */
    const char *master_addr; /* MASTER_ADDR (default 127.0.0.1) */
    int sleep_partner;       /* kill: the faulty rank's host partner sleeps (see above) */
    /* Set by the driver for the ranks. */
    int victim;
    int delay_ms;
    int sleeper; /* the rank that sleeps, or -1 */
} opts_t;

#define SLEEP_S 2.0

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int lookup(const char *const *names, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], s) == 0) return i;
    return -1;
}

/* Item i of a comma-separated list into out; returns the number of items. */
static int list_item(const char *list, int i, char *out, size_t n)
{
    int k = 0;
    if (n > 0) out[0] = '\0';
    for (const char *p = list;; k++) {
        size_t len = strcspn(p, ",");
        if (k == i && n > 0) snprintf(out, n, "%.*s", (int)len, p);
        if (p[len] == '\0') return k + 1;
        p += len + 1;
    }
}

/* ================================================================================================
 * Rank side
 * ============================================================================================== */

static int report_fd = -1;

/* One line to the driver; a single write() of less than PIPE_BUF is never interleaved. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    test_vsay(report_fd, fmt, ap);
    va_end(ap);
}

/* The element i of rank r's input in round it: any 32-bit pattern; sums wrap. */
static uint32_t val(int r, size_t i, int it)
{
    uint32_t x = (uint32_t)i * 2654435761u ^
                 ((uint32_t)r * 0x9e3779b9u + (uint32_t)it * 0x85ebca6bu);
    return x ^ (x >> 15);
}

static uint32_t sum_val(int n, size_t i, int it)
{
    uint32_t s = 0;
    for (int q = 0; q < n; q++) s += val(q, i, it);
    return s;
}

typedef struct rank_ctx {
    hoop_comm_t *c;
    int rank, size;
    int calls;           /* CALLS_* */
    int sleeper;         /* this rank sleeps before round 2 */
    size_t total, block; /* elements per buffer, per rank block */
    uint32_t *s, *r;
    size_t cap;        /* elements of s and r */
    uint32_t *ds, *dr; /* FAULT_DEVICE: their device twins, which the calls are given */
} rank_ctx_t;

/* FAULT_DEVICE=MODULE (a CUDA module, the test double here): every call's buffers are device
 * memory, the inputs copied there before the call and the outputs back after it. */
static uint32_t *dev_in(const rank_ctx_t *x, uint32_t *h, uint32_t *d)
{
    if (d == NULL) return h;
    devbuf_copy(d, h, (x->cap + 1) * sizeof(uint32_t));
    return d;
}
#define S_ARG dev_in(x, x->s, x->ds)
#define R_ARG dev_in(x, x->r, x->dr)

/* Checks n elements of got against want(i); reports the first wrong one. Returns 1 if all right. */
#define CHECK_RANGE(ctx, what, got, n, want_expr)                                                  \
    do {                                                                                           \
        for (size_t i_ = 0; i_ < (n); i_++) {                                                      \
            size_t i = i_;                                                                         \
            uint32_t w_ = (want_expr);                                                             \
            if ((got)[i_] != w_) {                                                                 \
                say("bad %d %s round %d: element %zu is %" PRIu32 ", want %" PRIu32, (ctx)->rank,  \
                    what, it, i_, (got)[i_], w_);                                                  \
                return 0;                                                                          \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* Runs round `it` of collective k, blocking on even rounds and nonblocking on odd ones.
 * Returns HOOP_OK or the error; sets *ok to 0 if a successful call returned wrong data. */
static hoop_result_t one_round(rank_ctx_t *x, enum test_coll k, int it)
{
    hoop_comm_t *c = x->c;
    int p = x->size, me = x->rank, root = it % p;
    int nb = x->calls == CALLS_MIXED ? it & 1 : x->calls == CALLS_NONBLOCKING;
    size_t n = x->total, m = x->block;
    hoop_request_t *rq[2] = {NULL, NULL};
    hoop_result_t rc = HOOP_OK;
    uint32_t *s = x->s, *r = x->r;
    memset(r, 0, n * sizeof *r);

    switch (k) {
    case C_ALLREDUCE:
        for (size_t i = 0; i < n; i++) s[i] = val(me, i, it);
        rc = nb ? hoop_iallreduce(c, S_ARG, R_ARG, n, HOOP_UINT32, HOOP_SUM, &rq[0])
                : hoop_allreduce(c, S_ARG, R_ARG, n, HOOP_UINT32, HOOP_SUM);
        break;
    case C_BROADCAST:
        for (size_t i = 0; i < n; i++) r[i] = me == root ? val(root, i, it) : 0;
        rc = nb ? hoop_ibroadcast(c, R_ARG, n, HOOP_UINT32, root, &rq[0])
                : hoop_broadcast(c, R_ARG, n, HOOP_UINT32, root);
        break;
    case C_REDUCE:
        for (size_t i = 0; i < n; i++) s[i] = val(me, i, it);
        rc = nb ? hoop_ireduce(c, S_ARG, R_ARG, n, HOOP_UINT32, HOOP_SUM, root, &rq[0])
                : hoop_reduce(c, S_ARG, R_ARG, n, HOOP_UINT32, HOOP_SUM, root);
        break;
    case C_ALLGATHER:
        for (size_t i = 0; i < m; i++) s[i] = val(me, i, it);
        rc = nb ? hoop_iallgather(c, S_ARG, R_ARG, m, HOOP_UINT32, &rq[0])
                : hoop_allgather(c, S_ARG, R_ARG, m, HOOP_UINT32);
        break;
    case C_GATHER:
        for (size_t i = 0; i < m; i++) s[i] = val(me, i, it);
        rc = nb ? hoop_igather(c, S_ARG, R_ARG, m, HOOP_UINT32, root, &rq[0])
                : hoop_gather(c, S_ARG, R_ARG, m, HOOP_UINT32, root);
        break;
    case C_SCATTER:
        if (me == root)
            for (size_t i = 0; i < m * (size_t)p; i++) s[i] = val(root, i, it);
        rc = nb ? hoop_iscatter(c, S_ARG, R_ARG, m, HOOP_UINT32, root, &rq[0])
                : hoop_scatter(c, S_ARG, R_ARG, m, HOOP_UINT32, root);
        break;
    case C_REDUCE_SCATTER:
        for (size_t i = 0; i < m * (size_t)p; i++) s[i] = val(me, i, it);
        rc = nb ? hoop_ireduce_scatter(c, S_ARG, R_ARG, m, HOOP_UINT32, HOOP_SUM, &rq[0])
                : hoop_reduce_scatter(c, S_ARG, R_ARG, m, HOOP_UINT32, HOOP_SUM);
        break;
    case C_ALLTOALL:
        for (size_t i = 0; i < m * (size_t)p; i++) s[i] = val(me, i, it);
        rc = nb ? hoop_ialltoall(c, S_ARG, R_ARG, m, HOOP_UINT32, &rq[0])
                : hoop_alltoall(c, S_ARG, R_ARG, m, HOOP_UINT32);
        break;
    case C_BARRIER: rc = nb ? hoop_ibarrier(c, &rq[0]) : hoop_barrier(c); break;
    case C_SENDRECV: {
        /* A ring shift: even ranks send first, odd ranks receive first, so blocking calls meet. */
        int to = (me + 1) % p, from = (me + p - 1) % p;
        for (size_t i = 0; i < n; i++) s[i] = val(me, i, it);
        if (nb) {
            rc = hoop_irecv(c, R_ARG, n, HOOP_UINT32, from, &rq[0]);
            if (rc == HOOP_OK) rc = hoop_isend(c, S_ARG, n, HOOP_UINT32, to, &rq[1]);
        } else if (me % 2 == 0) {
            rc = hoop_send(c, S_ARG, n, HOOP_UINT32, to);
            if (rc == HOOP_OK) rc = hoop_recv(c, R_ARG, n, HOOP_UINT32, from);
        } else {
            rc = hoop_recv(c, R_ARG, n, HOOP_UINT32, from);
            if (rc == HOOP_OK) rc = hoop_send(c, S_ARG, n, HOOP_UINT32, to);
        }
        break;
    }
    case C_COUNT: break;
    }
    for (int j = 0; j < 2; j++)
        if (rq[j] != NULL) {
            hoop_result_t w = hoop_wait(rq[j]);
            if (rc == HOOP_OK) rc = w;
        }
    if (rc == HOOP_OK && x->dr != NULL) devbuf_copy(x->r, x->dr, (x->cap + 1) * sizeof *r);
    return rc;
}

/* Checks the results of a successful round; returns 0 (after saying why) if one is wrong. */
static int check_round(rank_ctx_t *x, enum test_coll k, int it)
{
    int p = x->size, me = x->rank, root = it % p;
    size_t n = x->total, m = x->block;
    const uint32_t *r = x->r;
    switch (k) {
    case C_ALLREDUCE: CHECK_RANGE(x, "allreduce", r, n, sum_val(p, i, it)); break;
    case C_BROADCAST: CHECK_RANGE(x, "broadcast", r, n, val(root, i, it)); break;
    case C_REDUCE:
        if (me == root) CHECK_RANGE(x, "reduce", r, n, sum_val(p, i, it));
        break;
    case C_ALLGATHER:
        CHECK_RANGE(x, "allgather", r, m * (size_t)p, val((int)(i / m), i % m, it));
        break;
    case C_GATHER:
        if (me == root) CHECK_RANGE(x, "gather", r, m * (size_t)p, val((int)(i / m), i % m, it));
        break;
    case C_SCATTER: CHECK_RANGE(x, "scatter", r, m, val(root, (size_t)me * m + i, it)); break;
    case C_REDUCE_SCATTER:
        CHECK_RANGE(x, "reduce_scatter", r, m, sum_val(p, (size_t)me * m + i, it));
        break;
    case C_ALLTOALL:
        CHECK_RANGE(x, "alltoall", r, m * (size_t)p, val((int)(i / m), (size_t)me * m + i % m, it));
        break;
    case C_SENDRECV: CHECK_RANGE(x, "sendrecv", r, n, val((me + p - 1) % p, i, it)); break;
    case C_BARRIER:
    case C_COUNT: break;
    }
    return 1;
}

/* After a failure: a further call must fail at once, naming itself. */
static void follow_up(hoop_comm_t *c, int rank)
{
    double t0 = now_s();
    hoop_result_t rc = hoop_barrier(c);
    double dt = now_s() - t0;
    say("after %d %d %.6f %s", rank, (int)rc, dt, hoop_comm_last_error(c));
}

static void *self_killer(void *arg)
{
    const opts_t *o = arg;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)o->delay_ms * 1000000L};
    nanosleep(&ts, NULL);
    say("kill %d %.6f", o->victim, now_s());
    raise(SIGKILL);
    return NULL;
}

/* Loops over collective k until a call fails; reports it. */
static int fault_loop(rank_ctx_t *x, enum test_coll k)
{
    double start = now_s();
    int it = 0;
    for (;; it++) {
        if (it == 2 && x->sleeper) {
            /* Busy elsewhere (outside the library) while the fault happens. */
            struct timespec ts = {.tv_sec = (time_t)SLEEP_S, .tv_nsec = 0};
            nanosleep(&ts, NULL);
            say("woke %d %.6f", x->rank, now_s());
        }
        hoop_result_t rc = one_round(x, k, it);
        if (rc != HOOP_OK) {
            double t = now_s();
            say("result %d %d %.6f %s", x->rank, (int)rc, t, hoop_comm_last_error(x->c));
            follow_up(x->c, x->rank);
            return 0;
        }
        if (!check_round(x, k, it)) return 1;
        if (it == 1) say("ready %d", x->rank);
        if (now_s() - start > LOOP_MAX) {
            say("done %d %d", x->rank, it + 1);
            return 0;
        }
    }
}

/* The mismatched call: rank `odd` differs from the others in one respect. */
static hoop_result_t mismatch_call(rank_ctx_t *x, enum what w, int odd, size_t n)
{
    hoop_comm_t *c = x->c;
    int me_odd = x->rank == odd;
    uint32_t *s = x->s, *r = x->r;
    for (size_t i = 0; i < n + 1; i++) s[i] = val(x->rank, i, 100);
    switch (w) {
    case W_COLL:
        return me_odd ? hoop_broadcast(c, s, n, HOOP_UINT32, 0)
                      : hoop_allreduce(c, s, r, n, HOOP_UINT32, HOOP_SUM);
    case W_COUNT: return hoop_allreduce(c, s, r, me_odd ? n + 1 : n, HOOP_UINT32, HOOP_SUM);
    case W_DTYPE:
        /* Same element size: only the header can tell them apart. */
        return hoop_allreduce(c, s, r, n, me_odd ? HOOP_FLOAT32 : HOOP_UINT32, HOOP_SUM);
    /* Two ranks each believe they are the root: both send, receivers compare headers. */
    case W_ROOT: return hoop_broadcast(c, s, n, HOOP_UINT32, me_odd ? odd : (odd + 1) % x->size);
    /* The root believes another rank is: nobody sends, so no header can show the difference. */
    case W_ROOT_NONE:
        return hoop_broadcast(c, s, n, HOOP_UINT32, me_odd ? (odd + 1) % x->size : odd);
    case W_OP: return hoop_allreduce(c, s, r, n, HOOP_UINT32, me_odd ? HOOP_MAX : HOOP_SUM);
    case W_N: break;
    }
    return HOOP_ERR_INTERNAL;
}

static int rank_main(const opts_t *o)
{
    const char *fd = getenv("FAULT_REPORT_FD");
    report_fd = fd != NULL ? atoi(fd) : -1;
    if (report_fd < 0) {
        fprintf(stderr, "fault: rank started without FAULT_REPORT_FD\n");
        return 2;
    }
    int rank = atoi(getenv("RANK"));
    if (o->mode == M_EARLY && rank == o->victim) {
        say("exit %d %.6f", rank, now_s());
        _exit(3);
    }
    pthread_t killer;
    if (o->mode == M_INITKILL && rank == o->victim)
        if (pthread_create(&killer, NULL, self_killer, (void *)o) != 0) return 2;

    rank_ctx_t x = {.calls = o->calls, .sleeper = o->mode == M_KILL && rank == o->sleeper};
    double t0 = now_s();
    hoop_result_t rc = hoop_init_from_env(&x.c);
    double t1 = now_s();
    if (rc != HOOP_OK) {
        /* hoop_init has no communicator to hold the message: it goes to the log (stderr). */
        say("result %d %d %.6f hoop_init failed after %.3f s", rank, (int)rc, t1, t1 - t0);
        return 0;
    }
    x.rank = hoop_comm_rank(x.c);
    x.size = hoop_comm_size(x.c);
    if (o->mode == M_EARLY) {
        say("bad %d hoop_init succeeded although rank %d never started", rank, o->victim);
        hoop_comm_destroy(x.c);
        return 1;
    }
    /* Elsewhere a timeout well above the detection limit, so that only detection can pass. */
    double tmo = o->mode == M_STOP || o->mode == M_MISMATCH ? o->timeout : 10.0;
    if (hoop_comm_set_timeout(x.c, tmo) != HOOP_OK) return 2;

    size_t bytes = (size_t)(o->mib * 1048576.0);
    x.block = bytes / sizeof(uint32_t) / (size_t)x.size;
    if (o->mode == M_INITKILL) x.block = 1024;
    if (o->mode == M_MISMATCH) x.block = 1000; /* the all-reduce before the mismatch */
    x.total = x.block * (size_t)x.size;
    size_t cap = o->mode == M_MISMATCH && o->count + 1 > x.total ? o->count + 1 : x.total;
    x.s = calloc(cap + 1, sizeof(uint32_t));
    x.r = calloc(cap + 1, sizeof(uint32_t));
    x.cap = cap;
    const char *dev = getenv("FAULT_DEVICE");
    if (dev != NULL && dev[0] != '\0') {
        char err[300];
        if (devbuf_open(dev, err, sizeof err) != 0) {
            say("bad %d FAULT_DEVICE %s: %s", rank, dev, err);
            return 1;
        }
        x.ds = devbuf_alloc((cap + 1) * sizeof(uint32_t));
        x.dr = devbuf_alloc((cap + 1) * sizeof(uint32_t));
    }
    int bad = 0;
    if (x.s == NULL || x.r == NULL) {
        say("bad %d out of memory", rank);
        bad = 1;
    } else if (o->mode == M_MISMATCH) {
        rc = one_round(&x, C_ALLREDUCE, 0);
        if (rc != HOOP_OK) {
            /* Still finishing it when the others, already past it, found the mismatch and
             * aborted: a fair place to learn of it. */
            say("ready %d", rank);
            say("result %d %d %.6f in the call before: %s", rank, (int)rc, now_s(),
                hoop_comm_last_error(x.c));
            follow_up(x.c, rank);
        } else if (!check_round(&x, C_ALLREDUCE, 0)) {
            bad = 1;
        } else {
            say("ready %d", rank);
            say("begin %d %.6f", rank, now_s());
            rc = mismatch_call(&x, o->what, o->victim, o->count);
            say("result %d %d %.6f %s", rank, (int)rc, now_s(),
                rc == HOOP_OK ? "" : hoop_comm_last_error(x.c));
            /* A rank that had nothing to receive may finish its part: it learns at its next call. */
            follow_up(x.c, rank);
        }
    } else {
        bad = fault_loop(&x, o->mode == M_INITKILL ? C_ALLREDUCE : o->coll);
    }
    double td = now_s();
    hoop_comm_destroy(x.c);
    say("exit %d %.6f destroy took %.3f s", rank, now_s(), now_s() - td);
    free(x.s);
    free(x.r);
    if (x.ds != NULL) devbuf_free(x.ds);
    if (x.dr != NULL) devbuf_free(x.dr);
    return bad;
}

/* ================================================================================================
 * Driver side
 * ============================================================================================== */

typedef struct rstate {
    pid_t pid;
    int ready, exited, wstatus, has_result, has_after, said_exit;
    int code, after_code;
    double t, after_dt, t_exit, t_woke;
    char msg[1024], after_msg[1024];
    int good;             /* its message traces back to the faulty rank */
    int reaped_by_driver; /* it hung and the driver killed it (reported as such) */
} rstate_t;

typedef struct job {
    const opts_t *o;
    int n;
    rstate_t r[MAX_RANKS];
    int rfd;
    char buf[1 << 16];
    size_t blen;
    double t_fault;
    int failures;
    char dir[64];
} job_t;

static void fail(job_t *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(job_t *j, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay_fail(fmt, ap);
    va_end(ap);
    j->failures++;
}

static void handle_line(job_t *j, char *line)
{
    char kind[16];
    int rank, off = 0;
    if (sscanf(line, "%15s %d %n", kind, &rank, &off) < 2 || rank < 0 || rank >= j->n) {
        fail(j, "unreadable report line '%s'", line);
        return;
    }
    rstate_t *r = &j->r[rank];
    const char *rest = line + off;
    if (j->o->verbose) printf("  [%d] %s\n", rank, line);
    if (strcmp(kind, "ready") == 0) {
        r->ready = 1;
    } else if (strcmp(kind, "begin") == 0) {
        double t;
        /* A mismatch counts from the moment the last rank made its call. */
        if (sscanf(rest, "%lf", &t) == 1 && t > j->t_fault) j->t_fault = t;
    } else if (strcmp(kind, "result") == 0) {
        int n2 = 0;
        if (sscanf(rest, "%d %lf %n", &r->code, &r->t, &n2) >= 2) {
            r->has_result = 1;
            snprintf(r->msg, sizeof r->msg, "%s", rest + n2);
        }
    } else if (strcmp(kind, "after") == 0) {
        int n2 = 0;
        if (sscanf(rest, "%d %lf %n", &r->after_code, &r->after_dt, &n2) >= 2) {
            r->has_after = 1;
            snprintf(r->after_msg, sizeof r->after_msg, "%s", rest + n2);
        }
    } else if (strcmp(kind, "woke") == 0) {
        if (sscanf(rest, "%lf", &r->t_woke) != 1) fail(j, "bad woke line '%s'", line);
    } else if (strcmp(kind, "kill") == 0) {
        if (sscanf(rest, "%lf", &j->t_fault) != 1) fail(j, "bad kill line '%s'", line);
    } else if (strcmp(kind, "exit") == 0) {
        r->said_exit = 1;
        if (sscanf(rest, "%lf", &r->t_exit) != 1) r->t_exit = now_s();
        if (j->o->mode == M_EARLY && rank == j->o->victim) j->t_fault = r->t_exit;
    } else if (strcmp(kind, "done") == 0) {
        fail(j, "rank %d ran its loop for %.0f s without noticing the fault (%s)", rank, LOOP_MAX,
             rest);
    } else if (strcmp(kind, "bad") == 0) {
        fail(j, "rank %d: %s", rank, rest);
    } else {
        fail(j, "unknown report line '%s'", line);
    }
}

/* Reads report lines until pred(j) holds or the deadline passes; reaps exited ranks meanwhile. */
static int pump(job_t *j, double deadline, int (*pred)(job_t *))
{
    for (;;) {
        for (int q = 0; q < j->n; q++) {
            if (j->r[q].exited || j->r[q].pid <= 0) continue;
            int st;
            pid_t w = waitpid(j->r[q].pid, &st, WNOHANG);
            if (w == j->r[q].pid) {
                j->r[q].exited = 1;
                j->r[q].wstatus = st;
                if (j->r[q].t_exit == 0) j->r[q].t_exit = now_s();
            }
        }
        if (pred(j)) return 1;
        double left = deadline - now_s();
        if (left <= 0) return 0;
        struct pollfd pf = {.fd = j->rfd, .events = POLLIN};
        int ms = left > 0.05 ? 50 : (int)(left * 1000) + 1;
        if (j->rfd < 0) {
            poll(NULL, 0, ms);
            continue;
        }
        if (poll(&pf, 1, ms) <= 0) continue;
        ssize_t got = read(j->rfd, j->buf + j->blen, sizeof j->buf - 1 - j->blen);
        if (got <= 0) {
            close(j->rfd);
            j->rfd = -1; /* every writer is gone */
            continue;
        }
        j->blen += (size_t)got;
        j->buf[j->blen] = '\0';
        char *start = j->buf, *nl;
        while ((nl = strchr(start, '\n')) != NULL) {
            *nl = '\0';
            handle_line(j, start);
            start = nl + 1;
        }
        j->blen = (size_t)(j->buf + j->blen - start);
        memmove(j->buf, start, j->blen);
    }
}

static int all_ready(job_t *j)
{
    for (int q = 0; q < j->n; q++)
        if (!j->r[q].ready) return j->r[q].exited; /* a dead rank ends the wait */
    return 1;
}

static int survivors_reported(job_t *j)
{
    for (int q = 0; q < j->n; q++) {
        if (q == j->o->victim && j->o->mode != M_MISMATCH) continue;
        if (j->r[q].exited) continue;
        if (!j->r[q].has_result) return 0;
        if (j->r[q].code != HOOP_OK && !j->r[q].has_after && j->o->mode != M_EARLY &&
            j->o->mode != M_INITKILL)
            return 0;
    }
    return 1;
}

static int all_exited(job_t *j)
{
    for (int q = 0; q < j->n; q++)
        if (!j->r[q].exited) return 0;
    return 1;
}

static int drained(job_t *j) { return j->rfd < 0; }

static int begun(job_t *j) { return j->t_fault > 0; }

static int fault_known(job_t *j) { return j->t_fault > 0 || all_exited(j); }

/* The ranks a message names: "rank 3", "rank(s) 1,2", or a rank's rendezvous key
 * ("hoop/addr/3", "hoop/done/3", as hoop_init's timeouts say). */
static unsigned named_ranks(const char *msg)
{
    unsigned set = 0;
    static const char *const keys[] = {"hoop/addr/", "hoop/done/"};
    for (int k = 0; k < 2; k++)
        for (const char *p = msg; (p = strstr(p, keys[k])) != NULL;) {
            p += strlen(keys[k]);
            long v = strtol(p, (char **)&p, 10);
            if (v >= 0 && v < MAX_RANKS) set |= 1u << v;
        }
    for (const char *p = msg; (p = strstr(p, "rank")) != NULL;) {
        p += 4;
        if (strncmp(p, "(s)", 3) == 0) p += 3;
        if (*p != ' ') continue;
        p++;
        while (*p >= '0' && *p <= '9') {
            long v = strtol(p, (char **)&p, 10);
            if (v >= 0 && v < MAX_RANKS) set |= 1u << v;
            if (*p != ',') break;
            p++;
        }
    }
    return set;
}

static unsigned shm_snapshot(char names[][256], int cap, int *n)
{
    *n = 0;
    DIR *d = opendir("/dev/shm");
    if (d == NULL) return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcasestr(e->d_name, "hoop") != NULL && *n < cap)
            snprintf(names[(*n)++], 256, "%s", e->d_name);
    closedir(d);
    return 1;
}

/* Whether the library takes HOOP_TRANSPORT as it is set: a single-rank init. */
static int transport_accepted(void)
{
    hoop_comm_t *c = NULL;
    hoop_result_t rc = hoop_init(&c, "env://", 0, 1);
    if (rc == HOOP_OK) hoop_comm_destroy(c);
    return !(rc == HOOP_ERR_INVALID_ARGUMENT || rc == HOOP_ERR_UNSUPPORTED);
}

static void print_rank_logs(job_t *j)
{
    for (int q = 0; q < j->n; q++) {
        char path[128], line[1024];
        snprintf(path, sizeof path, "%s/rank%d.log", j->dir, q);
        FILE *f = fopen(path, "r");
        if (f == NULL) continue;
        while (fgets(line, sizeof line, f) != NULL) printf("  [%d log] %s", q, line);
        fclose(f);
        unlink(path);
    }
    rmdir(j->dir);
}

/* hoop_init's sentence, from the rank's log, appended to its result. */
static void add_init_reason(job_t *j, int q)
{
    char path[128], line[1024];
    snprintf(path, sizeof path, "%s/rank%d.log", j->dir, q);
    FILE *f = fopen(path, "r");
    if (f == NULL) return;
    while (fgets(line, sizeof line, f) != NULL) {
        char *at = strstr(line, "hoop_init failed:");
        if (at == NULL) continue;
        line[strcspn(line, "\n")] = '\0';
        size_t used = strlen(j->r[q].msg);
        snprintf(j->r[q].msg + used, sizeof j->r[q].msg - used, " (log: %s)", at + 17);
        break;
    }
    fclose(f);
}

static int rank_log_has(job_t *j, int q, const char *needle)
{
    char path[128], line[1024];
    snprintf(path, sizeof path, "%s/rank%d.log", j->dir, q);
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    int hit = 0;
    while (!hit && fgets(line, sizeof line, f) != NULL) hit = strstr(line, needle) != NULL;
    fclose(f);
    return hit;
}

static int spawn(job_t *j, char **argv_self, int wfd, int port)
{
    for (int q = 0; q < j->n; q++) {
        pid_t pid = fork();
        if (pid < 0) return -1;
        if (pid == 0) {
            char v[32], path[128];
            snprintf(path, sizeof path, "%s/rank%d.log", j->dir, q);
            int lf = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (lf >= 0) dup2(lf, 2);
            snprintf(v, sizeof v, "%d", q);
            setenv("RANK", v, 1);
            setenv("LOCAL_RANK", v, 1);
            snprintf(v, sizeof v, "%d", j->n);
            setenv("WORLD_SIZE", v, 1);
            setenv("LOCAL_WORLD_SIZE", v, 1);
            setenv("MASTER_ADDR", j->o->master_addr ? j->o->master_addr : "127.0.0.1", 1);
            if (j->o->hosts != NULL) {
                list_item(j->o->hosts, q, v, sizeof v);
                setenv("HOOP_HOSTID", v, 1);
            }
            if (j->o->netns != NULL) {
                /* As `ip netns exec` does for the network: join the namespace it mounted. */
                char ns[64];
                list_item(j->o->netns, q, ns, sizeof ns);
                snprintf(path, sizeof path, "/run/netns/%s", ns);
                int nfd = open(path, O_RDONLY | O_CLOEXEC);
                if (nfd < 0 || setns(nfd, CLONE_NEWNET) != 0) {
                    fprintf(stderr, "fault: cannot enter network namespace %s: %s\n", ns,
                            strerror(errno));
                    _exit(126);
                }
                close(nfd);
            }
            snprintf(v, sizeof v, "%d", port);
            setenv("MASTER_PORT", v, 1);
            snprintf(v, sizeof v, "%d", wfd);
            setenv("FAULT_REPORT_FD", v, 1);
            execv("/proc/self/exe", argv_self);
            _exit(127);
        }
        j->r[q].pid = pid;
    }
    return 0;
}

/* Marks survivors whose message leads back to the faulty rank. */
static void trace_names(job_t *j, int faulty)
{
    for (int q = 0; q < j->n; q++)
        j->r[q].good = q != faulty && j->r[q].has_result &&
                       (named_ranks(j->r[q].msg) >> faulty & 1);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int q = 0; q < j->n; q++) {
            if (q == faulty || j->r[q].good || !j->r[q].has_result) continue;
            unsigned names = named_ranks(j->r[q].msg);
            for (int k = 0; k < j->n; k++)
                if (k != q && (names >> k & 1) && j->r[k].good) {
                    j->r[q].good = changed = 1;
                    break;
                }
        }
    }
}

/* A rank that is not the faulty one must end by itself with status 0, never by a signal (a
 * SIGPIPE from a write to a peer that is gone, say). Counts the exit causes for the figures. */
static void check_exit(job_t *j, int q, int *by_signal)
{
    const rstate_t *r = &j->r[q];
    int st = r->wstatus;
    if (r->reaped_by_driver) return; /* failed already as a hang */
    if (WIFSIGNALED(st)) {
        (*by_signal)++;
        fail(j, "rank %d died of signal %d (%s)", q, WTERMSIG(st), strsignal(WTERMSIG(st)));
    } else if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
        fail(j, "rank %d exited with wait status %#x", q, st);
    }
}

/* The call after a failure: it must fail within `limit` seconds, naming itself. */
static void check_after(job_t *j, int q, double limit)
{
    rstate_t *r = &j->r[q];
    if (!r->has_after) {
        fail(j, "rank %d: no report of the call after the failure", q);
        return;
    }
    if (r->after_code == HOOP_OK) fail(j, "rank %d: a call after the failure succeeded", q);
    if (r->after_dt > limit)
        fail(j, "rank %d: a call after the failure took %.3f s", q, r->after_dt);
    if (strstr(r->after_msg, "hoop_barrier") == NULL)
        fail(j, "rank %d: the error of a later call does not name it: '%s'", q, r->after_msg);
}

/* The faulty rank itself: it died, exited, or (stopped, then continued) failed and left. */
static void check_faulty(job_t *j, int q)
{
    const opts_t *o = j->o;
    rstate_t *r = &j->r[q];
    int st = r->wstatus;
    if ((o->mode == M_KILL || o->mode == M_INITKILL) &&
        !(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL))
        fail(j, "rank %d was to die by SIGKILL; wait status %#x", q, st);
    if (o->mode == M_EARLY && !(WIFEXITED(st) && WEXITSTATUS(st) == 3))
        fail(j, "rank %d was to exit with status 3; wait status %#x", q, st);
    if (o->mode == M_STOP) {
        if (!r->has_result || r->code == HOOP_OK)
            fail(j, "the stopped rank %d did not report a failure after SIGCONT", q);
        else
            printf("  rank %d (stopped, then continued): %s: %s\n", q, test_code_name(r->code),
                   r->msg);
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0))
            fail(j, "the stopped rank %d exited with wait status %#x", q, st);
    }
}

/* A rank that never joined: at least one survivor whose hoop_init failed must point at it in its
 * log (its rank, its rendezvous key, or for rank 0 the store it was to serve). */
static void check_init_names(job_t *j, int faulty)
{
    int init_failures = 0, named = 0;
    for (int q = 0; q < j->n; q++) {
        if (q == faulty || strncmp(j->r[q].msg, "hoop_init failed", 16) != 0) continue;
        init_failures++;
        named |= (named_ranks(j->r[q].msg) >> faulty & 1) ||
                 (faulty == 0 && strstr(j->r[q].msg, "rendezvous store") != NULL);
    }
    if (init_failures > 0 && !named)
        fail(j, "no log of a rank whose hoop_init failed points at rank %d", faulty);
}

/* Mismatch: every rank fails in the mismatched call or, if its part needed nothing from the
 * others, in the next one; a rank that detects it names both calls. Returns detection times. */
static int check_mismatch(job_t *j, double *detect, int *by_signal)
{
    const opts_t *o = j->o;
    int p = j->n, v = o->victim, nd = 0, named = 0, in_call = 0;
    int none = o->expect_timeout;
    char want[2][32], alt[32] = "";
    switch (o->what) {
    case W_COLL:
        strcpy(want[0], "broadcast(");
        strcpy(want[1], "allreduce(");
        break;
    case W_COUNT:
        snprintf(want[0], 32, "count=%zu,", o->count + 1);
        snprintf(want[1], 32, "count=%zu,", o->count);
        break;
    case W_DTYPE:
        strcpy(want[0], "float32");
        strcpy(want[1], "uint32");
        break;
    case W_ROOT:
    case W_ROOT_NONE: /* told only where calls are compared before data moves (--expect mismatch) */
        /* Both roots only send: every rank may finish the broadcast, and the stray messages
         * show at the next call, beside that call rather than beside the other root. Whichever
         * stray message is found first (the odd root's or the others') aborts the rest. */
        snprintf(want[0], 32, "root=%d)", v);
        snprintf(alt, sizeof(alt), "root=%d)", (v + 1) % p);
        strcpy(want[1], "broadcast(");
        break;
    case W_OP:
        strcpy(want[0], "max)");
        strcpy(want[1], "sum)");
        break;
    case W_N: break;
    }
    if (none) {
        /* Nothing reached anyone: the sentence can only name the call that waited. */
        strcpy(want[0], "timed out");
        alt[0] = '\0';
        strcpy(want[1], "(call #");
    }
    for (int q = 0; q < p; q++) {
        rstate_t *r = &j->r[q];
        check_exit(j, q, by_signal);
        if (!r->has_result) {
            fail(j, "rank %d reported no result", q);
            continue;
        }
        double dt = r->t - j->t_fault;
        printf("  rank %d%s: %s after %.1f ms%s%s\n", q, q == v ? " (the odd one)" : "",
               test_code_name(r->code), dt * 1e3, r->code ? ": " : "", r->msg);
        int code = r->code;
        double limit = DETECT_MAX + (none ? o->timeout : 0);
        if (code == HOOP_OK) {
            /* Its part is done; the next call must fail, once the others have told it. */
            if (r->has_after)
                printf("  rank %d: then %s after %.1f ms: %s\n", q, test_code_name(r->after_code),
                       r->after_dt * 1e3, r->after_msg);
            code = r->after_code;
            dt = r->t + r->after_dt - j->t_fault;
            if (!r->has_after || r->after_code == HOOP_OK)
                fail(j, "rank %d: neither the mismatched call nor the next one failed", q);
        } else {
            in_call++;
            check_after(j, q, 1.0);
        }
        if (code == HOOP_OK) continue;
        detect[nd++] = dt;
        if (code != HOOP_ERR_PEER_LOST && code != HOOP_ERR_ABORTED &&
            code != (none ? HOOP_ERR_TIMEOUT : HOOP_ERR_MISMATCH))
            fail(j, "rank %d: %s, want %s (or the abort it causes)", q, test_code_name(code),
                 none ? "HOOP_ERR_TIMEOUT" : "HOOP_ERR_MISMATCH");
        if (dt > limit)
            fail(j, "rank %d failed %.3f s after the call (limit %.1f s)", q, dt, limit);
        if (none && code == HOOP_ERR_TIMEOUT && dt < o->timeout - 0.5)
            fail(j, "rank %d timed out after %.3f s, before its %.1f s timeout", q, dt, o->timeout);
        const char *m = r->code == HOOP_OK ? r->after_msg : r->msg;
        if ((strstr(m, want[0]) != NULL || (alt[0] && strstr(m, alt) != NULL)) &&
            strstr(m, want[1]) != NULL)
            named++;
    }
    if (named == 0) fail(j, "no rank's message shows both '%s' and '%s'", want[0], want[1]);
    printf("  %d of %d ranks failed in the mismatched call (or the one before), the others in the "
           "next call\n",
           in_call, p);
    return nd;
}

/* The rank that shares the faulty rank's host (the first one after it), or the next rank. */
static int partner_of(const opts_t *o, int v)
{
    const char *list = o->netns != NULL ? o->netns : o->hosts;
    char mine[64], other[64];
    if (list == NULL) return (v + 1) % o->ranks;
    list_item(list, v, mine, sizeof mine);
    for (int d = 1; d < o->ranks; d++) {
        list_item(list, (v + d) % o->ranks, other, sizeof other);
        if (strcmp(mine, other) == 0) return (v + d) % o->ranks;
    }
    return (v + 1) % o->ranks;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int driver_main(const opts_t *o0, int argc, char **argv)
{
    opts_t o = *o0;
    if (o.transport != NULL) setenv("HOOP_TRANSPORT", o.transport, 1);
    const char *tp = getenv("HOOP_TRANSPORT");
    if (tp == NULL || tp[0] == '\0') tp = "auto";
    if (!transport_accepted()) {
        printf("SKIP: this build of hoop does not accept HOOP_TRANSPORT=%s (hoop_init says so "
               "above); the test runs once the transport exists\n",
               tp);
        return 77;
    }
    if (!o.seed_given) o.seed = (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid();
    uint64_t rng = o.seed;
    int pick = (int)(splitmix(&rng) % (uint64_t)o.ranks);
    if (o.victim < 0 || o.victim >= o.ranks) o.victim = pick;
    o.delay_ms = o.mode == M_INITKILL ? (int)(splitmix(&rng) % 16) : (int)(splitmix(&rng) % 400);
    o.sleeper = o.mode == M_KILL && o.sleep_partner ? partner_of(&o, o.victim) : -1;

    char shm0[64][256], shm1[64][256];
    int nshm0, nshm1;
    shm_snapshot(shm0, 64, &nshm0);

    job_t *j = calloc(1, sizeof *j);
    if (j == NULL) return 2;
    j->o = &o;
    j->n = o.ranks;
    snprintf(j->dir, sizeof j->dir, "/tmp/hoop-fault-XXXXXX");
    if (mkdtemp(j->dir) == NULL) return 2;

    /* The ranks' command line: ours, plus the choices the driver made. */
    char **av = calloc((size_t)argc + 10, sizeof *av);
    char vbuf[32], dbuf[32], sbuf[32];
    int ac = 0;
    for (int i = 0; i < argc; i++) av[ac++] = argv[i];
    snprintf(vbuf, sizeof vbuf, "%d", o.victim);
    snprintf(dbuf, sizeof dbuf, "%d", o.delay_ms);
    av[ac++] = "--as-rank";
    av[ac++] = "--victim";
    av[ac++] = vbuf;
    av[ac++] = "--delay-ms";
    av[ac++] = dbuf;
    snprintf(sbuf, sizeof sbuf, "%d", o.sleeper);
    av[ac++] = "--sleeper-rank";
    av[ac++] = sbuf;
    av[ac] = NULL;

    char tmo[32];
    snprintf(tmo, sizeof tmo, "%g", o.mode == M_EARLY || o.mode == M_INITKILL ? o.timeout : 30.0);
    setenv("HOOP_TIMEOUT", tmo, 1);

    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) return 2;
    /* The write end must survive exec in the ranks. */
    int wfd = fcntl(pfd[1], F_DUPFD, 10);
    close(pfd[1]);
    j->rfd = pfd[0];
    int port = test_free_port();
    printf("fault %s%s%s, %d ranks, HOOP_TRANSPORT=%s, seed %" PRIu64 ": faulty rank %d",
           MODE_NAME[o.mode], o.mode == M_MISMATCH ? " of " : " ",
           o.mode == M_MISMATCH                     ? WHAT_NAME[o.what]
           : (o.mode == M_KILL || o.mode == M_STOP) ? test_coll_name[o.coll]
                                                    : "",
           o.ranks, tp, o.seed, o.victim);
    if (o.mode == M_KILL || o.mode == M_STOP || o.mode == M_INITKILL)
        printf(", delay %d ms", o.delay_ms);
    if (o.sleeper >= 0) printf(", rank %d sleeps %.0f s from round 2", o.sleeper, SLEEP_S);
    printf(" (rerun: --seed %" PRIu64 ")\n", o.seed);
    fflush(stdout);
    double t_start = now_s();
    if (spawn(j, av, wfd, port) != 0) return 2;
    close(wfd);

    int faulty = o.victim;
    if (o.mode == M_KILL || o.mode == M_STOP) {
        if (!pump(j, now_s() + 60, all_ready) || !all_ready(j)) {
            fail(j, "the ranks did not all complete two rounds");
        } else {
            for (int q = 0; q < j->n; q++)
                if (j->r[q].exited) fail(j, "rank %d exited before the fault", q);
            struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)o.delay_ms * 1000000L};
            nanosleep(&ts, NULL);
            j->t_fault = now_s();
            kill(j->r[faulty].pid, o.mode == M_KILL ? SIGKILL : SIGSTOP);
        }
    } else if (o.mode == M_MISMATCH) {
        pump(j, now_s() + 30, all_ready);
        pump(j, now_s() + 1, begun);
    } else {
        pump(j, now_s() + 30, fault_known);
        if (j->t_fault == 0) j->t_fault = t_start;
    }

    /* Every survivor must report; the limit here is generous, the checks below are not. */
    double limit = (o.mode == M_STOP || o.mode == M_EARLY || o.mode == M_INITKILL ? o.timeout : 0) +
                   DETECT_MAX;
    int in_time = pump(j, j->t_fault + limit + 1, survivors_reported);
    if (o.mode == M_STOP && j->r[faulty].pid > 0) kill(j->r[faulty].pid, SIGCONT);
    if (!in_time) {
        /* Whoever has not reported by now hangs: that is the failure, no need to watch it. */
        for (int q = 0; q < j->n; q++)
            if (!j->r[q].exited && !(q == faulty && o.mode != M_MISMATCH) && !j->r[q].has_result)
                fail(j, "rank %d reported nothing within %.1f s of the fault", q, limit + 1);
    } else {
        pump(j, now_s() + 5, all_exited);
    }
    for (int q = 0; q < j->n; q++) {
        if (!j->r[q].exited) {
            fail(j, "rank %d (pid %d) is still running after the reports were due; killing it", q,
                 (int)j->r[q].pid);
            kill(j->r[q].pid, SIGKILL);
            waitpid(j->r[q].pid, &j->r[q].wstatus, 0);
            j->r[q].exited = 1;
            j->r[q].reaped_by_driver = 1;
        }
    }
    pump(j, now_s() + 2, drained); /* the last lines: every writer is gone */

    /* ---- checks ---- */
    double detect[MAX_RANKS];
    int nd = 0, direct = 0, by_signal = 0;
    for (int q = 0; q < j->n; q++)
        if (j->r[q].has_result && strncmp(j->r[q].msg, "hoop_init failed", 16) == 0)
            add_init_reason(j, q);
    if (o.mode == M_MISMATCH)
        nd = check_mismatch(j, detect, &by_signal);
    else
        trace_names(j, faulty);
    for (int q = 0; q < j->n && o.mode != M_MISMATCH; q++) {
        rstate_t *r = &j->r[q];
        if (q == faulty) {
            check_faulty(j, q);
            continue;
        }
        check_exit(j, q, &by_signal);
        if (!r->has_result) {
            fail(j, "rank %d reported no result", q);
            continue;
        }
        /* A rank that slept through the fault can only learn of it once it is back. */
        double from = q == o.sleeper && r->t_woke > j->t_fault ? r->t_woke : j->t_fault;
        double dt = r->t - from;
        int code = r->code;
        printf("  rank %d: %s after %.1f ms%s: %s\n", q, test_code_name(code), dt * 1e3,
               from > j->t_fault ? " (from its wake-up)" : "", r->msg);
        if (code == HOOP_OK) {
            fail(j, "rank %d: the call succeeded", q);
            continue;
        }
        detect[nd++] = dt;
        if (dt < 0) fail(j, "rank %d failed %.3f s before the fault", q, -dt);
        switch (o.mode) {
        case M_KILL:
            if (code != HOOP_ERR_PEER_LOST && code != HOOP_ERR_ABORTED)
                fail(j, "rank %d: %s, want HOOP_ERR_PEER_LOST or HOOP_ERR_ABORTED", q,
                     test_code_name(code));
            if (dt > o.detect)
                fail(j, "rank %d failed %.3f s after the kill (limit %.1f s)", q, dt, o.detect);
            break;
        case M_STOP:
            if (code != HOOP_ERR_TIMEOUT && code != HOOP_ERR_PEER_LOST && code != HOOP_ERR_ABORTED)
                fail(j, "rank %d: %s, want a timeout or its consequence", q, test_code_name(code));
            if (dt < o.timeout - 0.5)
                fail(j, "rank %d failed %.3f s after the stop, before its %.1f s timeout", q, dt,
                     o.timeout);
            if (dt > o.timeout + DETECT_MAX)
                fail(j, "rank %d failed %.3f s after the stop (limit %.1f s)", q, dt,
                     o.timeout + DETECT_MAX);
            break;
        default: /* early-exit, init-kill */
            if (code != HOOP_ERR_TIMEOUT && code != HOOP_ERR_PEER_LOST && code != HOOP_ERR_ABORTED)
                fail(j, "rank %d: %s, want a timeout or a lost peer", q, test_code_name(code));
            if (dt > o.timeout + DETECT_MAX)
                fail(j, "rank %d failed %.3f s after rank %d left (limit %.1f s)", q, dt, faulty,
                     o.timeout + DETECT_MAX);
            break;
        }
        if (strncmp(r->msg, "hoop_init failed", 16) == 0) {
            /* No communicator to hold the sentence: it is in the rank's log. */
            if (!rank_log_has(j, q, "hoop_init failed"))
                fail(j, "rank %d: hoop_init failed without a line in its log", q);
            continue;
        }
        if (named_ranks(r->msg) >> faulty & 1)
            direct++;
        else if (o.names == NAMES_DIRECT)
            fail(j, "rank %d: the message does not name rank %d", q, faulty);
        if ((named_ranks(r->msg) & ~(1u << q)) == 0)
            fail(j, "rank %d: the message names no other rank", q);
        if (!r->good && o.names == NAMES_CHAIN)
            fail(j,
                 "rank %d: the message leads back neither to rank %d nor to a survivor that "
                 "names it",
                 q, faulty);
        check_after(j, q, 1.0);
    }
    if (o.mode == M_EARLY || o.mode == M_INITKILL) check_init_names(j, faulty);

    /* Nothing left behind: the ranks are reaped above; shared memory is checked here. */
    shm_snapshot(shm1, 64, &nshm1);
    for (int a = 0; a < nshm1; a++) {
        int old = 0;
        for (int b = 0; b < nshm0; b++) old |= strcmp(shm1[a], shm0[b]) == 0;
        if (!old) fail(j, "/dev/shm/%s was left behind", shm1[a]);
    }

    qsort(detect, (size_t)nd, sizeof detect[0], cmp_double);
    if (nd > 0)
        printf("FIGURES mode=%s what=%s transport=%s ranks=%d faulty=%d survivors=%d "
               "detect_ms_median=%.1f detect_ms_max=%.1f named_directly=%d by_signal=%d "
               "failures=%d\n",
               MODE_NAME[o.mode],
               o.mode == M_MISMATCH                     ? WHAT_NAME[o.what]
               : (o.mode == M_KILL || o.mode == M_STOP) ? test_coll_name[o.coll]
                                                        : "-",
               tp, j->n, faulty, nd, detect[nd / 2] * 1e3, detect[nd - 1] * 1e3, direct, by_signal,
               j->failures);
    if (j->failures > 0 || o.verbose)
        print_rank_logs(j);
    else {
        for (int q = 0; q < j->n; q++) {
            char path[128];
            snprintf(path, sizeof path, "%s/rank%d.log", j->dir, q);
            unlink(path);
        }
        rmdir(j->dir);
    }
    int failures = j->failures;
    printf("%s (%.1f s)\n", failures ? "FAILED" : "PASSED", now_s() - t_start);
    free(av);
    free(j);
    return failures ? 1 : 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: fault --mode kill|stop|early-exit|init-kill|mismatch [--coll NAME] "
                    "[--what coll|count|dtype|root|op] [--ranks N] [--transport T] [--seed S] "
                    "[--mib M] [--count C] [--timeout S] [--names direct|chain|any] "
                    "[--victim R] [--calls mixed|blocking|nonblocking] "
                    "[--expect mismatch|timeout] [--detect S] [--hosts ID,...] [--netns NS,...] "
                    "[--master-addr A] [--sleeper partner] [--verbose]\n");
    return 2;
}

int main(int argc, char **argv)
{
    opts_t o = {.mode = M_KILL,
                .ranks = 4,
                .mib = 4,
                .count = 1000,
                .timeout = 2,
                .victim = -1,
                .names = NAMES_CHAIN,
                .detect = DETECT_MAX,
                .sleeper = -1};
    int as_rank = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int k;
        if (strcmp(a, "--as-rank") == 0)
            as_rank = 1;
        else if (strcmp(a, "--verbose") == 0)
            o.verbose = 1;
        else if (v == NULL)
            return usage();
        else if (i++, strcmp(a, "--mode") == 0) {
            if ((k = lookup(MODE_NAME, 5, v)) < 0) return usage();
            o.mode = (enum mode)k;
        } else if (strcmp(a, "--coll") == 0) {
            if ((k = lookup(test_coll_name, C_COUNT, v)) < 0) return usage();
            o.coll = (enum test_coll)k;
        } else if (strcmp(a, "--what") == 0) {
            if ((k = lookup(WHAT_NAME, W_N, v)) < 0) return usage();
            o.what = (enum what)k;
        } else if (strcmp(a, "--names") == 0) {
            if ((k = lookup(NAMES_NAME, 3, v)) < 0) return usage();
            o.names = k;
        } else if (strcmp(a, "--expect") == 0) {
            static const char *const ex[] = {"mismatch", "timeout"};
            if ((k = lookup(ex, 2, v)) < 0) return usage();
            o.expect_timeout = k;
            o.expect_given = 1;
        } else if (strcmp(a, "--calls") == 0) {
            if ((k = lookup(CALLS_NAME, 3, v)) < 0) return usage();
            o.calls = k;
        } else if (strcmp(a, "--ranks") == 0)
            o.ranks = atoi(v);
        else if (strcmp(a, "--transport") == 0)
            o.transport = v;
        else if (strcmp(a, "--seed") == 0) {
            o.seed = strtoull(v, NULL, 10);
            o.seed_given = 1;
        } else if (strcmp(a, "--mib") == 0)
            o.mib = atof(v);
        else if (strcmp(a, "--count") == 0)
            o.count = (size_t)strtoull(v, NULL, 10);
        else if (strcmp(a, "--timeout") == 0)
            o.timeout = atof(v);
        else if (strcmp(a, "--victim") == 0)
            o.victim = atoi(v);
        else if (strcmp(a, "--delay-ms") == 0)
            o.delay_ms = atoi(v);
        else if (strcmp(a, "--detect") == 0)
            o.detect = atof(v);
        else if (strcmp(a, "--hosts") == 0)
            o.hosts = v;
        else if (strcmp(a, "--netns") == 0)
            o.netns = v;
        else if (strcmp(a, "--master-addr") == 0)
            o.master_addr = v;
        else if (strcmp(a, "--sleeper-rank") == 0)
            o.sleeper = atoi(v);
        else if (strcmp(a, "--sleeper") == 0) {
            if (strcmp(v, "partner") != 0) return usage();
            o.sleep_partner = 1;
        } else
            return usage();
    }
    if (o.what == W_ROOT_NONE && !o.expect_given) o.expect_timeout = 1;
    char item[8];
    if (o.ranks < 2 || o.ranks > MAX_RANKS || !(o.mib > 0) || !(o.timeout > 0) || o.count == 0 ||
        !(o.detect > 0) || (o.hosts != NULL && list_item(o.hosts, 0, item, 0) != o.ranks) ||
        (o.netns != NULL && list_item(o.netns, 0, item, 0) != o.ranks))
        return usage();
    /* A mismatch needs a second root. */
    if (as_rank) return rank_main(&o);
    return driver_main(&o, argc, argv);
}
