/*
 * mem-copy: what P processes copying at once move through memory, the yardstick for an
 * all-reduce of buffers that do not fit in the caches. Each rank of such an all-reduce must read
 * its whole input and write its whole output at least once; so, with all ranks on one host, no
 * all-reduce of S bytes per rank can take less time than P processes each copying S bytes at
 * once, and their copy rate (S / time, per process) bounds the algorithm bandwidth.
 *
 *   mem-copy [-p PROCS] [-s BYTES] [-n REPS] [-m memcpy|cma] [-c CHUNK]
 *                                  default: 2 processes, 256M, 10 copies, memcpy, 2M
 *
 * Each process faults in two buffers of BYTES, copies one into the other once untimed, then
 * waits for the others at a shared barrier and times REPS copies (memcpy, as hoop's own copies).
 * Prints, per repetition, the slowest process's time as "copy_GBps <S / time, 1e9 B/s>"; the
 * last line is the median.
 *
 * -m cma copies from the next process's buffer instead, with process_vm_readv in reads of CHUNK
 * bytes, as hoop's single-copy all-reduce (HOOP_CMA) reads its peers: its rate against memcpy's
 * on the same host is what such a schedule can reach there, whatever its traffic model says.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* process_vm_readv */
#endif
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../bench_util.h"

#define MAX_PROCS 64
#define MAX_REPS 1000

typedef struct shared {
    atomic_int arrived[MAX_REPS + 2];
    double took[MAX_REPS][MAX_PROCS];
    pid_t pid[MAX_PROCS]; /* -m cma: where every process's source lies */
    char *src[MAX_PROCS];
} shared_t;

/* One copy of bytes from process peer's src (or this process's, cma == 0) into dst. */
static int copy_once(const shared_t *sh, int cma, int peer, char *src, char *dst, size_t bytes,
                     size_t chunk)
{
    if (!cma) {
        memcpy(dst, src, bytes);
        return 0;
    }
    for (size_t off = 0; off < bytes; off += chunk) {
        size_t n = bytes - off < chunk ? bytes - off : chunk;
        struct iovec l = {dst + off, n}, r = {sh->src[peer] + off, n};
        if (process_vm_readv(sh->pid[peer], &l, 1, &r, 1, 0) != (ssize_t)n) return -1;
    }
    return 0;
}

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
    int procs = 2, reps = 10, cma = 0;
    size_t bytes = 256u << 20, chunk = 2u << 20;
    int bad = argc % 2 == 0;
    for (int i = 1; i + 1 < argc && !bad; i += 2) {
        if (strcmp(argv[i], "-p") == 0)
            bad = bench_parse_int(argv[i + 1], 1, MAX_PROCS, &procs);
        else if (strcmp(argv[i], "-s") == 0)
            bad = bench_parse_size(argv[i + 1], &bytes) || bytes == 0;
        else if (strcmp(argv[i], "-n") == 0)
            bad = bench_parse_int(argv[i + 1], 1, MAX_REPS, &reps);
        else if (strcmp(argv[i], "-c") == 0)
            bad = bench_parse_size(argv[i + 1], &chunk) || chunk == 0;
        else if (strcmp(argv[i], "-m") == 0 && strcmp(argv[i + 1], "memcpy") == 0)
            cma = 0;
        else if (strcmp(argv[i], "-m") == 0 && strcmp(argv[i + 1], "cma") == 0)
            cma = 1;
        else
            bad = 1;
    }
    if (bad) {
        fprintf(stderr,
                "usage: mem-copy [-p PROCS (1-%d)] [-s BYTES] [-n REPS (1-%d)] "
                "[-m memcpy|cma] [-c CHUNK]\n",
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
        /* Where Yama allows only ancestors to read a process, the sibling that reads this one
         * needs its leave. */
        if (cma) (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
        sh->pid[r] = getpid();
        sh->src[r] = src;
        int peer = cma ? (r + 1) % procs : r;
        barrier(sh, 0, procs);
        if (copy_once(sh, cma, peer, src, dst, bytes, chunk) != 0) {
            perror("mem-copy: process_vm_readv");
            _exit(1);
        }
        for (int k = 0; k < reps; k++) {
            barrier(sh, k + 1, procs);
            double t0 = now_s();
            if (copy_once(sh, cma, peer, src, dst, bytes, chunk) != 0) _exit(1);
            sh->took[k][r] = now_s() - t0;
        }
        barrier(sh, reps + 1, procs);
        _exit(dst[bytes - 1] == (char)(peer + 1) ? 0 : 1);
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
    if (cma)
        printf("procs %d bytes %zu cma chunk %zu median copy_GBps %.3f\n", procs, bytes, chunk,
               rate[reps / 2]);
    else
        printf("procs %d bytes %zu median copy_GBps %.3f\n", procs, bytes, rate[reps / 2]);
    return 0;
}
