/*
 * The disagreement matrix: ranks that disagree on anything that shapes a schedule must all fail,
 * never return HOOP_OK with data other than what their own view of the call says.
 *
 *   agree --mode init --transport T [--ranks 2,3,5] [--jobs K] [--only N] [--verbose]
 *   agree --mode call --transport T --ranks P [--jobs K] [--only N[-M]] [--strict] [--verbose] [--list]
 *
 * init: one fresh job per case; the ranks differ in WORLD_SIZE, claim one RANK twice, carry
 *   different job ids (from each launcher variable hoop reads one from), or differ in one entry of
 *   HOOP__AGREED_SETTINGS (src/base/agreed.h, iterated here through its X-macro: an entry without
 *   test values below fails the test, so a new setting cannot be left out), or one rank (or every
 *   rank) has a malformed value, which that rank fails with HOOP_ERR_INVALID_ARGUMENT. Every
 *   other process must fail hoop_init with HOOP_ERR_MISMATCH, say why in its log (no empty reason, no stray bytes),
 *   and one of them must log a WARN line naming what the ranks said. Three allowances, each for a
 *   process that cannot know better: where the other processes form a whole job by themselves
 *   (an extra process), they may pass with right results and the extra one may time out or lose
 *   the store (it came after the store closed, or as it closed, and then nobody is left to name
 *   the disagreement); of two claimants of one rank beside a whole job, one may be the one that
 *   joined; a process turned away for another job id does not fail the job it tried to join,
 *   whose ranks then time out waiting for it. A process whose init succeeds runs two checked
 *   all-reduces (rd, then the ring), with inputs salted by its job id, so that ranks of two jobs
 *   mixing their data are caught. Controls (the same values, spelled differently;
 *   lower-precedence job-id variables that differ under an equal higher one) must succeed with
 *   the right data, so a library that fails everything does not pass.
 * call: one job of P ranks runs many cases, each on a fresh communicator split off the job's
 *   (an aborted child leaves the parent usable): one rank (rotating) differs from the others in
 *   the all-reduce algorithm (hoop_comm_set_algo), dtype, op, count, root or collective. Every
 *   rank must fail in that call, or, where its part needed nothing from the others, in the next
 *   one (an all-to-all, so that every rank hears from every other; a case is torn down only once
 *   every rank is done, so no rank fails merely because the others left); codes MISMATCH or what
 *   follows it (ABORTED, PEER_LOST), or TIMEOUT where nobody ever sends; no rank may return
 *   HOOP_OK with a result other than its view's reference. A bystander whose own part matched
 *   everyone it talked to may finish the next call too, before the abort of the rank that found
 *   the disagreement reaches it (no library can stop that without a handshake per call): it
 *   must then fail the call after, and is counted; --strict fails it. Several jobs run at once
 *   (distinct ports): the cases mostly wait, on the network or for the timeouts. --sym puts
 *   every case's buffers in symmetric memory (hoop_mem_alloc on the case's communicator), where
 *   the zero-copy engine runs the calls it can, and first runs the others' call on every rank
 *   alike, which must succeed with the right data (and the engine must have run some of those).
 *
 * Counts are picked where schedules coincide or switch: 0, 1, 5, 8, 1000, and each side of every
 * size threshold, with HOOP_SMALL_BYTES=2K (512 uint32), HOOP_CHUNK_BYTES=4K (1024 uint32) and
 * HOOP_SHM_RING_BYTES=64K on every rank (where that setting is not the one under test) so that
 * the thresholds sit at small sizes: rd/ring at 512/513, one/two chunks per ring segment at
 * 1024p/1024p+1, the reduce tree's 256 x HOOP_SMALL_BYTES on up to 4 ranks at 131072/131073.
 *
 * Left out, and why: a rank told WORLD_SIZE=1 is a job of its own and meets nobody, so nothing can
 * tell it; RANK >= WORLD_SIZE is a local argument error (fault-badargs); the library version
 * needs a second build; op pairs are tried on int32 only and dtype pairs with sum only (the
 * header carries each field on its own, so their product adds no schedule the pairs miss); at 5
 * ranks the collective pairs use one count, to keep every test under a minute on 2 cores.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agree_util.h"
#include "core/agree.h"
#include "../common/testing.h"

#define INIT_TIMEOUT "3" /* HOOP_TIMEOUT of every rank: init waits no longer */
#define CALL_TIMEOUT 1.5 /* per call on a case's communicator: the cases that can only time out */
#define SMALL_EL 512     /* HOOP_SMALL_BYTES=2K in uint32 */
#define CHUNK_EL 1024    /* HOOP_CHUNK_BYTES=4K in uint32 */
#define TREE_EL 131072   /* reduce: binomial tree up to 256 x HOOP_SMALL_BYTES on up to 4 ranks */

/* ================================================================================================
 * The settings every rank must agree on, from the library's own list.
 * ============================================================================================== */

#define AS_ENTRY(field, env, kind) {env, #kind},
static const struct {
    const char *env, *kind;
} agreed[] = {HOOP__AGREED_SETTINGS(AS_ENTRY)};
#define NAGREED (sizeof agreed / sizeof agreed[0])

/* Two valid values that differ (a is what every other rank has), a's value spelled differently
 * (a control: must not count as a disagreement), and the values as bytes for the log check. */
typedef struct tvals {
    const char *env, *a, *b, *a_same, *a_num, *b_num;
} tvals_t;
static const tvals_t test_values[] = {
    {"HOOP_ALGO", "ring", "ps", "RING", NULL, NULL},
    {"HOOP_SMALL_BYTES", "2K", "8K", "2048", "2048", "8192"},
    {"HOOP_CHUNK_BYTES", "4K", "8K", "4096", "4096", "8192"},
    {"HOOP_TRANSPORT", NULL, NULL, NULL, NULL, NULL}, /* the run's transport against the other */
    {"HOOP_SOCKETS_PER_PEER", "1", "2", "01", NULL, NULL},
    {"HOOP_SHM_RING_BYTES", "64K", "128K", "65536", "65536", "131072"},
    {"HOOP_SHM_CMA_BYTES", "0", "64K", "0K", NULL, "65536"},
    {"HOOP_CMA", "off", "on", "OFF", NULL, NULL},
};

static const tvals_t *values_of(const char *env)
{
    for (size_t i = 0; i < sizeof test_values / sizeof test_values[0]; i++)
        if (strcmp(test_values[i].env, env) == 0) return &test_values[i];
    return NULL;
}

/* The small settings every rank of every job gets, where the setting is not under test. */
static void base_settings(const char *tp)
{
    setenv("HOOP_TRANSPORT", tp, 1);
    setenv("HOOP_SMALL_BYTES", "2K", 1);
    setenv("HOOP_CHUNK_BYTES", "4K", 1);
    setenv("HOOP_SHM_RING_BYTES", "64K", 1);
    setenv("HOOP_SHM_SPIN_US", "20", 1); /* many ranks share 2 cores */
    setenv("HOOP_TIMEOUT", INIT_TIMEOUT, 1);
}

typedef struct opts {
    int mode; /* 0 init, 1 call */
    const char *tp;
    int ranks[8], nranks;
    int jobs;
    int only, only_last; /* the cases to run: -1, all */
    int verbose, list, strict;
    int sym; /* the calls' buffers in symmetric memory (hoop_mem_alloc) */
    double deadline;
} opts_t;

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

static const char *other_tp(const char *tp) { return strcmp(tp, "tcp") == 0 ? "shm" : "tcp"; }

/* ================================================================================================
 * init: one job per case
 * ============================================================================================== */

enum { IP_SIZE, IP_DUP, IP_JOB, IP_SETTING, IP_MALFORMED, IP_CONTROL, IP_N };
static const char *const IP_NAME[] = {"world size", "duplicate rank",    "job id",
                                      "setting",    "malformed setting", "control"};

typedef struct ienv {
    const char *name;
    char val[48];
    int unset;
} ienv_t;

typedef struct icase {
    char name[120];
    int param, p, nproc;
    int rank[AG_MAXPROC], size[AG_MAXPROC];
    ienv_t env[AG_MAXPROC][4];
    int nenv[AG_MAXPROC];
    int own_jobid; /* every slot gets the case's HOOP_JOB_ID before its own variables */
    int expect_ok; /* a control: every rank must succeed */
    unsigned odd;  /* the processes that differ (both claimants of a duplicated rank) */
    int complete;  /* the others form a whole job: they may pass init, with right results */
    int dupx;      /* an extra process claims a rank of a whole job: one claimant may pass */
    int job_v;     /* job id: the odd process; those with rank 0's id may time out */
    char needle[3][64];
    int nneedle;
    char jobid[48];
} icase_t;

