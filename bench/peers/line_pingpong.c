/*
 * line-pingpong: how long one cache line takes from one core to another, the yardstick for an
 * 8-byte all-reduce between two ranks on one host (each exchange is at least one line each way).
 *
 *   line-pingpong [-n ROUND_TRIPS] [-c CPU_A,CPU_B]     default: 1000000 round trips, CPUs 0,1
 *
 * Two threads, each pinned to its CPU, bounce a counter in one line: A writes odd values and waits
 * for the next even one, B the reverse. Prints "one_way_ns <half the mean round trip>", the best
 * of 5 runs.
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
    return 0;
}
