/*
 * The concrete situations of issue 11 in which hoop returned HOOP_OK with wrong data or broke a
 * promise, each as it was met, checked against references computed here:
 *
 *   scenarios --scenario size --sizes 2,3,3 --transport T
 *       three processes told different WORLD_SIZEs: every one must fail hoop_init with
 *       HOOP_ERR_MISMATCH and log a WARN line with what the ranks said; one that passes runs the
 *       issue's 50 all-reduces of 1000 int32, checked.
 *   scenarios --scenario algo --algos A,B --count N --transport T
 *       at 2 and 3 ranks, each rank in turn calls hoop_comm_set_algo(B) where the others chose A:
 *       every rank fails in that all-reduce or the next call, never HOOP_OK with wrong data, and
 *       a message names both algorithms (or, where no rank receives anything that could show the
 *       difference, every rank times out).
 *   scenarios --scenario stale --key K|--no-key
 *       an old 3-rank job whose rank 2 never comes holds MASTER_PORT; a new job (another
 *       HOOP_JOB_ID, the same key or none) starts on that port: none of its ranks may pass
 *       hoop_init, the ones that reach the old store must name the old job, and the old ranks
 *       must not pass it either (they still miss their rank 2).
 *   scenarios --scenario threads --transport T [--rounds R]
 *       2 ranks, two threads posting an all-reduce on one communicator at the same moment, R
 *       rounds: a result must be right for the calls that were actually paired (the inputs say
 *       which: a thread's call may meet the other thread's on the other rank, which no library
 *       can tell where the posts did not overlap), the late post is HOOP_ERR_INVALID_ARGUMENT
 *       naming the misuse; never a result that is no such pairing.
 *   scenarios --scenario reinit --transport T [--rounds R] [--pairs P] [--key K] [--load N]
 *       3 ranks, R rounds of init / checked all-reduce / destroy in one process on one
 *       MASTER_PORT, with jitter so a fast rank meets the store of the round before; then P
 *       times two inits back to back, both kept and both used; with a HOOP_AUTH_KEY, and N
 *       busy processes beside the job, where asked.
 *   scenarios --scenario identity
 *       2-rank jobs started by hand (MASTER_ADDR/PORT, RANK, WORLD_SIZE), each rank initialising
 *       twice: with neither a job id nor a key, rank 0 warns once that the job has no identity,
 *       naming HOOP_JOB_ID; with HOOP_JOB_ID, a launcher's job id or a key, nobody warns.
 *   scenarios --scenario hooprun --hooprun PATH
 *       hooprun gives each job a HOOP_JOB_ID, the same to all its ranks and another per job; a
 *       job of two hooprun launches (--nnodes 2) still runs.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include "agree_util.h"
#include "../common/testing.h"

static int failures;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay_fail(fmt, ap);
    va_end(ap);
    failures++;
}

typedef struct opts {
    const char *scenario, *tp, *algos, *key, *hooprun;
    int sizes[AG_MAXPROC], nsizes;
    size_t count;
    int rounds, no_key, verbose;
    int pairs, load; /* reinit: back-to-back pairs; busy processes beside the job */
} opts_t;

