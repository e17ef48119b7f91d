/* A rank of the live-view test (check.py): makes CALLS all-reduces of COUNT floats, each checked
 * against its sum computed here; before call STALL the last rank says "stalling" and sleeps
 * SLEEP_S seconds outside hoop, so that the others wait in that call meanwhile.
 * Usage: status_rank CALLS COUNT STALL SLEEP_S. Prints "rank R ok" at the end. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "hoop.h"

int main(int argc, char **argv)
{
    if (argc != 5) return 2;
    int calls = atoi(argv[1]), count = atoi(argv[2]), stall = atoi(argv[3]);
    double sleep_s = atof(argv[4]);
    hoop_comm_t *comm = NULL;
    hoop_result_t rc = hoop_init_from_env(&comm);
    if (rc != HOOP_OK) {
        fprintf(stderr, "init: %s\n", hoop_error_string(rc));
        return 1;
    }
    int rank = hoop_comm_rank(comm), size = hoop_comm_size(comm);
    float *buf = malloc((size_t)count * sizeof(float));
    if (buf == NULL) return 1;
    for (int k = 1; k <= calls; k++) {
        if (k == stall && rank == size - 1) {
            printf("stalling before call %d\n", k);
            fflush(stdout);
            usleep((useconds_t)(sleep_s * 1e6));
        }
        for (int i = 0; i < count; i++) buf[i] = (float)(rank + 1) * (float)(i % 7 + k);
        rc = hoop_allreduce(comm, buf, buf, (size_t)count, HOOP_FLOAT32, HOOP_SUM);
        if (rc != HOOP_OK) {
            fprintf(stderr, "rank %d call %d: %s: %s\n", rank, k, hoop_error_string(rc),
                    hoop_comm_last_error(comm));
            return 1;
        }
        /* sum over r of (r + 1) * (i % 7 + k) */
        for (int i = 0; i < count; i++) {
            float want = (float)(size * (size + 1) / 2) * (float)(i % 7 + k);
            if (buf[i] != want) {
                fprintf(stderr, "rank %d call %d: element %d is %g, not %g\n", rank, k, i,
                        (double)buf[i], (double)want);
                return 1;
            }
        }
    }
    printf("rank %d ok\n", rank);
    free(buf);
    hoop_comm_destroy(comm);
    return 0;
}
