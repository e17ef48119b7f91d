/*
 * What the one-host area's first call costs a rank in mappings and pages, beyond 16 peers a host:
 *
 *   hooprun -n N area_maps MAX_SEGMENTS [MAX_AREA_KIB]
 *
 * Every rank runs one checked 8-byte all-reduce (the area's first call: its setup, then one
 * step), then reads its own /proc/self/smaps: how many shm transport segments it maps (its own
 * and the peers' it has talked to) and how much of the area it has faulted in (the area
 * mapping's Rss). The largest of each over the ranks must stay within the bounds: the setup goes
 * through the host's tree, so rank 0 maps its neighbours' segments only, not every rank's; and
 * a step's reads of every rank's step line fault a few pages, not one a rank.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoop.h"

/* Mappings of the transport's segments, and the Rss (KiB) of the area's, in this process. */
static void maps(int64_t *segs, int64_t *area_kib)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int in_area = 0;
    *segs = *area_kib = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        unsigned long lo, hi;
        int path = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &path) == 2) {
            const char *p = path > 0 ? line + path : "";
            in_area = strncmp(p, "/memfd:hoop-coll", 16) == 0;
            if (strncmp(p, "/memfd:hoop-shm", 15) == 0) (*segs)++;
        } else if (in_area && strncmp(line, "Rss:", 4) == 0) {
            *area_kib += strtoll(line + 4, NULL, 10);
        }
    }
    if (f != NULL) fclose(f);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: area_maps MAX_SEGMENTS [MAX_AREA_KIB]\n");
        return 2;
    }
    int64_t max_segs = strtoll(argv[1], NULL, 10),
            max_area = argc > 2 ? strtoll(argv[2], NULL, 10) : -1;
    hoop_comm_t *c;
    if (hoop_init_from_env(&c) != HOOP_OK) {
        fprintf(stderr, "area_maps: hoop_init failed\n");
        return 1;
    }
    int rank = hoop_comm_rank(c), size = hoop_comm_size(c);
    int64_t one = rank + 1, got = 0, want = (int64_t)size * (size + 1) / 2;
    hoop_result_t e = hoop_allreduce(c, &one, &got, 1, HOOP_INT64, HOOP_SUM);
    int64_t m[2] = {0, 0};
    maps(&m[0], &m[1]);
    int64_t mine[2] = {m[0], m[1]};
    if (e == HOOP_OK) e = hoop_allreduce(c, mine, m, 2, HOOP_INT64, HOOP_MAX);
    if (e != HOOP_OK) {
        fprintf(stderr, "area_maps: rank %d: %s: %s\n", rank, hoop_error_string(e),
                hoop_comm_last_error(c));
        hoop_comm_abort(c);
        hoop_comm_destroy(c);
        return 1;
    }
    int bad = 0;
    if (got != want) {
        fprintf(stderr, "area_maps: rank %d: all-reduce gave %lld, not %lld\n", rank,
                (long long)got, (long long)want);
        bad = 1;
    }
    if (rank == 0) {
        printf("area_maps: %d ranks: at most %lld segments mapped a rank (bound %lld), %lld KiB "
               "of the area touched (bound %lld)\n",
               size, (long long)m[0], (long long)max_segs, (long long)m[1], (long long)max_area);
        if (m[0] > max_segs) {
            fprintf(stderr, "area_maps: a rank maps %lld segments, more than %lld\n",
                    (long long)m[0], (long long)max_segs);
            bad = 1;
        }
        if (max_area >= 0 && m[1] > max_area) {
            fprintf(stderr, "area_maps: a rank touched %lld KiB of the area, more than %lld\n",
                    (long long)m[1], (long long)max_area);
            bad = 1;
        }
    }
    hoop_comm_destroy(c);
    return bad;
}
