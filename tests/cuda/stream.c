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
 *   stream MODULE group-limit
 *                            a group of stream-ordered calls holds one ordering slot per call
 *                            until its end (1024): 512 receives and 512 sends ordered on the
 *                            stream in one group, then one more call, which must be refused at
 *                            once with a sentence that names the limit, not after the timeout;
 *                            the group's calls must still complete right.
 *   stream MODULE stuck-destroy
 *                            (run with a short HOOP_TIMEOUT) 8 nonblocking calls ordered on a
 *                            stream whose gate stays closed: they fail by the timeout, and
 *                            hoop_comm_destroy, whose streams never reach their copies back,
 *                            must give up on all of them within one more timeout, not one each.
 *   stream MODULE legacy     no stream set: the gate closes on the legacy default stream, the
 *                            inputs' copy is queued there, and a thread opens the gate 30 ms
 *                            later. A call without a stream must start after the work queued
 *                            on the legacy stream, so it must read those inputs, and a
 *                            blocking one returns only after the gate opened.
 *   stream MODULE legacy-ordered
 *                            the rounds of ordered on the legacy default stream
 *                            (HOOP_STREAM_LEGACY, torch's default stream): the gate, the copies
 *                            and the calls all on it.
 *   stream MODULE capture    (the test double only: it needs the runtime's capture calls) a call
 *                            posted on a stream being captured into a CUDA graph must be refused
 *                            with a sentence, leave the capture valid (its graph replays) and the
 *                            communicator usable; and a call ordered on one stream must run
 *                            right while this thread captures another in the global mode.
 * Every mode ends with a call on host buffers outside the heap (classified by the module), and,
 * with the double, checks that no CUDA context was made on a device other than the test's
 * (HOOP_TEST_DEVICE; devbuf.h). The host side of every copy meant to be asynchronous is pinned:
 * one to or from pageable memory completes before it returns.
 * Exit 0 when every check held. */
#include <dlfcn.h>
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
static const char *module_path;
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
    float *hin = devbuf_host_alloc(n * sizeof(float));
    float *hout = devbuf_host_alloc(out_n * sizeof(float));
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
    /* The copy back is queued behind the gate: it must not have waited for it. */
    CHECK(gate_closed(),
          "%s of %zu: queueing the copy back waited for the stream (as a copy to "
          "pageable memory does)",
          kind_name[kind], n);
    /* Unordered, a nonblocking call needs nothing of the stream: it is waited for before the
     * gate opens, so that it reads the inputs before the stream writes them, every time. */
    if (req != NULL && !ordered) {
        rc = hoop_wait(req);
        CHECK(rc == HOOP_OK, "hoop_wait: %s", hoop_error_string(rc));
        req = NULL;
    }
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
    devbuf_host_free(hin);
    devbuf_host_free(hout);
    free(junk);
    return bad == 0;
}

/* A call of kind on n elements, not checked, no gate. */
static void warm_up(hoop_comm_t *c, int kind, size_t n)
{
    size_t out_n = kind == K_ALLGATHER ? n * (size_t)size : n;
    float *din = devbuf_alloc(n * sizeof(float)), *dout = devbuf_alloc(out_n * sizeof(float));
    hoop_request_t *req = NULL;
    hoop_result_t rc = post_kind(c, kind, din, dout, n, &req);
    if (rc == HOOP_OK && req != NULL) rc = hoop_wait(req);
    CHECK(rc == HOOP_OK, "warm-up %s of %zu: %s", kind_name[kind], n, hoop_comm_last_error(c));
    devbuf_free(din);
    devbuf_free(dout);
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
    float *hin = devbuf_host_alloc(n * sizeof(float));
    float *hout = devbuf_host_alloc(out_n * sizeof(float));
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
    devbuf_host_free(hin);
    devbuf_host_free(hout);
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
            float *hin = devbuf_host_alloc(n * sizeof(float));
            float *hout = devbuf_host_alloc(n * sizeof(float));
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
            devbuf_host_free(hin);
            devbuf_host_free(hout);
        }
    /* An end without a start is refused, and the communicator goes on. */
    CHECK(hoop_group_end(c) == HOOP_ERR_INVALID_ARGUMENT, "hoop_group_end without a start");
}

