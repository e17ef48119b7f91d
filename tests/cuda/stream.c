/* Stream-ordered calls (hoop_comm_set_stream), run as every rank under hooprun with a CUDA module
 * (the test double here, libhoop-cuda.so on a GPU):
 *
 *   stream MODULE ordered    each round closes a gate on the test's stream (the stream waits for
 *                            a word in pinned memory that only this test sets), queues there
 *                            the copy of the inputs to the device, posts the call ordered on
 *                            the stream, queues the copy of the result back, and only then
 *                            opens the gate and waits for the stream. The call must have
 *                            returned with the gate still closed (neither the host thread nor
 *                            the stream was waited for), must have read the inputs the stream
 *                            wrote (it started after them) and the copy back must see its
 *                            result (the stream waited for it). All-reduce (blocking and
 *                            nonblocking), broadcast, all-gather, send/recv; counts 1 to 65537.
 *   stream MODULE unordered  the control: the same rounds without a stream set, so that the
 *                            call reads its inputs before the gated copy wrote them; the test
 *                            passes only if it sees wrong results, proving that the rounds
 *                            above would catch a missing synchronization.
 *                            Last, hoop_comm_destroy right after such a call, with its stream
 *                            still gated: the call must end, right, before the communicator goes.
 *   stream MODULE reuse      a device buffer freed and another allocated at the same address
 *                            between stream-ordered calls: each call reads the new one's data.
 *   stream MODULE group      a ring ordered on the test's stream: every rank receives from its
 *                            left, then sends to its right (nonblocking, then blocking), inside
 *                            hoop_group_start/end. Without the group each rank's receive would
 *                            hold its stream, and with it the send after it, on every rank.
 *   stream MODULE legacy     no stream set: the gate closes on the legacy default stream, the
 *                            inputs' copy is queued there, and a thread opens the gate 30 ms
 *                            later. A call without a stream must start after the work queued
 *                            on the legacy stream, so it must read those inputs, and a
 *                            blocking one returns only after the gate opened. (The test double
 *                            has a legacy stream that runs late only under
 *                            HOOP_CUDA_DOUBLE_LEGACY=async.)
 * Exit 0 when every check held. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devbuf.h"
#include "hoop.h"
#include "../common/testing.h"

static int rank, size, wrong_rounds;

static const hoop_cuda_module_t *mod;
static void *stream;
static uint32_t *gate; /* pinned: the stream waits for it to reach the round's number */
static uint32_t round_no;

/* A late opener: if a call blocked the host until its stream moved on, the gate opens anyway
 * after 2 s, and the call is seen to have returned after it. */