typedef struct ictx {
    const icase_t *c;
    const char *tp;
} ictx_t;

/* An init that failed because the store was gone, or went while this process spoke to it. */
static int is_late(hoop_result_t rc, const char *sentence)
{
    if (rc == HOOP_ERR_TIMEOUT)
        return strstr(sentence, "could not reach the rendezvous store") != NULL;
    /* A store that closes with this process's bytes unread resets the connection rather than
     * closing it: the same lateness, another sentence. */
    return rc == HOOP_ERR_PEER_LOST && strstr(sentence, "rendezvous store") != NULL &&
           (strstr(sentence, "closed the connection") != NULL ||
            strstr(sentence, "was lost: Connection reset") != NULL);
}

static void init_env(void *ctx, int slot)
{
    const ictx_t *x = ctx;
    const icase_t *c = x->c;
    char v[32];
    base_settings(x->tp);
    snprintf(v, sizeof v, "%d", c->rank[slot]);
    setenv("RANK", v, 1);
    snprintf(v, sizeof v, "%d", c->size[slot]);
    setenv("WORLD_SIZE", v, 1);
    if (c->own_jobid) setenv("HOOP_JOB_ID", c->jobid, 1);
    for (int e = 0; e < c->nenv[slot]; e++) {
        if (c->env[slot][e].unset)
            unsetenv(c->env[slot][e].name);
        else
            setenv(c->env[slot][e].name, c->env[slot][e].val, 1);
    }
}

static int init_rank(void *ctx, int slot, int fd)
{
    (void)ctx;
    hoop_comm_t *c = NULL;
    double t0 = now_s();
    hoop_result_t rc = hoop_init_from_env(&c);
    ag_say(fd, "I %d %d %.3f", slot, (int)rc, now_s() - t0);
    if (rc != HOOP_OK) return 0;
    hoop_comm_set_timeout(c, 3);
    /* What it computes if it got through: rd (at most HOOP_SMALL_BYTES=2K), then the ring in
     * several chunks. */
    ag_spec_t s = {.coll = AG_ALLREDUCE,
                   .dtype = HOOP_UINT32,
                   .op = HOOP_SUM,
                   .algo = -1,
                   .count = 100,
                   .vk = AG_VK_FULL,
                   .salt = ag_job_salt()};
    ag_outcome_t o;
    for (int k = 0; k < 2; k++) {
        if (k == 1) {
            s.count = 5 * CHUNK_EL * (size_t)hoop_comm_size(c) + 3;
            s.salt++;
        }
        ag_run(c, &s, &o);
        ag_say(fd, "C %d %d %d %d %s", slot, k, (int)o.rc, o.wrong, o.wrong ? o.why : o.msg);
    }
    hoop_comm_destroy(c);
    return 0;
}

static ienv_t *add_env(icase_t *c, int slot, const char *name, const char *val)
{
    ienv_t *e = &c->env[slot][c->nenv[slot]++];
    e->name = name;
    if (val == NULL)
        e->unset = 1;
    else
        snprintf(e->val, sizeof e->val, "%s", val);
    return e;
}

static void needles(icase_t *c, const char *a, const char *b, const char *d)
{
    const char *in[3] = {a, b, d};
    c->nneedle = 0;
    for (int i = 0; i < 3; i++)
        if (in[i] != NULL) snprintf(c->needle[c->nneedle++], sizeof c->needle[0], "%s", in[i]);
}

