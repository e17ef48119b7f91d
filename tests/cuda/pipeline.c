/* The staging's pipelining (src/runtime/stage.c), run as every rank under hooprun with the CUDA
 * runtime test double, whose streams delay each operation at random:
 *
 *   pipeline DOUBLE [p2p]
 *
 * Ring all-reduces of device buffers cut into many chunks (the test's environment sets
 * HOOP_ALGO=ring and a small HOOP_CHUNK_BYTES), in and out of place, float32 and int32 sums of
 * inputs whose sums are exact in any order; every byte of every rank's result is compared with the
 * sum computed here from every rank's inputs. Then the double's counts of asynchronous copies
 * (hoop_cuda_double_copy_stats) must show the overlap, as facts rather than timings:
 *   - two or more device-to-host copies in flight at once: a step's sends were queued on the copy
 *     stream together, none waiting for the one before to reach the network;
 *   - two or more host-to-device copies in flight at once: the transport completed a receive
 *     while the copy of an earlier one to the device was still running;
 *   - copies to the device queued while copies to host memory were in flight: a receive's copy
 *     is queued only once the transport has completed it, so the network completed a receive
 *     while a send's copy was still pending.
 * Staging with synchronous copies queues no asynchronous copy at all and test_failures all three.
 *
 * p2p: point-to-point requests instead, each rank posting P nonblocking sends of device buffers
 * to the next rank and P receives from the one before, then waiting for them all; every byte
 * checked, and the counts must show two or more sends copied out at once (the requests' copies
 * queued as they were posted, none waiting for the one before) and copies in queued too.
 * Exit 0 when every check held. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf.h"
#include "hoop.h"
#include "../common/testing.h"

static int rank, size;

/* Rank r's element i in round k: small integers, so that float32 sums are exact too. */
static int32_t value(int r, int k, size_t i) { return (int32_t)((r * 7 + k * 3 + i % 977) % 500); }

static void fill(void *h, hoop_dtype_t dt, int r, int k, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (dt == HOOP_FLOAT32)
            ((float *)h)[i] = (float)value(r, k, i);
        else
            ((int32_t *)h)[i] = value(r, k, i) - 250; /* negative ones too */
    }
}

/* One all-reduce of n elements of dt, in place or not; 1 if every byte was right. */
static int one(hoop_comm_t *c, hoop_dtype_t dt, size_t n, int k, int in_place)
{
    size_t bytes = n * 4;
    char *hin = malloc(bytes ? bytes : 1), *want = malloc(bytes ? bytes : 1),
         *got = malloc(bytes ? bytes : 1), *tmp = malloc(bytes ? bytes : 1);
    memset(want, 0, bytes ? bytes : 1);
    for (int r = 0; r < size; r++) {
        fill(tmp, dt, r, k, n);
        for (size_t i = 0; i < n; i++) {
            if (dt == HOOP_FLOAT32)
                ((float *)want)[i] += ((float *)tmp)[i];
            else
                ((int32_t *)want)[i] += ((int32_t *)tmp)[i];
        }
    }
    fill(hin, dt, rank, k, n);
    void *din = devbuf_alloc(bytes), *dout = in_place ? din : devbuf_alloc(bytes);
    devbuf_copy(din, hin, bytes);
    if (!in_place) {
        memset(tmp, 0xa5, bytes ? bytes : 1); /* what the result must overwrite */
        devbuf_copy(dout, tmp, bytes);
    }
    hoop_result_t rc = hoop_allreduce(c, din, dout, n, dt, HOOP_SUM);
    CHECK(rc == HOOP_OK, "allreduce of %zu %s: %s", n, hoop_dtype_name(dt),
          hoop_comm_last_error(c));
    devbuf_copy(got, dout, bytes);
    size_t bad = 0, first = 0;
    for (size_t i = n; i-- > 0;)
        if (memcmp(got + i * 4, want + i * 4, 4) != 0) {
            bad++;
            first = i;
        }
    CHECK(bad == 0, "allreduce of %zu %s (%s), round %d: %zu wrong element(s), the first at %zu", n,
          hoop_dtype_name(dt), in_place ? "in place" : "out of place", k, bad, first);
    if (!in_place) devbuf_free(dout);
    devbuf_free(din);
    free(hin);
    free(want);
    free(got);
    free(tmp);
    return rc == HOOP_OK && bad == 0;
}

/* Rank r's byte i of message m. */
static unsigned char pbyte(int r, int m, size_t i) { return (unsigned char)(r * 31 + m * 7 + i); }

enum { P = 8 };