static void msleep(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Runs the job until it is done or the deadline passes (then kills it). Returns 1 if in time. */
static int run_job(ag_job_t *j, double seconds)
{
    double deadline = now_s() + seconds;
    while (!ag_job_done(j) && now_s() < deadline) {
        ag_job_t *js[1] = {j};
        ag_jobs_pump(js, 1, 50);
    }
    if (ag_job_done(j)) return 1;
    ag_job_kill(j);
    return 0;
}

static void check_exits(const ag_job_t *j, const char *what)
{
    for (int q = 0; q < j->nproc; q++)
        if (!(WIFEXITED(j->wstatus[q]) && WEXITSTATUS(j->wstatus[q]) == 0))
            fail("%s: process %d ended with wait status %#x", what, q, j->wstatus[q]);
}

/* A rank that passed init where it should not have: what it then computes, the way. */
static void fifty_allreduces(hoop_comm_t *c, int slot, int fd)
{
    int ok = 0, wrong = 0, first = HOOP_OK;
    char why[900] = "";
    hoop_comm_set_timeout(c, 2);
    uint32_t job = ag_job_salt();
    for (int it = 0; it < 50; it++) {
        ag_spec_t s = {.coll = AG_ALLREDUCE,
                       .dtype = HOOP_INT32,
                       .op = HOOP_SUM,
                       .algo = -1,
                       .count = 1000,
                       .vk = AG_VK_MED,
                       .salt = job + (uint32_t)it};
        ag_outcome_t o;
        ag_run(c, &s, &o);
        if (o.wrong) {
            if (!wrong) snprintf(why, sizeof why, "call %d: %.200s", it, o.why);
            wrong++;
        }
        if (o.rc == HOOP_OK)
            ok++;
        else {
            first = o.rc;
            snprintf(why + strlen(why), sizeof why - strlen(why), " then %.600s", o.msg);
            break;
        }
    }
    ag_say(fd, "A %d %d %d %d %s", slot, ok, wrong, (int)first, why);
}

/* ================================================================================================
 * size: ranks told different world sizes
 * ============================================================================================== */

typedef struct sctx {
    const opts_t *o;
    char jobid[64];
} sctx_t;

static void size_env(void *ctx, int slot)
{
    const sctx_t *x = ctx;
    char v[16];
    snprintf(v, sizeof v, "%d", slot);
    setenv("RANK", v, 1);
    snprintf(v, sizeof v, "%d", x->o->sizes[slot]);
    setenv("WORLD_SIZE", v, 1);
    setenv("HOOP_TRANSPORT", x->o->tp, 1);
    setenv("HOOP_TIMEOUT", "3", 1);
    setenv("HOOP_JOB_ID", x->jobid, 1);
}

static int init_then_fifty(void *ctx, int slot, int fd)
{
    (void)ctx;
    hoop_comm_t *c = NULL;
    double t0 = now_s();
    hoop_result_t rc = hoop_init_from_env(&c);
    ag_say(fd, "I %d %d %.3f", slot, (int)rc, now_s() - t0);
    if (rc != HOOP_OK) return 0;
    fifty_allreduces(c, slot, fd);
    hoop_comm_destroy(c);
    return 0;
}

typedef struct iresult {
    int got_i, rc, got_a, ok, wrong, first;
    double secs;
    char why[300];
} iresult_t;

static void parse_init_lines(ag_job_t *j, iresult_t *res)
{
    char *line;
    while ((line = ag_job_next_line(j)) != NULL) {
        int slot, rc, ok, wrong, first, off = 0;
        double t;
        if (sscanf(line, "I %d %d %lf", &slot, &rc, &t) == 3 && slot >= 0 && slot < j->nproc) {
            res[slot].got_i = 1;
            res[slot].rc = rc;
            res[slot].secs = t;
        } else if (sscanf(line, "A %d %d %d %d %n", &slot, &ok, &wrong, &first, &off) == 4 &&
                   slot >= 0 && slot < j->nproc) {
            res[slot].got_a = 1;
            res[slot].ok = ok;
            res[slot].wrong = wrong;
            res[slot].first = first;
            snprintf(res[slot].why, sizeof res[slot].why, "%s", line + off);
        }
    }
}

static int scenario_size(const opts_t *o)
{
    sctx_t x = {.o = o};
    snprintf(x.jobid, sizeof x.jobid, "agree-size-%d", (int)getpid());
    int n = o->nsizes;
    printf("size: %d processes, RANK 0..%d, WORLD_SIZE", n, n - 1);
    for (int q = 0; q < n; q++) printf("%s%d", q ? "," : " ", o->sizes[q]);
    printf(", HOOP_TRANSPORT=%s\n", o->tp);
    ag_job_t j;
    if (ag_job_start(&j, n, ag_free_port(), size_env, init_then_fifty, &x) != 0) return 2;
    if (!run_job(&j, 3 + 10)) fail("the processes were still running 13 s after they started");
    iresult_t res[AG_MAXPROC] = {{0}};
    parse_init_lines(&j, res);
    check_exits(&j, "size");
    int named = 0;
    for (int q = 0; q < n; q++) {
        char path[128], line[1200] = "";
        ag_job_log_path(&j, q, path, sizeof path);
        ag_log_line(path, "hoop_init failed", line, sizeof line);
        if (!res[q].got_i) {
            fail("process %d reported nothing", q);
            continue;
        }
        printf("  process %d (WORLD_SIZE=%d): hoop_init %s after %.3f s%s%s\n", q, o->sizes[q],
               ag_code_name(res[q].rc), res[q].secs, line[0] ? ": " : "", line);
        if (res[q].rc == HOOP_OK)
            fail("process %d passed hoop_init; then %d of 50 all-reduces returned HOOP_OK, %d with "
                 "WRONG data (%s)",
                 q, res[q].ok, res[q].wrong, res[q].why);
        else if (res[q].rc != HOOP_ERR_MISMATCH)
            fail("process %d: hoop_init %s, want HOOP_ERR_MISMATCH", q, ag_code_name(res[q].rc));
        if (res[q].secs > 3 + 2) fail("process %d took %.1f s to fail", q, res[q].secs);
        /* Its own sentence: WORLD_SIZE and both values. */
        for (int a = 0; a < n; a++)
            for (int b = 0; b < n; b++) {
                if (o->sizes[a] == o->sizes[b]) continue;
                char va[16], vb[16];
                snprintf(va, sizeof va, "%d", o->sizes[a]);
                snprintf(vb, sizeof vb, "%d", o->sizes[b]);
                const char *nd[3] = {"WORLD_SIZE", va, vb};
                if (ag_log_has_warn(path, nd, 3)) {
                    named++;
                    a = b = n;
                }
            }
    }
    if (named < n)
        fail("%d of %d processes logged a WARN line with WORLD_SIZE and the sizes that differ",
             named, n);
    ag_job_dump_logs(&j, failures > 0 || o->verbose);
    ag_job_free(&j);
    return failures ? 1 : 0;
}

/* ================================================================================================
 * algo: one rank picks another all-reduce algorithm
 * ============================================================================================== */

typedef struct actx {
    const opts_t *o;
    int p, odd, a, b;
    char jobid[64];
} actx_t;

static void algo_env(void *ctx, int slot)
{
    const actx_t *x = ctx;
    char v[16];
    snprintf(v, sizeof v, "%d", slot);
    setenv("RANK", v, 1);
    snprintf(v, sizeof v, "%d", x->p);
    setenv("WORLD_SIZE", v, 1);
    setenv("HOOP_TRANSPORT", x->o->tp, 1);
    setenv("HOOP_TIMEOUT", "5", 1);
    setenv("HOOP_JOB_ID", x->jobid, 1);
}

static int algo_rank(void *ctx, int slot, int fd)
{
    const actx_t *x = ctx;
    hoop_comm_t *c = NULL;
    hoop_result_t rc = hoop_init_from_env(&c);
    if (rc != HOOP_OK) {
        ag_say(fd, "R %d %d 0 %d 0 |hoop_init failed|", slot, (int)rc, (int)rc);
        return 0;
    }
    hoop_comm_set_timeout(c, 2);
    ag_spec_t s = {.coll = AG_ALLREDUCE,
                   .dtype = HOOP_INT32,
                   .op = HOOP_SUM,
                   .algo = slot == x->odd ? x->b : x->a,
                   .count = x->o->count,
                   .vk = AG_VK_MED,
                   .salt = 7};
    ag_outcome_t o1, o2;
    ag_run(c, &s, &o1);
    hoop_comm_set_algo(c, "auto");
    ag_spec_t nx = {.coll = AG_ALLTOALL,
                    .dtype = HOOP_UINT32,
                    .op = HOOP_SUM,
                    .algo = -1,
                    .count = 4,
                    .vk = AG_VK_FULL,
                    .salt = 8};
    ag_run(c, &nx, &o2);
    ag_say(fd, "R %d %d %d %d %d |%s|%s", slot, (int)o1.rc, o1.wrong, (int)o2.rc, o2.wrong,
           o1.wrong ? o1.why : o1.msg, o2.wrong ? o2.why : o2.msg);
    hoop_comm_destroy(c);
    return 0;
}

static int algo_index(const char *name)
{
    for (int i = 0; i < AG_NALGO; i++)
        if (strcmp(ag_algo_names[i], name) == 0) return i;
    return -1;
}

static int scenario_algo(const opts_t *o)
{
    char a[32], *b;
    snprintf(a, sizeof a, "%s", o->algos);
    b = strchr(a, ',');
    if (b == NULL) return 2;
    *b++ = '\0';
    int ia = algo_index(a), ib = algo_index(b);
    if (ia < 0 || ib < 0 || ia == ib) return 2;
    int jobs = 0, wrong = 0, undetected = 0;
    for (int p = 2; p <= 3; p++)
        for (int odd = 0; odd < p; odd++) {
            actx_t x = {.o = o, .p = p, .odd = odd, .a = ia, .b = ib};
            snprintf(x.jobid, sizeof x.jobid, "agree-algo-%d-%d-%d", (int)getpid(), p, odd);
            ag_job_t j;
            if (ag_job_start(&j, p, ag_free_port(), algo_env, algo_rank, &x) != 0) return 2;
            int f0 = failures;
            if (!run_job(&j, 20)) fail("p=%d odd rank %d: still running after 20 s", p, odd);
            check_exits(&j, "algo");
            jobs++;
            char *line;
            int got[AG_MAXPROC] = {0}, cause = 0, both = 0, mismatch = 0;
            char msgs[AG_MAXPROC][800];
            int rc1[AG_MAXPROC], rc2[AG_MAXPROC];
            while ((line = ag_job_next_line(&j)) != NULL) {
                int slot, r1, w1, r2, w2, off = 0;
                if (sscanf(line, "R %d %d %d %d %d %n", &slot, &r1, &w1, &r2, &w2, &off) != 5 ||
                    slot < 0 || slot >= p)
                    continue;
                got[slot] = 1;
                rc1[slot] = r1;
                rc2[slot] = r2;
                snprintf(msgs[slot], sizeof msgs[slot], "%s", line + off);
                if (w1 || w2) {
                    wrong++;
                    fail("p=%d, rank %d ran %s where the others ran %s, count %zu: rank %d: "
                         "HOOP_OK with WRONG data: %s",
                         p, odd, b, a, o->count, slot, line + off);
                }
                if (r1 == HOOP_OK && r2 == HOOP_OK) {
                    undetected++;
                    fail("p=%d, rank %d ran %s where the others ran %s, count %zu: rank %d: the "
                         "call and the next one both returned HOOP_OK",
                         p, odd, b, a, o->count, slot);
                }
                int code = r1 != HOOP_OK ? r1 : r2;
                if (code == HOOP_ERR_MISMATCH) mismatch = 1;
                if (code == HOOP_ERR_MISMATCH || code == HOOP_ERR_TIMEOUT) cause = 1;
                if (code != HOOP_OK && code != HOOP_ERR_MISMATCH && code != HOOP_ERR_ABORTED &&
                    code != HOOP_ERR_TIMEOUT && code != HOOP_ERR_PEER_LOST)
                    fail("p=%d odd rank %d: rank %d: %s, want HOOP_ERR_MISMATCH or what follows it",
                         p, odd, slot, ag_code_name(code));
                if (strstr(line + off, a) != NULL && strstr(line + off, b) != NULL) both = 1;
            }
            for (int q = 0; q < p; q++)
                if (!got[q]) fail("p=%d odd rank %d: rank %d reported nothing", p, odd, q);
            if (!cause) fail("p=%d odd rank %d: no rank said HOOP_ERR_MISMATCH", p, odd);
            /* Where every rank's first step is to wait for one that chose otherwise, nothing
             * that arrives can show it: then all that can be said is the timeout. */
            if (mismatch && !both)
                fail("p=%d odd rank %d: no message names both '%s' and '%s'", p, odd, a, b);
            printf("  %d ranks, rank %d ran %s, the others %s, all-reduce of %zu int32:\n", p, odd,
                   b, a, o->count);
            for (int q = 0; q < p; q++)
                if (got[q])
                    printf("    rank %d: %s, then %s: %.300s\n", q, ag_code_name(rc1[q]),
                           ag_code_name(rc2[q]), msgs[q]);
            ag_job_dump_logs(&j, failures > f0 || o->verbose);
            ag_job_free(&j);
        }
    printf("SUMMARY algo %s/%s count %zu HOOP_TRANSPORT=%s: %d jobs, HOOP_OK with wrong data %d, "
           "ranks that failed neither in the call nor the next %d\n",
           a, b, o->count, o->tp, jobs, wrong, undetected);
    return failures ? 1 : 0;
}

/* ================================================================================================
 * stale: a new job on the port of an old one
 * ============================================================================================== */

typedef struct stctx {
    const opts_t *o;
    const char *jobid;
    int first_rank; /* RANK of slot 0 */
    const char *timeout;
} stctx_t;

static void stale_env(void *ctx, int slot)
{
    const stctx_t *x = ctx;
    char v[16];
    snprintf(v, sizeof v, "%d", x->first_rank + slot);
    setenv("RANK", v, 1);
    setenv("WORLD_SIZE", "3", 1);
    setenv("HOOP_TRANSPORT", "tcp", 1);
    setenv("HOOP_TIMEOUT", x->timeout, 1);
    setenv("HOOP_JOB_ID", x->jobid, 1);
    if (x->o->key != NULL) setenv("HOOP_AUTH_KEY", x->o->key, 1);
}

static int port_listening(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0) close(fd);
    return ok;
}