static icase_t *new_case(icase_t *cs, int *n, int param, int p, int nproc, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static icase_t *new_case(icase_t *cs, int *n, int param, int p, int nproc, const char *fmt, ...)
{
    icase_t *c = &cs[(*n)++];
    memset(c, 0, sizeof *c);
    c->param = param;
    c->p = p;
    c->nproc = nproc;
    c->own_jobid = 1;
    c->expect_ok = param == IP_CONTROL;
    c->job_v = -1;
    for (int q = 0; q < nproc; q++) {
        c->rank[q] = q;
        c->size[q] = p;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->name, sizeof c->name, fmt, ap);
    va_end(ap);
    snprintf(c->jobid, sizeof c->jobid, "agree-%d-%d", (int)getpid(), *n);
    return c;
}

/* Returns the number of cases, or -1 if an agreed setting has no test values. */
static int build_init_cases(const opts_t *o, icase_t *cs, int cap)
{
    int n = 0, missing = 0;
    for (size_t i = 0; i < NAGREED; i++)
        if (values_of(agreed[i].env) == NULL) {
            fail("%s is in HOOP__AGREED_SETTINGS (src/base/agreed.h) but this test has no values "
                 "for it: add two valid, different values to test_values[] in tests/agree/agree.c",
                 agreed[i].env);
            missing++;
        }
    if (missing) return -1;

    for (int ri = 0; ri < o->nranks; ri++) {
        int p = o->ranks[ri];
        char a[16], b[16];
        if (n + 64 > cap) break;
        new_case(cs, &n, IP_CONTROL, p, p, "p=%d all agree", p);

        /* World size: one rank says one more, or one less (never 1: see the top). */
        int vs[2] = {0, p - 1};
        for (int k = 0; k < 2; k++) {
            int v = vs[k];
            icase_t *c = new_case(cs, &n, IP_SIZE, p, p, "p=%d rank %d says WORLD_SIZE=%d", p, v,
                                  p + 1);
            c->size[v] = p + 1;
            c->odd = 1u << v;
            snprintf(a, sizeof a, "%d", p + 1);
            snprintf(b, sizeof b, "%d", p);
            needles(c, "WORLD_SIZE", a, b);
            if (v < p - 1 && p - 1 >= 2) {
                c = new_case(cs, &n, IP_SIZE, p, p, "p=%d rank %d says WORLD_SIZE=%d", p, v, p - 1);
                c->size[v] = p - 1;
                c->odd = 1u << v;
                snprintf(a, sizeof a, "%d", p - 1);
                needles(c, "WORLD_SIZE", a, b);
            }
        }
        {
            icase_t *c = new_case(cs, &n, IP_SIZE, p, p + 1,
                                  "p=%d and an extra process: rank %d says WORLD_SIZE=%d", p, p,
                                  p + 1);
            c->size[p] = p + 1;
            c->odd = 1u << p;
            c->complete = 1;
            snprintf(a, sizeof a, "%d", p + 1);
            snprintf(b, sizeof b, "%d", p);
            needles(c, "WORLD_SIZE", a, b);
        }

        /* One RANK claimed twice: instead of the last rank (no whole job can form: every
         * process must fail), or by an extra process beside a whole job (rank 1, and rank 0,
         * the store's host): the job may form without it if it comes late, but never with both. */
        if (p >= 3) {
            icase_t *c = new_case(cs, &n, IP_DUP, p, p, "p=%d ranks 0..%d, then rank %d again", p,
                                  p - 2, p - 2);
            c->rank[p - 1] = p - 2;
            c->odd = 3u << (p - 2);
            snprintf(a, sizeof a, "rank %d", p - 2);
            needles(c, a, "twice|claimed|duplicate|RANK=", NULL);
        }
        for (int d = 1; d >= 0; d--) {
            icase_t *c = new_case(cs, &n, IP_DUP, p, p + 1, "p=%d ranks 0..%d and rank %d again", p,
                                  p - 1, d);
            c->rank[p] = d;
            c->dupx = 1;
            c->odd = 1u << d | 1u << p;
            c->complete = 1;
        }

        /* Job ids, from each variable hoop reads one from, each alone. */
        {
            static const char *const srcs[] = {"HOOP_JOB_ID", "TORCHELASTIC_RUN_ID",
                                               "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"};
            int v = n % p;
            for (size_t k = 0; k < sizeof srcs / sizeof srcs[0]; k++) {
                icase_t *c = new_case(cs, &n, IP_JOB, p, p, "p=%d rank %d has another %s", p, v,
                                      srcs[k]);
                c->own_jobid = 0;
                c->job_v = v;
                c->odd = 1u << v;
                snprintf(a, sizeof a, "ja%d-%d", (int)getpid() % 10000, n);
                snprintf(b, sizeof b, "jb%d-%d", (int)getpid() % 10000, n);
                for (int q = 0; q < p; q++) add_env(c, q, srcs[k], q == v ? b : a);
                needles(c, a, b, NULL);
                v = (v + 1) % p;
            }
            /* Slurm: job and step. */
            icase_t *c = new_case(cs, &n, IP_JOB, p, p, "p=%d rank %d has another SLURM_JOB_ID", p,
                                  v);
            c->own_jobid = 0;
            c->job_v = v;
            c->odd = 1u << v;
            int base = 1000 + (int)(getpid() % 5000) * 10 + n % 10;
            for (int q = 0; q < p; q++) {
                snprintf(a, sizeof a, "%d", q == v ? base + 1 : base);
                add_env(c, q, "SLURM_JOB_ID", a);
                add_env(c, q, "SLURM_STEP_ID", "0");
            }
            snprintf(a, sizeof a, "%d", base);
            snprintf(b, sizeof b, "%d", base + 1);
            needles(c, a, b, NULL);
            c = new_case(cs, &n, IP_JOB, p, p, "p=%d rank %d has another SLURM_STEP_ID", p, v);
            c->own_jobid = 0;
            c->job_v = v;
            c->odd = 1u << v;
            for (int q = 0; q < p; q++) {
                snprintf(a, sizeof a, "%d", base);
                add_env(c, q, "SLURM_JOB_ID", a);
                add_env(c, q, "SLURM_STEP_ID", q == v ? "1" : "0");
            }
            snprintf(a, sizeof a, "%d.0", base);
            snprintf(b, sizeof b, "%d.1", base);
            needles(c, a, b, NULL);
            /* One rank without any job id among ranks with one. */
            c = new_case(cs, &n, IP_JOB, p, p, "p=%d rank %d has no job id", p, p - 1);
            c->own_jobid = 0;
            c->job_v = p - 1;
            c->odd = 1u << (p - 1);
            snprintf(a, sizeof a, "jc%d-%d", (int)getpid() % 10000, n);
            for (int q = 0; q < p - 1; q++) add_env(c, q, "HOOP_JOB_ID", a);
            needles(c, a, NULL, NULL);
            /* Controls: a lower-precedence variable differs under an equal higher one. */
            static const char *const pairs[][2] = {{"HOOP_JOB_ID", "TORCHELASTIC_RUN_ID"},
                                                   {"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"},
                                                   {"SLURM_JOB_ID", "PMIX_NAMESPACE"}};
            for (size_t k = 0; k < 3; k++) {
                c = new_case(cs, &n, IP_CONTROL, p, p, "p=%d equal %s, rank %d has another %s", p,
                             pairs[k][0], v, pairs[k][1]);
                c->own_jobid = 0;
                for (int q = 0; q < p; q++) {
                    snprintf(a, sizeof a, "%d", 3000 + n);
                    add_env(c, q, pairs[k][0], a);
                    snprintf(b, sizeof b, "%d", q == v ? 5000 + n : 4000 + n);
                    add_env(c, q, pairs[k][1], b);
                    if (strcmp(pairs[k][0], "SLURM_JOB_ID") == 0 ||
                        strcmp(pairs[k][1], "SLURM_JOB_ID") == 0)
                        add_env(c, q, "SLURM_STEP_ID", "0");
                }
            }
        }

        /* Every agreed setting: one rank has the other value; a control spells it differently. */
        for (size_t i = 0; i < NAGREED; i++) {
            const tvals_t *t = values_of(agreed[i].env);
            const char *va = t->a, *vb = t->b, *same = t->a_same;
            char up[16];
            if (strcmp(t->env, "HOOP_TRANSPORT") == 0) {
                va = o->tp;
                vb = other_tp(o->tp);
                for (size_t k = 0; k <= strlen(va) && k < sizeof up; k++)
                    up[k] = (char)(va[k] >= 'a' && va[k] <= 'z' ? va[k] - 32 : va[k]);
                same = up;
            }
            for (int k = 0; k < 2; k++) {
                int v = k == 0 ? 0 : p - 1;
                icase_t *c = new_case(cs, &n, IP_SETTING, p, p,
                                      "p=%d rank %d has %s=%s, the others %s", p, v, t->env, vb,
                                      va);
                for (int q = 0; q < p; q++) add_env(c, q, t->env, q == v ? vb : va);
                c->odd = 1u << v;
                char na[64], nb[64];
                snprintf(na, sizeof na, "%s%s%s", va, t->a_num ? "|" : "",
                         t->a_num ? t->a_num : "");
                snprintf(nb, sizeof nb, "%s%s%s", vb, t->b_num ? "|" : "",
                         t->b_num ? t->b_num : "");
                needles(c, t->env, na, nb);
            }
            icase_t *c = new_case(cs, &n, IP_CONTROL, p, p, "p=%d rank %d spells %s=%s as %s", p,
                                  p / 2, t->env, va, same);
            for (int q = 0; q < p; q++) add_env(c, q, t->env, q == p / 2 ? same : va);
        }

        /* A malformed value on one rank (rank 0, which holds the store, or the last), or on every
         * rank: each variable kind once, a setting ranks must agree on, a local one, and one that
         * used to be read apart. The rank that has it fails with HOOP_ERR_INVALID_ARGUMENT, the
         * others at once with HOOP_ERR_MISMATCH, naming it: none waits for its timeout. */
        static const char *const malformed[][2] = {
            {"HOOP_TIMEOUT", "soon"}, {"HOOP_CUDA_IPC_BYTES", "lots"}, {"HOOP_CHUNK_BYTES", "12Q"}};
        for (int k = 0; k < 3; k++) {
            int v = k == 0 ? 0 : k == 1 ? p - 1 : -1;
            icase_t *c = v >= 0 ? new_case(cs, &n, IP_MALFORMED, p, p, "p=%d rank %d has %s=%s", p,
                                           v, malformed[k][0], malformed[k][1])
                                : new_case(cs, &n, IP_MALFORMED, p, p, "p=%d every rank has %s=%s",
                                           p, malformed[k][0], malformed[k][1]);
            for (int q = 0; q < p; q++)
                if (v < 0 || q == v) add_env(c, q, malformed[k][0], malformed[k][1]);
            c->odd = v >= 0 ? 1u << v : (1u << p) - 1;
            needles(c, malformed[k][0], malformed[k][1], "is not valid");
        }
    }
    return n;
}

typedef struct irun {
    ag_job_t job;
    ictx_t ctx;
    int idx, active, tries;
    double deadline;
} irun_t;

static int icounts[IP_N][HOOP_ERR_INTERNAL + 1];
static int i_tried, i_detected, i_wrong, i_joined, i_controls_ok;

static void check_init_case(const opts_t *o, irun_t *r)
{
    const icase_t *c = r->ctx.c;
    ag_job_t *j = &r->job;
    int init_rc[AG_MAXPROC], got_i[AG_MAXPROC] = {0}, crc[AG_MAXPROC][2], cw[AG_MAXPROC][2];
    char cmsg[AG_MAXPROC][2][200];
    double secs[AG_MAXPROC] = {0};
    memset(crc, -1, sizeof crc);
    memset(cw, 0, sizeof cw);
    char *line;
    while ((line = ag_job_next_line(j)) != NULL) {
        int slot, rc, k, w, off = 0;
        double t;
        if (sscanf(line, "I %d %d %lf", &slot, &rc, &t) == 3 && slot >= 0 && slot < c->nproc) {
            init_rc[slot] = rc;
            got_i[slot] = 1;
            secs[slot] = t;
        } else if (sscanf(line, "C %d %d %d %d %n", &slot, &k, &rc, &w, &off) == 4 && slot >= 0 &&
                   slot < c->nproc && k >= 0 && k < 2) {
            crc[slot][k] = rc;
            cw[slot][k] = w;
            snprintf(cmsg[slot][k], sizeof cmsg[0][0], "%s", line + off);
        }
    }
    i_tried++;
    int bad = 0, warned = 0, wrong = 0, passed = 0, odd_passed = 0, late = 0;
    char buf[1200];
    for (int q = 0; q < c->nproc; q++) {
        int st = j->wstatus[q];
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
            fail("init case '%s': process %d (RANK=%d) ended with wait status %#x", c->name, q,
                 c->rank[q], st);
            bad++;
        }
        if (!got_i[q]) {
            fail("init case '%s': process %d (RANK=%d) did not report hoop_init's result", c->name,
                 q, c->rank[q]);
            bad++;
            continue;
        }
        int rc = init_rc[q];
        icounts[c->param][rc >= 0 && rc <= HOOP_ERR_INTERNAL ? rc : HOOP_ERR_INTERNAL]++;
        for (int k = 0; k < 2; k++)
            if (cw[q][k]) wrong++;
        char path[128];
        ag_job_log_path(j, q, path, sizeof path);
        const char *nd[3] = {c->needle[0], c->needle[1], c->needle[2]};
        if (c->nneedle > 0 && ag_log_has_warn(path, nd, c->nneedle)) warned = 1;
        if (c->expect_ok) {
            if (rc != HOOP_OK) {
                ag_log_line(path, "hoop_init failed", buf, sizeof buf);
                fail("init case '%s' (a control: nothing differs): process %d: hoop_init %s: %s",
                     c->name, q, ag_code_name(rc), buf);
                bad++;
            } else {
                for (int k = 0; k < 2; k++)
                    if (crc[q][k] != HOOP_OK || cw[q][k]) {
                        fail("init case '%s' (a control): process %d: all-reduce %d: %s%s %s",
                             c->name, q, k, ag_code_name(crc[q][k]),
                             cw[q][k] ? " with WRONG data:" : "", cmsg[q][k]);
                        bad++;
                    }
            }
            continue;
        }
        int odd = c->odd >> q & 1;
        /* Where the others make a whole job, they may pass (the odd one may come too late for
         * them to see it: then it times out), with right results; of two claimants of one rank,
         * either may be the one that joined. */
        int may_pass = c->complete && (!odd || c->dupx);
        /* A process with another job id is turned away; the job it tried to join waits on. */
        int may_wait = c->job_v >= 0 && ((q == c->job_v) == (c->job_v == 0));
        if (rc == HOOP_OK) passed++;
        if (rc == HOOP_OK && odd) odd_passed++;
        /* A failed init must say why; the sentence is in its log (no communicator holds it). */
        if (rc != HOOP_OK) {
            buf[0] = '\0';
            size_t bl = ag_log_line(path, "hoop_init failed", buf, sizeof buf) ? strlen(buf) : 0;
            for (size_t k = 0; k < bl; k++)
                if ((unsigned char)buf[k] < 0x20 && buf[k] != '\t') {
                    fail("init case '%s': process %d: its hoop_init sentence holds byte %#x: '%s'",
                         c->name, q, (unsigned char)buf[k], buf);
                    bad++;
                    break;
                }
            while (bl > 0 && (unsigned char)buf[bl - 1] <= ' ') buf[--bl] = '\0';
            /* An extra process that came after the whole job had closed its store, or while it
             * closed (its connection reset): nobody was left to compare it with, so nobody can
             * name the disagreement. */
            if (odd && c->complete && is_late(rc, buf)) late++;
            if (bl == 0 || buf[bl - 1] == ':') {
                fail("init case '%s': process %d failed hoop_init (%s) without a reason in its "
                     "log: '%s'",
                     c->name, q, ag_code_name(rc), buf);
                bad++;
            }
        }
        if (rc == HOOP_OK && !may_pass) {
            i_joined++;
            fail("init case '%s': process %d (RANK=%d WORLD_SIZE=%d) passed hoop_init; then "
                 "all-reduce: %s%s, %s%s (%s)",
                 c->name, q, c->rank[q], c->size[q], ag_code_name(crc[q][0]),
                 cw[q][0] ? " with WRONG data" : "", ag_code_name(crc[q][1]),
                 cw[q][1] ? " with WRONG data" : "", cw[q][0] ? cmsg[q][0] : cmsg[q][1]);
            bad++;
        } else if (c->param == IP_MALFORMED) {
            /* Exactly these: a timeout would mean a rank waited for one that had given up. */
            int want = odd ? HOOP_ERR_INVALID_ARGUMENT : HOOP_ERR_MISMATCH;
            if (rc != want) {
                ag_log_line(path, "hoop_init failed", buf, sizeof buf);
                fail("init case '%s': process %d (RANK=%d%s) failed hoop_init with %s, want %s "
                     "(after %.2f s): %s",
                     c->name, q, c->rank[q], odd ? ", the malformed one" : "", ag_code_name(rc),
                     ag_code_name(want), secs[q], buf);
                bad++;
            }
        } else if (rc != HOOP_OK && !(odd && c->dupx) && rc != HOOP_ERR_MISMATCH &&
                   !(may_wait && (rc == HOOP_ERR_TIMEOUT || rc == HOOP_ERR_PEER_LOST)) &&
                   !(odd && c->complete && (rc == HOOP_ERR_TIMEOUT || is_late(rc, buf)))) {
            ag_log_line(path, "hoop_init failed", buf, sizeof buf);
            fail("init case '%s': process %d (RANK=%d%s) failed hoop_init with %s, want "
                 "HOOP_ERR_MISMATCH (after %.2f s): %s",
                 c->name, q, c->rank[q], odd ? ", the odd one" : "", ag_code_name(rc), secs[q],
                 buf);
            bad++;
        }
    }
    if (c->dupx && odd_passed > 1) {
        fail("init case '%s': both processes claiming one rank passed hoop_init", c->name);
        bad++;
    }
    if (wrong) {
        i_wrong += wrong;
        fail("init case '%s': %d all-reduce(s) returned HOOP_OK with WRONG data", c->name, wrong);
    }
    if (!c->expect_ok && passed < c->nproc && !warned && c->nneedle > 0 &&
        !(late > 0 && passed + late == c->nproc)) {
        fail("init case '%s': no process logged a WARN line holding '%s'%s%s%s%s", c->name,
             c->needle[0], c->nneedle > 1 ? " and '" : "", c->nneedle > 1 ? c->needle[1] : "",
             c->nneedle > 2 ? "' and '" : "", c->nneedle > 2 ? c->needle[2] : "");
        bad++;
    }
    if (!c->expect_ok && passed < c->nproc && bad == 0) i_detected++;
    if (c->expect_ok && bad == 0) i_controls_ok++;
    if (bad || o->verbose) {
        printf("  init case #%d '%s' (HOOP_TRANSPORT=%s): rerun: agree --mode init --transport %s "
               "--ranks %d --only %d --verbose\n",
               r->idx, c->name, o->tp, o->tp, c->p, r->idx);
        ag_job_dump_logs(j, 1);
    }
}

