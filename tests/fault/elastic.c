/*
 * Elastic restart, end to end: run under `hooprun --max-restarts 1`. In the first attempt rank 1
 * kills itself (SIGKILL) in the middle of a loop of all-reduces; hooprun stops the others and
 * starts every rank again with a fresh rendezvous and HOOP_RESTART_COUNT=1, where the loop must
 * run to the end with every result right. Exit 0 therefore means: a failure, a restart, and a
 * clean second attempt.
 *
 *   hooprun --max-restarts 1 -n N elastic [--transport T]
 *
 * A transport the library does not accept (HOOP_TRANSPORT) makes the test skip (exit 77).
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoop.h"
#include "../common/testing.h"

#define ROUNDS 20
#define COUNT (256 * 1024 + 7)

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--transport") == 0)
        setenv("HOOP_TRANSPORT", argv[2], 1);
    else if (argc != 1) {
        fprintf(stderr, "usage: hooprun --max-restarts 1 -n N elastic [--transport T]\n");
        return 2;
    }
    const char *rc_env = getenv("HOOP_RESTART_COUNT");
    int attempt = rc_env != NULL ? atoi(rc_env) : -1;
    if (attempt < 0) {
        printf("FAIL: HOOP_RESTART_COUNT is not set: run under hooprun --max-restarts\n");
        return 1;
    }
    hoop_comm_t *c = NULL;
    char what[64];
    snprintf(what, sizeof what, "attempt %d: hoop_init", attempt);
    int init = test_init_from_env(&c, what);
    if (init != 0) return init;
    hoop_result_t rc;
    int me = hoop_comm_rank(c), p = hoop_comm_size(c);
    uint32_t *v = malloc(COUNT * sizeof *v);
    if (v == NULL) return 1;
    for (int it = 0; it < ROUNDS; it++) {
        if (attempt == 0 && me == 1 && it == ROUNDS / 2) raise(SIGKILL);
        for (size_t i = 0; i < COUNT; i++)
            v[i] = (uint32_t)(i * 2654435761u) + (uint32_t)(me * 977 + it);
        rc = hoop_allreduce(c, v, v, COUNT, HOOP_UINT32, HOOP_SUM);
        if (rc != HOOP_OK) {
            /* In the first attempt the survivors may get here before hooprun stops them. */
            printf("attempt %d rank %d round %d: %s: %s\n", attempt, me, it, hoop_error_string(rc),
                   hoop_comm_last_error(c));
            hoop_comm_destroy(c);
            free(v);
            return attempt == 0 ? 3 : 1;
        }
        for (size_t i = 0; i < COUNT; i++) {
            uint32_t want = 0;
            for (int q = 0; q < p; q++)
                want += (uint32_t)(i * 2654435761u) + (uint32_t)(q * 977 + it);
            if (v[i] != want) {
                printf("FAIL: attempt %d rank %d round %d: element %zu is %u, want %u\n", attempt,
                       me, it, i, v[i], want);
                return 1;
            }
        }
    }
    printf("attempt %d rank %d: %d all-reduces right\n", attempt, me, ROUNDS);
    hoop_comm_destroy(c);
    free(v);
    /* The first attempt cannot end well: rank 1 is dead. */
    return attempt == 0 ? 1 : 0;
}
