/*
 * The area refused by one rank: every rank must learn it and the call must still give the right
 * bytes, point to point.
 *
 *   hooprun -n N area_refused REFUSER
 *
 * Rank REFUSER cannot open a file when the first collective comes (its descriptors used up to
 * its limit), so it cannot map the area, whose setup opens rank 0's memfd. Its refusal travels
 * up the ranks' tree to rank 0 and the verdict down again: on every rank the call runs without
 * the area, and no rank keeps the area mapped. The sums are of integers, checked against the
 * closed form; a second call after the rank has its descriptors back must agree too.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "hoop.h"

#define N 1000
#define MAX_FILL 4096

static int area_mapped(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int n = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (strstr(line, "/memfd:hoop-coll") != NULL) n++;
    if (f != NULL) fclose(f);
    return n;
}

static int check(const int64_t *got, int size, int rank, const char *what)
{
    for (int i = 0; i < N; i++) {
        int64_t want = 1000 * (int64_t)size * (size - 1) / 2 + (int64_t)size * i;
        if (got[i] != want) {
            fprintf(stderr, "rank %d: %s: element %d is %lld, not %lld\n", rank, what, i,
                    (long long)got[i], (long long)want);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    int refuser = argc > 1 ? atoi(argv[1]) : 1;
    hoop_comm_t *c;
    if (hoop_init_from_env(&c) != HOOP_OK) {
        fprintf(stderr, "area_refused: hoop_init failed\n");
        return 1;
    }
    int rank = hoop_comm_rank(c), size = hoop_comm_size(c), bad = 0;
    static int64_t in[N], out[N];
    for (int i = 0; i < N; i++) in[i] = 1000 * (int64_t)rank + i;
    struct rlimit old, lim;
    int fill[MAX_FILL], nfill = 0;
    if (rank == refuser) {
        /* Every descriptor below the limit taken: the next open fails with EMFILE. */
        getrlimit(RLIMIT_NOFILE, &old);
        int top = 0;
        for (int fd = 0; fd < 1024; fd++)
            if (fcntl(fd, F_GETFD) >= 0) top = fd;
        lim = old;
        lim.rlim_cur = (rlim_t)top + 1;
        setrlimit(RLIMIT_NOFILE, &lim);
        while (nfill < MAX_FILL) {
            int fd = dup(0);
            if (fd < 0) break;
            fill[nfill++] = fd;
        }
        int probe = open("/dev/null", O_RDONLY);
        if (probe >= 0 || errno != EMFILE) {
            fprintf(stderr, "rank %d: could not use up its descriptors\n", rank);
            bad = 1;
            if (probe >= 0) close(probe);
        }
    }
    hoop_result_t e = hoop_allreduce(c, in, out, N, HOOP_INT64, HOOP_SUM);
    if (rank == refuser) {
        for (int k = 0; k < nfill; k++) close(fill[k]);
        setrlimit(RLIMIT_NOFILE, &old);
    }
    if (e != HOOP_OK) {
        fprintf(stderr, "rank %d: all-reduce: %s: %s\n", rank, hoop_error_string(e),
                hoop_comm_last_error(c));
        hoop_comm_destroy(c);
        return 1;
    }
    bad |= check(out, size, rank, "the call the area was refused in");
    if (area_mapped() != 0) {
        fprintf(stderr, "rank %d: the area is still mapped after every rank was told no\n", rank);
        bad = 1;
    }
    memset(out, 0, sizeof(out));
    e = hoop_allreduce(c, in, out, N, HOOP_INT64, HOOP_SUM);
    if (e != HOOP_OK) {
        fprintf(stderr, "rank %d: second all-reduce: %s: %s\n", rank, hoop_error_string(e),
                hoop_comm_last_error(c));
        bad = 1;
    } else {
        bad |= check(out, size, rank, "the call after");
    }
    if (rank == 0 && !bad) printf("area_refused: %d ranks, rank %d refused: OK\n", size, refuser);
    hoop_comm_destroy(c);
    return bad;
}