static int run_init(const opts_t *o)
{
    icase_t *cs = calloc(512, sizeof *cs);
    if (cs == NULL) return 2;
    int n = build_init_cases(o, cs, 512);
    if (n < 0) return 1;
    int k = o->jobs > 0 ? o->jobs : 6;
    irun_t *runs = calloc((size_t)k, sizeof *runs);
    ag_job_t *jobs[16];
    int next = o->only >= 0 ? o->only : 0, end = o->only >= 0 ? o->only_last + 1 : n;
    if (end > n) end = n;
    double t0 = now_s();
    for (;;) {
        int active = 0;
        for (int i = 0; i < k; i++) {
            irun_t *r = &runs[i];
            if (!r->active && next < end) {
                r->idx = next++;
                r->ctx = (ictx_t){.c = &cs[r->idx], .tp = o->tp};
                r->tries = 0;
            start:
                if (ag_job_start(&r->job, cs[r->idx].nproc, ag_free_port(), init_env, init_rank,
                                 &r->ctx) != 0) {
                    fail("init case '%s': could not start its processes", cs[r->idx].name);
                    ag_job_kill(&r->job);
                    ag_job_free(&r->job);
                    continue;
                }
                r->active = 1;
                r->deadline = now_s() + 20;
            }
            if (!r->active) continue;
            active++;
            if (ag_job_done(&r->job) || now_s() > r->deadline) {
                if (!ag_job_done(&r->job)) {
                    fail("init case '%s': the processes were still running %0.f s after they "
                         "started; killed",
                         cs[r->idx].name, 20.0);
                    ag_job_kill(&r->job);
                }
                /* A port someone else took between our probe and rank 0's bind: start again.
                 * Where two processes claim rank 0, one of them finds the port taken by design;
                 * only both finding it taken means someone else has it. */
                char path[128], line[600];
                int taken = 0, zeros = 0;
                for (int q = 0; q < cs[r->idx].nproc; q++) {
                    if (cs[r->idx].rank[q] != 0) continue;
                    zeros++;
                    ag_job_log_path(&r->job, q, path, sizeof path);
                    taken += ag_log_line(path, "is already in use", line, sizeof line) != 0;
                }
                if (r->tries < 2 && zeros > 0 && taken == zeros) {
                    r->tries++;
                    ag_job_dump_logs(&r->job, 0);
                    ag_job_free(&r->job);
                    goto start;
                }
                check_init_case(o, r);
                ag_job_dump_logs(&r->job, 0);
                ag_job_free(&r->job);
                r->active = 0;
            }
        }
        if (active == 0 && next >= end) break;
        for (int i = 0; i < k; i++) jobs[i] = runs[i].active ? &runs[i].job : NULL;
        ag_jobs_pump(jobs, k, 20);
    }
    printf("SUMMARY init HOOP_TRANSPORT=%s ranks", o->tp);
    for (int i = 0; i < o->nranks; i++) printf("%s%d", i ? "," : " ", o->ranks[i]);
    printf(": %d cases (%d controls ok), disagreements detected on every rank %d, processes that "
           "passed init despite a disagreement %d, HOOP_OK with wrong data %d, %.1f s\n",
           i_tried, i_controls_ok, i_detected, i_joined, i_wrong, now_s() - t0);
    for (int pm = 0; pm < IP_N; pm++) {
        printf("  codes from hoop_init, %s:", IP_NAME[pm]);
        for (int rc = 0; rc <= HOOP_ERR_INTERNAL; rc++)
            if (icounts[pm][rc]) printf(" %s %d", ag_code_name(rc), icounts[pm][rc]);
        printf("\n");
    }
    printf("  agreed settings tried (HOOP__AGREED_SETTINGS):");
    for (size_t i = 0; i < NAGREED; i++) printf(" %s", agreed[i].env);
    printf("\n");
    free(runs);
    free(cs);
    return failures ? 1 : 0;
}

