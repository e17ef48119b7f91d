/*
 * A rank that fails in hoop_init once it has read the addresses, before it says so (its done key,
 * HOOP_TEST_SKIP_DONE):
 *
 *   hooprun -n N done_fail VICTIM [METHOD]
 *
 * (METHOD: an init method such as file:///PATH, env:// where none is given.)
 * Every rank must fail its init (the victim as the hook makes it, the others because it never
 * connects or never says done), none past HOOP_TIMEOUT and a margin, and where a rank's
 * sentence is about the done keys it must name the victim or a subtree that holds it
 * (tests/scale/scale_test.sh checks the sentences in the log). Each rank prints
 * "done_fail: rank R init CODE after S s" and exits 0 where init failed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "hoop.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    const char *r = getenv("RANK");
    const char *w = getenv("WORLD_SIZE");
    if (argc < 2 || argc > 3 || r == NULL || w == NULL) {
        fprintf(stderr, "usage: hooprun -n N done_fail VICTIM [METHOD]\n");
        return 2;
    }
    int rank = atoi(r), victim = atoi(argv[1]);
    if (rank == victim) setenv("HOOP_TEST_SKIP_DONE", "1", 1);
    double t0 = now();
    hoop_comm_t *c = NULL;
    hoop_result_t rc = argc == 3 ? hoop_init(&c, argv[2], rank, atoi(w)) : hoop_init_from_env(&c);
    printf("done_fail: rank %d init %s after %.2f s\n", rank, hoop_error_string(rc), now() - t0);
    fflush(stdout);
    if (rc == HOOP_OK) {
        hoop_comm_destroy(c);
        return 1;
    }
    return 0;
}
