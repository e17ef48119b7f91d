/* The programs that fork their own ranks over a fresh file:// rendezvous (tests/cma, tests/sym,
 * and tests/cuda/ipc_close.c over a TCP store):
 * the launch, the wait with a deadline, the kill of one rank, the checks every rank makes. Header
 * only, like testing.h, so that each test stays one program to build. */
#ifndef HOOP_TEST_FORKED_H
#define HOOP_TEST_FORKED_H

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../common/refcheck.h"
#include "testing.h"

#define TEST_FORKED_MAX 64

typedef struct test_launch {
    char dir[64]; /* the launch's own folder: rendezvous files and logs, removed at the end */
    int nranks;
    pid_t pids[TEST_FORKED_MAX];
    int out_fd;      /* with watch_output: the ranks' stdout, read by the parent; else -1 */
    double deadline; /* now_s() past which the parent gives up on its ranks */
    char buf[1024];  /* the ranks' output read and not yet copied out */
    size_t have;
    int may_skip; /* set by the caller: a rank other than the killed one may exit 77 (nothing
                   * to test on this machine), which test_launch_wait counts in skipped */
    int skipped;
} test_launch_t;

/* "--ranks N --mode M", M one of modes (NULL-terminated; the first is the default): 0, or 2 with a
 * usage line (a mode misspelt in meson.build would otherwise run nothing and pass). */
static inline int test_forked_args(int argc, char **argv, const char *const *modes, int *ranks,
                                   const char **mode)
{
    *ranks = 2;
    *mode = modes[0];
    int known = 1;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 < argc && strcmp(argv[i], "--ranks") == 0) {
            *ranks = atoi(argv[i + 1]);
        } else if (i + 1 < argc && strcmp(argv[i], "--mode") == 0) {
            *mode = argv[i + 1];
            known = 0;
            for (int m = 0; modes[m] != NULL; m++) known |= strcmp(modes[m], *mode) == 0;
        } else {
            known = 0;
        }
    }
    if (known && *ranks >= 1 && *ranks <= TEST_FORKED_MAX) return 0;
    printf("usage: %s --ranks 1..%d --mode", argv[0], TEST_FORKED_MAX);
    for (int m = 0; modes[m] != NULL; m++) printf("%c%s", m == 0 ? ' ' : '|', modes[m]);
    printf("\n");
    return 2;
}

/* A fresh folder under /tmp named after the program, and HOOP_JOB_ID naming this launch, so that
 * no other run that reached a rendezvous of the same name can join it. 0, or -1 with a sentence. */
static inline int test_launch_open(test_launch_t *l, const char *name, double deadline_s)
{
    memset(l, 0, sizeof *l);
    l->out_fd = -1;
    l->deadline = now_s() + deadline_s;
    snprintf(l->dir, sizeof l->dir, "/tmp/hoop-%s-XXXXXX", name);
    if (mkdtemp(l->dir) == NULL) {
        printf("FAIL: mkdtemp %s: %s\n", l->dir, strerror(errno));
        return -1;
    }
    char job[64];
    snprintf(job, sizeof job, "%s-%d", name, (int)getpid());
    setenv("HOOP_JOB_ID", job, 1);
    return 0;
}

/* "file://<dir>/<file>": a rendezvous of this launch. */
static inline void test_launch_url(const test_launch_t *l, const char *file, char *url, size_t n)
{
    snprintf(url, n, "file://%.*s/%s", (int)sizeof l->dir, l->dir, file);
}

/* Forks ranks processes, each exiting with rank_main(rank, ranks, arg). A rank dies with its
 * parent, so that a test stopped from outside leaves no rank behind. watch_output: the ranks'
 * stdout goes to the parent (test_launch_kill_when reads it). 0, or -1 (the ranks forked so far
 * are killed). */
static inline int test_launch_fork(test_launch_t *l, int ranks, int watch_output,
                                   int (*rank_main)(int rank, int size, void *arg), void *arg)
{
    int fds[2] = {-1, -1};
    if (ranks < 1 || ranks > TEST_FORKED_MAX) {
        printf("FAIL: %d ranks: this program forks 1 to %d\n", ranks, TEST_FORKED_MAX);
        return -1;
    }
    if (watch_output && pipe(fds) != 0) {
        printf("FAIL: pipe: %s\n", strerror(errno));
        return -1;
    }
    pid_t parent = getpid();
    fflush(stdout);
    for (int r = 0; r < ranks; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(1);
            if (watch_output) {
                dup2(fds[1], 1);
                close(fds[0]);
                close(fds[1]);
            }
            _exit(rank_main(r, ranks, arg));
        }
        if (pid < 0) {
            printf("FAIL: fork of rank %d: %s\n", r, strerror(errno));
            for (int q = 0; q < r; q++) kill(l->pids[q], SIGKILL);
            for (int q = 0; q < r; q++) waitpid(l->pids[q], NULL, 0);
            if (watch_output) close(fds[0]), close(fds[1]);
            return -1;
        }
        l->pids[r] = pid;
        l->nranks = r + 1;
    }
    if (watch_output) {
        close(fds[1]);
        l->out_fd = fds[0];
    }
    return 0;
}