/* ================================================================================================
 * call: many cases per job, each on its own split communicator
 * ============================================================================================== */

enum { CP_ALGO, CP_DTYPE, CP_OP, CP_COUNT, CP_ROOT, CP_COLL, CP_N };
static const char *const CP_NAME[] = {"algo", "dtype", "op", "count", "root", "collective"};

typedef struct combo {
    int param, odd;
    ag_spec_t base, alt; /* the others' view, the odd rank's */
} combo_t;

typedef struct cbuild {
    combo_t *c;
    int n, cap, p;
} cbuild_t;

static void add_combo(cbuild_t *b, int param, ag_spec_t base, ag_spec_t alt, int odd)
{
    if (b->n >= b->cap) return;
    uint32_t salt = (uint32_t)b->n * 7919u + 17u;
    int nb = b->n % 4 == 3;
    base.salt = alt.salt = salt;
    base.nonblocking = alt.nonblocking = nb;
    alt.vk = base.vk;
    combo_t *c = &b->c[b->n++];
    c->param = param;
    c->odd = odd;
    c->base = base;
    c->alt = alt;
}

/* The odd rank, rotating over the first, the last and a middle one. */
static int odd_of(const cbuild_t *b)
{
    int k = b->n % 3;
    return k == 0 ? 0 : k == 1 ? b->p - 1 : b->p / 2;
}

static int build_combos(int p, combo_t *out, int cap)
{
    cbuild_t b = {.c = out, .cap = cap, .p = p};
    const ag_spec_t def = {.coll = AG_ALLREDUCE,
                           .dtype = HOOP_UINT32,
                           .op = HOOP_SUM,
                           .root = 0,
                           .algo = -1,
                           .count = 8,
                           .vk = AG_VK_FULL};
    size_t seg1 = (size_t)CHUNK_EL * (size_t)p; /* ring: one chunk per segment up to here */

    /* Algorithms: every ordered pair, at counts where their messages can coincide. */
    const size_t acounts[] = {
        0,    1,        5,           8, 1000, SMALL_EL, SMALL_EL + 1, CHUNK_EL, CHUNK_EL + 1,
        seg1, seg1 + 1, 3 * seg1 + 7};
    for (int a = 0; a < AG_NALGO; a++)
        for (int x = 0; x < AG_NALGO; x++) {
            if (a == x) continue;
            for (size_t i = 0; i < sizeof acounts / sizeof acounts[0]; i++) {
                ag_spec_t s = def, t;
                s.count = acounts[i];
                s.algo = a;
                t = s;
                t.algo = x;
                add_combo(&b, CP_ALGO, s, t, odd_of(&b));
            }
        }

    /* Dtypes: same element size (only the header can tell), then different sizes. */
    static const hoop_dtype_t dpairs[][2] = {
        {HOOP_INT32, HOOP_UINT32},     {HOOP_INT32, HOOP_FLOAT32},  {HOOP_UINT32, HOOP_FLOAT32},
        {HOOP_INT64, HOOP_UINT64},     {HOOP_INT64, HOOP_FLOAT64},  {HOOP_UINT64, HOOP_FLOAT64},
        {HOOP_FLOAT16, HOOP_BFLOAT16}, {HOOP_INT8, HOOP_UINT8},     {HOOP_INT32, HOOP_INT64},
        {HOOP_UINT8, HOOP_FLOAT16},    {HOOP_FLOAT32, HOOP_FLOAT64}};
    const size_t dcounts[] = {0, 1, 8, 1000, seg1 + 1};
    for (size_t d = 0; d < sizeof dpairs / sizeof dpairs[0]; d++)
        for (size_t i = 0; i < sizeof dcounts / sizeof dcounts[0]; i++) {
            ag_spec_t s = def, t;
            s.vk = AG_VK_SMALL;
            s.count = dcounts[i];
            s.dtype = dpairs[d][0];
            t = s;
            t.dtype = dpairs[d][1];
            add_combo(&b, CP_DTYPE, s, t, odd_of(&b));
        }
    const int dcolls[] = {AG_BROADCAST, AG_REDUCE,         AG_ALLGATHER, AG_GATHER,
                          AG_SCATTER,   AG_REDUCE_SCATTER, AG_ALLTOALL};
    const size_t dcounts2[] = {1, 1000, seg1 + 1};
    for (size_t k = 0; k < sizeof dcolls / sizeof dcolls[0]; k++)
        for (size_t d = 0; d < 3; d++) {
            static const size_t pick[3] = {1, 6, 8}; /* int32/float32, f16/bf16, int32/int64 */
            for (size_t i = 0; i < 3; i++) {
                ag_spec_t s = def, t;
                s.coll = dcolls[k];
                s.vk = AG_VK_SMALL;
                s.count = dcounts2[i];
                s.dtype = dpairs[pick[d]][0];
                t = s;
                t.dtype = dpairs[pick[d]][1];
                add_combo(&b, CP_DTYPE, s, t, odd_of(&b));
            }
        }

    /* Ops, on int32 with small signed values so that every pair gives different results. */
    const size_t ocounts[] = {1, 8, 1000, seg1 + 1};
    for (int x = 0; x < HOOP_OP_COUNT; x++)
        for (int y = x + 1; y < HOOP_OP_COUNT; y++)
            for (size_t i = 0; i < sizeof ocounts / sizeof ocounts[0]; i++) {
                ag_spec_t s = def, t;
                s.vk = AG_VK_SIGNED;
                s.dtype = HOOP_INT32;
                s.count = ocounts[i];
                s.op = (hoop_op_t)x;
                t = s;
                t.op = (hoop_op_t)y;
                add_combo(&b, CP_OP, s, t, odd_of(&b));
            }
    static const hoop_op_t opairs[][2] = {
        {HOOP_SUM, HOOP_MAX}, {HOOP_MIN, HOOP_MAX}, {HOOP_PROD, HOOP_AVG}, {HOOP_SUM, HOOP_AVG}};
    for (int coll = AG_REDUCE; coll <= AG_REDUCE_SCATTER; coll += AG_REDUCE_SCATTER - AG_REDUCE)
        for (size_t k = 0; k < 4; k++)
            for (size_t i = 0; i < 3; i++) {
                ag_spec_t s = def, t;
                s.coll = coll;
                s.vk = AG_VK_SIGNED;
                s.dtype = HOOP_INT32;
                s.count = dcounts2[i];
                s.op = opairs[k][0];
                t = s;
                t.op = opairs[k][1];
                add_combo(&b, CP_OP, s, t, odd_of(&b));
            }

    /* Counts, across each threshold. */
    const size_t cpairs[][2] = {{0, 1},
                                {1, 0},
                                {5, 8},
                                {8, 5},
                                {SMALL_EL, SMALL_EL + 1},
                                {1000, 1001},
                                {CHUNK_EL, CHUNK_EL + 1},
                                {seg1, seg1 + 1}};
    for (size_t i = 0; i < sizeof cpairs / sizeof cpairs[0]; i++) {
        ag_spec_t s = def, t;
        s.count = cpairs[i][0];
        t = s;
        t.count = cpairs[i][1];
        add_combo(&b, CP_COUNT, s, t, odd_of(&b));
    }
    for (int coll = AG_BROADCAST; coll <= AG_ALLTOALL; coll++)
        for (size_t i = 0; i < 5; i++) {
            static const size_t pick[5] = {0, 3, 4, 7, 99};
            ag_spec_t s = def, t;
            s.coll = coll;
            if (pick[i] == 99) {
                if (coll != AG_REDUCE || p > 4) continue;
                s.count = TREE_EL;
                t = s;
                t.count = TREE_EL + 1;
            } else {
                s.count = cpairs[pick[i]][0];
                t = s;
                t.count = cpairs[pick[i]][1];
            }
            add_combo(&b, CP_COUNT, s, t, odd_of(&b));
        }

    /* Roots: r0 is the others' root, the odd rank believes r1 is: two roots, no root, or a
     * bystander that looks for the wrong root. */
    const size_t rcounts[] = {1, 1000, 5000, TREE_EL + 1};
    const int rcolls[] = {AG_BROADCAST, AG_REDUCE, AG_GATHER, AG_SCATTER};
    for (size_t k = 0; k < 4; k++)
        for (int var = 0; var < 3; var++) {
            int r0 = 0, r1 = p - 1, odd = var == 0 ? r1 : var == 1 ? r0 : 1;
            if (var == 2 && p < 3) continue;
            for (size_t i = 0; i < 4; i++) {
                if (i == 3 && (rcolls[k] != AG_REDUCE || p > 4)) continue;
                ag_spec_t s = def, t;
                s.coll = rcolls[k];
                s.count = rcounts[i];
                s.root = r0;
                t = s;
                t.root = r1;
                add_combo(&b, CP_ROOT, s, t, odd);
            }
        }

    /* Collectives: every ordered pair. */
    for (int x = 0; x < AG_NCOLL; x++)
        for (int y = 0; y < AG_NCOLL; y++) {
            if (x == y) continue;
            const size_t ccounts[] = {8, 1000};
            for (size_t i = 0; i < 2; i++) {
                if (p >= 5 && i != (size_t)((x + y) % 2)) continue;
                ag_spec_t s = def, t;
                s.coll = x;
                s.count = ccounts[i];
                t = s;
                t.coll = y;
                add_combo(&b, CP_COLL, s, t, odd_of(&b));
            }
        }
    return b.n;
}