static int scenario_stale(const opts_t *o)
{
    char old_id[64], new_id[64];
    snprintf(old_id, sizeof old_id, "oldjob-%d", (int)getpid());
    snprintf(new_id, sizeof new_id, "newjob-%d", (int)getpid());
    int port = ag_free_port();
    printf("stale: old job %s (ranks 0 and 1 of 3; rank 2 never comes) on port %d, then new job "
           "%s (ranks 0, 1, 2) on the same port, %s\n",
           old_id, port, new_id, o->key ? "both with one HOOP_AUTH_KEY" : "no key");
    stctx_t ox = {.o = o, .jobid = old_id, .first_rank = 0, .timeout = "8"};
    stctx_t nx = {.o = o, .jobid = new_id, .first_rank = 0, .timeout = "4"};
    ag_job_t oj, nj;
    if (ag_job_start(&oj, 2, port, stale_env, init_then_fifty, &ox) != 0) return 2;
    double t0 = now_s();
    while (!port_listening(port) && now_s() - t0 < 5) msleep(20);
    msleep(200); /* the old ranks have claimed their numbers */
    if (ag_job_start(&nj, 3, port, stale_env, init_then_fifty, &nx) != 0) return 2;
    double deadline = now_s() + 8 + 8;
    while ((!ag_job_done(&oj) || !ag_job_done(&nj)) && now_s() < deadline) {
        ag_job_t *js[2] = {&oj, &nj};
        ag_jobs_pump(js, 2, 50);
    }
    if (!ag_job_done(&oj)) {
        fail("the old job's ranks were still running after 16 s");
        ag_job_kill(&oj);
    }
    if (!ag_job_done(&nj)) {
        fail("the new job's ranks were still running after 16 s");
        ag_job_kill(&nj);
    }
    check_exits(&oj, "old job");
    check_exits(&nj, "new job");
    iresult_t ores[AG_MAXPROC] = {{0}}, nres[AG_MAXPROC] = {{0}};
    parse_init_lines(&oj, ores);
    parse_init_lines(&nj, nres);
    for (int pass = 0; pass < 2; pass++) {
        ag_job_t *j = pass == 0 ? &oj : &nj;
        iresult_t *res = pass == 0 ? ores : nres;
        const char *who = pass == 0 ? "old job" : "new job";
        for (int q = 0; q < j->nproc; q++) {
            char path[128], line[1200] = "";
            ag_job_log_path(j, q, path, sizeof path);
            ag_log_line(path, "hoop_init failed", line, sizeof line);
            if (!res[q].got_i) {
                fail("%s rank %d reported nothing", who, q);
                continue;
            }
            printf("  %s rank %d: hoop_init %s after %.2f s%s%s\n", who, q, ag_code_name(res[q].rc),
                   res[q].secs, line[0] ? ": " : "", line);
            if (res[q].rc == HOOP_OK) {
                fail("%s rank %d passed hoop_init; then %d of 50 all-reduces returned HOOP_OK, %d "
                     "with WRONG data (%s)",
                     who, q, res[q].ok, res[q].wrong, res[q].why);
                continue;
            }
            if (pass == 0 || q == 0)
                continue; /* the old ranks still miss rank 2; the new rank 0
                                                * finds its port taken */
            int want = res[q].rc == HOOP_ERR_MISMATCH || (o->key && res[q].rc == HOOP_ERR_AUTH);
            if (!want)
                fail("new job rank %d: hoop_init %s, want HOOP_ERR_MISMATCH%s", q,
                     ag_code_name(res[q].rc), o->key ? " or HOOP_ERR_AUTH" : "");
            const char *nd[1] = {old_id};
            if (!ag_log_has_warn(path, nd, 1))
                fail("new job rank %d: no WARN line names the other job ('%s')", q, old_id);
        }
    }
    ag_job_dump_logs(&oj, failures > 0 || o->verbose);
    ag_job_dump_logs(&nj, failures > 0 || o->verbose);
    ag_job_free(&oj);
    ag_job_free(&nj);
    return failures ? 1 : 0;
}

