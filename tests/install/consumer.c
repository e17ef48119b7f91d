/*
 * A program that knows hoop only through its installed header and pkg-config: every collective once
 * on int32 data with closed-form expected values, then a split. Prints "rank R: ok" on success.
 * With --version it prints hoop_version() and exits.
 */
#include <hoop.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define K 5 /* elements per rank */

static int failures;

static void expect(int rank, const char *what, const int32_t *got, const int32_t *want, int n)
{
    for (int i = 0; i < n; i++) {
        if (got[i] != want[i]) {
            printf("rank %d: %s: element %d is %d, expected %d\n", rank, what, i, (int)got[i],
                   (int)want[i]);
            failures++;
            return;
        }
    }
}

static int ok(hoop_comm_t *c, const char *what, hoop_result_t e)
{
    if (e == HOOP_OK) return 1;
    printf("%s failed: %s: %s\n", what, hoop_error_string(e), c ? hoop_comm_last_error(c) : "");
    failures++;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        printf("%s\n", hoop_version());
        return 0;
    }
    hoop_comm_t *c = NULL;
    if (!ok(NULL, "hoop_init", hoop_init(&c, NULL, -1, -1))) return 1;
    int r = hoop_comm_rank(c), n = hoop_comm_size(c);
    int32_t *in = calloc((size_t)(n * K), sizeof *in), *out = calloc((size_t)(n * K), sizeof *out),
            *want = calloc((size_t)(n * K), sizeof *want);
    if (!in || !out || !want) return 1;

    /* allreduce: sum over q of (q + i) */
    for (int i = 0; i < K; i++) in[i] = r + i;
    for (int i = 0; i < K; i++) want[i] = n * i + n * (n - 1) / 2;
    if (ok(c, "allreduce", hoop_allreduce(c, in, out, K, HOOP_INT32, HOOP_SUM)))
        expect(r, "allreduce", out, want, K);

    /* broadcast from the last rank */
    for (int i = 0; i < K; i++) out[i] = r == n - 1 ? 100 + i : -1;
    for (int i = 0; i < K; i++) want[i] = 100 + i;
    if (ok(c, "broadcast", hoop_broadcast(c, out, K, HOOP_INT32, n - 1)))
        expect(r, "broadcast", out, want, K);

    /* reduce (max) to rank 0 */
    for (int i = 0; i < K; i++) in[i] = 10 * r + i;
    for (int i = 0; i < K; i++) want[i] = 10 * (n - 1) + i;
    if (ok(c, "reduce", hoop_reduce(c, in, out, K, HOOP_INT32, HOOP_MAX, 0)) && r == 0)
        expect(r, "reduce", out, want, K);

    /* allgather and gather (to the last rank) of r*K + i: the result counts up from 0 */
    for (int i = 0; i < K; i++) in[i] = r * K + i;
    for (int j = 0; j < n * K; j++) want[j] = j;
    if (ok(c, "allgather", hoop_allgather(c, in, out, K, HOOP_INT32)))
        expect(r, "allgather", out, want, n * K);
    memset(out, 0, (size_t)(n * K) * sizeof *out);
    if (ok(c, "gather", hoop_gather(c, in, out, K, HOOP_INT32, n - 1)) && r == n - 1)
        expect(r, "gather", out, want, n * K);

    /* scatter from rank 0 of 3j */
    for (int j = 0; j < n * K; j++) in[j] = 3 * j;
    for (int i = 0; i < K; i++) want[i] = 3 * (r * K + i);
    if (ok(c, "scatter", hoop_scatter(c, in, out, K, HOOP_INT32, 0)))
        expect(r, "scatter", out, want, K);

    /* reduce_scatter (sum) of j + q: block r holds n * (r*K + i) + n(n-1)/2 */
    for (int j = 0; j < n * K; j++) in[j] = j + r;
    for (int i = 0; i < K; i++) want[i] = n * (r * K + i) + n * (n - 1) / 2;
    if (ok(c, "reduce_scatter", hoop_reduce_scatter(c, in, out, K, HOOP_INT32, HOOP_SUM)))
        expect(r, "reduce_scatter", out, want, K);

    /* alltoall: block q of rank r carries 1000 r + q K + i */
    for (int j = 0; j < n * K; j++) in[j] = 1000 * r + j;
    for (int q = 0; q < n; q++)
        for (int i = 0; i < K; i++) want[q * K + i] = 1000 * q + r * K + i;
    if (ok(c, "alltoall", hoop_alltoall(c, in, out, K, HOOP_INT32)))
        expect(r, "alltoall", out, want, n * K);

    ok(c, "barrier", hoop_barrier(c));

    /* a ring of nonblocking send/recv */
    hoop_request_t *rq[2] = {NULL, NULL};
    for (int i = 0; i < K; i++) in[i] = 7 * r + i;
    for (int i = 0; i < K; i++) want[i] = 7 * ((r + n - 1) % n) + i;
    if (ok(c, "irecv", hoop_irecv(c, out, K, HOOP_INT32, (r + n - 1) % n, &rq[0])) &&
        ok(c, "isend", hoop_isend(c, in, K, HOOP_INT32, (r + 1) % n, &rq[1]))) {
        int good = ok(c, "wait recv", hoop_wait(rq[0]));
        good &= ok(c, "wait send", hoop_wait(rq[1]));
        if (good) expect(r, "send/recv", out, want, K);
    }

    /* split into even and odd ranks, then an allreduce (avg) in place on each half */
    hoop_comm_t *half = NULL;
    if (ok(c, "split", hoop_comm_split(c, r % 2, r, &half)) && half) {
        int hn = hoop_comm_size(half);
        int32_t v[1] = {r};
        int32_t sum = 0;
        for (int q = r % 2; q < n; q += 2) sum += q;
        int32_t w[1] = {sum / hn};
        hoop_request_t *rq2 = NULL;
        if (ok(half, "iallreduce", hoop_iallreduce(half, v, v, 1, HOOP_INT32, HOOP_AVG, &rq2)) &&
            ok(half, "wait", hoop_wait(rq2)))
            expect(r, "split allreduce", v, w, 1);
        hoop_comm_destroy(half);
    }

    hoop_comm_destroy(c);
    free(in);
    free(out);
    free(want);
    if (failures) return 1;
    printf("rank %d: ok\n", r);
    return 0;
}
