/*
 * line-pingpong: how long one cache line takes from one core to another, the yardstick for an
 * 8-byte all-reduce between two ranks on one host (each exchange is at least one line each way).
 *
 *   line-pingpong [-n ROUND_TRIPS] [-c CPU_A,CPU_B]     default: 1000000 round trips, CPUs 0,1
 *
 * Two threads, each pinned to its CPU, bounce a counter in one line: A writes odd values and waits
 * for the next even one, B the reverse. Prints "one_way_ns <half the mean round trip>", the best
 * of 5 runs.
 *
 * Then the same threads run the smallest all-reduce there is, with no library around it: at
 * exchange i each writes an 8-byte value and the number i into one line of its own (two lines
 * each, used in turn, so that a line is not written again before the peer has read it), waits
 * until the peer's line says i, and adds the peer's value to its own. Prints "exchange_ns <mean
 * time per exchange>", the best of 5 runs: what a two-rank 8-byte all-reduce costs when only the
 * lines move.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bench_util.h"

static _Alignas(64) _Atomic unsigned long line;
static unsigned long rounds;

/* The exchange's lines: side t's line for exchange i is xline[t][i % 2]. */
typedef struct {
    _Alignas(64) _Atomic unsigned long step;
    double value;
} xline_t;
static xline_t xline[2][2];
static double xsum[2];

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    (void)pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

/* Thread B: answers every odd value with the next even one. */
static void *answer(void *arg)
{
    pin(*(int *)arg);
    for (unsigned long i = 0; i < rounds; i++) {
        unsigned long want = 2 * i + 1;
        while (atomic_load_explicit(&line, memory_order_acquire) != want) {
        }
        atomic_store_explicit(&line, want + 1, memory_order_release);
    }
    return NULL;
}

/* Side t of the exchange, rounds times; leaves its running sum in xsum[t]. */
static void exchange(int t)
{
    double v = 1.0 + t;
    for (unsigned long i = 1; i <= rounds; i++) {
        xline_t *mine = &xline[t][i % 2], *peer = &xline[1 - t][i % 2];
        mine->value = v;
        atomic_store_explicit(&mine->step, i, memory_order_release);
        while (atomic_load_explicit(&peer->step, memory_order_acquire) != i) {
        }
        v = v + peer->value > 1e9 ? 1.0 : v + peer->value;
    }
    xsum[t] = v;
}

static void *exchange_b(void *arg)
{
    pin(*(int *)arg);
    exchange(1);
    return NULL;
}

int main(int argc, char **argv)
{
    int n = 1000000, cpus[2] = {0, 1};
    int bad = argc % 2 == 0;
    for (int i = 1; i + 1 < argc && !bad; i += 2) {
        if (strcmp(argv[i], "-n") == 0)
            bad = bench_parse_int(argv[i + 1], 1, 1000000000, &n);
        else if (strcmp(argv[i], "-c") == 0)
            bad = sscanf(argv[i + 1], "%d,%d", &cpus[0], &cpus[1]) != 2 || cpus[0] < 0 ||
                  cpus[1] < 0 || cpus[0] >= CPU_SETSIZE || cpus[1] >= CPU_SETSIZE;
        else
            bad = 1;
    }
    if (bad) {
        fprintf(stderr, "usage: line-pingpong [-n ROUND_TRIPS] [-c CPU_A,CPU_B]\n");
        return 2;
    }
    rounds = (unsigned long)n;
    double best = 0;
    for (int run = 0; run < 5; run++) {
        atomic_store(&line, 0);
        pthread_t b;
        if (pthread_create(&b, NULL, answer, &cpus[1]) != 0) {
            perror("line-pingpong: pthread_create");
            return 1;
        }
        pin(cpus[0]);
        double t0 = now_s();
        for (unsigned long i = 0; i < rounds; i++) {
            atomic_store_explicit(&line, 2 * i + 1, memory_order_release);
            while (atomic_load_explicit(&line, memory_order_acquire) != 2 * i + 2) {
            }
        }
        double t = now_s() - t0;
        pthread_join(b, NULL);
        double one_way = t / (double)rounds / 2 * 1e9;
        if (run == 0 || one_way < best) best = one_way;
    }
    printf("one_way_ns %.1f\n", best);
    best = 0;
    for (int run = 0; run < 5; run++) {
        memset(xline, 0, sizeof(xline));
        pthread_t b;
        if (pthread_create(&b, NULL, exchange_b, &cpus[1]) != 0) {
            perror("line-pingpong: pthread_create");
            return 1;
        }
        pin(cpus[0]);
        double t0 = now_s();
        exchange(0);
        double t = now_s() - t0;
        pthread_join(b, NULL);
        /* Both sides added the same values in the other order: the same sums, or a line was
         * read before it was written. */
        if (xsum[0] != xsum[1]) {
            fprintf(stderr, "line-pingpong: the exchange's sums differ (%g, %g)\n", xsum[0],
                    xsum[1]);
            return 1;
        }
        double per = t / (double)rounds * 1e9;
        if (run == 0 || per < best) best = per;
    }
    printf("exchange_ns %.1f\n", best);
    return 0;
}