static void *late_open(void *arg)
{
    uint32_t want = *(uint32_t *)arg;
    for (int ms = 0; ms < 2000; ms++) {
        if ((int32_t)(__atomic_load_n(gate, __ATOMIC_ACQUIRE) - want) >= 0) return NULL;
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    __atomic_store_n(gate, want, __ATOMIC_RELEASE);
    return NULL;
}

static void *open_later(void *arg)
{
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    __atomic_store_n(gate, *(uint32_t *)arg, __ATOMIC_RELEASE);
    return NULL;
}

/* The gate closed on s (the test's stream, or NULL: the legacy default stream). */
static void close_gate_on(void *s)
{
    round_no++;
    if (mod->stream_wait_word(devbuf_ctx(), s, gate, round_no) != 0) {
        fprintf(stderr, "stream_wait_word: %s\n", mod->error(devbuf_ctx()));
        exit(1);
    }
}

static void close_gate(void) { close_gate_on(stream); }

static int gate_closed(void)
{
    return (int32_t)(__atomic_load_n(gate, __ATOMIC_ACQUIRE) - round_no) < 0;
}

static void open_gate(void) { __atomic_store_n(gate, round_no, __ATOMIC_RELEASE); }

enum { K_ALLREDUCE, K_IALLREDUCE, K_BROADCAST, K_ALLGATHER, K_SENDRECV, K_COUNT };
static const char *const kind_name[] = {"allreduce", "iallreduce", "broadcast", "allgather",
                                        "send/recv"};

/* Small integers in float32: exact sums in any order. */
static float input(int r, uint32_t round, size_t i)
{
    return (float)((r * 7 + (int)round * 3 + (int)(i % 101)) % 50);
}

/* Posts one call of kind on n elements; for send/recv, even ranks send to rank ^ 1 and odd ones
 * receive from it into dout. */
static hoop_result_t post_kind(hoop_comm_t *c, int kind, float *din, float *dout, size_t n,
                               hoop_request_t **req)
{
    int peer = rank ^ 1;
    switch (kind) {
    case K_ALLREDUCE: return hoop_allreduce(c, din, dout, n, HOOP_FLOAT32, HOOP_SUM);
    case K_IALLREDUCE: return hoop_iallreduce(c, din, dout, n, HOOP_FLOAT32, HOOP_SUM, req);
    case K_BROADCAST: return hoop_broadcast(c, din, n, HOOP_FLOAT32, size - 1);
    case K_ALLGATHER: return hoop_allgather(c, din, dout, n, HOOP_FLOAT32);
    default:
        if (peer >= size) return HOOP_OK;
        return rank % 2 == 0 ? hoop_send(c, din, n, HOOP_FLOAT32, peer)
                             : hoop_recv(c, dout, n, HOOP_FLOAT32, peer);
    }
}

/* The elements of hout (out_n of them) that are not what kind gives on n elements this round:
 * how many, and the first (its index, value and the value expected). */
static size_t count_wrong(int kind, size_t n, const float *hout, size_t out_n, size_t *first,
                          float *got, float *exp)
{
    int peer = rank ^ 1;
    size_t bad = 0;
    for (size_t i = 0; i < out_n; i++) {
        float e;
        if (kind == K_ALLREDUCE || kind == K_IALLREDUCE) {
            e = 0;
            for (int r = 0; r < size; r++) e += input(r, round_no, i);
        } else if (kind == K_BROADCAST) {
            e = input(size - 1, round_no, i);
        } else if (kind == K_ALLGATHER) {
            e = input((int)(i / n), round_no, i % n);
        } else {
            e = peer >= size || rank % 2 == 0 ? -1.0f : input(peer, round_no, i);
        }
        if (hout[i] != e && bad++ == 0) {
            *first = i;
            *got = hout[i];
            *exp = e;
        }
    }
    return bad;
}

/* One round of kind on n elements; ordered: with the stream set. Returns 1 if the result was
 * right everywhere. */
static int one_round(hoop_comm_t *c, int kind, size_t n, int ordered)
{
    size_t out_n = kind == K_ALLGATHER ? n * (size_t)size : n;
    float *hin = malloc(n * sizeof(float)), *hout = malloc(out_n * sizeof(float));
    float *din = devbuf_alloc(n * sizeof(float)), *dout = devbuf_alloc(out_n * sizeof(float));
    for (size_t i = 0; i < n; i++) hin[i] = input(rank, round_no + 1, i);
    /* What the device buffers hold before: known values, so that a call that read them instead
     * of the stream's inputs shows. */
    float *junk = malloc(out_n * sizeof(float));
    for (size_t i = 0; i < out_n; i++) junk[i] = -1.0f;
    devbuf_copy(din, junk, n * sizeof(float));
    devbuf_copy(dout, junk, out_n * sizeof(float));

    close_gate();
    uint32_t want = round_no;
    pthread_t opener;
    pthread_create(&opener, NULL, late_open, &want);
    devbuf_copy_async(din, hin, n * sizeof(float), stream);
    hoop_request_t *req = NULL;
    hoop_result_t rc = post_kind(c, kind, din, dout, n, &req);
    int returned_closed = gate_closed();
    CHECK(rc == HOOP_OK, "%s of %zu: %s: %s", kind_name[kind], n, hoop_error_string(rc),
          hoop_comm_last_error(c));
    if (ordered)
        CHECK(returned_closed, "%s of %zu returned only after its stream moved on (it waited)",
              kind_name[kind], n);
    float *src = kind == K_BROADCAST ? din : dout;
    devbuf_copy_async(hout, src, out_n * sizeof(float), stream);
    open_gate();
    if (req != NULL) {
        rc = hoop_wait(req);
        CHECK(rc == HOOP_OK, "hoop_wait: %s", hoop_error_string(rc));
    }
    devbuf_sync(stream);
    pthread_join(opener, NULL);

    size_t first = 0;
    float got = 0, exp = 0;
    size_t bad = count_wrong(kind, n, hout, out_n, &first, &got, &exp);
    if (ordered)
        CHECK(bad == 0, "%s of %zu: %zu wrong element(s), first at %zu: %g, expected %g",
              kind_name[kind], n, bad, first, (double)got, (double)exp);
    devbuf_free(din);
    devbuf_free(dout);
    free(hin);
    free(hout);
    free(junk);
    return bad == 0;
}

static void *open_soon(void *arg)
{
    struct timespec ts = {0, 30 * 1000 * 1000};
    nanosleep(&ts, NULL);
    __atomic_store_n(gate, *(uint32_t *)arg, __ATOMIC_RELEASE);
    return NULL;
}

/* One round of kind on n elements through the legacy default stream (mode legacy). */
static void legacy_round(hoop_comm_t *c, int kind, size_t n)
{
    size_t out_n = kind == K_ALLGATHER ? n * (size_t)size : n;
    float *hin = malloc(n * sizeof(float)), *hout = malloc(out_n * sizeof(float));
    float *din = devbuf_alloc(n * sizeof(float)), *dout = devbuf_alloc(out_n * sizeof(float));
    float *junk = malloc(out_n * sizeof(float));
    for (size_t i = 0; i < n; i++) hin[i] = input(rank, round_no + 1, i);
    for (size_t i = 0; i < out_n; i++) junk[i] = -1.0f;
    devbuf_copy(din, junk, n * sizeof(float));
    devbuf_copy(dout, junk, out_n * sizeof(float));

    close_gate_on(NULL);
    uint32_t want = round_no;
    devbuf_copy_async(din, hin, n * sizeof(float), NULL);
    pthread_t opener;
    pthread_create(&opener, NULL, open_soon, &want);
    hoop_request_t *req = NULL;
    int peer = rank ^ 1;
    hoop_result_t rc = post_kind(c, kind, din, dout, n, &req);
    int returned_closed = gate_closed();
    CHECK(rc == HOOP_OK, "%s of %zu: %s: %s", kind_name[kind], n, hoop_error_string(rc),
          hoop_comm_last_error(c));
    if (req != NULL) {
        rc = hoop_wait(req);
        CHECK(rc == HOOP_OK, "hoop_wait: %s", hoop_error_string(rc));
    } else if (kind != K_SENDRECV || peer < size) { /* a rank without a peer posts nothing */
        /* A blocking call without a stream returns with its result in device memory, after
         * the work queued before it on the legacy stream: after the gate opened. */
        CHECK(!returned_closed, "%s of %zu returned before the legacy stream's work it must follow",
              kind_name[kind], n);
    }
    pthread_join(opener, NULL);
    devbuf_copy_async(hout, kind == K_BROADCAST ? din : dout, out_n * sizeof(float), NULL);
    devbuf_sync(NULL);
    size_t first = 0;
    float got = 0, exp = 0;
    size_t bad = count_wrong(kind, n, hout, out_n, &first, &got, &exp);
    CHECK(bad == 0,
          "%s of %zu after the legacy stream: %zu wrong element(s), first at %zu: %g, "
          "expected %g",
          kind_name[kind], n, bad, first, (double)got, (double)exp);
    devbuf_free(din);
    devbuf_free(dout);
    free(hin);
    free(hout);
    free(junk);
}

/* Mode group: a ring of receive-then-send ordered on the stream, in a group. */
static void group_rounds(hoop_comm_t *c)
{
    static const size_t counts[] = {1, 7, 1031, 65537};
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    for (int blocking = 0; blocking < 2; blocking++)
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
            size_t n = counts[k];
            round_no++;
            float *hin = malloc(n * sizeof(float)), *hout = malloc(n * sizeof(float));
            float *din = devbuf_alloc(n * sizeof(float)), *dout = devbuf_alloc(n * sizeof(float));
            for (size_t i = 0; i < n; i++) {
                hin[i] = input(rank, round_no, i);
                hout[i] = -1.0f;
            }
            devbuf_copy(dout, hout, n * sizeof(float));
            devbuf_copy_async(din, hin, n * sizeof(float), stream);
            hoop_request_t *rr = NULL, *rs = NULL;
            hoop_result_t a, b, g;
            CHECK(hoop_group_start(c) == HOOP_OK, "hoop_group_start");
            if (blocking) {
                a = hoop_recv(c, dout, n, HOOP_FLOAT32, left);
                b = hoop_send(c, din, n, HOOP_FLOAT32, right);
            } else {
                a = hoop_irecv(c, dout, n, HOOP_FLOAT32, left, &rr);
                b = hoop_isend(c, din, n, HOOP_FLOAT32, right, &rs);
            }
            g = hoop_group_end(c);
            CHECK(a == HOOP_OK && b == HOOP_OK && g == HOOP_OK, "group of %zu: %s / %s / %s: %s", n,
                  hoop_error_string(a), hoop_error_string(b), hoop_error_string(g),
                  hoop_comm_last_error(c));
            devbuf_copy_async(hout, dout, n * sizeof(float), stream);
            if (rr != NULL)
                CHECK(hoop_wait(rr) == HOOP_OK, "wait irecv: %s", hoop_comm_last_error(c));
            if (rs != NULL)
                CHECK(hoop_wait(rs) == HOOP_OK, "wait isend: %s", hoop_comm_last_error(c));
            devbuf_sync(stream);
            size_t bad = 0;
            for (size_t i = 0; i < n; i++) bad += hout[i] != input(left, round_no, i);
            CHECK(bad == 0, "group %s ring of %zu: %zu wrong element(s)",
                  blocking ? "blocking" : "nonblocking", n, bad);
            devbuf_free(din);
            devbuf_free(dout);
            free(hin);
            free(hout);
        }
    /* An end without a start is refused, and the communicator goes on. */
    CHECK(hoop_group_end(c) == HOOP_ERR_INVALID_ARGUMENT, "hoop_group_end without a start");
}