/* The next line of the ranks' output into out (NUL-terminated, and copied to stdout): 1, or 0 at
 * the end of the output or at the deadline. */
static inline int test_launch_line(test_launch_t *l, char *out, size_t n)
{
    for (;;) {
        char *nl = memchr(l->buf, '\n', l->have);
        if (nl != NULL || l->have == sizeof l->buf) {
            size_t len = nl != NULL ? (size_t)(nl - l->buf) + 1 : l->have;
            fwrite(l->buf, 1, len, stdout);
            fflush(stdout);
            snprintf(out, n, "%.*s", (int)len, l->buf);
            memmove(l->buf, l->buf + len, l->have - len);
            l->have -= len;
            return 1;
        }
        double left = l->deadline - now_s();
        struct pollfd p = {.fd = l->out_fd, .events = POLLIN};
        int k = left > 0 ? poll(&p, 1, (int)(left * 1000) + 1) : 0;
        if (k < 0 && errno == EINTR) continue;
        ssize_t got = k > 0 ? read(l->out_fd, l->buf + l->have, sizeof l->buf - l->have) : 0;
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            fwrite(l->buf, 1, l->have, stdout); /* a last line without its newline */
            fflush(stdout);
            l->have = 0;
            return 0;
        }
        l->have += (size_t)got;
    }
}

/* Once every rank has printed a line with word, lets a few calls pass, kills rank victim with
 * SIGKILL and copies the rest of the ranks' output. 0, or 1 where not every rank said word. */
static inline int test_launch_kill_when(test_launch_t *l, const char *word, int victim)
{
    char line[sizeof l->buf + 1];
    int said = 0;
    while (said < l->nranks && test_launch_line(l, line, sizeof line))
        if (strstr(line, word) != NULL) said++;
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
    kill(l->pids[victim], SIGKILL);
    while (test_launch_line(l, line, sizeof line)) {
    }
    close(l->out_fd);
    l->out_fd = -1;
    if (said < l->nranks) printf("FAIL: %d of %d ranks said \"%s\"\n", said, l->nranks, word);
    return said < l->nranks;
}

/* Waits for every rank until the deadline (then kills the ones left, and says so). A rank must
 * exit with 0 (or 77, where may_skip), rank killed (-1: none) must die of SIGKILL. on_fail, where
 * given, is called for a rank that ended otherwise (to show its log). Returns 0, or 1 where a
 * rank ended otherwise. */
static inline int test_launch_wait(test_launch_t *l, int killed,
                                   void (*on_fail)(int rank, void *arg), void *arg)
{
    int bad = 0, st[TEST_FORKED_MAX], done[TEST_FORKED_MAX] = {0}, left = l->nranks;
    while (left > 0) {
        for (int r = 0; r < l->nranks; r++) {
            if (done[r]) continue;
            pid_t w = waitpid(l->pids[r], &st[r], WNOHANG);
            if (w == l->pids[r] || (w < 0 && errno != EINTR)) done[r] = 1, left--;
            if (w < 0 && errno == ECHILD) st[r] = -1;
        }
        if (left == 0) break;
        if (now_s() > l->deadline) {
            for (int r = 0; r < l->nranks; r++)
                if (!done[r]) {
                    printf("FAIL: rank %d still runs at the deadline: killed\n", r);
                    kill(l->pids[r], SIGKILL);
                    waitpid(l->pids[r], NULL, 0);
                }
            bad = 1;
            break;
        }
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
    for (int r = 0; r < l->nranks; r++) {
        if (!done[r]) continue;
        int exited = WIFEXITED(st[r]), code = exited ? WEXITSTATUS(st[r]) : -1;
        if (r != killed && l->may_skip && code == 77) {
            l->skipped++;
            continue;
        }
        int ok = r == killed ? WIFSIGNALED(st[r]) && WTERMSIG(st[r]) == SIGKILL : code == 0;
        if (!ok) {
            printf("FAIL: rank %d ended with status 0x%x\n", r, (unsigned)st[r]);
            if (on_fail != NULL) on_fail(r, arg);
            bad = 1;
        }
    }
    return bad;
}

/* Removes the launch's folder and what the ranks left in it. */
static inline void test_launch_close(test_launch_t *l)
{
    if (l->out_fd >= 0) close(l->out_fd);
    l->out_fd = -1;
    DIR *d = opendir(l->dir);
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char path[sizeof l->dir + 260];
        snprintf(path, sizeof path, "%s/%s", l->dir, e->d_name);
        unlink(path);
    }
    if (d != NULL) closedir(d);
    rmdir(l->dir);
}

