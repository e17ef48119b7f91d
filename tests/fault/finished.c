/*
 * A call that every rank made alike, and that every rank finished its part of, succeeds whatever a
 * peer does next; and a peer's abort reaches the others with its reason, whatever its timing. Run
 * as every rank under hooprun (nobody dies: rank 1 only fails or aborts its communicator).
 *
 *   hooprun -n N finished --scenario mismatch|abort-after|abort-during [--rounds K] [--count C]
 *                         [--coll allreduce|scatter|gather]
 *
 * Each round runs on a fresh communicator split from the world one: a first all-reduce (call #0,
 * which also sets up the shared area over shared memory), then call #1, an all-reduce made alike
 * by every rank, then:
 *
 *   mismatch      rank 1 calls an all-reduce of another count as call #2: call #1 must return
 *                 HOOP_OK with the right sum on every rank, and call #2 fail on every rank with a
 *                 sentence about call #2 (HOOP_ERR_MISMATCH, or HOOP_ERR_ABORTED where a rank
 *                 learnt it from a peer), which shows rank 1's count;
 *   abort-after   rank 1 calls hoop_comm_abort as soon as call #1 returns: call #1 must return
 *                 HOOP_OK with the right sum on every rank, and the others' call #2 fail with
 *                 HOOP_ERR_ABORTED saying that hoop_comm_abort was called on rank 1;
 *   abort-during  after a barrier (call #1), a thread of rank 1 calls hoop_comm_abort at a
 *                 random moment of all-reduces #2 to #4 (rank 1's main thread makes them too):
 *                 on every other rank, each call either returns HOOP_OK with the right sum or
 *                 fails, and the first that fails says that hoop_comm_abort was called on rank 1,
 *                 never only that rank 1 was lost; call #5 fails everywhere.
 *
 * The rounds' sizes cycle through a payload in the area's lines, one in its buffers and one over
 * several rounds of them (4, 1000 and 100000 int32); --count C makes every round's C int32 (over
 * the point-to-point algorithms, the ring's multi-step calls are where a late notice can land);
 * --coll makes call #1 of mismatch and abort-after a scatter or a gather from root 0. At
 * the end every rank's count of failed checks is summed over the world communicator: each rank
 * passes only if every rank did.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hoop.h"
#include "../common/testing.h"

enum { S_MISMATCH, S_ABORT_AFTER, S_ABORT_DURING };
static const char *const SCEN[] = {"mismatch", "abort-after", "abort-during"};

static int R, P;
static int landed_mid; /* abort-during rounds where one of calls #2-#4 failed here (R != 1) */
static const size_t SIZES[] = {4, 1000, 100000};
static size_t fixed_count; /* --count, 0: cycle through SIZES */
enum { C_ALLREDUCE, C_SCATTER, C_GATHER };
static const char *const COLL[] = {"allreduce", "scatter", "gather"};
static int coll1; /* --coll: call #1's collective (root 0 for the rooted ones) */
static const char *const ABORT_WHY = "hoop_comm_abort was called on rank 1";

static int32_t val(int rank, size_t i, int call)
{
    return (int32_t)((rank + 1) * 7 + i % 13 + call);
}

/* An all-reduce of n int32 as the call-th call of the round; *right says whether its sum is. */
static hoop_result_t call_allreduce(hoop_comm_t *c, int32_t *s, int32_t *r, size_t n, int call,
                                    int *right)
{
    for (size_t i = 0; i < n; i++) {
        s[i] = val(R, i, call);
        r[i] = -1;
    }
    hoop_result_t rc = hoop_allreduce(c, s, r, n, HOOP_INT32, HOOP_SUM);
    *right = 1;
    for (size_t i = 0; rc == HOOP_OK && i < n; i++) {
        int32_t want = 0;
        for (int q = 0; q < P; q++) want += val(q, i, call);
        if (r[i] != want) {
            *right = 0;
            break;
        }
    }
    return rc;
}

/* Call #1 when --coll names a rooted collective: a scatter or gather of n int32 a rank from root
 * 0, checked where a rank receives (scatter: every rank; gather: the root). */