/* Mode group-limit. */
static void group_limit(hoop_comm_t *c)
{
    enum { PAIRS = 512 }; /* 1024 calls: every ordering slot */
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    size_t bytes = PAIRS * sizeof(float);
    round_no++;
    float *hin = devbuf_host_alloc(bytes), *hout = devbuf_host_alloc(bytes);
    float *din = devbuf_alloc(bytes), *dout = devbuf_alloc(bytes);
    for (size_t i = 0; i < PAIRS; i++) {
        hin[i] = input(rank, round_no, i);
        hout[i] = -1.0f;
    }
    devbuf_copy(dout, hout, bytes);
    devbuf_copy_async(din, hin, bytes, stream);
    static hoop_request_t *rr[PAIRS], *rs[PAIRS];
    CHECK(hoop_group_start(c) == HOOP_OK, "hoop_group_start");
    int posted = 0;
    for (size_t i = 0; i < PAIRS; i++) {
        hoop_result_t a = hoop_irecv(c, dout + i, 1, HOOP_FLOAT32, left, &rr[i]);
        hoop_result_t b = hoop_isend(c, din + i, 1, HOOP_FLOAT32, right, &rs[i]);
        CHECK(a == HOOP_OK && b == HOOP_OK, "group call pair %zu: %s / %s: %s", i,
              hoop_error_string(a), hoop_error_string(b), hoop_comm_last_error(c));
        if (a != HOOP_OK || b != HOOP_OK) break;
        posted++;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    hoop_request_t *extra = NULL;
    hoop_result_t x = hoop_isend(c, din, 1, HOOP_FLOAT32, right, &extra);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    const char *why = hoop_comm_last_error(c);
    CHECK(x == HOOP_ERR_UNSUPPORTED && extra == NULL,
          "the group's 1025th stream-ordered call: %s (%s), not refused", hoop_error_string(x),
          why);
    CHECK(took < 5.0, "the group's 1025th call was refused after %.1f s, not at once", took);
    CHECK(strstr(why, "1024") != NULL && strstr(why, "group") != NULL,
          "the refusal does not name the group's limit: %s", why);
    hoop_result_t g = hoop_group_end(c);
    CHECK(g == HOOP_OK, "hoop_group_end: %s: %s", hoop_error_string(g), hoop_comm_last_error(c));
    for (int i = 0; i < posted; i++) {
        CHECK(hoop_wait(rr[i]) == HOOP_OK, "wait irecv %d: %s", i, hoop_comm_last_error(c));
        CHECK(hoop_wait(rs[i]) == HOOP_OK, "wait isend %d: %s", i, hoop_comm_last_error(c));
    }
    devbuf_copy_async(hout, dout, bytes, stream);
    devbuf_sync(stream);
    size_t bad = 0;
    for (size_t i = 0; i < PAIRS; i++) bad += hout[i] != input(left, round_no, i);
    CHECK(bad == 0, "group of %d calls: %zu wrong element(s) of %d", 2 * PAIRS, bad, PAIRS);
    devbuf_free(din);
    devbuf_free(dout);
    devbuf_host_free(hin);
    devbuf_host_free(hout);
}

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Mode stuck-destroy: destroys c; returns how long hoop_comm_destroy took. */
static double stuck_destroy(hoop_comm_t *c)
{
    enum { CALLS = 8, N = 64 };
    float *d = devbuf_alloc(CALLS * N * sizeof(float));
    hoop_request_t *req[CALLS];
    close_gate();
    for (int i = 0; i < CALLS; i++) {
        hoop_result_t rc = hoop_iallreduce(c, d + i * N, d + i * N, N, HOOP_FLOAT32, HOOP_SUM,
                                           &req[i]);
        CHECK(rc == HOOP_OK, "iallreduce %d: %s", i, hoop_comm_last_error(c));
        if (rc != HOOP_OK) req[i] = NULL;
    }
    for (int i = 0; i < CALLS; i++)
        if (req[i] != NULL)
            CHECK(hoop_wait(req[i]) != HOOP_OK, "call %d completed behind a closed gate", i);
    double t0 = seconds();
    hoop_comm_destroy(c);
    double took = seconds() - t0;
    open_gate();
    devbuf_sync(stream);
    devbuf_free(d);
    return took;
}

/* A freed buffer's address given to a new one between ordered calls: the calls read what the
 * new one holds. */
static void reuse_rounds(hoop_comm_t *c)
{
    for (int round = 0; round < 8; round++) {
        size_t n = 1031 + (size_t)round * 97;
        float *d = devbuf_alloc(n * sizeof(float));
        float *h = devbuf_host_alloc(n * sizeof(float)), *o = devbuf_host_alloc(n * sizeof(float));
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
        devbuf_host_free(h);
        devbuf_host_free(o);
    }
}

/* The runtime's capture calls, from the module (the test double exports them; libhoop-cuda.so
 * does not). */
typedef int (*begin_capture_fn)(void *stream, int mode);
typedef int (*end_capture_fn)(void *stream, void **graph);
typedef int (*instantiate_fn)(void **exec, void *graph, unsigned long long flags);
typedef int (*graph_launch_fn)(void *exec, void *stream);
typedef int (*graph_destroy_fn)(void *graph_or_exec);

/* Mode capture; 77 when the module has no capture calls. */
static int capture_rounds(hoop_comm_t *c)
{
    void *h = dlopen(module_path, RTLD_NOW | RTLD_NOLOAD);
    begin_capture_fn begin = h ? (begin_capture_fn)dlsym(h, "cudaStreamBeginCapture") : NULL;
    end_capture_fn end = h ? (end_capture_fn)dlsym(h, "cudaStreamEndCapture") : NULL;
    instantiate_fn inst = h ? (instantiate_fn)dlsym(h, "cudaGraphInstantiate") : NULL;
    graph_launch_fn launch = h ? (graph_launch_fn)dlsym(h, "cudaGraphLaunch") : NULL;
    graph_destroy_fn gdestroy = h ? (graph_destroy_fn)dlsym(h, "cudaGraphDestroy") : NULL;
    graph_destroy_fn xdestroy = h ? (graph_destroy_fn)dlsym(h, "cudaGraphExecDestroy") : NULL;
    if (begin == NULL || end == NULL || inst == NULL || launch == NULL || gdestroy == NULL ||
        xdestroy == NULL) {
        printf("rank %d: capture: %s has no capture calls to drive: skipped\n", rank, module_path);
        return 77;
    }
    size_t n = 1031;
    float *h_in = devbuf_host_alloc(n * sizeof(float)),
          *h_out = devbuf_host_alloc(n * sizeof(float));
    float *din = devbuf_alloc(n * sizeof(float)), *dout = devbuf_alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h_in[i] = input(rank, 5, i);
    devbuf_copy(din, h_in, n * sizeof(float));

    /* A call on the stream being captured (the global mode, torch's default): refused, with
     * nothing queued into the capture, which stays valid and replays what it holds. */
    hoop_comm_set_stream(c, stream);
    CHECK(begin(stream, 0) == 0, "cudaStreamBeginCapture");
    devbuf_copy_async(dout, din, n * sizeof(float), stream); /* captured */
    hoop_result_t rc = hoop_allreduce(c, din, din, n, HOOP_FLOAT32, HOOP_SUM);
    const char *le = hoop_comm_last_error(c);
    CHECK(rc == HOOP_ERR_UNSUPPORTED, "an all-reduce on a capturing stream returned %s: %s",
          hoop_error_string(rc), le);
    CHECK(strstr(le, "captured into a CUDA graph") != NULL, "the refusal says: %s", le);
    void *graph = NULL, *exec = NULL;
    CHECK(end(stream, &graph) == 0 && graph != NULL,
          "the capture was invalidated by the refused call");
    if (graph != NULL && inst(&exec, graph, 0) == 0) {
        float *junk = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) junk[i] = -1.0f;
        devbuf_copy(dout, junk, n * sizeof(float));
        CHECK(launch(exec, stream) == 0, "cudaGraphLaunch");
        devbuf_copy_async(h_out, dout, n * sizeof(float), stream);
        devbuf_sync(stream);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += h_out[i] != h_in[i];
        CHECK(bad == 0, "the replayed graph's copy: %zu wrong element(s)", bad);
        free(junk);
        xdestroy(exec);
    }
    gdestroy(graph);

    /* The communicator goes on: a call ordered on the same stream, no longer capturing. */
    devbuf_copy(din, h_in, n * sizeof(float));
    rc = hoop_allreduce(c, din, dout, n, HOOP_FLOAT32, HOOP_SUM);
    CHECK(rc == HOOP_OK, "an all-reduce after the refusal: %s", hoop_comm_last_error(c));
    devbuf_copy_async(h_out, dout, n * sizeof(float), stream);
    devbuf_sync(stream);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float e = 0;
        for (int r = 0; r < size; r++) e += input(r, 5, i);
        bad += h_out[i] != e;
    }
    CHECK(bad == 0, "the all-reduce after the refusal: %zu wrong element(s)", bad);

    /* A capture of another stream by this thread, in the global mode, while a call ordered on
     * the first one runs: the call (whose engine this thread drives in hoop_wait) must neither
     * fail nor invalidate the capture. */
    void *other = devbuf_stream();
    close_gate();
    uint32_t want = round_no;
    devbuf_copy_async(din, h_in, n * sizeof(float), stream);
    CHECK(begin(other, 0) == 0, "cudaStreamBeginCapture of another stream");
    hoop_request_t *req = NULL;
    rc = hoop_iallreduce(c, din, dout, n, HOOP_FLOAT32, HOOP_SUM, &req);
    CHECK(rc == HOOP_OK, "an all-reduce during another stream's capture: %s",
          hoop_comm_last_error(c));
    devbuf_copy_async(h_out, dout, n * sizeof(float), stream);
    __atomic_store_n(gate, want, __ATOMIC_RELEASE);
    if (req != NULL) {
        rc = hoop_wait(req);
        CHECK(rc == HOOP_OK, "its wait: %s", hoop_comm_last_error(c));
    }
    graph = NULL;
    CHECK(end(other, &graph) == 0 && graph != NULL,
          "the other stream's capture was invalidated by the call");
    gdestroy(graph);
    devbuf_sync(stream);
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        float e = 0;
        for (int r = 0; r < size; r++) e += input(r, 5, i);
        bad += h_out[i] != e;
    }
    CHECK(bad == 0, "the all-reduce during the capture: %zu wrong element(s)", bad);
    mod->stream_destroy(devbuf_ctx(), other);
    devbuf_free(din);
    devbuf_free(dout);
    devbuf_host_free(h_in);
    devbuf_host_free(h_out);
    return 0;
}