/* The p2p mode's round of P messages of n bytes each way; returns how many arrived intact. */
static int p2p_round(hoop_comm_t *c, size_t n)
{
    void *sd[P], *rd[P];
    hoop_request_t *req[2 * P];
    unsigned char *h = malloc(n);
    int ok = 0;
    for (int m = 0; m < P; m++) {
        for (size_t i = 0; i < n; i++) h[i] = pbyte(rank, m, i);
        sd[m] = devbuf_alloc(n);
        rd[m] = devbuf_alloc(n);
        devbuf_copy(sd[m], h, n);
    }
    for (int m = 0; m < P; m++) {
        hoop_result_t rc = hoop_irecv(c, rd[m], n, HOOP_UINT8, (rank + size - 1) % size,
                                      &req[P + m]);
        CHECK(rc == HOOP_OK, "irecv: %s", hoop_comm_last_error(c));
    }
    for (int m = 0; m < P; m++) {
        hoop_result_t rc = hoop_isend(c, sd[m], n, HOOP_UINT8, (rank + 1) % size, &req[m]);
        CHECK(rc == HOOP_OK, "isend: %s", hoop_comm_last_error(c));
    }
    for (int k = 0; k < 2 * P; k++) {
        hoop_result_t rc = hoop_wait(req[k]);
        CHECK(rc == HOOP_OK, "wait %d: %s", k, hoop_comm_last_error(c));
    }
    int from = (rank + size - 1) % size;
    for (int m = 0; m < P; m++) {
        devbuf_copy(h, rd[m], n);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += h[i] != pbyte(from, m, i);
        CHECK(bad == 0, "message %d of %zu bytes from rank %d: %zu wrong byte(s)", m, n, from, bad);
        ok += bad == 0;
        devbuf_free(sd[m]);
        devbuf_free(rd[m]);
    }
    free(h);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: pipeline DOUBLE [p2p]\n");
        return 2;
    }
    char err[512];
    if (devbuf_open(argv[1], err, sizeof err) != 0) {
        fprintf(stderr, "pipeline: %s: %s\n", argv[1], err);
        return 1;
    }
    void (*stats)(long *, long *, long *) = (void (*)(long *, long *, long *))dlsym(
        dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD), "hoop_cuda_double_copy_stats");
    if (stats == NULL) {
        fprintf(stderr, "pipeline: %s has no hoop_cuda_double_copy_stats\n", argv[1]);
        return 1;
    }
    hoop_comm_t *c;
    hoop_result_t rc = hoop_init_from_env(&c);
    if (rc != HOOP_OK) {
        fprintf(stderr, "pipeline: hoop_init_from_env: %s\n", hoop_error_string(rc));
        return 1;
    }
    rank = test_rank = hoop_comm_rank(c);
    size = hoop_comm_size(c);
    int p2p = argc > 2 && strcmp(argv[2], "p2p") == 0;
    /* Large counts span several chunks per ring segment; the small ones one chunk, or less. */
    static const size_t counts[] = {300007, 1, 1031, 123457};
    int calls = 0, right = 0;
    for (int k = 0; k < 3 && p2p; k++) {
        right += p2p_round(c, k == 1 ? 1 : (size_t)65537 * (size_t)(k + 1));
        calls += P;
    }
    for (int k = 0; k < 3 && !p2p; k++)
        for (size_t j = 0; j < sizeof counts / sizeof counts[0]; j++) {
            hoop_dtype_t dt = (k + (int)j) % 2 ? HOOP_INT32 : HOOP_FLOAT32;
            right += one(c, dt, counts[j], k, (int)j % 2);
            calls++;
        }
    rc = hoop_barrier(c);
    CHECK(rc == HOOP_OK, "barrier: %s", hoop_comm_last_error(c));
    long d2h = 0, h2d = 0, crossed = 0;
    stats(&d2h, &h2d, &crossed);
    printf("rank %d: %d of %d %s right; at most %ld device-to-host and %ld host-to-device "
           "copies in flight at once, %ld copies queued while the other direction had one in "
           "flight\n",
           rank, right, calls, p2p ? "messages" : "all-reduces", d2h, h2d, crossed);
    CHECK(d2h >= 2,
          "at most %ld device-to-host copy in flight at once: the sends were not "
          "copied ahead of the network",
          d2h);
    CHECK(h2d >= (p2p ? 1 : 2),
          "at most %ld host-to-device copy in flight at once: no receive completed "
          "while another was being copied to the device",
          h2d);
    CHECK(p2p || crossed >= 1,
          "no copy to the device was queued while a copy to host memory was in "
          "flight: the network never completed a receive while a send was copied");
    rc = hoop_comm_destroy(c);
    CHECK(rc == HOOP_OK, "destroy: %s", hoop_error_string(rc));
    printf("rank %d: pipeline: %s\n", rank, test_failures ? "FAILED" : "ok");
    return test_failures ? 1 : 0;
}