typedef struct cctx {
    const combo_t *combos;
    int ncombo, first, stride, p;
    const char *tp;
    int sym;
    char jobid[48];
} cctx_t;

#define SYM_CAP (1u << 20)  /* each symmetric buffer: every case's calls fit, guards and all */
static int zero_copy_lines; /* trace lines of the zero-copy engine since the last reset */

static void on_trace(void *ctx, const char *line)
{
    (void)ctx;
    if (strstr(line, "every rank's input") != NULL || strstr(line, "every rank's output") != NULL)
        zero_copy_lines++;
}

static void call_env(void *ctx, int slot)
{
    const cctx_t *x = ctx;
    char v[32];
    base_settings(x->tp);
    setenv("HOOP_TIMEOUT", "10", 1);
    snprintf(v, sizeof v, "%d", slot);
    setenv("RANK", v, 1);
    snprintf(v, sizeof v, "%d", x->p);
    setenv("WORLD_SIZE", v, 1);
    setenv("HOOP_JOB_ID", x->jobid, 1);
}

static int call_rank(void *ctx, int slot, int fd)
{
    const cctx_t *x = ctx;
    hoop_comm_t *parent = NULL;
    hoop_result_t rc = hoop_init_from_env(&parent);
    if (rc != HOOP_OK) {
        ag_say(fd, "F %d %d", slot, (int)rc);
        return 0;
    }
    /* Above any case's two calls, so that the parent waits out a case's timeouts. */
    hoop_comm_set_timeout(parent, 30);
    for (int i = x->first; i < x->ncombo; i += x->stride) {
        const combo_t *cb = &x->combos[i];
        hoop_comm_t *c = NULL;
        rc = hoop_comm_split(parent, 0, slot, &c);
        if (rc != HOOP_OK) {
            ag_say(fd, "S %d %d %d %s", i, slot, (int)rc, hoop_comm_last_error(parent));
            break;
        }
        hoop_comm_set_timeout(c, CALL_TIMEOUT);
        if (x->sym) {
            /* The case's buffers in its communicator's symmetric memory, where the zero-copy
             * engine takes them; its destroy unmaps them. */
            void *sb = NULL, *rb = NULL;
            rc = hoop_mem_alloc(c, SYM_CAP, &sb);
            if (rc == HOOP_OK) rc = hoop_mem_alloc(c, SYM_CAP, &rb);
            if (rc != HOOP_OK) {
                ag_say(fd, "S %d %d %d hoop_mem_alloc: %s", i, slot, (int)rc,
                       hoop_comm_last_error(c));
                break;
            }
            ag_use_buffers(sb, rb, SYM_CAP);
            hoop_comm_set_trace(c, on_trace, NULL);
        }
        const ag_spec_t *s = slot == cb->odd ? &cb->alt : &cb->base;
        ag_outcome_t o1, o2;
        if (x->sym) {
            /* First the others' call on every rank alike, which must succeed (zero copy where
             * the engine serves it: all-reduce, reduce-scatter, all-gather and broadcast above
             * HOOP_SMALL_BYTES); then the case. */
            ag_outcome_t o0;
            zero_copy_lines = 0;
            ag_run(c, &cb->base, &o0);
            ag_say(fd, "Z %d %d %d %d %d |%s", i, slot, zero_copy_lines, (int)o0.rc, o0.wrong,
                   o0.wrong ? o0.why : o0.msg);
        }
        ag_run(c, s, &o1);
        /* The next call, with every rank's choices equal again: an all-to-all, in which every
         * rank hears from every other, so that a stray message of the call before, from
         * whichever peer, is in the way; then another, for a bystander that raced ahead. */
        hoop_comm_set_algo(c, "auto");
        ag_spec_t nx = {.coll = AG_ALLTOALL,
                        .dtype = HOOP_UINT32,
                        .op = HOOP_SUM,
                        .algo = -1,
                        .count = 4,
                        .vk = AG_VK_FULL,
                        .salt = s->salt ^ 0x5bd1e995u};
        ag_run(c, &nx, &o2);
        ag_outcome_t o3;
        nx.salt ^= 0x27d4eb2du;
        ag_run(c, &nx, &o3);
        ag_say(fd, "R %d %d %d %d %d %d %.1f %.1f %d %d |%s|%s", i, slot, (int)o1.rc, o1.wrong,
               (int)o2.rc, o2.wrong, o1.ms, o2.ms, (int)o3.rc, o3.wrong, o1.wrong ? o1.why : o1.msg,
               o2.wrong ? o2.why : o2.msg);
        /* No rank may tear the case down while another is still in it: its next call would then
         * fail because the peers left, not because anything was detected. */
        rc = hoop_barrier(parent);
        ag_use_buffers(NULL, NULL, 0);
        hoop_comm_destroy(c);
        if (rc != HOOP_OK) {
            ag_say(fd, "S %d %d %d %s", i, slot, (int)rc, hoop_comm_last_error(parent));
            break;
        }
    }
    hoop_comm_destroy(parent);
    return 0;
}

typedef struct cres {
    int got, rc1, w1, rc2, w2, rc3, w3;
    double ms1, ms2;
    char msg[400];
} cres_t;

typedef struct crun {
    ag_job_t job;
    cctx_t ctx;
    int active, cur, restarts, init_tries;
} crun_t;

