/*
 * A rank for the authentication and abort tests, started by auth_test.sh with RANK, WORLD_SIZE,
 * MASTER_ADDR and MASTER_PORT set (not under hooprun, which would stop the survivors of a failure).
 *
 *   free-port           prints a free TCP port of 127.0.0.1 and exits
 *   loop ITERS          ITERS all-reduces of several sizes, each checked against the sum computed
 *                       here; "rank R: ITERS all-reduces correct". With AUTH_TEST_DELAY_RANK=R and
 *                       AUTH_TEST_DELAY_S=S, rank R sleeps S seconds before hoop_init.
 *   init                hoop_init only: "rank R: init ok in T ms", or "rank R: init failed: <result>"
 *   abort               after a barrier rank 1 calls hoop_comm_abort and the others an all-reduce
 *   kill                after a barrier rank 1 kills itself (SIGKILL), the others call an all-reduce
 *   mismatch            rank 1 calls a broadcast where the others call an all-reduce
 *
 * In abort, kill and mismatch every surviving rank prints "rank R: result <name>: <last error>";
 * the script checks the sentences.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "hoop.h"
#include "../common/testing.h"

static const char *result_name(hoop_result_t r)
{
    static const char *const names[] = {"OK",        "INVALID_ARGUMENT", "SYSTEM",  "TIMEOUT",
                                        "PEER_LOST", "MISMATCH",         "AUTH",    "UNSUPPORTED",
                                        "ABORTED",   "NO_MEMORY",        "INTERNAL"};
    return (unsigned)r < sizeof(names) / sizeof(names[0]) ? names[r] : "?";
}

static void sleep_s(double s)
{
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Prints a free port for the driver script. */
static int print_free_port(void)
{
    int port = test_free_port();
    if (port < 0) return 1;
    printf("%d\n", port);
    return 0;
}

static int init(hoop_comm_t **comm)
{
    const char *r = getenv("RANK");
    int rank = r != NULL ? atoi(r) : -1;
    printf("rank %d pid %ld\n", rank, (long)getpid());
    const char *dr = getenv("AUTH_TEST_DELAY_RANK"), *ds = getenv("AUTH_TEST_DELAY_S");
    if (dr != NULL && ds != NULL && atoi(dr) == rank) sleep_s(atof(ds));
    hoop_result_t rc = hoop_init_from_env(comm);
    if (rc != HOOP_OK) {
        printf("rank %d: init failed: %s\n", rank, result_name(rc));
        fflush(stdout);
        return -1;
    }
    return 0;
}

/* Element i of rank r's input at iteration it: small integers, exact in every dtype used. */
static int64_t value(int r, int it, size_t i)
{
    return (int64_t)((r * 7 + it * 3 + (int)(i % 101)) % 50) - 20;
}

static int loop(int iters)
{
    hoop_comm_t *c;
    if (init(&c) != 0) return 1;
    int me = hoop_comm_rank(c), p = hoop_comm_size(c);
    static const size_t counts[] = {1, 7, 1031, 65537};
    size_t maxn = 65537;
    int32_t *i32 = malloc(maxn * sizeof(int32_t));
    double *f64 = malloc(maxn * sizeof(double));
    int bad = 0;
    for (int it = 0; it < iters && !bad && i32 != NULL && f64 != NULL; it++) {
        size_t n = counts[it % 4];
        for (size_t i = 0; i < n; i++) {
            i32[i] = (int32_t)value(me, it, i);
            f64[i] = (double)value(me, it, i);
        }
        hoop_result_t rc = hoop_allreduce(c, i32, i32, n, HOOP_INT32, HOOP_SUM);
        if (rc == HOOP_OK) rc = hoop_allreduce(c, f64, f64, n, HOOP_FLOAT64, HOOP_SUM);
        if (rc != HOOP_OK) {
            printf("rank %d: all-reduce %d failed: %s: %s\n", me, it, result_name(rc),
                   hoop_comm_last_error(c));
            bad = 1;
            break;
        }
        for (size_t i = 0; i < n && !bad; i++) {
            int64_t want = 0;
            for (int r = 0; r < p; r++) want += value(r, it, i);
            if (i32[i] != want || f64[i] != (double)want) {
                printf("rank %d: all-reduce %d element %zu: got %d and %g, want %lld\n", me, it, i,
                       i32[i], f64[i], (long long)want);
                bad = 1;
            }
        }
    }
    if (!bad) printf("rank %d: %d all-reduces correct\n", me, iters);
    free(i32);
    free(f64);
    hoop_comm_destroy(c);
    return bad;
}

static int failure(const char *mode)
{
    hoop_comm_t *c;
    if (init(&c) != 0) return 1;
    int me = hoop_comm_rank(c);
    hoop_result_t rc = hoop_barrier(c);
    if (rc != HOOP_OK) {
        /* Rank 1 may leave the barrier, and fail, before a slower rank has left it. */
        printf("rank %d: result %s: %s\n", me, result_name(rc), hoop_comm_last_error(c));
        hoop_comm_destroy(c);
        return me == 1;
    }
    /* Large enough for the ring: every rank both sends to and receives from rank 1's neighbours. */
    size_t n = 1 << 16;
    float *buf = calloc(n, sizeof(float));
    if (buf == NULL) return 1;
    if (me == 1 && strcmp(mode, "abort") == 0) {
        hoop_comm_abort(c);
        sleep_s(1.0); /* alive, so that the others hear the abort notice and not a closed process */
        printf("rank %d: aborted\n", me);
    } else if (me == 1 && strcmp(mode, "kill") == 0) {
        fflush(stdout);
        raise(SIGKILL);
    } else {
        if (me == 1 && strcmp(mode, "mismatch") == 0)
            rc = hoop_broadcast(c, buf, 10, HOOP_FLOAT32, 0);
        else if (strcmp(mode, "mismatch") == 0)
            rc = hoop_allreduce(c, buf, buf, 20, HOOP_FLOAT32, HOOP_SUM);
        else
            rc = hoop_allreduce(c, buf, buf, n, HOOP_FLOAT32, HOOP_SUM);
        printf("rank %d: result %s: %s\n", me, result_name(rc), hoop_comm_last_error(c));
    }
    fflush(stdout);
    free(buf);
    hoop_comm_destroy(c);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && strcmp(argv[1], "free-port") == 0) return print_free_port();
    if (argc >= 3 && strcmp(argv[1], "loop") == 0) return loop(atoi(argv[2]));
    if (argc >= 2 && strcmp(argv[1], "init") == 0) {
        hoop_comm_t *c;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (init(&c) != 0) return 1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("rank %d: init ok in %.2f ms\n", hoop_comm_rank(c),
               (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6);
        hoop_comm_destroy(c);
        return 0;
    }
    if (argc >= 2 && (strcmp(argv[1], "abort") == 0 || strcmp(argv[1], "kill") == 0 ||
                      strcmp(argv[1], "mismatch") == 0))
        return failure(argv[1]);
    fprintf(stderr, "usage: auth_rank free-port | loop ITERS | init | abort | kill | mismatch\n");
    return 2;
}