/* ---- on a rank ---- */

/* A call the rest of a rank's checks cannot go on without: ends the rank at once. */
static inline void test_must(hoop_result_t rc, hoop_comm_t *c, const char *what)
{
    if (rc == HOOP_OK) return;
    printf("rank %d: FAIL %s: %s: %s\n", test_rank, what, hoop_error_string(rc),
           hoop_comm_last_error(c));
    fflush(stdout);
    exit(1);
}

/* A rank's end: with barrier, the last call's result on every rank (no rank left early); then
 * the destroy. The rank's exit status. */
static inline int test_rank_end(hoop_comm_t *c, int barrier)
{
    if (barrier) test_must(hoop_barrier(c), c, "hoop_barrier");
    hoop_comm_destroy(c);
    return test_failures ? 1 : 0;
}

/* A rank's side of test_launch_kill_when: says "looping", then all-reduces a (n floats) into b
 * until a call fails, which must be within 60 s and with one of the codes in ok_codes (a bit per
 * hoop_result_t); the victim is killed on the way. */
static inline void test_loop_until_killed(hoop_comm_t *c, const float *a, float *b, size_t n,
                                          unsigned ok_codes)
{
    printf("rank %d looping\n", test_rank);
    fflush(stdout);
    time_t end = time(NULL) + 60;
    while (time(NULL) < end) {
        hoop_result_t rc = hoop_allreduce(c, a, b, n, HOOP_FLOAT32, HOOP_SUM);
        if (rc != HOOP_OK) {
            CHECK((ok_codes >> rc) & 1u, "kill: the survivor failed with %s",
                  hoop_error_string(rc));
            printf("rank %d failed as it should: %s: %s\n", test_rank, hoop_error_string(rc),
                   hoop_comm_last_error(c));
            fflush(stdout);
            return;
        }
    }
    CHECK(0, "kill: no call failed in 60 s");
}

/* One checked all-reduce of a test: in into out (out == in: in place) for n elements of the exact
 * inputs of salt; fast: whether the schedule the test is about must run (else must not). */
typedef void (*test_case_fn)(hoop_comm_t *c, void *in, void *out, hoop_dtype_t dt, hoop_op_t op,
                             size_t n, uint64_t salt, int fast, const char *what);

/* one_case for every dtype and op, out of place (a into b) and in place (a), at odd counts:
 * 70001 elements, above HOOP_SMALL_BYTES (16 KiB) for every dtype, and 300007, a block over
 * several chunks of the fold, for a few dtypes only (the reference is slow on 2 cores). a and b
 * hold 300007 elements of 8 bytes; *salt moves on by one a call. */
static inline void test_sweep_exact(hoop_comm_t *c, void *a, void *b, test_case_fn one_case,
                                    int fast, uint64_t *salt)
{
    const size_t counts[] = {70001, 300007};
    for (size_t k = 0; k < 2; k++)
        for (int dt = 0; dt < HOOP_DTYPE_COUNT; dt++)
            for (int op = 0; op < HOOP_OP_COUNT; op++) {
                if (k == 1 && !(dt == HOOP_INT8 || dt == HOOP_FLOAT32 || dt == HOOP_BFLOAT16))
                    continue;
                one_case(c, a, b, (hoop_dtype_t)dt, (hoop_op_t)op, counts[k], (*salt)++, fast,
                         "out of place");
                one_case(c, a, a, (hoop_dtype_t)dt, (hoop_op_t)op, counts[k], (*salt)++, fast,
                         "in place");
            }
}

/* out against the reference reduction of every rank's exact input (rc_exact_input of salt) for n
 * elements; one CHECK for the first wrong element. Returns the wrong elements. */
static inline size_t test_verify_exact(const void *out, hoop_dtype_t dt, hoop_op_t op, int p,
                                       uint64_t salt, size_t n, const char *what)
{
    size_t es = hoop_dtype_size(dt), bad = 0;
    for (size_t i = 0; i < n; i++) {
        rc_acc_t a = {0};
        for (int q = 0; q < p; q++)
            rc_acc_add(&a, dt, es, op, rc_exact_input(dt, op, p, q, salt, i));
        uint64_t want = rc_acc_result(&a, dt, es, op, p), got = rc_ld(out, i, es);
        if (got != want && bad++ == 0)
            CHECK(0, "%s %s %s n=%zu: element %zu is 0x%" PRIx64 ", want 0x%" PRIx64, what,
                  hoop_dtype_name(dt), hoop_op_name(op), n, i, got, want);
    }
    return bad;
}

#endif