/* ================================================================================================
 * threads: two threads post on one communicator at once
 * ============================================================================================== */

typedef struct tshared {
    pthread_barrier_t start, done;
    hoop_comm_t *c;
    int round, me, stop;
    struct {
        hoop_result_t rc;
        int wrong, crossed;
        char msg[300], why[200];
    } out[2];
} tshared_t;

typedef struct targ {
    tshared_t *sh;
    int t;
} targ_t;

static const size_t TCOUNTS[3] = {64, 4096, 65536};

static uint32_t tsalt(int round, int t) { return (uint32_t)round * 2u + (uint32_t)t + 1000u; }

static void *poster(void *arg)
{
    targ_t *a = arg;
    tshared_t *sh = a->sh;
    uint32_t *s = malloc(TCOUNTS[2] * 4), *r = malloc(TCOUNTS[2] * 4);
    for (;;) {
        pthread_barrier_wait(&sh->start);
        if (sh->stop) break;
        int me = sh->me, round = sh->round;
        size_t n = TCOUNTS[round % 3];
        /* Element 0 says which thread of each rank the result came from. */
        s[0] = (uint32_t)(a->t + 1) << (8 * me);
        for (size_t j = 1; j < n; j++)
            s[j] = (uint32_t)ag_val(AG_VK_FULL, me, j, tsalt(round, a->t));
        memset(r, 0xEE, n * 4);
        hoop_result_t rc = hoop_allreduce(sh->c, s, r, n, HOOP_UINT32, HOOP_SUM);
        sh->out[a->t].rc = rc;
        sh->out[a->t].wrong = sh->out[a->t].crossed = 0;
        sh->out[a->t].msg[0] = sh->out[a->t].why[0] = '\0';
        if (rc != HOOP_OK) {
            snprintf(sh->out[a->t].msg, sizeof sh->out[a->t].msg, "%s",
                     hoop_comm_last_error(sh->c));
        } else {
            int tr[2], okt = 1;
            for (int q = 0; q < 2; q++) {
                tr[q] = (int)((r[0] >> (8 * q)) & 0xff) - 1;
                if (tr[q] != 0 && tr[q] != 1) okt = 0;
            }
            sh->out[a->t].crossed = okt && tr[0] != tr[1];
            if ((r[0] >> 16) != 0 || !okt || tr[me] != a->t) {
                sh->out[a->t].wrong = 1;
                snprintf(sh->out[a->t].why, sizeof sh->out[a->t].why,
                         "element 0 is %#x: not the sum of one thread's tag per rank, with this "
                         "thread's own",
                         r[0]);
            }
            for (size_t j = 1; j < n && !sh->out[a->t].wrong; j++) {
                uint32_t want = 0;
                for (int q = 0; q < 2; q++)
                    want += (uint32_t)ag_val(AG_VK_FULL, q, j, tsalt(round, tr[q]));
                if (r[j] != want) {
                    sh->out[a->t].wrong = 1;
                    snprintf(sh->out[a->t].why, sizeof sh->out[a->t].why,
                             "element %zu of %zu is %#x, want %#x (rank 0 thread %d with rank 1 "
                             "thread %d)",
                             j, n, r[j], want, tr[0], tr[1]);
                }
            }
        }
        pthread_barrier_wait(&sh->done);
    }
    free(s);
    free(r);
    return NULL;
}

typedef struct thctx {
    const opts_t *o;
    char jobid[64];
} thctx_t;

