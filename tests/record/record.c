/*
 * The flight recorder, as every rank of a job under hooprun sees it. check.py runs it and reads
 * what it leaves in --dir (the dumps, and what each rank called, to compare them with).
 *
 *   record --scenario S --dir DIR
 *
 *   ring      collectives of every kind, dtypes, roots and counts, point-to-point sends and
 *             receives, nonblocking calls, and one call that fails (rank 0: a receive from any
 *             source that times out, the communicator staying usable), more calls in all than
 *             HOOP_RECORD keeps; each rank writes what it called (called-<rank>.json) and its
 *             dump (dump-<rank>.json) through hoop_comm_dump
 *   off       the same calls but the failed one, under HOOP_RECORD=0, then a dump
 *   hang      8 all-reduces, of which rank 2 skips #5 and waits instead for a message rank 0
 *             never sends; the others' #5 times out (HOOP_TIMEOUT short), and rank 2's receive
 *             fails as their abort reaches it: every rank must write its dump by itself
 *   skip      the same, but rank 2 sleeps through the others' timeout and makes its next call,
 *             which the others' #5 disagrees with
 *   signal    HOOP_RECORD_SIGNAL=1, a handler of the program's own installed first: the rank
 *             sends itself SIGUSR2 in the middle of a run of all-reduces, which go on (and must
 *             all be right) until the dump appears; the program's handler must have run too, and
 *             must be back in place once the communicator is gone
 *   nosignal  the same without HOOP_RECORD_SIGNAL: hoop must leave SIGUSR2 alone (the handler in
 *             place stays, no dump is written)
 *   badenv    rank 1 sets HOOP_RECORD=lots: init must fail on every rank, with
 *             HOOP_ERR_INVALID_ARGUMENT naming it on rank 1 and HOOP_ERR_MISMATCH elsewhere
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hoop.h"
#include "../common/testing.h"

static int R = -1, P;
static FILE *called; /* what this rank called, as JSON lines */
static int ncalled;

/* One call, as the dump must show it: kind, dtype, count, root or peer (-1), op (NULL), and the
 * code it returned. */
