/*
 * mem-copy: what P processes copying at once move through memory, the yardstick for an
 * all-reduce of buffers that do not fit in the caches. Each rank of such an all-reduce must read
 * its whole input and write its whole output at least once; so, with all ranks on one host, no
 * all-reduce of S bytes per rank can take less time than P processes each copying S bytes at
 * once, and their copy rate (S / time, per process) bounds the algorithm bandwidth.
 *
 *   mem-copy [-p PROCS] [-s BYTES] [-n REPS]     default: 2 processes, 256M, 10 copies
 *
 * Each process faults in two buffers of BYTES, copies one into the other once untimed, then
 * waits for the others at a shared barrier and times REPS copies (memcpy, as hoop's own copies).
 * Prints, per repetition, the slowest process's time as "copy_GBps <S / time, 1e9 B/s>"; the
 * last line is the median.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../bench_util.h"

#define MAX_PROCS 64
#define MAX_REPS 1000

typedef struct shared {
    atomic_int arrived[MAX_REPS + 1];
    double took[MAX_REPS][MAX_PROCS];
} shared_t;

/* Every process spins here until all have arrived for round k. */
static void barrier(shared_t *sh, int k, int procs)
{
    atomic_fetch_add(&sh->arrived[k], 1);
    while (atomic_load(&sh->arrived[k]) < procs) {
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int procs = 2, reps = 10;
    size_t bytes = 256u << 20;
    int bad = argc % 2 == 0;
    for (int i = 1; i + 1 < argc && !bad; i += 2) {
        if (strcmp(argv[i], "-p") == 0)
            bad = bench_parse_int(argv[i + 1], 1, MAX_PROCS, &procs);
        else if (strcmp(argv[i], "-s") == 0)
            bad = bench_parse_size(argv[i + 1], &bytes) || bytes == 0;
        else if (strcmp(argv[i], "-n") == 0)
            bad = bench_parse_int(argv[i + 1], 1, MAX_REPS, &reps);
        else
            bad = 1;
    }
    if (bad) {
        fprintf(stderr, "usage: mem-copy [-p PROCS (1-%d)] [-s BYTES] [-n REPS (1-%d)]\n",
                MAX_PROCS, MAX_REPS);
        return 2;
    }
    shared_t *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
                        0);
    if (sh == MAP_FAILED) {
        perror("mem-copy: mmap");
        return 1;
    }
    for (int r = 0; r < procs; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("mem-copy: fork");
            return 1;
        }
        if (pid > 0) continue;
        char *src = malloc(bytes), *dst = malloc(bytes);
        if (src == NULL || dst == NULL) _exit(1);
        memset(src, r + 1, bytes);
        memset(dst, 0, bytes);
        memcpy(dst, src, bytes);
        for (int k = 0; k < reps; k++) {
            barrier(sh, k, procs);
            double t0 = now_s();
            memcpy(dst, src, bytes);
            sh->took[k][r] = now_s() - t0;
        }
        barrier(sh, reps, procs);
        _exit(dst[bytes - 1] == (char)(r + 1) ? 0 : 1);
    }
    int failed = 0;
    for (int r = 0; r < procs; r++) {
        int st;
        if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) failed = 1;
    }
    if (failed) {
        fprintf(stderr, "mem-copy: a copying process failed\n");
        return 1;
    }
    double rate[MAX_REPS];
    for (int k = 0; k < reps; k++) {
        double slowest = 0;
        for (int r = 0; r < procs; r++)
            if (sh->took[k][r] > slowest) slowest = sh->took[k][r];
        rate[k] = (double)bytes / slowest / 1e9;
        printf("copy_GBps %.3f\n", rate[k]);
    }
    qsort(rate, (size_t)reps, sizeof rate[0], cmp_double);
    printf("procs %d bytes %zu median copy_GBps %.3f\n", procs, bytes, rate[reps / 2]);
    return 0;
}