static void threads_env(void *ctx, int slot)
{
    const thctx_t *x = ctx;
    char v[16];
    snprintf(v, sizeof v, "%d", slot);
    setenv("RANK", v, 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("HOOP_TRANSPORT", x->o->tp, 1);
    setenv("HOOP_TIMEOUT", "10", 1);
    setenv("HOOP_JOB_ID", x->jobid, 1);
    /* Many small pieces per call, so that two calls in flight at once interleave. */
    setenv("HOOP_CHUNK_BYTES", "4K", 1);
    setenv("HOOP_SMALL_BYTES", "1K", 1);
}

static int named_misuse(const char *m)
{
    return strcasestr(m, "thread") != NULL || strcasestr(m, "concurrent") != NULL ||
           strcasestr(m, "at the same time") != NULL;
}

static int threads_rank(void *ctx, int slot, int fd)
{
    const thctx_t *x = ctx;
    hoop_comm_t *parent = NULL;
    hoop_result_t rc = hoop_init_from_env(&parent);
    if (rc != HOOP_OK) {
        ag_say(fd, "F %d %d", slot, (int)rc);
        return 0;
    }
    hoop_comm_set_timeout(parent, 20);
    tshared_t sh = {.me = slot};
    pthread_barrier_init(&sh.start, NULL, 3);
    pthread_barrier_init(&sh.done, NULL, 3);
    pthread_t th[2];
    targ_t ta[2] = {{&sh, 0}, {&sh, 1}};
    for (int t = 0; t < 2; t++) pthread_create(&th[t], NULL, poster, &ta[t]);
    int okright = 0, okwrong = 0, refused = 0, named = 0, other = 0, rounds = 0, crossed = 0;
    char first_wrong[300] = "", first_other[400] = "", first_refusal[300] = "";
    char first_unnamed[300] = "";
    double t0 = now_s();
    for (int round = 0; round < x->o->rounds; round++) {
        /* Both ranks stop at the same round: the parent decides. */
        uint32_t go = now_s() - t0 < 40 ? 1 : 0, all = 0;
        if (hoop_allreduce(parent, &go, &all, 1, HOOP_UINT32, HOOP_MIN) != HOOP_OK) break;
        if (all == 0) break;
        hoop_comm_t *c = NULL;
        if (hoop_comm_split(parent, 0, slot, &c) != HOOP_OK) {
            snprintf(first_other, sizeof first_other, "split: %s", hoop_comm_last_error(parent));
            break;
        }
        /* Short: a post that one rank refused and the other ran leaves the other waiting. */
        hoop_comm_set_timeout(c, 0.5);
        sh.c = c;
        sh.round = round;
        pthread_barrier_wait(&sh.start);
        pthread_barrier_wait(&sh.done);
        rounds++;
        for (int t = 0; t < 2; t++) {
            if (sh.out[t].wrong) {
                okwrong++;
                if (!first_wrong[0])
                    snprintf(first_wrong, sizeof first_wrong, "round %d thread %d: %s%s%s", round,
                             t, ag_code_name(sh.out[t].rc), sh.out[t].why[0] ? ": " : "",
                             sh.out[t].why);
            } else if (sh.out[t].rc == HOOP_OK) {
                okright++;
                crossed += sh.out[t].crossed;
            } else if (sh.out[t].rc == HOOP_ERR_INVALID_ARGUMENT) {
                refused++;
                if (named_misuse(sh.out[t].msg))
                    named++;
                else if (!first_unnamed[0])
                    snprintf(first_unnamed, sizeof first_unnamed, "'%.280s'", sh.out[t].msg);
                if (!first_refusal[0])
                    snprintf(first_refusal, sizeof first_refusal, "%s", sh.out[t].msg);
            } else {
                other++;
                if (!first_other[0])
                    snprintf(first_other, sizeof first_other, "round %d thread %d: %s: %s", round,
                             t, ag_code_name(sh.out[t].rc), sh.out[t].msg);
            }
        }
        /* Both ranks done with the round before it goes. */
        hoop_barrier(parent);
        hoop_comm_destroy(c);
    }
    sh.stop = 1;
    pthread_barrier_wait(&sh.start);
    for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
    ag_say(fd, "T %d %d %d %d %d %d %d %d |%s|%s|%s|%s", slot, rounds, okright, okwrong, refused,
           named, other, crossed, first_wrong, first_refusal, first_other, first_unnamed);
    hoop_comm_destroy(parent);
    return 0;
}

static int scenario_threads(const opts_t *o)
{
    thctx_t x = {.o = o};
    snprintf(x.jobid, sizeof x.jobid, "agree-threads-%d", (int)getpid());
    printf("threads: 2 ranks, HOOP_TRANSPORT=%s, two threads per rank post an all-reduce on one "
           "communicator at once, %d rounds\n",
           o->tp, o->rounds);
    ag_job_t j;
    if (ag_job_start(&j, 2, ag_free_port(), threads_env, threads_rank, &x) != 0) return 2;
    if (!run_job(&j, 55)) fail("the ranks were still running after 55 s");
    check_exits(&j, "threads");
    char *line;
    int got = 0;
    while ((line = ag_job_next_line(&j)) != NULL) {
        int slot, rounds, okright, okwrong, refused, named, other, crossed, off = 0;
        if (sscanf(line, "F %d %d", &slot, &rounds) == 2) {
            fail("rank %d: hoop_init %s", slot, ag_code_name(rounds));
            continue;
        }
        if (sscanf(line, "T %d %d %d %d %d %d %d %d %n", &slot, &rounds, &okright, &okwrong,
                   &refused, &named, &other, &crossed, &off) != 8)
            continue;
        got++;
        char *f[4] = {NULL, NULL, NULL, NULL}, *p = line + off;
        for (int k = 0; k < 4 && p != NULL; k++) {
            if (*p == '|') p++;
            f[k] = p;
            p = strchr(p, '|');
            if (p != NULL) *p = '\0', p++;
        }
        printf("  rank %d: %d rounds, %d posts: %d HOOP_OK right (%d of them with the other "
               "thread's call on the other rank: where no post overlapped, nothing can tell), %d "
               "HOOP_OK WRONG, %d refused (%d naming the misuse), %d other errors\n",
               slot, rounds, 2 * rounds, okright, crossed, okwrong, refused, named, other);
        if (f[1] && f[1][0]) printf("    a refusal: %s\n", f[1]);
        if (f[2] && f[2][0]) printf("    another error: %s\n", f[2]);
        if (okwrong) fail("rank %d: %d posts returned wrong data (first: %s)", slot, okwrong, f[0]);
        if (refused == 0) fail("rank %d: no late post was refused in %d rounds", slot, rounds);
        /* The other thread's call on the same communicator may replace the sentence before it
         * is read ("valid until the next call on comm"): a few may be lost, not most. */
        if (named < refused)
            printf("    %d refusal(s) without the sentence in hoop_comm_last_error (first: %s)\n",
                   refused - named, f[3] ? f[3] : "");
        if (named * 10 < refused * 9)
            fail(
                "rank %d: %d of %d refusals do not say that two threads posted at once (first: %s)",
                slot, refused - named, refused, f[3] ? f[3] : "");
        if (rounds < 50) fail("rank %d: only %d rounds ran", slot, rounds);
    }
    if (got != 2) fail("%d of 2 ranks reported", got);
    ag_job_dump_logs(&j, failures > 0 || o->verbose);
    ag_job_free(&j);
    return failures ? 1 : 0;
}

/* ================================================================================================
 * reinit: init / destroy / init in one process
 * ============================================================================================== */

typedef struct rctx {
    const opts_t *o;
    char jobid[64];
} rctx_t;

static void reinit_env(void *ctx, int slot)
{
    const rctx_t *x = ctx;
    char v[16];
    snprintf(v, sizeof v, "%d", slot);
    setenv("RANK", v, 1);
    setenv("WORLD_SIZE", "3", 1);
    setenv("HOOP_TRANSPORT", x->o->tp, 1);
    setenv("HOOP_TIMEOUT", "10", 1);
    setenv("HOOP_JOB_ID", x->jobid, 1);
    if (x->o->key != NULL) setenv("HOOP_AUTH_KEY", x->o->key, 1);
}

static int checked(hoop_comm_t *c, uint32_t salt, size_t count, ag_outcome_t *o)
{
    ag_spec_t s = {.coll = AG_ALLREDUCE,
                   .dtype = HOOP_UINT32,
                   .op = HOOP_SUM,
                   .algo = -1,
                   .count = count,
                   .vk = AG_VK_FULL,
                   .salt = salt};
    ag_run(c, &s, o);
    return o->rc == HOOP_OK && !o->wrong;
}

static int reinit_rank(void *ctx, int slot, int fd)
{
    const rctx_t *x = ctx;
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(slot + 1) ^ (uint64_t)getpid();
    for (int round = 0; round < x->o->rounds; round++) {
        hoop_comm_t *c = NULL;
        double t0 = now_s();
        hoop_result_t rc = hoop_init_from_env(&c);
        double ti = now_s() - t0;
        ag_outcome_t o = {0};
        if (rc == HOOP_OK) {
            hoop_comm_set_timeout(c, 5);
            checked(c, 500u + (uint32_t)round, round % 2 ? 5000 : 1000, &o);
        }
        ag_say(fd, "R %d %d %d %.3f %d %d |%s", slot, round, (int)rc, ti, (int)o.rc, o.wrong,
               o.wrong ? o.why : o.msg);
        /* Jitter: some ranks leave at once, others linger, so that a fast rank's next init can
         * meet the store of this round. */
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        msleep((int)((rng >> 33) % 15));
        if (c != NULL) hoop_comm_destroy(c);
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        if ((rng >> 40) & 1) msleep((int)((rng >> 33) % 10));
    }
    /* Two inits back to back, both kept; each used, the second first. The first store closes
     * while a fast rank's second init may be connecting to it. */
    for (int pair = 0; pair < x->o->pairs; pair++) {
        hoop_comm_t *c1 = NULL, *c2 = NULL;
        hoop_result_t r1 = hoop_init_from_env(&c1);
        hoop_result_t r2 = hoop_init_from_env(&c2);
        ag_outcome_t o1 = {0}, o2 = {0};
        if (r2 == HOOP_OK) {
            hoop_comm_set_timeout(c2, 5);
            checked(c2, 900u + 2u * (uint32_t)pair, 3000, &o2);
        }
        if (r1 == HOOP_OK) {
            hoop_comm_set_timeout(c1, 5);
            checked(c1, 901u + 2u * (uint32_t)pair, 700, &o1);
        }
        ag_say(fd, "B %d %d %d %d %d %d %d |%s|%s", slot, (int)r1, (int)r2, (int)o1.rc, o1.wrong,
               (int)o2.rc, o2.wrong, o1.wrong ? o1.why : o1.msg, o2.wrong ? o2.why : o2.msg);
        if (c2 != NULL) hoop_comm_destroy(c2);
        if (c1 != NULL) hoop_comm_destroy(c1);
        /* A failed pair leaves the ranks out of step: the next would only time out. */
        if (r1 != HOOP_OK || r2 != HOOP_OK) break;
    }
    return 0;
}

/* Busy processes beside a job, so that its ranks and their store threads lose the CPU at any
 * moment (the windows where a store closes under a connecting rank open wider). Each spins until
 * killed, or for at most a minute should the driver die first. */
static int start_load(pid_t *pids, int n)
{
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        if (pids[i] < 0) return i;
        if (pids[i] == 0) {
            double end = now_s() + 60;
            volatile unsigned long spin = 0;
            while (now_s() < end) spin++;
            _exit(0);
        }
    }
    return n;
}

