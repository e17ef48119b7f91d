/*
 * Overlapping placements of device buffers, run as every rank under hooprun:
 *
 *   hooprun -n N placement MODULE
 *
 * The collective suite passes in place only in the usual conventions; the library also takes
 * other overlaps, which the CUDA IPC path (and staging) must not corrupt: a reduce-scatter whose
 * output starts inside its input at an offset that is neither 0 nor rank * count (so each chunk's
 * result lands on input not yet read), an all-gather whose input lies in its output at another
 * rank's block, half a block off. Every case runs at sizes that
 * take one chunk and many, on int32 (exact), against a reference each rank computes alone.
 * Exit 0 when every check held.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf.h"
#include "hoop.h"
#include "../common/testing.h"

static int rank, size;

static int32_t val(int q, size_t i, int salt)
{
    return (int32_t)((q + 1) * 1000003 + (int)i * 7 + salt);
}

/* Reduce-scatter of n per rank with the output at in + shift elements. */
static void reduce_scatter(hoop_comm_t *c, size_t n, size_t shift)
{
    size_t total = n * (size_t)size, span = total + shift + n;
    int32_t *h = malloc(span * 4), *d = devbuf_alloc(span * 4);
    for (size_t i = 0; i < span; i++) h[i] = -1;
    for (size_t i = 0; i < total; i++) h[i] = val(rank, i, 1);
    devbuf_copy(d, h, span * 4);
    hoop_result_t rc = hoop_reduce_scatter(c, d, d + shift, n, HOOP_INT32, HOOP_SUM);
    CHECK(rc == HOOP_OK, "reduce_scatter n=%zu shift=%zu: %s: %s", n, shift, hoop_error_string(rc),
          hoop_comm_last_error(c));
    devbuf_copy(h, d, span * 4);
    size_t bad = 0;
    for (size_t i = 0; i < n && rc == HOOP_OK; i++) {
        uint32_t want = 0;
        for (int q = 0; q < size; q++) want += (uint32_t)val(q, (size_t)rank * n + i, 1);
        bad += (uint32_t)h[shift + i] != want;
    }
    CHECK(bad == 0, "reduce_scatter n=%zu shift=%zu: %zu wrong elements", n, shift, bad);
    devbuf_free(d);
    free(h);
}

/* All-gather of n per rank with the input at block b of the output, plus half a block. */
static void allgather(hoop_comm_t *c, size_t n, int b)
{
    size_t total = n * (size_t)size, at = (size_t)b * n + n / 2;
    int32_t *h = malloc((total + n) * 4), *d = devbuf_alloc((total + n) * 4);
    for (size_t i = 0; i < total + n; i++) h[i] = -1;
    for (size_t i = 0; i < n; i++) h[at + i] = val(rank, i, 2);
    devbuf_copy(d, h, (total + n) * 4);
    hoop_result_t rc = hoop_allgather(c, d + at, d, n, HOOP_INT32);
    CHECK(rc == HOOP_OK, "allgather n=%zu input at %zu: %s: %s", n, at, hoop_error_string(rc),
          hoop_comm_last_error(c));
    devbuf_copy(h, d, (total + n) * 4);
    size_t bad = 0;
    for (size_t i = 0; i < total && rc == HOOP_OK; i++) bad += h[i] != val((int)(i / n), i % n, 2);
    CHECK(bad == 0, "allgather n=%zu input at %zu: %zu wrong elements", n, at, bad);
    devbuf_free(d);
    free(h);
}

int main(int argc, char **argv)
{
    char err[512];
    if (argc != 2) {
        fprintf(stderr, "usage: placement MODULE\n");
        return 2;
    }
    if (devbuf_open(argv[1], err, sizeof err) != 0) {
        printf("no CUDA device: %s\n", err);
        return 77;
    }
    hoop_comm_t *c;
    hoop_result_t rc = hoop_init(&c, "env://", -1, -1);
    if (rc != HOOP_OK) {
        fprintf(stderr, "hoop_init: %s\n", hoop_error_string(rc));
        return 1;
    }
    rank = test_rank = hoop_comm_rank(c);
    size = hoop_comm_size(c);
    /* One chunk, and many (the tests give small IPC areas and chunks). */
    static const size_t counts[] = {1, 7, 1031, 70001};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        size_t n = counts[k];
        reduce_scatter(c, n, n / 3 + 1);
        reduce_scatter(c, n, (size_t)size * n - 1);
        for (int b = 0; b < size; b++) allgather(c, n, b);
    }
    printf("rank %d: placement: %s\n", rank, test_failures == 0 ? "ok" : "FAILED");
    hoop_comm_destroy(c);
    return test_failures == 0 ? 0 : 1;
}