static void note(const char *kind, hoop_dtype_t dt, size_t count, int root, const char *op,
                 hoop_result_t rc)
{
    if (called == NULL) return;
    fprintf(called,
            "%s{\"kind\": \"%s\", \"dtype\": \"%s\", \"count\": %zu, \"root\": %d, \"op\": %s%s%s, "
            "\"rc\": %d}",
            ncalled++ ? ",\n" : "[\n", kind, hoop_dtype_name(dt), count, root, op ? "\"" : "",
            op ? op : "null", op ? "\"" : "", (int)rc);
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* An all-reduce of n float32 (sum), checked. */
static hoop_result_t allreduce_checked(hoop_comm_t *c, size_t n, int salt)
{
    float *s = calloc(n, sizeof(float)), *r = calloc(n, sizeof(float));
    if (s == NULL || r == NULL) {
        TEST_FAIL("out of memory for %zu floats", n);
        free(s);
        free(r);
        return HOOP_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < n; i++) s[i] = (float)((R + 1) * (int)(i % 7) + salt);
    hoop_result_t rc = hoop_allreduce(c, s, r, n, HOOP_FLOAT32, HOOP_SUM);
    for (size_t i = 0; rc == HOOP_OK && i < n; i++) {
        float want = 0;
        for (int q = 0; q < P; q++) want += (float)((q + 1) * (int)(i % 7) + salt);
        if (r[i] != want) {
            TEST_FAIL("allreduce(%zu) salt %d: [%zu] = %g, want %g", n, salt, i, r[i], want);
            break;
        }
    }
    note("allreduce", HOOP_FLOAT32, n, -1, "sum", rc);
    free(s);
    free(r);
    return rc;
}

/* Every kind of call, rounds times; the failed receive (rank 0) where fail is set. */
static void calls(hoop_comm_t *c, int rounds, int fail)
{
    int32_t ib[64];
    double db[64], dr[64];
    uint8_t u8[3], u8all[3 * 64];
    for (int i = 0; i < rounds; i++) {
        allreduce_checked(c, 100 + (size_t)i, i);
        int root = i % P;
        for (int k = 0; k < 7; k++) ib[k] = R == root ? 1000 * i + k : -1;
        hoop_result_t rc = hoop_broadcast(c, ib, 7, HOOP_INT32, root);
        if (rc == HOOP_OK && ib[3] != 1000 * i + 3) TEST_FAIL("broadcast #%d: got %d", i, ib[3]);
        note("broadcast", HOOP_INT32, 7, root, NULL, rc);
        memset(u8, R + i, sizeof(u8));
        rc = hoop_allgather(c, u8, u8all, 3, HOOP_UINT8);
        if (rc == HOOP_OK && u8all[3 * (P - 1)] != (uint8_t)(P - 1 + i))
            TEST_FAIL("allgather #%d", i);
        note("allgather", HOOP_UINT8, 3, -1, NULL, rc);
        for (int k = 0; k < 5; k++) db[k] = R * 10 + k;
        int rroot = (i + 1) % P;
        rc = hoop_reduce(c, db, dr, 5, HOOP_FLOAT64, HOOP_MAX, rroot);
        if (rc == HOOP_OK && R == rroot && dr[4] != (P - 1) * 10 + 4) TEST_FAIL("reduce #%d", i);
        note("reduce", HOOP_FLOAT64, 5, rroot, "max", rc);
        /* A ring of point-to-point messages: a send to the next rank, a receive from the one
         * before, nonblocking. */
        if (P > 1) {
            int64_t out[4] = {R, i, 2, 3}, in[4] = {-1, -1, -1, -1};
            hoop_request_t *sr, *rr;
            int next = (R + 1) % P, prev = (R + P - 1) % P;
            hoop_result_t a = hoop_isend(c, out, 4, HOOP_INT64, next, &sr);
            note("send", HOOP_INT64, 4, next, NULL, a);
            hoop_result_t b = hoop_irecv(c, in, 4, HOOP_INT64, prev, &rr);
            note("recv", HOOP_INT64, 4, prev, NULL, b);
            if (a == HOOP_OK) a = hoop_wait(sr);
            if (b == HOOP_OK) b = hoop_wait(rr);
            if (a != HOOP_OK || b != HOOP_OK || in[0] != prev || in[1] != i)
                TEST_FAIL("send/recv #%d: %d %d, got %lld", i, a, b, (long long)in[0]);
        }
        hoop_request_t *q;
        int32_t v = R + 1, sum = -1;
        hoop_result_t rc2 = hoop_iallreduce(c, &v, &sum, 1, HOOP_INT32, HOOP_SUM, &q);
        if (rc2 == HOOP_OK) rc2 = hoop_wait(q);
        if (rc2 == HOOP_OK && sum != P * (P + 1) / 2) TEST_FAIL("iallreduce #%d: %d", i, sum);
        note("allreduce", HOOP_INT32, 1, -1, "sum", rc2);
    }
    if (fail && P > 1) {
        /* Nobody sends: the receive fails alone, within the timeout, and the communicator
         * stays usable. */
        if (R == 0) {
            int64_t x[2];
            int src = 7;
            hoop_comm_set_timeout(c, 0.5);
            hoop_result_t rc = hoop_recv_any(c, x, 2, HOOP_INT64, &src);
            hoop_comm_set_timeout(c, 60);
            if (rc != HOOP_ERR_TIMEOUT)
                TEST_FAIL("recv_any: %s, not a timeout", hoop_error_string(rc));
            note("recv", HOOP_INT64, 2, -1, NULL, rc);
        }
        hoop_result_t rc = hoop_barrier(c);
        note("barrier", HOOP_UINT8, 0, -1, NULL, rc);
        if (rc != HOOP_OK)
            TEST_FAIL("barrier after the failed receive: %s", hoop_comm_last_error(c));
        for (int i = 0; i < 3; i++) allreduce_checked(c, 10, 50 + i);
    }
}

static int file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static volatile sig_atomic_t own_handled;
static void own_handler(int sig)
{
    (void)sig;
    own_handled++;
}

static void install_own(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = own_handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR2, &sa, NULL);
}

static int own_in_place(void)
{
    struct sigaction cur;
    sigaction(SIGUSR2, NULL, &cur);
    return !(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == own_handler;
}

/* SIGUSR2 to itself mid-run; all-reduces go on until the dump appears (or 10 s). */
static void signal_run(hoop_comm_t *c, const char *dir, int opted)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/hoop-trace-%d.json", dir, R);
    for (int i = 0; i < 5; i++) allreduce_checked(c, 1000, i);
    if (own_in_place() == opted)
        TEST_FAIL("after hoop_init, the program's SIGUSR2 handler is %sin place",
                  opted ? "still " : "no longer ");
    kill(getpid(), SIGUSR2);
    double end = now_s() + 10;
    int appeared = 0, i = 0;
    /* Every rank makes as many calls: the count is agreed by an all-reduce of who has seen it. */
    for (;; i++) {
        appeared = file_exists(path);
        int32_t mine = appeared || now_s() > end || (!opted && now_s() > end - 8.5), all = 0;
        if (hoop_allreduce(c, &mine, &all, 1, HOOP_INT32, HOOP_MIN) != HOOP_OK) {
            TEST_FAIL("allreduce while waiting for the dump: %s", hoop_comm_last_error(c));
            break;
        }
        if (all) break;
        allreduce_checked(c, 4096, 100 + i);
    }
    if (opted && !appeared) TEST_FAIL("SIGUSR2 with HOOP_RECORD_SIGNAL=1: no dump at %s", path);
    if (!opted && file_exists(path))
        TEST_FAIL("SIGUSR2 without HOOP_RECORD_SIGNAL: %s written", path);
    if (own_handled != 1)
        TEST_FAIL("the program's own handler ran %d times, not once", own_handled);
    printf("rank %d: %d all-reduces while the dump was written\n", R, i);
}