static hoop_result_t call_rooted(hoop_comm_t *c, int32_t *s, int32_t *r, size_t n, int call,
                                 int *right)
{
    size_t total = n * (size_t)P;
    int32_t *big = malloc(total * sizeof(int32_t));
    if (big == NULL) return HOOP_ERR_NO_MEMORY;
    for (size_t i = 0; i < n; i++) {
        s[i] = val(R, i, call);
        r[i] = -1;
    }
    for (size_t i = 0; i < total; i++) big[i] = coll1 == C_SCATTER ? val(0, i, call) : -1;
    hoop_result_t rc = coll1 == C_SCATTER ? hoop_scatter(c, big, r, n, HOOP_INT32, 0)
                                          : hoop_gather(c, s, big, n, HOOP_INT32, 0);
    *right = 1;
    for (size_t i = 0; rc == HOOP_OK && i < n; i++)
        if (coll1 == C_SCATTER && r[i] != val(0, (size_t)R * n + i, call)) *right = 0;
    for (int q = 0; rc == HOOP_OK && coll1 == C_GATHER && R == 0 && q < P; q++)
        for (size_t i = 0; i < n; i++)
            if (big[(size_t)q * n + i] != val(q, i, call)) *right = 0;
    free(big);
    return rc;
}

typedef struct aborter {
    hoop_comm_t *c;
    long delay_us;
} aborter_t;

static void *abort_later(void *arg)
{
    aborter_t *a = arg;
    struct timespec ts = {a->delay_us / 1000000, (a->delay_us % 1000000) * 1000};
    nanosleep(&ts, NULL);
    hoop_comm_abort(a->c);
    return NULL;
}

