/* One rank of the split check over verbs (guest_more.sh): the world splits into even and odd ranks
 * and into one group in reverse order; on each new communicator an all-reduce of 1000 and of 262147
 * float32 (the second zero copy) and a ring exchange of 300007 bytes, every element checked against
 * its reference (--fake-hosts K: rank r claims host r % K). Each communicator made by split connects its own queue pairs, through the
 * out-of-band exchange over its parent. Exit 0 when everything came right.
 *
 * --abort-after-split: 3 ranks; rank 0 aborts a communicator split from the world as soon as its
 * split returns, while the others may still be settling its connections (guest_more.sh holds rank
 * 1's ready notice to rank 2 for it): the split succeeds on every rank, the first call on the new
 * communicator fails on every rank with rank 0's abort, and the world goes on. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoop.h"
#include "../common/testing.h"

#define BIG 262147
#define RING 300007

static int check(hoop_comm_t *c, const char *what, int salt)
{
    int r = hoop_comm_rank(c), n = hoop_comm_size(c);
    float *a = malloc(BIG * sizeof(float)), *b = malloc(BIG * sizeof(float));
    uint8_t *s = malloc(RING), *v = malloc(RING);
    int bad = a == NULL || b == NULL || s == NULL || v == NULL;
    for (size_t cnt = 1000; !bad && cnt <= BIG; cnt = cnt == 1000 ? BIG : BIG + 1) {
        for (size_t i = 0; i < cnt; i++) a[i] = (float)((i * 5 + (size_t)(r + salt)) % 23);
        hoop_result_t rc = hoop_allreduce(c, a, b, cnt, HOOP_FLOAT32, HOOP_SUM);
        size_t wrong = 0;
        for (size_t i = 0; rc == HOOP_OK && i < cnt; i++) {
            float want = 0;
            for (int q = 0; q < n; q++) want += (float)((i * 5 + (size_t)(q + salt)) % 23);
            wrong += b[i] != want;
        }
        if (rc != HOOP_OK || wrong) {
            printf("FAIL %s rank %d: allreduce of %zu: %s, %zu wrong: %s\n", what, r, cnt,
                   test_code_name(rc), wrong, hoop_comm_last_error(c));
            bad = 1;
        }
    }
    if (!bad && n > 1) {
        int to = (r + 1) % n, from = (r + n - 1) % n;
        for (size_t i = 0; i < RING; i++) s[i] = (uint8_t)(i * 13 + (size_t)r * 7 + (size_t)salt);
        hoop_request_t *q[2];
        hoop_result_t e0 = hoop_irecv(c, v, RING, HOOP_UINT8, from, &q[0]);
        hoop_result_t e1 = hoop_isend(c, s, RING, HOOP_UINT8, to, &q[1]);
        if (e0 == HOOP_OK) e0 = hoop_wait(q[0]);
        if (e1 == HOOP_OK) e1 = hoop_wait(q[1]);
        size_t wrong = 0;
        for (size_t i = 0; e0 == HOOP_OK && i < RING; i++)
            wrong += v[i] != (uint8_t)(i * 13 + (size_t)from * 7 + (size_t)salt);
        if (e0 != HOOP_OK || e1 != HOOP_OK || wrong) {
            printf("FAIL %s rank %d: ring exchange: %s/%s, %zu wrong: %s\n", what, r,
                   test_code_name(e0), test_code_name(e1), wrong, hoop_comm_last_error(c));
            bad = 1;
        }
    }
    if (!bad) printf("%s: rank %d of %d: checked\n", what, r, n);
    free(a);
    free(b);
    free(s);
    free(v);
    return bad;
}

static int abort_after_split(hoop_comm_t *w)
{
    int r = hoop_comm_rank(w), bad = 0;
    hoop_comm_t *c = NULL;
    hoop_result_t rc = hoop_comm_split(w, 0, r, &c);
    if (rc != HOOP_OK) {
        printf("FAIL rank %d: split: %s: %s\n", r, test_code_name(rc), hoop_comm_last_error(w));
        return 1;
    }
    if (r == 0) (void)hoop_comm_abort(c);
    rc = hoop_barrier(c);
    const char *m = hoop_comm_last_error(c);
    if (rc != HOOP_ERR_ABORTED || (r != 0 && strstr(m, "rank 0 aborted") == NULL)) {
        printf("FAIL rank %d: barrier after rank 0's abort: %s: %s\n", r, test_code_name(rc), m);
        bad = 1;
    }
    hoop_comm_destroy(c);
    int32_t x = r + 1;
    rc = hoop_allreduce(w, &x, &x, 1, HOOP_INT32, HOOP_SUM);
    if (rc != HOOP_OK || x != 6) {
        printf("FAIL rank %d: world all-reduce after: %s, %d\n", r, test_code_name(rc), (int)x);
        bad = 1;
    }
    if (!bad) printf("abort after split: rank %d: checked\n", r);
    hoop_comm_destroy(w);
    return bad;
}

int main(int argc, char **argv)
{
    hoop_comm_t *w, *eo = NULL, *rev = NULL;
    if (argc == 3 && strcmp(argv[1], "--fake-hosts") == 0) {
        /* rank r claims host r % K: shared memory inside, verbs across under auto */
        char id[32];
        const char *rk = getenv("RANK");
        snprintf(id, sizeof(id), "fake-host-%d", (rk != NULL ? atoi(rk) : 0) % atoi(argv[2]));
        setenv("HOOP_HOSTID", id, 1);
    }
    hoop_result_t rc = hoop_init_from_env(&w);
    if (rc != HOOP_OK) {
        printf("FAIL init: %s\n", test_code_name(rc));
        return 1;
    }
    if (argc == 2 && strcmp(argv[1], "--abort-after-split") == 0) return abort_after_split(w);
    int r = hoop_comm_rank(w), n = hoop_comm_size(w), bad = 0;
    rc = hoop_comm_split(w, r % 2, r, &eo);
    if (rc == HOOP_OK) rc = hoop_comm_split(w, 0, n - 1 - r, &rev);
    if (rc != HOOP_OK) {
        printf("FAIL split rank %d: %s: %s\n", r, test_code_name(rc), hoop_comm_last_error(w));
        return 1;
    }
    if (hoop_comm_rank(eo) != r / 2 || hoop_comm_rank(rev) != n - 1 - r) {
        printf("FAIL rank %d: new ranks %d and %d\n", r, hoop_comm_rank(eo), hoop_comm_rank(rev));
        bad = 1;
    }
    bad |= check(eo, r % 2 ? "odd" : "even", 1);
    bad |= check(rev, "reversed", 2);
    bad |= check(w, "world", 3);
    hoop_comm_destroy(eo);
    hoop_comm_destroy(rev);
    hoop_comm_destroy(w);
    return bad;
}