static int ccounts[CP_N][HOOP_ERR_INTERNAL + 1];
static int c_tried, c_detected, c_wrong, c_undetected, c_third, c_late, c_lost;
static int zero_copy_cases; /* --sym: rank-cases whose first call the zero-copy engine ran */

static void describe_combo(const combo_t *cb, char *buf, size_t n)
{
    char a[120], b[120];
    ag_spec_describe(&cb->base, a, sizeof a);
    ag_spec_describe(&cb->alt, b, sizeof b);
    snprintf(buf, n, "%s: others %s, rank %d %s", CP_NAME[cb->param], a, cb->odd, b);
}

static void check_combo(const opts_t *o, const combo_t *cb, int idx, cres_t *res, int p)
{
    char d[300];
    describe_combo(cb, d, sizeof d);
    int bad = 0, cause = 0, late3 = 0;
    c_tried++;
    for (int q = 0; q < p; q++) {
        cres_t *r = &res[q];
        int code = r->rc1 != HOOP_OK ? r->rc1 : r->rc2 != HOOP_OK ? r->rc2 : r->rc3;
        if (code >= 0 && code <= HOOP_ERR_INTERNAL) ccounts[cb->param][code]++;
        if (r->w1 || r->w2 || r->w3) {
            c_wrong++;
            fail("case #%d (%s): rank %d: %s returned %s with WRONG data: %s", idx, d, q,
                 r->w1   ? "the call"
                 : r->w2 ? "the next call"
                         : "the call after next",
                 ag_code_name(r->w1   ? r->rc1
                              : r->w2 ? r->rc2
                                      : r->rc3),
                 r->msg);
            bad++;
        }
        if (r->rc1 == HOOP_OK && r->rc2 == HOOP_OK) {
            if (r->rc3 == HOOP_OK) {
                c_undetected++;
                fail("case #%d (%s): rank %d: the call and the two after it returned HOOP_OK", idx,
                     d, q);
                bad++;
            } else {
                /* Its own part matched (its data is right): a bystander whose next call completed
                 * before the abort of a rank that found the disagreement reached it. */
                c_third++;
                late3++;
                if (o->strict) {
                    fail("case #%d (%s): rank %d: the call and the next one both returned HOOP_OK "
                         "(the one after: %s)",
                         idx, d, q, ag_code_name(r->rc3));
                    bad++;
                }
            }
            continue;
        }
        if ((r->rc1 != HOOP_OK && r->rc2 == HOOP_OK) || (r->rc2 != HOOP_OK && r->rc3 == HOOP_OK)) {
            fail("case #%d (%s): rank %d: a call after a failure succeeded (%s, %s, %s)", idx, d, q,
                 ag_code_name(r->rc1), ag_code_name(r->rc2), ag_code_name(r->rc3));
            bad++;
        }
        if (r->rc1 == HOOP_OK) c_late++;
        if (code == HOOP_ERR_MISMATCH || code == HOOP_ERR_TIMEOUT) cause = 1;
        if (code != HOOP_ERR_MISMATCH && code != HOOP_ERR_ABORTED && code != HOOP_ERR_TIMEOUT &&
            code != HOOP_ERR_PEER_LOST) {
            fail("case #%d (%s): rank %d: %s, want HOOP_ERR_MISMATCH (or the abort it causes, or "
                 "a timeout where nothing is sent): %s",
                 idx, d, q, ag_code_name(code), r->msg);
            bad++;
        }
    }
    if (!bad && !cause) {
        fail("case #%d (%s): no rank says HOOP_ERR_MISMATCH (nor timed out): only aborts", idx, d);
        bad++;
    }
    if (!bad) c_detected++;
    if (bad || o->verbose || late3) {
        printf("  case #%d (%s)%s\n", idx, d,
               bad     ? ""
               : late3 ? ": a bystander failed only in the call after next"
                       : ": every rank failed");
        for (int q = 0; q < p; q++)
            printf("    rank %d: %s (%.1f ms), then %s (%.1f ms), then %s: %s\n", q,
                   ag_code_name(res[q].rc1), res[q].ms1, ag_code_name(res[q].rc2), res[q].ms2,
                   ag_code_name(res[q].rc3), res[q].msg);
        printf("    rerun: agree --mode call --transport %s --ranks %d --only %d --verbose\n",
               o->tp, p, idx);
    }
}

static int crun_start(crun_t *r, int first, const opts_t *o)
{
    r->ctx.first = first;
    r->cur = first;
    snprintf(r->ctx.jobid, sizeof r->ctx.jobid, "agree-call-%d-%d-%d", (int)getpid(), first,
             r->restarts);
    if (first >= r->ctx.ncombo) {
        r->active = 0;
        return 0;
    }
    if (ag_job_start(&r->job, o->ranks[0], ag_free_port(), call_env, call_rank, &r->ctx) != 0) {
        ag_job_kill(&r->job);
        ag_job_free(&r->job);
        return -1;
    }
    r->active = 1;
    return 0;
}

