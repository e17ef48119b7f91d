/*
 * Receives from any source (hoop_recv_any, hoop_irecv_any), as every rank of `hooprun -n N
 * anysource_test` (N >= 3, real processes over the transport HOOP_TRANSPORT picks):
 *
 * - fan-in: one rank receives every other rank's messages, of every dtype at sizes 0, 1, 7, 1031
 *   and 1 MiB + 3 elements (past every transport's eager limit; --large-count N changes the
 *   last), with blocking and nonblocking
 *   receives from any source; each message's bytes encode its sender, its round and each byte's
 *   offset, so that a receive checks the source it reports, and that every sender's messages
 *   arrive in its own order, whole;
 * - every rank in turn (as torch's test_send_recv_any_source): the rest send it two messages each;
 * - a receive from any source posted before a receive from rank 1 takes rank 1's first message
 *   and the other receive its second (a later receive never overtakes it);
 * - a collective posted after an unmatched receive from any source runs once it has matched, and
 *   gives the right sum;
 * - a send posted after an unmatched receive from any source goes on (the peer waits for it
 *   before it sends what the receive takes);
 * - nothing to receive: HOOP_ERR_TIMEOUT after the communicator's timeout, *source = -1, and the
 *   communicator still runs an all-reduce right;
 * - a send whose count differs from the receive's, with hoop_recv_any and with hoop_irecv_any
 *   (each on a communicator split for it): HOOP_ERR_MISMATCH with the sender in *source, a
 *   sentence that calls the receive a receive, and every rank's next call on it fails;
 * - bad arguments: a communicator of one rank (split), a NULL request.
 *
 * --device MODULE: the fan-in only, over device buffers of that CUDA module (the test double
 * tests/cuda/double, or libhoop-cuda.so on a GPU): the sender fills a host buffer and copies it
 * to the device before sending, the receiver copies each message back before checking it.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hoop.h"
#include "../common/testing.h"
#include "../cuda/devbuf.h"

static int rank_, size_;
static int device; /* --device: the fan-in's buffers are device memory */

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* The last is --large-count's (where the link is slow: the verbs test guest's emulated one). */
static size_t counts[] = {0, 1, 7, 1031, (1u << 20) + 3};
#define NCOUNTS (sizeof counts / sizeof counts[0])

/* Byte i of message `round` from src: differs between senders, rounds and offsets. */
static uint8_t pattern(int src, int round, size_t i)
{
    uint32_t v = (uint32_t)src * 2654435761u ^ (uint32_t)round * 40503u ^ (uint32_t)(i * 131u);
    return (uint8_t)(v ^ (v >> 11) ^ (v >> 23));
}

static void fill(uint8_t *b, size_t n, int src, int round)
{
    for (size_t i = 0; i < n; i++) b[i] = pattern(src, round, i);
}

/* The first wrong byte, or -1. */
static long first_wrong(const uint8_t *b, size_t n, int src, int round)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern(src, round, i)) return (long)i;
    return -1;
}

/* What round r of the fan-in moves: every dtype at every size, in an order both sides know. */
static hoop_dtype_t round_dtype(int r) { return (hoop_dtype_t)(r % HOOP_DTYPE_COUNT); }
static size_t round_count(int r) { return counts[(r / HOOP_DTYPE_COUNT) % NCOUNTS]; }
#define ROUNDS ((int)(HOOP_DTYPE_COUNT * NCOUNTS))

/* Checks a message of round r received from any source: its reported sender, and that it is
 * that sender's next message of the round (next[src]: how many of them came before). */
static void check_one(const uint8_t *buf, size_t bytes, int src, hoop_result_t rc, int r, int *next,
                      const char *how, hoop_comm_t *w)
{
    CHECK(rc == HOOP_OK, "%s round %d: %s: %s", how, r, test_code_name(rc),
          hoop_comm_last_error(w));
    CHECK(src >= 0 && src < size_ && src != rank_, "%s round %d: source %d", how, r, src);
    if (rc != HOOP_OK || src < 0 || src >= size_ || src == rank_) return;
    int k = next[src]++;
    CHECK(k < 2, "%s round %d: a third message from rank %d", how, r, src);
    long bad = first_wrong(buf, bytes, src, 2 * r + k);
    CHECK(bad < 0, "%s round %d (%zu bytes, %s) from rank %d, its message %d: byte %ld wrong", how,
          r, bytes, hoop_dtype_name(round_dtype(r)), src, k, bad);
}