static void stop_load(const pid_t *pids, int n)
{
    for (int i = 0; i < n; i++) kill(pids[i], SIGKILL);
    for (int i = 0; i < n; i++) waitpid(pids[i], NULL, 0);
}

static int scenario_reinit(const opts_t *o)
{
    rctx_t x = {.o = o};
    snprintf(x.jobid, sizeof x.jobid, "agree-reinit-%d", (int)getpid());
    printf("reinit: 3 ranks, HOOP_TRANSPORT=%s%s, %d rounds of init / all-reduce / destroy on one "
           "MASTER_PORT, then %d pair(s) of inits back to back, %d busy process(es) beside\n",
           o->tp, o->key != NULL ? " with a key" : "", o->rounds, o->pairs, o->load);
    pid_t load[AG_MAXPROC];
    int nload = start_load(load, o->load < AG_MAXPROC ? o->load : AG_MAXPROC);
    ag_job_t j;
    if (ag_job_start(&j, 3, ag_free_port(), reinit_env, reinit_rank, &x) != 0) {
        stop_load(load, nload);
        return 2;
    }
    if (!run_job(&j, 55)) fail("the ranks were still running after 55 s");
    stop_load(load, nload);
    check_exits(&j, "reinit");
    char *line;
    int rounds_ok = 0, rounds_seen = 0, back = 0;
    double tmax = 0;
    while ((line = ag_job_next_line(&j)) != NULL) {
        int slot, round, rc, orc, w, r1, r2, o1, w1, o2, w2, off = 0;
        double ti;
        if (sscanf(line, "R %d %d %d %lf %d %d %n", &slot, &round, &rc, &ti, &orc, &w, &off) == 6) {
            rounds_seen++;
            if (ti > tmax) tmax = ti;
            if (rc != HOOP_OK)
                fail("rank %d round %d: hoop_init %s (after %.2f s)", slot, round, ag_code_name(rc),
                     ti);
            else if (orc != HOOP_OK || w)
                fail("rank %d round %d: all-reduce %s%s: %s", slot, round, ag_code_name(orc),
                     w ? " with WRONG data" : "", line + off);
            else
                rounds_ok++;
        } else if (sscanf(line, "B %d %d %d %d %d %d %d %n", &slot, &r1, &r2, &o1, &w1, &o2, &w2,
                          &off) == 7) {
            back++;
            if (r1 != HOOP_OK || r2 != HOOP_OK)
                fail("rank %d: two inits back to back: %s, %s", slot, ag_code_name(r1),
                     ag_code_name(r2));
            else if (o1 != HOOP_OK || w1 || o2 != HOOP_OK || w2)
                fail("rank %d: back to back: first communicator %s%s, second %s%s: %s", slot,
                     ag_code_name(o1), w1 ? " WRONG data" : "", ag_code_name(o2),
                     w2 ? " WRONG data" : "", line + off);
        }
    }
    printf(
        "  %d of %d rank-rounds initialised and all-reduced right (slowest init %.3f s); %d of %d "
        "back-to-back pairs reported\n",
        rounds_ok, 3 * o->rounds, tmax, back, 3 * o->pairs);
    if (rounds_seen != 3 * o->rounds)
        fail("%d of %d rank-rounds reported", rounds_seen, 3 * o->rounds);
    /* A failed pair ends the ranks' pairs early (said above); otherwise every one reports. */
    if (back != 3 * o->pairs && failures == 0)
        fail("%d of %d back-to-back pairs reported", back, 3 * o->pairs);
    char path[128], l2[1200];
    for (int q = 0; q < 3; q++) {
        ag_job_log_path(&j, q, path, sizeof path);
        if (ag_log_line(path, " hoop WARN ", l2, sizeof l2))
            printf("  rank %d logged: %s\n", q, l2);
    }
    ag_job_dump_logs(&j, failures > 0 || o->verbose);
    ag_job_free(&j);
    return failures ? 1 : 0;
}

