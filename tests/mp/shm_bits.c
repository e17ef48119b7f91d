/*
 * The shared-memory collectives give the bits of the point-to-point algorithms, on every rank:
 *
 *   hooprun -n N shm_bits
 *
 * Inputs are random floats (float32, float64, float16, bfloat16) whose sums and products round,
 * so the bits depend on the order of the reduction. For every dtype, op (sum, prod, avg, max) and
 * count (around the small/large boundary and odd sizes), all-reduce runs through the shared area
 * (hoop_comm_set_algo "shm"), in place and out of place, and through the point-to-point
 * algorithms ("p2p": recursive doubling small, ring large); reduce-scatter likewise. The results
 * must be equal byte for byte, and a digest of each result must be the same on every rank.
 *
 * Then waiting: the last rank sleeps before a barrier, a small and a large all-reduce (0.5 s
 * each); the others wait in the shared area meanwhile and must use under a fifth of a core
 * doing so (they spin briefly, yield, then sleep).
 */
#include <inttypes.h>
#include <sys/resource.h>
#include <time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoop.h"

static int failures;

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Finite values of moderate range, with full mantissas. */
static void fill(void *buf, size_t n, hoop_dtype_t dt, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t r = splitmix(&seed);
        switch (dt) {
        case HOOP_FLOAT32:
            ((float *)buf)[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 + 0.5);
            break;
        case HOOP_FLOAT64:
            ((double *)buf)[i] = (double)(r >> 11) / 9007199254740992.0 * 3.0 - 1.0;
            break;
        case HOOP_FLOAT16: /* exponent 13..16 (0.25 .. 2): products and sums stay finite */
            ((uint16_t *)buf)[i] = (uint16_t)(((r >> 20) & 1) << 15 | (13 + (r >> 8) % 4) << 10 |
                                              (r & 0x3ff));
            break;
        default: /* bfloat16: exponent 125..128 */
            ((uint16_t *)buf)[i] = (uint16_t)(((r >> 20) & 1) << 15 | (125 + (r >> 8) % 4) << 7 |
                                              (r & 0x7f));
            break;
        }
    }
}

static uint64_t digest(const void *buf, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)buf)[i]) * 0x100000001b3ull;
    return h;
}

static void check(hoop_result_t rc, const char *what)
{
    if (rc != HOOP_OK) {
        printf("FAIL: %s: %s\n", what, hoop_error_string(rc));
        exit(1);
    }
}

/* Every rank's digest of buf is the same. */
static void same_everywhere(hoop_comm_t *c, const void *buf, size_t bytes, const char *what)
{
    int p = hoop_comm_size(c);
    uint64_t mine = digest(buf, bytes), *all = malloc((size_t)p * sizeof(*all));
    check(hoop_allgather(c, &mine, all, 1, HOOP_UINT64), "allgather of digests");
    for (int q = 0; q < p; q++)
        if (all[q] != mine) {
            printf("FAIL: %s: rank %d's result differs from rank %d's\n", what, q,
                   hoop_comm_rank(c));
            failures++;
            break;
        }
    free(all);
}

static void compare(const void *a, const void *b, size_t n, size_t es, const char *what)
{
    if (memcmp(a, b, n * es) == 0) return;
    size_t i = 0;
    while (memcmp((const char *)a + i * es, (const char *)b + i * es, es) == 0) i++;
    printf("FAIL: %s: element %zu of %zu differs\n", what, i, n);
    failures++;
}

static double cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec +
           ((double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_usec) * 1e-6;
}