/* Each round, every other rank sends `root` two messages (its own order: the receives must see
 * them in it) and root takes them from any source, blocking (nonblocking = 0) or all posted at
 * once. A barrier ends the round: messages of different sizes never meet one receive. */
static void fan_in(hoop_comm_t *w, int root, int nonblocking)
{
    const char *how = nonblocking ? "irecv_any" : "recv_any";
    size_t maxb = counts[NCOUNTS - 1] * 8;
    int nrecv = 2 * (size_ - 1);
    /* bufs: what is checked (host); the calls use dbufs, the same or device twins. */
    uint8_t **bufs = calloc((size_t)nrecv, sizeof *bufs);
    uint8_t **dbufs = calloc((size_t)nrecv, sizeof *dbufs);
    for (int i = 0; i < nrecv; i++) {
        bufs[i] = malloc(maxb);
        dbufs[i] = device ? devbuf_alloc(maxb) : bufs[i];
    }
    for (int r = 0; r < ROUNDS; r++) {
        hoop_dtype_t dt = round_dtype(r);
        size_t n = round_count(r), bytes = n * hoop_dtype_size(dt);
        if (rank_ != root) {
            hoop_request_t *q[2];
            for (int k = 0; k < 2; k++) {
                fill(bufs[k], bytes, rank_, 2 * r + k);
                if (device && bytes > 0) devbuf_copy(dbufs[k], bufs[k], bytes);
                CHECK(hoop_isend(w, dbufs[k], n, dt, root, &q[k]) == HOOP_OK, "isend round %d: %s",
                      r, hoop_comm_last_error(w));
            }
            for (int k = 0; k < 2; k++)
                CHECK(hoop_wait(q[k]) == HOOP_OK, "send round %d: %s", r, hoop_comm_last_error(w));
        } else {
            int next[64] = {0};
            hoop_request_t *req[128];
            int src[128];
            for (int i = 0; i < nrecv; i++) {
                memset(bufs[i], 0xee, bytes);
                if (device && bytes > 0) devbuf_copy(dbufs[i], bufs[i], bytes);
                hoop_result_t rc = nonblocking
                                       ? hoop_irecv_any(w, dbufs[i], n, dt, &src[i], &req[i])
                                       : hoop_recv_any(w, dbufs[i], n, dt, &src[i]);
                if (!nonblocking) {
                    if (device && bytes > 0) devbuf_copy(bufs[i], dbufs[i], bytes);
                    check_one(bufs[i], bytes, src[i], rc, r, next, how, w);
                } else {
                    CHECK(rc == HOOP_OK, "irecv_any round %d: %s", r, hoop_comm_last_error(w));
                }
            }
            /* Requests were matched in posting order: checked in that order too. */
            for (int i = 0; nonblocking && i < nrecv; i++) {
                hoop_result_t rc = hoop_wait(req[i]);
                if (device && bytes > 0) devbuf_copy(bufs[i], dbufs[i], bytes);
                check_one(bufs[i], bytes, src[i], rc, r, next, how, w);
            }
            for (int p = 0; p < size_; p++)
                CHECK(p == root || next[p] == 2, "%s round %d: %d messages from rank %d", how, r,
                      next[p], p);
        }
        CHECK(hoop_barrier(w) == HOOP_OK, "barrier after round %d: %s", r, hoop_comm_last_error(w));
    }
    for (int i = 0; i < nrecv; i++) {
        if (device) devbuf_free(dbufs[i]);
        free(bufs[i]);
    }
    free(bufs);
    free(dbufs);
}

/* As torch's test: each rank in turn receives twice from every other rank (once blocking, once
 * nonblocking), the others send it two messages. */