static int run_call(const opts_t *o)
{
    int p = o->ranks[0];
    combo_t *cs = calloc(2048, sizeof *cs);
    cres_t(*res)[AG_MAXPROC] = calloc(2048, sizeof *res);
    if (cs == NULL || res == NULL) return 2;
    int n = build_combos(p, cs, 2048);
    if (o->list) {
        char d[300];
        for (int i = 0; i < n; i++) {
            describe_combo(&cs[i], d, sizeof d);
            printf("#%d %s\n", i, d);
        }
        return 0;
    }
    combo_t *sel = cs;
    int nsel = n;
    if (o->only >= 0) {
        if (o->only_last >= n) return 2;
        sel = &cs[o->only];
        nsel = o->only_last - o->only + 1;
    }
    /* The cases mostly wait (on the network, or for a timeout): more jobs than cores. */
    int k = o->jobs > 0 ? o->jobs : p >= 5 ? 5 : 8;
    if (k > nsel) k = nsel;
    crun_t *runs = calloc((size_t)k, sizeof *runs);
    ag_job_t *jobs[16];
    double t0 = now_s(), deadline = t0 + o->deadline;
    for (int i = 0; i < k; i++) {
        runs[i].ctx = (cctx_t){
            .combos = sel, .ncombo = nsel, .stride = k, .p = p, .tp = o->tp, .sym = o->sym};
        if (crun_start(&runs[i], i, o) != 0) fail("could not start job %d", i);
    }
    const double idle_max = 4 * CALL_TIMEOUT + 10;
    int *done = calloc((size_t)nsel, sizeof *done);
    for (;;) {
        int active = 0;
        for (int i = 0; i < k; i++) {
            crun_t *r = &runs[i];
            if (!r->active) continue;
            active++;
            ag_job_t *j = &r->job;
            char *line;
            int restart_at = -1, init_failed = 0;
            while ((line = ag_job_next_line(j)) != NULL) {
                int idx, slot, rc1, w1, rc2, w2, rc3, w3, off = 0;
                double m1, m2;
                if (sscanf(line, "R %d %d %d %d %d %d %lf %lf %d %d %n", &idx, &slot, &rc1, &w1,
                           &rc2, &w2, &m1, &m2, &rc3, &w3, &off) == 10 &&
                    idx >= 0 && idx < nsel && slot >= 0 && slot < p) {
                    cres_t *c = &res[idx][slot];
                    *c = (cres_t){.got = 1,
                                  .rc1 = rc1,
                                  .w1 = w1,
                                  .rc2 = rc2,
                                  .w2 = w2,
                                  .rc3 = rc3,
                                  .w3 = w3,
                                  .ms1 = m1,
                                  .ms2 = m2};
                    snprintf(c->msg, sizeof c->msg, "%s", line + off);
                    int all = 1;
                    for (int q = 0; q < p; q++) all &= res[idx][q].got;
                    if (all && !done[idx]) {
                        done[idx] = 1;
                        check_combo(o, &sel[idx], idx + (o->only >= 0 ? o->only : 0), res[idx], p);
                    }
                } else if (sscanf(line, "S %d %d %d %n", &idx, &slot, &rc1, &off) == 3 &&
                           idx >= 0 && idx < nsel) {
                    fail("case #%d: rank %d: hoop_comm_split failed: %s: %s",
                         idx + (o->only >= 0 ? o->only : 0), slot, ag_code_name(rc1), line + off);
                    if (!done[idx]) {
                        done[idx] = 2;
                        c_lost++;
                        c_tried++;
                    }
                    restart_at = idx + k;
                } else if (sscanf(line, "F %d %d", &slot, &rc1) == 2) {
                    init_failed = 1;
                } else if (sscanf(line, "Z %d %d %d %d %d |%n", &idx, &slot, &rc1, &rc2, &w2,
                                  &off) == 5) {
                    zero_copy_cases += rc1 > 0;
                    if (rc2 != HOOP_OK || w2)
                        fail("case #%d: rank %d: the agreeing call before it: %s%s: %s",
                             idx + (o->only >= 0 ? o->only : 0), slot, ag_code_name(rc2),
                             w2 ? " with WRONG data" : "", line + off);
                }
            }
            while (r->cur < nsel && done[r->cur]) r->cur += k;
            int finished = ag_job_done(j);
            if (finished && r->cur >= nsel) {
                ag_job_dump_logs(j, 0);
                ag_job_free(j);
                r->active = 0;
                continue;
            }
            const char *why = NULL;
            if (init_failed)
                why = "hoop_init of a job failed";
            else if (finished)
                why = "the job ended before its cases were done";
            else if (now_s() - j->t_last > idle_max)
                why = "no rank reported for too long";
            if (why == NULL && restart_at < 0) continue;
            /* Start again after the case that broke the job (or at it, if init failed). */
            ag_job_kill(j);
            char *ln;
            while ((ln = ag_job_next_line(j)) != NULL) (void)ln;
            int crashed = 0;
            for (int q = 0; q < p; q++)
                if (!(WIFEXITED(j->wstatus[q]) && WEXITSTATUS(j->wstatus[q]) == 0)) crashed = 1;
            if (init_failed && r->init_tries < 2 && !crashed) {
                r->init_tries++;
                ag_job_dump_logs(j, 0);
                ag_job_free(j);
                if (crun_start(r, r->cur, o) != 0) r->active = 0;
                continue;
            }
            if (why != NULL && r->cur < nsel) {
                char d[300];
                describe_combo(&sel[r->cur], d, sizeof d);
                fail("case #%d (%s): %s", r->cur + (o->only >= 0 ? o->only : 0), d, why);
                c_lost++;
                c_tried++;
                for (int q = 0; q < p; q++) {
                    cres_t *c = &res[r->cur][q];
                    printf("    rank %d: %s%s, exit status %#x\n", q,
                           c->got ? ag_code_name(c->rc1) : "no report", c->got ? "" : "",
                           j->wstatus[q]);
                }
                ag_job_dump_logs(j, 1);
                done[r->cur] = 2;
                restart_at = r->cur + k;
            } else {
                ag_job_dump_logs(j, 0);
            }
            ag_job_free(j);
            r->init_tries = 0;
            if (++r->restarts > 8) {
                fail("job %d broke down %d times; its remaining cases are not run", i, r->restarts);
                r->active = 0;
                continue;
            }
            if (crun_start(r, restart_at, o) != 0) r->active = 0;
        }
        if (active == 0) break;
        if (now_s() > deadline) {
            int left = 0;
            for (int i = 0; i < nsel; i++) left += !done[i];
            fail("%d cases not run within %.0f s (the sweep is sized to fit)", left, o->deadline);
            for (int i = 0; i < k; i++)
                if (runs[i].active) {
                    ag_job_kill(&runs[i].job);
                    ag_job_dump_logs(&runs[i].job, 0);
                    ag_job_free(&runs[i].job);
                    runs[i].active = 0;
                }
            break;
        }
        for (int i = 0; i < k; i++) jobs[i] = runs[i].active ? &runs[i].job : NULL;
        ag_jobs_pump(jobs, k, 20);
    }
    printf(
        "SUMMARY call HOOP_TRANSPORT=%s ranks=%d: %d combinations, disagreements detected on "
        "every rank %d, HOOP_OK with wrong data %d (rank-calls), ranks that never failed %d, ranks "
        "that failed only in the next call %d, bystanders that failed only in the call after "
        "next %d, hung or crashed %d, %.1f s\n",
        o->tp, p, c_tried, c_detected, c_wrong, c_undetected, c_late, c_third, c_lost,
        now_s() - t0);
    if (o->sym) {
        /* Most cases are not zero-copy (small counts, forced algorithms, other collectives);
         * those of all-reduce, reduce-scatter, all-gather and broadcast above 2K are. */
        printf("  --sym: the zero-copy engine ran the agreeing call before the case in %d "
               "rank-cases\n",
               zero_copy_cases);
        if (zero_copy_cases == 0) fail("--sym: the zero-copy engine never ran");
    }
    for (int pm = 0; pm < CP_N; pm++) {
        printf("  first failure per rank, %s:", CP_NAME[pm]);
        for (int rc = 0; rc <= HOOP_ERR_INTERNAL; rc++)
            if (ccounts[pm][rc]) printf(" %s %d", ag_code_name(rc), ccounts[pm][rc]);
        printf("\n");
    }
    free(done);
    free(runs);
    free(res);
    free(cs);
    return failures ? 1 : 0;
}

/* ================================================================================================ */

static int usage(void)
{
    fprintf(stderr, "usage: agree --mode init|call --transport tcp|shm [--ranks P[,P...]] "
                    "[--jobs K] [--only N[-M]] [--deadline S] [--strict] [--sym] [--verbose] "
                    "[--list]\n");
    return 2;
}

/* Whether the library takes this transport: a single-rank init, in a child (no library state
 * may live in the process that forks the ranks). */
static int transport_accepted(const char *tp)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("HOOP_TRANSPORT", tp, 1);
        setenv("HOOP_DEBUG", "NONE", 1);
        hoop_comm_t *c = NULL;
        hoop_result_t rc = hoop_init(&c, "env://", 0, 1);
        if (rc == HOOP_OK) hoop_comm_destroy(c);
        _exit(rc == HOOP_ERR_INVALID_ARGUMENT || rc == HOOP_ERR_UNSUPPORTED);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return 1;
    return !(WIFEXITED(st) && WEXITSTATUS(st) == 1);
}

int main(int argc, char **argv)
{
    opts_t o = {.mode = -1, .tp = "tcp", .jobs = 0, .only = -1, .deadline = 80};
    o.ranks[0] = 2;
    o.ranks[1] = 3;
    o.ranks[2] = 5;
    o.nranks = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--verbose") == 0)
            o.verbose = 1;
        else if (strcmp(a, "--list") == 0)
            o.list = 1;
        else if (strcmp(a, "--strict") == 0)
            o.strict = 1;
        else if (strcmp(a, "--sym") == 0)
            o.sym = 1;
        else if (v == NULL)
            return usage();
        else if (i++, strcmp(a, "--mode") == 0) {
            if (strcmp(v, "init") == 0)
                o.mode = 0;
            else if (strcmp(v, "call") == 0)
                o.mode = 1;
            else
                return usage();
        } else if (strcmp(a, "--transport") == 0)
            o.tp = v;
        else if (strcmp(a, "--ranks") == 0) {
            o.nranks = 0;
            for (const char *s = v; *s && o.nranks < 8;) {
                int r = atoi(s);
                if (r < 2 || r > AG_MAXPROC - 2) return usage();
                o.ranks[o.nranks++] = r;
                s = strchr(s, ',');
                if (s == NULL) break;
                s++;
            }
        } else if (strcmp(a, "--jobs") == 0)
            o.jobs = atoi(v);
        else if (strcmp(a, "--only") == 0) {
            /* N, or a range N-M */
            o.only = o.only_last = atoi(v);
            const char *dash = strchr(v, '-');
            if (dash != NULL) o.only_last = atoi(dash + 1);
            if (o.only < 0 || o.only_last < o.only) return usage();
        } else if (strcmp(a, "--deadline") == 0)
            o.deadline = atof(v);
        else
            return usage();
    }
    if (o.mode < 0 || o.nranks < 1 || o.jobs > 16) return usage();
    setvbuf(stdout, NULL, _IOLBF, 0);
    ag_clean_environment();
    for (size_t i = 0; i < NAGREED; i++) unsetenv(agreed[i].env);
    if (!o.list && !transport_accepted(o.tp)) {
        printf("SKIP: this build of hoop does not accept HOOP_TRANSPORT=%s\n", o.tp);
        return 77;
    }
    int rc = o.mode == 0 ? run_init(&o) : run_call(&o);
    printf("%s\n", rc == 0 ? "PASSED" : "FAILED");
    return rc;
}