/* A freed buffer's address given to a new one between ordered calls: the calls read what the
 * new one holds. */
static void reuse_rounds(hoop_comm_t *c)
{
    for (int round = 0; round < 8; round++) {
        size_t n = 1031 + (size_t)round * 97;
        float *d = devbuf_alloc(n * sizeof(float));
        float *h = malloc(n * sizeof(float)), *o = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) h[i] = input(rank, (uint32_t)round, i);
        devbuf_copy_async(d, h, n * sizeof(float), stream);
        hoop_result_t rc = hoop_allreduce(c, d, d, n, HOOP_FLOAT32, HOOP_SUM);
        CHECK(rc == HOOP_OK, "allreduce: %s", hoop_comm_last_error(c));
        devbuf_copy_async(o, d, n * sizeof(float), stream);
        devbuf_sync(stream);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            float e = 0;
            for (int r = 0; r < size; r++) e += input(r, (uint32_t)round, i);
            bad += o[i] != e;
        }
        CHECK(bad == 0, "reuse round %d: %zu wrong element(s) of %zu", round, bad, n);
        devbuf_free(d); /* the next round's buffer may get the same address */
        free(h);
        free(o);
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: stream MODULE ordered|unordered|reuse|group|legacy\n");
        return 2;
    }
    char err[512];
    if (devbuf_open(argv[1], err, sizeof err) != 0) {
        fprintf(stderr, "stream: %s: %s\n", argv[1], err);
        return strstr(err, "device") != NULL ? 77 : 1;
    }
    mod = devbuf_module();
    const char *mode = argv[2];
    hoop_comm_t *c;
    hoop_result_t rc = hoop_init_from_env(&c);
    if (rc != HOOP_OK) {
        fprintf(stderr, "stream: hoop_init_from_env: %s\n", hoop_error_string(rc));
        return 1;
    }
    rank = test_rank = hoop_comm_rank(c);
    size = hoop_comm_size(c);
    stream = devbuf_stream();
    gate = mod->host_alloc(devbuf_ctx(), sizeof *gate);
    *gate = 0;
    int ordered = strcmp(mode, "unordered") != 0 && strcmp(mode, "legacy") != 0;
    if (ordered) {
        hoop_comm_set_stream(c, stream);
        CHECK(hoop_comm_get_stream(c) == stream, "hoop_comm_get_stream");
    }
    int rounds = 0;
    if (!strcmp(mode, "reuse")) {
        reuse_rounds(c);
    } else if (!strcmp(mode, "group")) {
        group_rounds(c);
    } else if (!strcmp(mode, "legacy")) {
        static const size_t counts[] = {1, 7, 1031, 65537};
        for (int kind = 0; kind < K_COUNT; kind++)
            for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
                legacy_round(c, kind, counts[k]);
    } else {
        static const size_t counts[] = {1, 7, 1031, 65537};
        for (int kind = 0; kind < K_COUNT; kind++)
            for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
                wrong_rounds += !one_round(c, kind, counts[k], ordered);
                rounds++;
            }
    }
    /* The stream-ordered calls are all done (the stream was waited for); a last host call. */
    hoop_comm_set_stream(c, NULL);
    rc = hoop_barrier(c);
    CHECK(rc == HOOP_OK, "barrier: %s", hoop_comm_last_error(c));
    /* Unordered, every round is wrong but a send/recv one on a rank that receives nothing. */
    if (!ordered)
        CHECK(wrong_rounds >= rounds - 4,
              "without a stream set, every call read its inputs before the stream wrote them, "
              "yet %d of %d rounds came out right: the test could not catch a missing "
              "synchronization",
              rounds - wrong_rounds, rounds);
    if (!ordered && wrong_rounds > 0)
        printf("rank %d: without the stream set, %d of %d rounds were wrong, as they must be\n",
               rank, wrong_rounds, rounds);
    if (!strcmp(mode, "ordered")) {
        /* hoop_comm_destroy right after a call that returned once queued, its stream still
         * closed: the call must end first (the gate opens 100 ms later), and right. */
        hoop_comm_set_stream(c, stream);
        size_t n = 4099;
        float *h = malloc(n * sizeof(float)), *o = malloc(n * sizeof(float));
        float *d = devbuf_alloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) h[i] = input(rank, 777, i);
        close_gate();
        uint32_t want = round_no;
        devbuf_copy_async(d, h, n * sizeof(float), stream);
        rc = hoop_allreduce(c, d, d, n, HOOP_FLOAT32, HOOP_SUM);
        CHECK(rc == HOOP_OK, "allreduce before destroy: %s", hoop_comm_last_error(c));
        devbuf_copy_async(o, d, n * sizeof(float), stream);
        pthread_t opener;
        pthread_create(&opener, NULL, open_later, &want);
        rc = hoop_comm_destroy(c);
        CHECK(rc == HOOP_OK, "destroy: %s", hoop_error_string(rc));
        devbuf_sync(stream);
        pthread_join(opener, NULL);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            float e = 0;
            for (int r = 0; r < size; r++) e += input(r, 777, i);
            bad += o[i] != e;
        }
        CHECK(bad == 0, "the call queued before hoop_comm_destroy: %zu wrong element(s)", bad);
        devbuf_free(d);
        free(h);
        free(o);
    } else {
        rc = hoop_comm_destroy(c);
        CHECK(rc == HOOP_OK, "destroy: %s", hoop_error_string(rc));
    }
    mod->host_free(devbuf_ctx(), gate);
    mod->stream_destroy(devbuf_ctx(), stream);
    printf("rank %d: %s: %s\n", rank, mode, test_failures ? "FAILED" : "ok");
    return test_failures ? 1 : 0;
}