/* ================================================================================================
 * identity: a job with neither a job id nor a key is warned about
 * ============================================================================================== */

typedef struct idcase {
    const char *name, *var, *val; /* var NULL: nothing but MASTER_*, RANK, WORLD_SIZE */
    int warned;                   /* rank 0 must warn (once); rank 1 never does */
} idcase_t;

static void identity_env(void *ctx, int slot)
{
    const idcase_t *x = ctx;
    char v[16];
    snprintf(v, sizeof v, "%d", slot);
    setenv("RANK", v, 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("HOOP_TRANSPORT", "tcp", 1);
    setenv("HOOP_TIMEOUT", "10", 1);
    if (x->var != NULL) setenv(x->var, x->val, 1);
}

/* Two inits, each checked with an all-reduce: the warning is said once per process. */
static int identity_rank(void *ctx, int slot, int fd)
{
    (void)ctx;
    for (int round = 0; round < 2; round++) {
        hoop_comm_t *c = NULL;
        hoop_result_t rc = hoop_init_from_env(&c);
        ag_outcome_t o = {0};
        if (rc == HOOP_OK) {
            hoop_comm_set_timeout(c, 5);
            checked(c, 700u + (uint32_t)round, 100, &o);
            hoop_comm_destroy(c);
        }
        ag_say(fd, "N %d %d %d %d %d", slot, round, (int)rc, (int)o.rc, o.wrong);
    }
    return 0;
}

/* Lines of the log at path that hold needle. */
static int log_count(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f) != NULL) n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

static int scenario_identity(const opts_t *o)
{
    static const idcase_t cases[] = {
        {"no job id, no key", NULL, NULL, 1},
        {"torchrun's run id \"none\", which names no job", "TORCHELASTIC_RUN_ID", "none", 1},
        {"HOOP_JOB_ID", "HOOP_JOB_ID", "identity-test", 0},
        {"a launcher's job id", "TORCHELASTIC_RUN_ID", "run-7", 0},
        {"HOOP_AUTH_KEY", "HOOP_AUTH_KEY", "a key of this launch", 0},
    };
    const char *needle = "has no identity";
    printf(
        "identity: 2-rank jobs, two inits each; rank 0 warns once, naming HOOP_JOB_ID, where the "
        "job has neither a job id nor a key\n");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const idcase_t *x = &cases[i];
        ag_job_t j;
        if (ag_job_start(&j, 2, ag_free_port(), identity_env, identity_rank, (void *)x) != 0)
            return 2;
        if (!run_job(&j, 30)) fail("%s: the ranks were still running after 30 s", x->name);
        check_exits(&j, x->name);
        char *line;
        int good = 0;
        while ((line = ag_job_next_line(&j)) != NULL) {
            int slot, round, rc, orc, w;
            if (sscanf(line, "N %d %d %d %d %d", &slot, &round, &rc, &orc, &w) != 5) continue;
            if (rc != HOOP_OK || orc != HOOP_OK || w)
                fail("%s: rank %d round %d: init %s, all-reduce %s%s", x->name, slot, round,
                     ag_code_name(rc), ag_code_name(orc), w ? " with WRONG data" : "");
            else
                good++;
        }
        if (good != 4)
            fail("%s: %d of 4 rank-rounds initialised and all-reduced right", x->name, good);
        char path[128], l0[1200] = "";
        ag_job_log_path(&j, 0, path, sizeof path);
        const int n0 = log_count(path, needle);
        const char *const nd[2] = {needle, "HOOP_JOB_ID"};
        const int named = ag_log_has_warn(path, nd, 2);
        ag_log_line(path, needle, l0, sizeof l0);
        ag_job_log_path(&j, 1, path, sizeof path);
        const int n1 = log_count(path, needle);
        printf("  %s: rank 0 warned %d time(s), rank 1 %d%s%s\n", x->name, n0, n1,
               l0[0] ? ": " : "", l0);
        if (x->warned && (n0 != 1 || !named))
            fail("%s: rank 0 logged %d WARN line(s) saying \"%s\" and naming HOOP_JOB_ID, want 1",
                 x->name, n0, needle);
        if (!x->warned && n0 != 0) fail("%s: rank 0 warned of a job without identity", x->name);
        if (n1 != 0) fail("%s: rank 1 warned too (rank 0 says it for the job)", x->name);
        ag_job_dump_logs(&j, failures > 0 || o->verbose);
        ag_job_free(&j);
    }
    return failures ? 1 : 0;
}

/* ================================================================================================
 * hooprun: a job id per job
 * ============================================================================================== */

/* A rank under hooprun: its job id, and a checked all-reduce. */
static int hooprun_rank(void)
{
    const char *id = getenv("HOOP_JOB_ID");
    hoop_comm_t *c = NULL;
    hoop_result_t rc = hoop_init_from_env(&c);
    ag_outcome_t o = {0};
    if (rc == HOOP_OK) {
        hoop_comm_set_timeout(c, 10);
        checked(c, 77, 1000, &o);
    }
    printf("JOBID rank=%d id=%s init=%s allreduce=%s%s\n", c ? hoop_comm_rank(c) : -1,
           id && id[0] ? id : "(none)", ag_code_name(rc), ag_code_name(o.rc),
           o.wrong ? " WRONG" : "");
    fflush(stdout);
    if (c != NULL) hoop_comm_destroy(c);
    return rc != HOOP_OK || o.rc != HOOP_OK || o.wrong;
}

