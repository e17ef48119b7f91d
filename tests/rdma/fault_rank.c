/* One rank of a verbs fault run (verbs_test.sh): loops over all-reduces (1000 and 262147 float32,
 * the second going zero copy), all-to-alls and a barrier, each result checked against its
 * reference, until a call fails or ROUNDS rounds pass. A failure must be HOOP_ERR_PEER_LOST,
 * HOOP_ERR_SYSTEM or HOOP_ERR_ABORTED, and a call after it must fail at once; the rank then prints
 *
 *   FAILED rank R round N: CODE: message
 *
 * and exits 0. It exits 1 if every round succeeded (the fault never came) or a result was wrong,
 * 2 on an unexpected code. The shell checks every rank's line (which peer, which status text).
 *
 *   fault_rank [ROUNDS]     (default 400; HOOP_TRANSPORT and the rest from the environment) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hoop.h"
#include "../common/testing.h"

#define BIG 262147

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 400;
    hoop_comm_t *c;
    hoop_result_t rc = hoop_init_from_env(&c);
    if (rc != HOOP_OK) {
        printf("FAILED rank ? round -1: %s: init\n", test_code_name(rc));
        return 2;
    }
    int rank = hoop_comm_rank(c), n = hoop_comm_size(c);
    float *a = malloc(BIG * sizeof(float)), *b = malloc(BIG * sizeof(float));
    int *s = malloc((size_t)n * 64 * sizeof(int)), *r = malloc((size_t)n * 64 * sizeof(int));
    if (a == NULL || b == NULL || s == NULL || r == NULL) return 2;
    int round = 0;
    double t_fail = 0;
    for (; round < rounds; round++) {
        size_t cnt = round % 2 ? BIG : 1000;
        for (size_t i = 0; i < cnt; i++)
            a[i] = (float)((i + (size_t)rank * 3 + (size_t)round) % 17);
        rc = hoop_allreduce(c, a, b, cnt, HOOP_FLOAT32, HOOP_SUM);
        for (size_t i = 0; rc == HOOP_OK && i < cnt; i++) {
            float want = 0;
            for (int q = 0; q < n; q++) want += (float)((i + (size_t)q * 3 + (size_t)round) % 17);
            if (b[i] != want) {
                printf("WRONG rank %d round %d: allreduce element %zu is %g, not %g\n", rank, round,
                       i, (double)b[i], (double)want);
                return 1;
            }
        }
        if (rc != HOOP_OK) break;
        for (int q = 0; q < n * 64; q++) s[q] = rank * 100000 + q * 7 + round;
        rc = hoop_alltoall(c, s, r, 64, HOOP_INT32);
        for (int q = 0; rc == HOOP_OK && q < n; q++)
            for (int k = 0; k < 64; k++)
                if (r[q * 64 + k] != q * 100000 + (rank * 64 + k) * 7 + round) {
                    printf("WRONG rank %d round %d: alltoall from %d\n", rank, round, q);
                    return 1;
                }
        if (rc != HOOP_OK) break;
        if ((rc = hoop_barrier(c)) != HOOP_OK) break;
        if (round == 2) { /* a fault from outside may come now */
            printf("STARTED rank %d\n", rank);
            fflush(stdout);
        }
    }
    if (rc == HOOP_OK) {
        printf("NOFAULT rank %d: %d rounds passed\n", rank, rounds);
        hoop_comm_destroy(c);
        return 1;
    }
    t_fail = now_s();
    printf("FAILED rank %d round %d: %s: %s\n", rank, round, test_code_name(rc),
           hoop_comm_last_error(c));
    fflush(stdout);
    int bad = rc != HOOP_ERR_PEER_LOST && rc != HOOP_ERR_SYSTEM && rc != HOOP_ERR_ABORTED;
    hoop_result_t again = hoop_allreduce(c, a, b, 1000, HOOP_FLOAT32, HOOP_SUM);
    if (again == HOOP_OK || now_s() - t_fail > 1.0) {
        printf("BAD rank %d: the call after the failure gave %s after %.2f s\n", rank,
               test_code_name(again), now_s() - t_fail);
        bad = 1;
    }
    hoop_comm_destroy(c);
    free(a);
    free(b);
    free(s);
    free(r);
    return bad ? 2 : 0;
}
