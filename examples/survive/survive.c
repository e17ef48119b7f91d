/*
 * survive: the pattern of a job that loses a rank and goes on without it (docs/reliability.md,
 * "Survivors continue").
 *
 *   RANK=r WORLD_SIZE=n survive [--steps N] [--victim R] [--kill-at K] [URL]
 *
 * Each step all-reduces one number per rank (its old rank + 1, times the step) and checks the sum
 * against the members it knows of. At step K (default 5 of 10) rank R (default 1) SIGKILLs
 * itself. A survivor's call fails; it calls hoop_comm_shrink, and an all-gather on the new
 * communicator tells every survivor who is left and the lowest step any of them is in (a
 * survivor whose all-reduce completed, the dead rank having sent its part, is one step ahead);
 * they go on together from there. Start the ranks without
 * hooprun, which ends a job at its first death, e.g.
 *
 *   for r in 0 1 2 3; do RANK=$r WORLD_SIZE=4 survive file:///tmp/rdv & done; wait
 */
#include <hoop.h>

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int lost(hoop_result_t rc)
{
    return rc == HOOP_ERR_PEER_LOST || rc == HOOP_ERR_ABORTED || rc == HOOP_ERR_TIMEOUT;
}

int main(int argc, char **argv)
{
    const char *url = NULL;
    long steps = 10, kill_at = 5, victim = 1;
    if (argc % 2 == 0) url = argv[--argc]; /* a bare last argument: the rendezvous URL */
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--steps") == 0)
            steps = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--kill-at") == 0)
            kill_at = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--victim") == 0)
            victim = atol(argv[i + 1]);
        else {
            fprintf(stderr, "survive: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    hoop_comm_t *comm = NULL;
    if (hoop_init(&comm, url, -1, -1) != HOOP_OK) return 1;
    const int old_rank = hoop_comm_rank(comm);
    int size = hoop_comm_size(comm);
    /* The members' old ranks, by current rank. */
    int32_t *members = malloc((size_t)size * sizeof(int32_t));
    int32_t *where = malloc(2 * (size_t)size * sizeof(int32_t));
    /* Communicators left behind, kept until the end: while one lives, a rank that was only
     * stopped and comes back is told it was left out. */
    hoop_comm_t **old = malloc((size_t)size * sizeof(*old));
    int nold = 0;
    if (members == NULL || where == NULL || old == NULL) return 1;
    for (int r = 0; r < size; r++) members[r] = r;

    for (long k = 0; k < steps; k++) {
        if (k == kill_at && old_rank == victim) raise(SIGKILL);
        double x = (double)(old_rank + 1) * (double)k;
        hoop_result_t rc = hoop_allreduce(comm, &x, &x, 1, HOOP_FLOAT64, HOOP_SUM);
        if (lost(rc)) {
            /* Every rank still running shrinks, then they agree on who is left and on the step
             * to go on from (x is computed afresh there). */
            fprintf(stderr, "survive: rank %d: step %ld failed (%s); shrinking\n", old_rank, k,
                    hoop_comm_last_error(comm));
            hoop_comm_t *nc = NULL;
            rc = hoop_comm_shrink(comm, &nc);
            if (rc == HOOP_OK) {
                old[nold++] = comm;
                comm = nc;
                size = hoop_comm_size(comm);
                int32_t me[2] = {old_rank, (int32_t)k};
                rc = hoop_allgather(comm, me, where, 2, HOOP_INT32);
            }
            if (rc != HOOP_OK) {
                fprintf(stderr, "survive: rank %d: cannot go on: %s\n", old_rank,
                        hoop_comm_last_error(comm));
                return 1;
            }
            long from = k;
            for (int r = 0; r < size; r++) {
                members[r] = where[2 * r];
                if (where[2 * r + 1] < from) from = where[2 * r + 1];
            }
            if (hoop_comm_rank(comm) == 0)
                printf("survive: step %ld goes on with %d ranks\n", from, size);
            k = from - 1;
            continue;
        }
        if (rc != HOOP_OK) {
            fprintf(stderr, "survive: rank %d: %s\n", old_rank, hoop_comm_last_error(comm));
            return 1;
        }
        double want = 0;
        for (int r = 0; r < size; r++) want += (double)(members[r] + 1) * (double)k;
        if (x != want) {
            fprintf(stderr, "survive: rank %d: step %ld: sum %g, want %g\n", old_rank, k, x, want);
            return 1;
        }
    }
    if (hoop_comm_rank(comm) == 0)
        printf("survive: %ld steps checked, %d ranks at the end\n", steps, size);
    for (int i = 0; i < nold; i++) hoop_comm_destroy(old[i]);
    hoop_comm_destroy(comm);
    free(old);
    free(where);
    free(members);
    return 0;
}