/* No CUDA context on a device the test did not use (the double counts them), and a call on host
 * buffers outside the heap (the module classifies them) made none either. */
static void contexts_checked(hoop_comm_t *c)
{
    float a[64], b[64];
    for (int i = 0; i < 64; i++) a[i] = (float)(rank + i);
    hoop_result_t rc = hoop_allreduce(c, a, b, 64, HOOP_FLOAT32, HOOP_SUM);
    CHECK(rc == HOOP_OK, "an all-reduce of host buffers: %s", hoop_comm_last_error(c));
    for (int i = 0; i < 64 && rc == HOOP_OK; i++) {
        float e = 0;
        for (int r = 0; r < size; r++) e += (float)(r + i);
        CHECK(b[i] == e, "host all-reduce element %d: %g, expected %g", i, (double)b[i], (double)e);
        if (b[i] != e) break;
    }
    void *h = dlopen(module_path, RTLD_NOW | RTLD_NOLOAD);
    int (*contexts)(int) = h ? (int (*)(int))dlsym(h, "hoop_cuda_double_contexts") : NULL;
    if (contexts == NULL) return;
    for (int d = 0; d < 8; d++)
        if (d != devbuf_device())
            CHECK(contexts(d) == 0,
                  "a CUDA context was made on device %d, which this rank does not use (it uses "
                  "device %d)",
                  d, devbuf_device());
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(
            stderr,
            "usage: stream MODULE ordered|unordered|reuse|group|group-limit|stuck-destroy|legacy|"
            "legacy-ordered|capture\n");
        return 2;
    }
    char err[512];
    if (devbuf_open(argv[1], err, sizeof err) != 0) {
        fprintf(stderr, "stream: %s: %s\n", argv[1], err);
        return devbuf_no_device(err) ? 77 : 1;
    }
    mod = devbuf_module();
    module_path = argv[1];
    const char *mode = argv[2];
    hoop_comm_t *c;
    hoop_result_t rc = hoop_init_from_env(&c);
    if (rc != HOOP_OK) {
        fprintf(stderr, "stream: hoop_init_from_env: %s\n", hoop_error_string(rc));
        return 1;
    }
    rank = test_rank = hoop_comm_rank(c);
    size = hoop_comm_size(c);
    /* legacy-ordered: the rounds of ordered on the legacy default stream. */
    int on_legacy = !strcmp(mode, "legacy-ordered");
    stream = on_legacy ? HOOP_STREAM_LEGACY : devbuf_stream();
    if (on_legacy) mode = "ordered";
    gate = mod->host_alloc(devbuf_ctx(), sizeof *gate);
    *gate = 0;
    int ordered = strcmp(mode, "unordered") != 0 && strcmp(mode, "legacy") != 0 &&
                  strcmp(mode, "capture") != 0;
    if (ordered) {
        hoop_comm_set_stream(c, stream);
        CHECK(hoop_comm_get_stream(c) == stream, "hoop_comm_get_stream");
    }
    int rounds = 0, skipped = 0;
    if (!strcmp(mode, "capture")) {
        skipped = capture_rounds(c) == 77;
    } else if (!strcmp(mode, "reuse")) {
        reuse_rounds(c);
    } else if (!strcmp(mode, "group")) {
        group_rounds(c);
    } else if (!strcmp(mode, "group-limit")) {
        group_limit(c);
    } else if (!strcmp(mode, "stuck-destroy")) {
        double limit = atof(getenv("HOOP_TIMEOUT") != NULL ? getenv("HOOP_TIMEOUT") : "60");
        double took = stuck_destroy(c);
        CHECK(took < 2.5 * limit,
              "hoop_comm_destroy took %.1f s with 8 calls' copies back stuck, at a timeout of "
              "%.1f s: it must give up on all of them within one timeout",
              took, limit);
        mod->host_free(devbuf_ctx(), gate);
        mod->stream_destroy(devbuf_ctx(), stream);
        printf("rank %d: %s: %s\n", rank, argv[2], test_failures ? "FAILED" : "ok");
        return test_failures ? 1 : 0;
    } else if (!strcmp(mode, "legacy")) {
        static const size_t counts[] = {1, 7, 1031, 65537};
        for (int kind = 0; kind < K_COUNT; kind++)
            for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
                legacy_round(c, kind, counts[k]);
    } else {
        static const size_t counts[] = {1, 7, 1031, 65537};
        /* Unordered, a blocking call waits for its device work: one that allocates pinned or
         * device memory while the gate is closed waits for the gate too (CUDA orders the work
         * queued after an allocation after all the work queued before it), which would let it
         * read the inputs. A first round of each kind at the largest size, ungated, makes what
         * the calls keep, as an application's first iteration would. */
        if (!ordered)
            for (int kind = 0; kind < K_COUNT; kind++) warm_up(c, kind, 65537);
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
    contexts_checked(c);
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
        float *h = devbuf_host_alloc(n * sizeof(float)), *o = devbuf_host_alloc(n * sizeof(float));
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
        devbuf_host_free(h);
        devbuf_host_free(o);
    } else {
        rc = hoop_comm_destroy(c);
        CHECK(rc == HOOP_OK, "destroy: %s", hoop_error_string(rc));
    }
    mod->host_free(devbuf_ctx(), gate);
    if (!on_legacy) mod->stream_destroy(devbuf_ctx(), stream);
    printf("rank %d: %s: %s\n", rank, argv[2],
           test_failures ? "FAILED"
           : skipped     ? "skipped"
                         : "ok");
    return test_failures ? 1 : skipped ? 77 : 0;
}