static double wall_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The last rank arrives 0.5 s late at each of three calls; the others' CPU while they wait. */
static void idle_wait(hoop_comm_t *c, char *a, char *b)
{
    int me = hoop_comm_rank(c), p = hoop_comm_size(c);
    check(hoop_comm_set_algo(c, "shm"), "set_algo");
    memset(a, 1, 1 << 20);
    check(hoop_barrier(c), "barrier");
    double w0 = wall_s(), c0 = cpu_s();
    for (int i = 0; i < 3; i++) {
        if (me == p - 1) {
            struct timespec ts = {0, 500000000};
            nanosleep(&ts, NULL);
        }
        hoop_result_t rc = i == 0   ? hoop_barrier(c)
                           : i == 1 ? hoop_allreduce(c, a, b, 2, HOOP_FLOAT32, HOOP_SUM)
                                    : hoop_allreduce(c, a, b, 1 << 18, HOOP_FLOAT32, HOOP_SUM);
        if (rc != HOOP_OK)
            printf("FAIL: call %d of the waiting test: %s\n", i, hoop_comm_last_error(c));
        check(rc, "the late rank's call");
    }
    double wall = wall_s() - w0, cpu = cpu_s() - c0;
    if (me != p - 1) {
        printf("rank %d waited %.2f s using %.3f s of CPU\n", me, wall, cpu);
        if (cpu > 0.2 * wall) {
            printf("FAIL: rank %d used %.0f%% of a core while waiting\n", me, 100 * cpu / wall);
            failures++;
        }
    }
}

int main(void)
{
    hoop_comm_t *c;
    check(hoop_init_from_env(&c), "hoop_init");
    int me = hoop_comm_rank(c), p = hoop_comm_size(c);
    const hoop_dtype_t dts[] = {HOOP_FLOAT32, HOOP_FLOAT64, HOOP_FLOAT16, HOOP_BFLOAT16};
    const size_t es[] = {4, 8, 2, 2};
    const hoop_op_t ops[] = {HOOP_SUM, HOOP_PROD, HOOP_AVG, HOOP_MAX};
    /* 4096 float32 elements are HOOP_SMALL_BYTES (16 KiB): the last small all-reduce. */
    const size_t counts[] = {1, 7, 1031, 4096, 4097, 100003};
    size_t maxn = 100003 * (size_t)p;
    char *in = malloc(maxn * 8), *a = malloc(maxn * 8), *b = malloc(maxn * 8);
    char what[160];
    int runs = 0;
    for (int d = 0; d < 4; d++) {
        for (int o = 0; o < 4; o++) {
            for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
                size_t n = counts[k];
                snprintf(what, sizeof(what), "allreduce(count=%zu, %s, %s) on %d ranks", n,
                         hoop_dtype_name(dts[d]), hoop_op_name(ops[o]), p);
                fill(in, n, dts[d],
                     (uint64_t)me * 1000003u + n * 7 + (uint64_t)d * 31 + (uint64_t)o);
                check(hoop_comm_set_algo(c, "shm"), "set_algo");
                check(hoop_allreduce(c, in, a, n, dts[d], ops[o]), what);
                memcpy(b, in, n * es[d]);
                check(hoop_allreduce(c, b, b, n, dts[d], ops[o]), what);
                compare(a, b, n, es[d], "in place against out of place");
                check(hoop_comm_set_algo(c, "p2p"), "set_algo");
                check(hoop_allreduce(c, in, b, n, dts[d], ops[o]), what);
                compare(a, b, n, es[d], what);
                same_everywhere(c, a, n * es[d], what);
                runs++;
            }
        }
        /* Reduce-scatter: the ring's fold order. */
        const size_t rs_counts[] = {1, 7, 1031, 70001};
        for (size_t k = 0; k < 4; k++) {
            size_t n = rs_counts[k];
            snprintf(what, sizeof(what), "reduce_scatter(count=%zu, %s, sum) on %d ranks", n,
                     hoop_dtype_name(dts[d]), p);
            fill(in, n * (size_t)p, dts[d], (uint64_t)me * 7919u + n + (uint64_t)d);
            check(hoop_comm_set_algo(c, "shm"), "set_algo");
            check(hoop_reduce_scatter(c, in, a, n, dts[d], HOOP_SUM), what);
            check(hoop_comm_set_algo(c, "p2p"), "set_algo");
            check(hoop_reduce_scatter(c, in, b, n, dts[d], HOOP_SUM), what);
            compare(a, b, n, es[d], what);
            runs++;
        }
    }
    idle_wait(c, a, b);
    free(in);
    free(a);
    free(b);
    check(hoop_comm_destroy(c), "hoop_comm_destroy");
    if (failures) return 1;
    if (me == 0) printf("OK: %d calls, shm and p2p bit-identical on %d ranks\n", runs, p);
    return 0;
}