static void each_in_turn(hoop_comm_t *w)
{
    enum { N = 10 };
    for (int dst = 0; dst < size_; dst++) {
        int32_t buf[N];
        if (rank_ != dst) {
            for (int k = 0; k < 2; k++) {
                for (int i = 0; i < N; i++) buf[i] = rank_ * 1000 + k * 100 + i;
                CHECK(hoop_send(w, buf, N, HOOP_INT32, dst) == HOOP_OK, "send to %d: %s", dst,
                      hoop_comm_last_error(w));
            }
            continue;
        }
        int got[64] = {0};
        for (int m = 0; m < 2 * (size_ - 1); m++) {
            int src = -7;
            hoop_result_t rc;
            if (m % 2 == 0) {
                rc = hoop_recv_any(w, buf, N, HOOP_INT32, &src);
            } else {
                hoop_request_t *q;
                rc = hoop_irecv_any(w, buf, N, HOOP_INT32, &src, &q);
                if (rc == HOOP_OK) rc = hoop_wait(q);
            }
            CHECK(rc == HOOP_OK && src >= 0 && src < size_ && src != dst,
                  "receive %d at rank %d: %s, source %d: %s", m, dst, test_code_name(rc), src,
                  hoop_comm_last_error(w));
            if (rc != HOOP_OK || src < 0 || src >= size_) continue;
            int k = got[src]++;
            int ok = 1;
            for (int i = 0; i < N; i++) ok &= buf[i] == src * 1000 + k * 100 + i;
            CHECK(ok && k < 2, "receive %d at rank %d from %d: message %d wrong", m, dst, src, k);
        }
    }
    CHECK(hoop_barrier(w) == HOOP_OK, "barrier: %s", hoop_comm_last_error(w));
}

/* Rank 0: a receive from any source, then one from rank 1; rank 1 sends two messages, after a
 * pause so that both receives are posted first. */
static void no_overtaking(hoop_comm_t *w)
{
    uint8_t a[100], b[100];
    if (rank_ == 1) {
        sleep_s(0.2);
        fill(a, sizeof a, 1, 501);
        fill(b, sizeof b, 1, 502);
        CHECK(hoop_send(w, a, sizeof a, HOOP_UINT8, 0) == HOOP_OK, "send a");
        CHECK(hoop_send(w, b, sizeof b, HOOP_UINT8, 0) == HOOP_OK, "send b");
    } else if (rank_ == 0) {
        hoop_request_t *qa, *qb;
        int src = -7;
        CHECK(hoop_irecv_any(w, a, sizeof a, HOOP_UINT8, &src, &qa) == HOOP_OK, "irecv_any");
        CHECK(hoop_irecv(w, b, sizeof b, HOOP_UINT8, 1, &qb) == HOOP_OK, "irecv");
        hoop_result_t rb = hoop_wait(qb), ra = hoop_wait(qa);
        CHECK(ra == HOOP_OK && rb == HOOP_OK, "waits: %s %s: %s", test_code_name(ra),
              test_code_name(rb), hoop_comm_last_error(w));
        CHECK(src == 1, "any-source receive matched rank %d, not 1", src);
        CHECK(first_wrong(a, sizeof a, 1, 501) < 0, "the any-source receive did not get the first");
        CHECK(first_wrong(b, sizeof b, 1, 502) < 0, "the receive from 1 did not get the second");
    }
    CHECK(hoop_barrier(w) == HOOP_OK, "barrier: %s", hoop_comm_last_error(w));
}

/* Rank 0: irecv_any, then an all-reduce; the last rank sends (after a pause) before its own
 * all-reduce. Also a send rank 0 posts after the unmatched receive: rank 1 must get it first,
 * and only then does the last rank send. */
