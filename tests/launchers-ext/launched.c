/*
 * One rank of a job started by a launcher people already run (srun, mpirun), with no hoop
 * variables: hoop_init_from_env must find the others on its own. The rank and size it gets are
 * compared with the launcher's own variables, then every rank checks all-reduce, all-gather and
 * broadcast results against a reference it computes alone. The whole is done twice (a second
 * communicator in the same process, as a program that re-initializes does).
 *
 *   launched [ROUNDS]   prints "rank R: N checks passed, F failed"; exit status 0 when F == 0.
 *   launched --expect-fail   hoop_init_from_env must fail (another job holds the rendezvous
 *                            port): prints "rank R of job J: init failed: ERROR"; exit status 0
 *                            when it failed, 1 when it joined a communicator.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoop.h"

#include "../common/testing.h"

/* The launcher's own numbering: what hoop must agree with. */
static int launcher_int(const char *const *names, int *out)
{
    for (int i = 0; names[i] != NULL; i++) {
        const char *v = getenv(names[i]);
        if (v != NULL && *v != '\0') {
            *out = atoi(v);
            return 0;
        }
    }
    return -1;
}

/* Element i of rank r's input in round k: exact in float32 after summing up to 64 ranks. */
static int64_t input(int r, size_t i, int k) { return (int64_t)((r + 1) * 3 + (i % 97) * 5 + k); }

static void round_trip(int k, int rank, int size)
{
    hoop_comm_t *c = NULL;
    hoop_result_t e = hoop_init_from_env(&c);
    CHECK(e == HOOP_OK && c != NULL, "round %d: hoop_init_from_env: %s", k, hoop_error_string(e));
    if (e != HOOP_OK || c == NULL) return;
    CHECK(hoop_comm_rank(c) == rank && hoop_comm_size(c) == size,
          "round %d: hoop says rank %d of %d, the launcher %d of %d", k, hoop_comm_rank(c),
          hoop_comm_size(c), rank, size);
    static const size_t counts[] = {0, 1, 7, 1031, 65537};
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
        const size_t n = counts[ci];
        int64_t *a = malloc((n + 1) * sizeof *a), *ra = malloc((n + 1) * sizeof *ra);
        float *f = malloc((n + 1) * sizeof *f), *rf = malloc((n + 1) * sizeof *rf);
        for (size_t i = 0; i < n; i++) {
            a[i] = input(rank, i, k);
            f[i] = (float)input(rank, i, k);
        }
        e = hoop_allreduce(c, a, ra, n, HOOP_INT64, HOOP_SUM);
        CHECK(e == HOOP_OK, "round %d: int64 all-reduce of %zu: %s", k, n, hoop_comm_last_error(c));
        e = hoop_allreduce(c, f, rf, n, HOOP_FLOAT32, HOOP_MAX);
        CHECK(e == HOOP_OK, "round %d: float32 all-reduce of %zu: %s", k, n,
              hoop_comm_last_error(c));
        size_t bad_sum = 0, bad_max = 0;
        for (size_t i = 0; i < n; i++) {
            int64_t want = 0;
            for (int r = 0; r < size; r++) want += input(r, i, k);
            bad_sum += ra[i] != want;
            bad_max += rf[i] != (float)input(size - 1, i, k);
        }
        CHECK(bad_sum == 0, "round %d: int64 sum of %zu: %zu element(s) wrong", k, n, bad_sum);
        CHECK(bad_max == 0, "round %d: float32 max of %zu: %zu element(s) wrong", k, n, bad_max);
        free(a);
        free(ra);
        free(f);
        free(rf);
    }
    int32_t mine[2] = {rank, rank * rank + k}, *all = calloc((size_t)size * 2, sizeof *all);
    e = hoop_allgather(c, mine, all, 2, HOOP_INT32);
    CHECK(e == HOOP_OK, "round %d: all-gather: %s", k, hoop_comm_last_error(c));
    int bad = 0;
    for (int r = 0; r < size; r++) bad += all[2 * r] != r || all[2 * r + 1] != r * r + k;
    CHECK(bad == 0, "round %d: all-gather: %d rank(s) wrong", k, bad);
    free(all);
    uint8_t b[13];
    for (size_t i = 0; i < sizeof b; i++) b[i] = rank == size - 1 ? (uint8_t)(i * 7 + k) : 0xEE;
    e = hoop_broadcast(c, b, sizeof b, HOOP_UINT8, size - 1);
    CHECK(e == HOOP_OK, "round %d: broadcast: %s", k, hoop_comm_last_error(c));
    bad = 0;
    for (size_t i = 0; i < sizeof b; i++) bad += b[i] != (uint8_t)(i * 7 + k);
    CHECK(bad == 0, "round %d: broadcast from rank %d: %d byte(s) wrong", k, size - 1, bad);
    e = hoop_comm_destroy(c);
    CHECK(e == HOOP_OK, "round %d: hoop_comm_destroy: %s", k, hoop_error_string(e));
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    static const char *const rank_vars[] = {"SLURM_PROCID", "OMPI_COMM_WORLD_RANK", NULL};
    static const char *const size_vars[] = {"SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", NULL};
    int rank = -1, size = -1;
    if (launcher_int(rank_vars, &rank) != 0 || launcher_int(size_vars, &size) != 0) {
        fprintf(stderr, "launched: run it under srun or mpirun\n");
        return 2;
    }
    /* What a hoop launcher would have set must not be there: the launcher is the only source. */
    static const char none[][16] = {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE",
                                    "HOOP_JOB_ID"};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        CHECK(getenv(none[i]) == NULL, "%s is set", none[i]);
    if (argc > 1 && strcmp(argv[1], "--expect-fail") == 0) {
        hoop_comm_t *c = NULL;
        hoop_result_t e = hoop_init_from_env(&c);
        const char *job = getenv("SLURM_JOB_ID");
        if (e == HOOP_OK) {
            printf("rank %d of job %s: FAIL hoop_init_from_env joined a communicator\n", rank,
                   job ? job : "?");
            hoop_comm_destroy(c);
            return 1;
        }
        printf("rank %d of job %s: init failed: %s\n", rank, job ? job : "?", hoop_error_string(e));
        return test_failures == 0 ? 0 : 1;
    }
    int rounds = argc > 1 ? atoi(argv[1]) : 2;
    for (int k = 0; k < rounds; k++) round_trip(k, rank, size);
    printf("rank %d: %ld checks passed, %ld failed\n", rank, test_checks - test_failures,
           test_failures);
    return test_failures == 0 && test_checks > 0 ? 0 : 1;
}