int main(int argc, char **argv)
{
    const char *scen = "ring", *dir = ".";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--scenario") == 0) scen = argv[i + 1];
        if (strcmp(argv[i], "--dir") == 0) dir = argv[i + 1];
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *rank_env = getenv("RANK");
    int my = rank_env ? atoi(rank_env) : 0;
    if (strcmp(scen, "signal") == 0 || strcmp(scen, "nosignal") == 0) install_own();
    if (strcmp(scen, "badenv") == 0 && my == 1) setenv("HOOP_RECORD", "lots", 1);

    hoop_comm_t *c = NULL;
    hoop_result_t rc = hoop_init_from_env(&c);
    if (strcmp(scen, "badenv") == 0) {
        R = test_rank = my;
        hoop_result_t want = my == 1 ? HOOP_ERR_INVALID_ARGUMENT : HOOP_ERR_MISMATCH;
        if (rc != want)
            TEST_FAIL("init with rank 1's HOOP_RECORD=lots: %s, want %s", hoop_error_string(rc),
                      hoop_error_string(want));
        if (rc == HOOP_OK) hoop_comm_destroy(c);
        printf("rank %d: %s\n", my, test_failures ? "FAILED" : "passed");
        return test_failures ? 1 : 0;
    }
    if (rc != HOOP_OK) {
        printf("init failed: %s\n", hoop_error_string(rc));
        return 1;
    }
    R = test_rank = hoop_comm_rank(c);
    P = hoop_comm_size(c);
    char path[600];

    if (strcmp(scen, "ring") == 0 || strcmp(scen, "off") == 0) {
        snprintf(path, sizeof(path), "%s/called-%d.json", dir, R);
        called = fopen(path, "w");
        calls(c, 8, strcmp(scen, "ring") == 0);
        fprintf(called, "\n]\n");
        fclose(called);
        called = NULL;
        snprintf(path, sizeof(path), "%s/dump-%d.json", dir, R);
        rc = hoop_comm_dump(c, path);
        if (rc != HOOP_OK) TEST_FAIL("hoop_comm_dump: %s", hoop_comm_last_error(c));
    } else if (strcmp(scen, "hang") == 0 || strcmp(scen, "skip") == 0) {
        int skip = strcmp(scen, "skip") == 0;
        for (int i = 0; i < 8; i++) {
            if (i == 5 && R == 2 && skip) {
                /* Skips #5: sleeps through the others' timeout, then makes its next call. */
                sleep_s(4);
                continue;
            }
            if (i == 5 && R == 2) {
                int64_t x[3];
                rc = hoop_recv(c, x, 3, HOOP_INT64, 0);
                if (rc == HOOP_OK) TEST_FAIL("a receive nobody sent to succeeded");
                break;
            }
            rc = allreduce_checked(c, 1000 + (size_t)i, i);
            if (rc != HOOP_OK) break;
        }
        if (rc == HOOP_OK) TEST_FAIL("every call succeeded though rank 2 skipped one");
        snprintf(path, sizeof(path), "%s/hoop-trace-%d.json", dir, R);
        if (!file_exists(path)) TEST_FAIL("the failed call wrote no dump at %s", path);
    } else if (strcmp(scen, "signal") == 0 || strcmp(scen, "nosignal") == 0) {
        signal_run(c, dir, strcmp(scen, "signal") == 0);
    }

    /* Every rank passes only if all did (not where the scenario broke the communicator). */
    if (strcmp(scen, "hang") != 0 && strcmp(scen, "skip") != 0) {
        int32_t f = (int32_t)test_failures, all = 0;
        if (hoop_allreduce(c, &f, &all, 1, HOOP_INT32, HOOP_SUM) != HOOP_OK || all != 0)
            test_failures += f == 0;
    }
    hoop_comm_destroy(c);
    if (strcmp(scen, "signal") == 0 && !own_in_place())
        TEST_FAIL("the program's SIGUSR2 handler is not back once the communicator is gone");
    printf("rank %d: %s\n", R, test_failures ? "FAILED" : "passed");
    return test_failures ? 1 : 0;
}