static void round_(hoop_comm_t *world, int scen, int round)
{
    hoop_comm_t *c = NULL;
    hoop_result_t rc = hoop_comm_split(world, 0, R, &c);
    if (rc != HOOP_OK) {
        TEST_FAIL("round %d: hoop_comm_split: %s", round, hoop_comm_last_error(world));
        return;
    }
    hoop_comm_set_timeout(c, 20);
    size_t n = fixed_count > 0 ? fixed_count : SIZES[round % 3];
    int32_t *s = malloc((n + 1) * sizeof(int32_t)), *r = malloc((n + 1) * sizeof(int32_t));
    int right;
    rc = call_allreduce(c, s, r, n, 0, &right);
    if (rc != HOOP_OK || !right) {
        TEST_FAIL("round %d (%s, count %zu): call #0: %s: %s", round, SCEN[scen], n,
                  hoop_error_string(rc), rc == HOOP_OK ? "wrong sum" : hoop_comm_last_error(c));
        goto out;
    }
    if (scen == S_ABORT_DURING) {
        /* Call #1: once rank 1 is past it, every rank is done with call #0, so that the abort
         * lands in calls #2 to #4 on every rank. */
        rc = hoop_barrier(c);
        if (rc != HOOP_OK) {
            TEST_FAIL("round %d: the barrier: %s", round, hoop_comm_last_error(c));
            goto out;
        }
    }
    pthread_t th;
    aborter_t ab = {.c = c, .delay_us = (long)(rand() % 3000)};
    int threaded = scen == S_ABORT_DURING && R == 1;
    if (threaded && pthread_create(&th, NULL, abort_later, &ab) != 0) {
        TEST_FAIL("round %d: pthread_create", round);
        goto out;
    }
    if (scen == S_ABORT_DURING) {
        /* Calls #2 to #4: OK and right, until the first that fails, with the abort's reason. */
        int failed = 0;
        for (int k = 2; k <= 4; k++) {
            rc = call_allreduce(c, s, r, n, k, &right);
            if (R == 1) continue; /* the aborting rank: its calls may fail or not */
            if (rc == HOOP_OK && !right) {
                TEST_FAIL("round %d (count %zu): call #%d returned HOOP_OK with a wrong sum", round,
                          n, k);
            } else if (rc != HOOP_OK && !failed) {
                failed = 1;
                landed_mid++;
                const char *m = hoop_comm_last_error(c);
                if (rc != HOOP_ERR_ABORTED || strstr(m, ABORT_WHY) == NULL)
                    TEST_FAIL("round %d (count %zu): call #%d failed with %s, without the abort's "
                              "reason: %s",
                              round, n, k, hoop_error_string(rc), m);
            }
        }
        if (threaded) pthread_join(th, NULL);
        /* After the abort, every rank's next call fails; on the others, with the abort's reason
         * (the only place it is checked when the abort came after call #4). */
        rc = call_allreduce(c, s, r, n, 5, &right);
        const char *m5 = hoop_comm_last_error(c);
        if (rc == HOOP_OK)
            TEST_FAIL("round %d (count %zu): call #5 after the abort succeeded", round, n);
        else if (R != 1 && (rc != HOOP_ERR_ABORTED || strstr(m5, ABORT_WHY) == NULL))
            TEST_FAIL("round %d (count %zu): call #5 after the abort failed with %s, without the "
                      "abort's reason: %s",
                      round, n, hoop_error_string(rc), m5);
        goto out;
    }
    rc = coll1 == C_ALLREDUCE ? call_allreduce(c, s, r, n, 1, &right)
                              : call_rooted(c, s, r, n, 1, &right);
    if (rc != HOOP_OK || !right)
        TEST_FAIL("round %d (%s, count %zu): call #1 (%s), made alike by every rank, %s: %s", round,
                  SCEN[scen], n, COLL[coll1], rc == HOOP_OK ? "gave a wrong result" : "failed",
                  rc == HOOP_OK ? "" : hoop_comm_last_error(c));
    if (scen == S_ABORT_AFTER && R == 1) {
        hoop_comm_abort(c);
        goto out;
    }
    size_t n2 = scen == S_MISMATCH && R == 1 ? n + 1 : n;
    rc = call_allreduce(c, s, r, n2, 2, &right);
    const char *m = hoop_comm_last_error(c);
    if (rc == HOOP_OK) {
        TEST_FAIL("round %d (%s, count %zu): call #2 succeeded", round, SCEN[scen], n);
    } else if (scen == S_MISMATCH) {
        char odd[48];
        snprintf(odd, sizeof odd, "count=%zu", n + 1);
        if ((rc != HOOP_ERR_MISMATCH && rc != HOOP_ERR_ABORTED) || strstr(m, "call #2") == NULL ||
            strstr(m, odd) == NULL)
            TEST_FAIL("round %d (count %zu): the mismatched call #2 failed with %s: %s (want a "
                      "sentence about call #2 that shows %s)",
                      round, n, hoop_error_string(rc), m, odd);
    } else if (rc != HOOP_ERR_ABORTED || strstr(m, ABORT_WHY) == NULL) {
        TEST_FAIL("round %d (count %zu): call #2 after rank 1's abort failed with %s: %s (want "
                  "HOOP_ERR_ABORTED with \"%s\")",
                  round, n, hoop_error_string(rc), m, ABORT_WHY);
    }
out:
    hoop_comm_destroy(c);
    free(s);
    free(r);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int scen = -1, rounds = 30;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--scenario")) {
            for (int k = 0; k < 3; k++)
                if (!strcmp(argv[i + 1], SCEN[k])) scen = k;
        } else if (!strcmp(argv[i], "--rounds")) {
            rounds = atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "--coll")) {
            coll1 = -1;
            for (int k = 0; k < 3; k++)
                if (!strcmp(argv[i + 1], COLL[k])) coll1 = k;
            if (coll1 < 0) rounds = 0; /* refused below */
        } else if (!strcmp(argv[i], "--count")) {
            long v = atol(argv[i + 1]);
            fixed_count = v > 0 ? (size_t)v : 0;
            if (v <= 0) rounds = 0; /* refused below */
        }
    }
    if (scen < 0 || rounds < 1) {
        fprintf(stderr, "usage: finished --scenario mismatch|abort-after|abort-during [--rounds K] "
                        "[--count C] [--coll allreduce|scatter|gather]\n");
        return 2;
    }
    hoop_comm_t *world = NULL;
    if (hoop_init_from_env(&world) != HOOP_OK) {
        printf("FAIL hoop_init\n");
        return 1;
    }
    R = test_rank = hoop_comm_rank(world);
    P = hoop_comm_size(world);
    if (P < 2) {
        printf("SKIP: run as 2 ranks or more\n");
        hoop_comm_destroy(world);
        return 77;
    }
    srand((unsigned)(R * 7919 + 17));
    for (int k = 0; k < rounds; k++) round_(world, scen, k);
    int32_t mine = (int32_t)test_failures, all = -1;
    hoop_result_t rc = hoop_allreduce(world, &mine, &all, 1, HOOP_INT32, HOOP_SUM);
    hoop_comm_destroy(world);
    if (rc != HOOP_OK) {
        printf("rank %d: FAIL the final all-reduce: %s\n", R, hoop_error_string(rc));
        return 1;
    }
    printf("rank %d: %s, %d rounds: %ld failed checks here, %d on all ranks\n", R, SCEN[scen],
           rounds, test_failures, (int)all);
    if (scen == S_ABORT_DURING && R != 1)
        printf("rank %d: the abort landed during calls #2-#4 in %d of %d rounds, after them in "
               "the others\n",
               R, landed_mid, rounds);
    return all == 0 ? 0 : 1;
}