static void collective_after(hoop_comm_t *w)
{
    int last = size_ - 1;
    /* Large enough for the ring over TCP: rank 0's first receive is from the last rank, the one
     * whose send the earlier receive is to take. */
    enum { NX = 200003 };
    int64_t msg[5], token = 0, *x = malloc(NX * sizeof *x);
    hoop_request_t *q = NULL;
    int src = -7;
    if (rank_ == 0) {
        CHECK(hoop_irecv_any(w, msg, 5, HOOP_INT64, &src, &q) == HOOP_OK, "irecv_any");
        token = 77;
        CHECK(hoop_send(w, &token, 1, HOOP_INT64, 1) == HOOP_OK, "send past a held receive: %s",
              hoop_comm_last_error(w));
    } else if (rank_ == 1) {
        CHECK(hoop_recv(w, &token, 1, HOOP_INT64, 0) == HOOP_OK && token == 77, "token: %s",
              hoop_comm_last_error(w));
        CHECK(hoop_send(w, &token, 1, HOOP_INT64, last) == HOOP_OK, "token on");
    }
    if (rank_ == last) {
        CHECK(hoop_recv(w, &token, 1, HOOP_INT64, 1) == HOOP_OK && token == 77, "token at last");
        sleep_s(0.2);
        for (int i = 0; i < 5; i++) msg[i] = 900 + i;
        CHECK(hoop_send(w, msg, 5, HOOP_INT64, 0) == HOOP_OK, "send");
    }
    for (int i = 0; i < NX; i++) x[i] = rank_ * 10 + i % 7;
    hoop_result_t rc = hoop_allreduce(w, x, x, NX, HOOP_INT64, HOOP_SUM);
    int64_t ranks = (int64_t)size_ * (size_ - 1) / 2;
    long bad = -1;
    for (int i = 0; i < NX && bad < 0; i++)
        if (x[i] != 10 * ranks + (int64_t)size_ * (i % 7)) bad = i;
    CHECK(rc == HOOP_OK && bad < 0, "all-reduce after an any-source receive: %s, element %ld: %s",
          test_code_name(rc), bad, hoop_comm_last_error(w));
    free(x);
    if (rank_ == 0) {
        rc = hoop_wait(q);
        CHECK(rc == HOOP_OK && src == last && msg[0] == 900 && msg[4] == 904,
              "any-source receive before the all-reduce: %s, source %d", test_code_name(rc), src);
    }
    CHECK(hoop_barrier(w) == HOOP_OK, "barrier: %s", hoop_comm_last_error(w));
}

static void nothing_arrives(hoop_comm_t *w)
{
    double t = 2.0;
    hoop_comm_set_timeout(w, t);
    if (rank_ == 0) {
        int32_t v;
        int src = 5;
        double t0 = now_s();
        hoop_result_t rc = hoop_recv_any(w, &v, 1, HOOP_INT32, &src);
        double took = now_s() - t0;
        CHECK(rc == HOOP_ERR_TIMEOUT, "nothing to receive: %s", test_code_name(rc));
        CHECK(src == -1, "source after a timeout: %d", src);
        CHECK(took >= t * 0.9 && took < t + 5, "timed out after %.2f s (timeout %.1f s)", took, t);
        CHECK(strstr(hoop_comm_last_error(w), "any source") != NULL, "message: %s",
              hoop_comm_last_error(w));
    } else {
        sleep_s(t + 0.5);
    }
    hoop_comm_set_timeout(w, 30);
    int32_t x = rank_ + 1;
    hoop_result_t rc = hoop_allreduce(w, &x, &x, 1, HOOP_INT32, HOOP_SUM);
    CHECK(rc == HOOP_OK && x == size_ * (size_ + 1) / 2,
          "all-reduce after a receive timed out: %s: %s", test_code_name(rc),
          hoop_comm_last_error(w));
}

static void bad_arguments(hoop_comm_t *w)
{
    hoop_comm_t *one = NULL;
    hoop_result_t rc = hoop_comm_split(w, rank_, 0, &one);
    CHECK(rc == HOOP_OK, "split into ones: %s", hoop_comm_last_error(w));
    if (rc == HOOP_OK) {
        int src = 9;
        uint8_t b;
        rc = hoop_recv_any(one, &b, 1, HOOP_UINT8, &src);
        CHECK(rc == HOOP_ERR_INVALID_ARGUMENT && src == -1, "recv_any alone: %s, source %d",
              test_code_name(rc), src);
        CHECK(strstr(hoop_comm_last_error(one), "no other rank") != NULL, "message: %s",
              hoop_comm_last_error(one));
        hoop_comm_destroy(one);
    }
    uint8_t b;
    rc = hoop_irecv_any(w, &b, 1, HOOP_UINT8, NULL, NULL);
    CHECK(rc == HOOP_ERR_INVALID_ARGUMENT, "NULL request: %s", test_code_name(rc));
    CHECK(hoop_barrier(w) == HOOP_OK, "barrier: %s", hoop_comm_last_error(w));
}