/* Starts argv with stdout (and stderr) into a pipe; returns the read end. */
static int spawn_out(char *const argv[], pid_t *pid)
{
    int pfd[2];
    if (pipe(pfd) != 0) return -1;
    fflush(NULL);
    *pid = fork();
    if (*pid == 0) {
        dup2(pfd[1], 1);
        dup2(pfd[1], 2);
        close(pfd[0]);
        close(pfd[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(pfd[1]);
    return pfd[0];
}

static int read_all(int fd, char *buf, size_t cap)
{
    size_t len = 0;
    ssize_t got;
    while (len + 1 < cap && (got = read(fd, buf + len, cap - 1 - len)) > 0) len += (size_t)got;
    buf[len] = '\0';
    close(fd);
    return (int)len;
}

/* The ids of "JOBID rank=R id=X init=OK allreduce=OK" lines; returns how many were all right. */
static int parse_jobids(const char *out, char ids[][80], int cap, int *n)
{
    int good = 0;
    *n = 0;
    for (const char *p = out; (p = strstr(p, "JOBID ")) != NULL; p++) {
        int r;
        char id[80];
        if (sscanf(p, "JOBID rank=%d id=%79s", &r, id) != 2 || *n >= cap) continue;
        snprintf(ids[(*n)++], 80, "%s", id);
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char line[400];
        snprintf(line, sizeof line, "%.*s", (int)(len < 399 ? len : 399), p);
        if (strstr(line, "init=HOOP_OK allreduce=HOOP_OK") != NULL && strstr(line, "WRONG") == NULL)
            good++;
    }
    return good;
}

static int scenario_hooprun(const opts_t *o, const char *self)
{
    char ids[2][4][80];
    char out[16384];
    for (int k = 0; k < 2; k++) {
        char *argv[] = {(char *)o->hooprun, "--timeout",         "60", "-n", "2",
                        (char *)self,       "--as-hooprun-rank", NULL};
        pid_t pid;
        int fd = spawn_out(argv, &pid);
        if (fd < 0) return 2;
        read_all(fd, out, sizeof out);
        int st;
        waitpid(pid, &st, 0);
        int n, good = parse_jobids(out, ids[k], 4, &n);
        printf("  hooprun -n 2, launch %d: exit status %#x, ids %s %s\n", k, st,
               n > 0 ? ids[k][0] : "-", n > 1 ? ids[k][1] : "-");
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) || good != 2) {
            fail("hooprun -n 2, launch %d: %d of 2 ranks initialised and all-reduced right", k,
                 good);
            printf("%s", out);
        }
        if (n == 2 && (strcmp(ids[k][0], "(none)") == 0 || strcmp(ids[k][0], ids[k][1]) != 0))
            fail("hooprun -n 2, launch %d: the ranks' HOOP_JOB_ID are '%s' and '%s', want one id",
                 k, ids[k][0], ids[k][1]);
    }
    if (strcmp(ids[0][0], ids[1][0]) == 0)
        fail("two hooprun launches gave the same HOOP_JOB_ID '%s'", ids[0][0]);

    /* One job of two hooprun launches, as on two hosts: they must still agree. */
    char port[16];
    snprintf(port, sizeof port, "%d", ag_free_port());
    pid_t pid[2];
    int fd[2];
    for (int k = 0; k < 2; k++) {
        char nr[4];
        snprintf(nr, sizeof nr, "%d", k);
        char *argv[] = {(char *)o->hooprun,
                        "--timeout",
                        "60",
                        "-n",
                        "1",
                        "--nnodes",
                        "2",
                        "--node-rank",
                        nr,
                        "--master-addr",
                        "127.0.0.1",
                        "--master-port",
                        port,
                        (char *)self,
                        "--as-hooprun-rank",
                        NULL};
        fd[k] = spawn_out(argv, &pid[k]);
        if (fd[k] < 0) return 2;
    }
    int good = 0;
    for (int k = 0; k < 2; k++) {
        char buf[8192];
        read_all(fd[k], buf, sizeof buf);
        int st;
        waitpid(pid[k], &st, 0);
        char nid[4][80];
        int n;
        int g = parse_jobids(buf, nid, 4, &n);
        good += g;
        printf("  hooprun --nnodes 2 --node-rank %d: exit status %#x, id %s\n", k, st,
               n > 0 ? nid[0] : "-");
        if (g != 1) printf("%s", buf);
    }
    if (good != 2)
        fail("a job of two hooprun launches (--nnodes 2): %d of 2 ranks initialised and "
             "all-reduced right",
             good);
    return failures ? 1 : 0;
}

/* ================================================================================================ */

static int usage(void)
{
    fprintf(stderr,
            "usage: scenarios --scenario size|algo|stale|threads|reinit|identity|hooprun "
            "[--transport T] [--sizes A,B,C] [--algos A,B] [--count N] [--key K | --no-key] "
            "[--rounds R] [--pairs P] [--load N] [--hooprun PATH] [--verbose]\n");
    return 2;
}

int main(int argc, char **argv)
{
    opts_t o = {.tp = "tcp", .count = 8, .rounds = 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--as-hooprun-rank") == 0) return hooprun_rank();
        if (strcmp(a, "--verbose") == 0)
            o.verbose = 1;
        else if (strcmp(a, "--no-key") == 0)
            o.no_key = 1;
        else if (v == NULL)
            return usage();
        else if (i++, strcmp(a, "--scenario") == 0)
            o.scenario = v;
        else if (strcmp(a, "--transport") == 0)
            o.tp = v;
        else if (strcmp(a, "--algos") == 0)
            o.algos = v;
        else if (strcmp(a, "--count") == 0)
            o.count = (size_t)strtoull(v, NULL, 10);
        else if (strcmp(a, "--key") == 0)
            o.key = v;
        else if (strcmp(a, "--rounds") == 0)
            o.rounds = atoi(v);
        else if (strcmp(a, "--pairs") == 0)
            o.pairs = atoi(v);
        else if (strcmp(a, "--load") == 0)
            o.load = atoi(v);
        else if (strcmp(a, "--hooprun") == 0)
            o.hooprun = v;
        else if (strcmp(a, "--sizes") == 0) {
            o.nsizes = 0;
            for (const char *s = v; s != NULL && o.nsizes < AG_MAXPROC; s = strchr(s, ',')) {
                if (*s == ',') s++;
                o.sizes[o.nsizes++] = atoi(s);
            }
        } else
            return usage();
    }
    if (o.scenario == NULL) return usage();
    setvbuf(stdout, NULL, _IOLBF, 0);
    ag_clean_environment();
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) return 2;
    self[sl] = '\0';
    int rc;
    double t0 = now_s();
    if (strcmp(o.scenario, "size") == 0 && o.nsizes >= 2)
        rc = scenario_size(&o);
    else if (strcmp(o.scenario, "algo") == 0 && o.algos != NULL)
        rc = scenario_algo(&o);
    else if (strcmp(o.scenario, "stale") == 0 && (o.key != NULL || o.no_key))
        rc = scenario_stale(&o);
    else if (strcmp(o.scenario, "threads") == 0) {
        if (o.rounds <= 0) o.rounds = 250;
        rc = scenario_threads(&o);
    } else if (strcmp(o.scenario, "reinit") == 0) {
        if (o.rounds <= 0) o.rounds = 20;
        if (o.pairs <= 0) o.pairs = 1;
        rc = scenario_reinit(&o);
    } else if (strcmp(o.scenario, "identity") == 0) {
        rc = scenario_identity(&o);
    } else if (strcmp(o.scenario, "hooprun") == 0 && o.hooprun != NULL)
        rc = scenario_hooprun(&o, self);
    else
        return usage();
    printf("%s (%.1f s)\n", rc == 0 ? "PASSED" : "FAILED", now_s() - t0);
    return rc;
}
