/*
 * One rank of bench/scale.sh: hoop_init, one 8-byte all-reduce (checked), hoop_comm_destroy, and
 * what each cost, gathered on rank 0, which prints one line of key=value pairs:
 *
 *   ranks init_s allreduce_us destroy_s rss_mib_max rss_mib_mean shm_mib_max fds_max shmem_mib
 *
 * init_s runs from the first rank's entry into hoop_init to the last rank's return (one host:
 * one clock); rss, shm (the shared memory a rank maps) and fds are each rank's after init;
 * shmem_mib is the host's shared memory in use after init (/proc/meminfo Shmem) less what
 * SCALE_SHMEM_BEFORE (KiB, read by the script before the launch) says was there.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "hoop.h"
#include "procmem.h"

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(void)
{
    double begin = wall_s();
    hoop_comm_t *c;
    hoop_result_t e = hoop_init_from_env(&c);
    double end = wall_s();
    if (e != HOOP_OK) {
        fprintf(stderr, "scale: hoop_init failed: %s\n", hoop_error_string(e));
        return 1;
    }
    int rank = hoop_comm_rank(c), size = hoop_comm_size(c);
    int64_t shm, shm_rss;
    procmem_shm(&shm, &shm_rss);
    /* min of the begins (as its negative), max of the ends, of the per-rank figures and of the
     * begins (the launch: first to last rank into hoop_init) */
    double mx[6] = {-begin, end, (double)procmem_rss(), (double)shm, (double)procmem_fds(), begin};
    double sum_rss = mx[2];
    double t0 = mono_s();
    int64_t one = rank + 1, got = 0;
    e = hoop_allreduce(c, &one, &got, 1, HOOP_INT64, HOOP_SUM);
    double ar = mono_s() - t0;
    if (e == HOOP_OK && got != (int64_t)size * (size + 1) / 2) {
        fprintf(stderr, "scale: rank %d: all-reduce gave %lld, not %lld\n", rank, (long long)got,
                (long long)size * (size + 1) / 2);
        e = HOOP_ERR_INTERNAL;
    }
    double stat[2] = {ar, 0};
    if (e == HOOP_OK) e = hoop_allreduce(c, mx, mx, 6, HOOP_FLOAT64, HOOP_MAX);
    if (e == HOOP_OK) e = hoop_allreduce(c, &sum_rss, &stat[1], 1, HOOP_FLOAT64, HOOP_SUM);
    if (e == HOOP_OK) e = hoop_allreduce(c, stat, stat, 1, HOOP_FLOAT64, HOOP_MAX);
    int64_t shmem = procmem_kb_line("/proc/meminfo", "Shmem");
    const char *before = getenv("SCALE_SHMEM_BEFORE");
    if (before) shmem -= strtoll(before, NULL, 10) * 1024;
    if (e != HOOP_OK) {
        fprintf(stderr, "scale: rank %d: %s: %s\n", rank, hoop_error_string(e),
                hoop_comm_last_error(c));
        hoop_comm_abort(c);
        hoop_comm_destroy(c);
        return 1;
    }
    t0 = mono_s();
    hoop_comm_destroy(c);
    double destroy = mono_s() - t0;
    const double mib = 1024.0 * 1024.0;
    if (rank == 0)
        printf("ranks=%d init_s=%.3f allreduce_us=%.1f destroy_s=%.3f rss_mib_max=%.1f "
               "rss_mib_mean=%.1f shm_mib_max=%.1f fds_max=%.0f shmem_mib=%.1f launch_s=%.3f\n",
               size, mx[1] + mx[0], stat[0] * 1e6, destroy, mx[2] / mib, stat[1] / size / mib,
               mx[3] / mib, mx[4], (double)shmem / mib, mx[5] + mx[0]);
    return 0;
}