/* On a communicator split from w for it, which the mismatch aborts. */
static void count_mismatch(hoop_comm_t *w, int nonblocking, int late)
{
    const char *how = nonblocking ? "hoop_irecv_any" : "hoop_recv_any";
    hoop_comm_t *c = NULL;
    if (hoop_comm_split(w, 0, rank_, &c) != HOOP_OK) {
        CHECK(0, "split for the count mismatch: %s", hoop_comm_last_error(w));
        return;
    }
    int32_t b[8] = {0};
    if (rank_ == 1) {
        if (late) sleep_s(0.05); /* the receive is posted, and held, before the send */
        hoop_result_t rc = hoop_send(c, b, 5, HOOP_INT32, 0);
        /* Delivered into the receiver's buffer, or failed by its abort: never anything else. */
        CHECK(rc == HOOP_OK || rc == HOOP_ERR_MISMATCH || rc == HOOP_ERR_ABORTED ||
                  rc == HOOP_ERR_PEER_LOST,
              "send of 5: %s", test_code_name(rc));
    } else if (rank_ == 0) {
        int src = -7;
        hoop_request_t *q = NULL;
        hoop_result_t rc = nonblocking ? hoop_irecv_any(c, b, 6, HOOP_INT32, &src, &q)
                                       : hoop_recv_any(c, b, 6, HOOP_INT32, &src);
        if (nonblocking && rc == HOOP_OK) rc = hoop_wait(q);
        const char *m = hoop_comm_last_error(c);
        CHECK(rc == HOOP_ERR_MISMATCH, "%s of 6 from a send of 5: %s", how, test_code_name(rc));
        /* It had matched rank 1's message before it failed on it. */
        CHECK(src == 1, "%s: source of the mismatched message: %d", how, src);
        /* The sender's call is a send, this rank's a receive. */
        CHECK(strstr(m, "rank 1 called send(count=5") != NULL &&
                  strstr(m, "rank 0 called recv(count=6") != NULL,
              "%s: the mismatch's sentence: %s", how, m);
    }
    hoop_result_t rc = hoop_barrier(c);
    CHECK(rc != HOOP_OK, "%s: the call after a mismatch succeeded", how);
    hoop_comm_destroy(c);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *module = NULL;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 < argc && strcmp(argv[i], "--large-count") == 0) {
            counts[NCOUNTS - 1] = strtoull(argv[i + 1], NULL, 10);
        } else if (i + 1 < argc && strcmp(argv[i], "--device") == 0) {
            module = argv[i + 1];
        } else {
            printf("usage: anysource_test [--large-count N] [--device MODULE]\n");
            return 2;
        }
    }
    if (module != NULL) {
        char err[512];
        if (devbuf_open(module, err, sizeof err) != 0) {
            printf("SKIP: %s\n", err);
            return 77;
        }
        device = 1;
    }
    hoop_comm_t *w = NULL;
    if (hoop_init_from_env(&w) != HOOP_OK) {
        printf("FAIL: hoop_init\n");
        return 1;
    }
    rank_ = test_rank = hoop_comm_rank(w);
    size_ = hoop_comm_size(w);
    if (size_ < 3 || size_ > 64) {
        printf("SKIP: run as 3 to 64 ranks (hooprun -n 3)\n");
        hoop_comm_destroy(w);
        return 77;
    }
    hoop_comm_set_timeout(w, 30);
    fan_in(w, 0, 0);
    fan_in(w, size_ - 1, 1);
    if (device) { /* the rest is host memory's, tested without --device */
        CHECK(hoop_barrier(w) == HOOP_OK, "final barrier: %s", hoop_comm_last_error(w));
        hoop_comm_destroy(w);
        printf("rank %d: %s\n", rank_, test_failures ? "FAILED" : "all checks passed");
        return test_failures != 0;
    }
    each_in_turn(w);
    no_overtaking(w);
    collective_after(w);
    nothing_arrives(w);
    bad_arguments(w);
    for (int late = 0; late < 2; late++) {
        count_mismatch(w, 0, late);
        count_mismatch(w, 1, late);
    }
    CHECK(hoop_barrier(w) == HOOP_OK, "final barrier: %s", hoop_comm_last_error(w));
    hoop_comm_destroy(w);
    printf("rank %d: %s\n", rank_, test_failures ? "FAILED" : "all checks passed");
    return test_failures != 0;
}
