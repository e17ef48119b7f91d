/*
 * One long transfer across a slow link, for slowlink.sh: every rank runs
 *
 *   slowlink sendrecv BYTES   rank 0 sends BYTES to the last rank (on the other host)
 *   slowlink isendrecv BYTES  the same with hoop_isend/hoop_irecv and hoop_wait
 *   slowlink gather BYTES     every rank sends BYTES to rank 0
 *
 * and prints "rank R: MODE: HOOP_OK in S s" once the call returned and the bytes it received are
 * right, or the error. Exit status 0 only then.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hoop.h"
#include "../common/testing.h"

static uint32_t val(int rank, size_t i)
{
    return (uint32_t)i * 2654435761u ^ (uint32_t)rank * 0x9e3779b9u;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "sendrecv") != 0 && strcmp(argv[1], "isendrecv") != 0 &&
                      strcmp(argv[1], "gather") != 0)) {
        fprintf(stderr, "usage: slowlink sendrecv|isendrecv|gather BYTES\n");
        return 2;
    }
    int gather = strcmp(argv[1], "gather") == 0, nb = strcmp(argv[1], "isendrecv") == 0;
    size_t n = (size_t)strtoull(argv[2], NULL, 10) / sizeof(uint32_t);
    hoop_comm_t *c;
    if (hoop_init_from_env(&c) != HOOP_OK) return 1;
    int me = hoop_comm_rank(c), p = hoop_comm_size(c), last = p - 1;
    uint32_t *s = malloc(n * sizeof *s), *r = malloc((gather ? (size_t)p : 1) * n * sizeof *r);
    if (s == NULL || r == NULL) return 1;
    for (size_t i = 0; i < n; i++) s[i] = val(me, i);
    /* Everyone is connected and ready before the clock starts. */
    hoop_result_t rc = hoop_barrier(c);
    double t0 = now_s();
    hoop_request_t *rq = NULL;
    if (rc == HOOP_OK && gather)
        rc = hoop_gather(c, s, r, n, HOOP_UINT32, 0);
    else if (rc == HOOP_OK && me == 0)
        rc = nb ? hoop_isend(c, s, n, HOOP_UINT32, last, &rq)
                : hoop_send(c, s, n, HOOP_UINT32, last);
    else if (rc == HOOP_OK && me == last)
        rc = nb ? hoop_irecv(c, r, n, HOOP_UINT32, 0, &rq) : hoop_recv(c, r, n, HOOP_UINT32, 0);
    if (rc == HOOP_OK && rq != NULL) rc = hoop_wait(rq);
    double dt = now_s() - t0;
    size_t wrong = 0;
    if (rc == HOOP_OK && gather && me == 0)
        for (int q = 0; q < p; q++)
            for (size_t i = 0; i < n; i++) wrong += r[(size_t)q * n + i] != val(q, i);
    if (rc == HOOP_OK && !gather && me == last)
        for (size_t i = 0; i < n; i++) wrong += r[i] != val(0, i);
    if (rc != HOOP_OK)
        printf("rank %d: %s: %s after %.2f s: %s\n", me, argv[1], hoop_error_string(rc), dt,
               hoop_comm_last_error(c));
    else if (wrong > 0)
        printf("rank %d: %s: HOOP_OK but %zu wrong elements\n", me, argv[1], wrong);
    else
        printf("rank %d: %s: HOOP_OK in %.2f s\n", me, argv[1], dt);
    hoop_comm_destroy(c);
    free(s);
    free(r);
    return rc != HOOP_OK || wrong > 0;
}
