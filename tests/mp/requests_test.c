/*
 * Request handles, hoop_comm_destroy with calls pending, and the numbering in a failed split's
 * errors, as both ranks of `hooprun -n 2 requests_test` (real processes):
 *
 * - a request that was waited for is gone: a second hoop_wait, or hoop_test after it, fails with
 *   HOOP_ERR_INVALID_ARGUMENT and says so, also once its slot serves a newer request (which goes on
 *   unharmed); of two threads waiting for one request, one gets its result, the other the error;
 * - small nonblocking calls that nobody waits for (hoop_test alone) end, with the right sums;
 * - hoop_comm_destroy with calls the peer never matches (a broadcast from the peer, a receive, a
 *   mix), with and without a thread blocked in hoop_wait on them, returns within 1 s although the
 *   communicator's timeout is 20 s; the blocked wait returns HOOP_ERR_ABORTED (destroy lets it
 *   leave before it frees anything); the peer's next call on that communicator fails at once;
 * - hoop_comm_abort from another thread ends a blocking all-reduce that the peer never joins, on
 *   a communicator that never had a nonblocking call (so the call runs without the scheduler's
 *   queue), within 1 s of the abort although the timeout is 20 s; the peer's all-reduce
 *   either fails or, where rank 0's contribution was in before the abort, gives the right sum,
 *   and its call after that fails;
 * - a split whose new communicator cannot connect (this program refuses its own connect() and its
 *   opening of peers' shared-memory segments for the while) names ranks as the parent numbers
 *   them, with the new numbers beside them;
 * - a rank whose address space is limited (RLIMIT_AS) fails a 64 MiB recursive-doubling
 *   all-reduce saying what it could not allocate and how much, and the peer learns it at once
 *   (skipped under AddressSanitizer, and where the limit cannot be set, as under valgrind).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "hoop.h"
#include "../common/testing.h"

static int rank_;

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* ---- refusing connections, for the split that must fail ----
 * Definitions here take precedence over the C library's for libhoop's calls too. */

static atomic_int refuse;

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    static int (*real)(int, const struct sockaddr *, socklen_t);
    if (atomic_load(&refuse)) {
        errno = ECONNREFUSED;
        return -1;
    }
    if (real == NULL) *(void **)&real = dlsym(RTLD_NEXT, "connect");
    return real(fd, addr, len);
}

/* Another process's segment is opened through /proc/PID/fd/N. With _FILE_OFFSET_BITS=64 the C
 * library's headers name this definition open64, as they name libhoop's calls. */
static int refused_path(const char *path)
{
    return atomic_load(&refuse) && strncmp(path, "/proc/", 6) == 0 && strstr(path, "/fd/") != NULL;
}

int open(const char *path, int flags, ...)
{
    static int (*real)(const char *, int, ...);
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    if (refused_path(path)) {
        errno = EACCES;
        return -1;
    }
    if (real == NULL) *(void **)&real = dlsym(RTLD_NEXT, "open");
    return real(path, flags, mode);
}

/* ---- handles ---- */

typedef struct waiter {
    hoop_request_t *req;
    hoop_result_t rc;
    double end;
    pthread_t th;
} waiter_t;

static void *wait_thread(void *arg)
{
    waiter_t *w = arg;
    w->rc = hoop_wait(w->req);
    w->end = now_s();
    return NULL;
}

static void handles(hoop_comm_t *w)
{
    int32_t v = rank_ + 1;
    hoop_request_t *q = NULL;
    hoop_result_t rc = hoop_iallreduce(w, &v, &v, 1, HOOP_INT32, HOOP_SUM, &q);
    CHECK(rc == HOOP_OK, "iallreduce: %s", hoop_comm_last_error(w));
    rc = hoop_wait(q);
    CHECK(rc == HOOP_OK && v == 3, "wait: %s, v=%d", hoop_error_string(rc), (int)v);

    double t0 = now_s();
    rc = hoop_wait(q);
    CHECK(rc == HOOP_ERR_INVALID_ARGUMENT, "second hoop_wait returned %s", hoop_error_string(rc));
    CHECK(strstr(hoop_comm_last_error(w), "already waited for") != NULL,
          "second hoop_wait: message '%s'", hoop_comm_last_error(w));
    int done = 7;
    rc = hoop_test(q, &done);
    CHECK(rc == HOOP_ERR_INVALID_ARGUMENT && done == 0, "hoop_test after hoop_wait: %s, done=%d",
          hoop_error_string(rc), done);
    CHECK(strstr(hoop_comm_last_error(w), "hoop_test") != NULL &&
              strstr(hoop_comm_last_error(w), "already waited for") != NULL,
          "hoop_test after hoop_wait: message '%s'", hoop_comm_last_error(w));
    CHECK(now_s() - t0 < 0.1, "the stale calls took %.3f s", now_s() - t0);

    /* One request live at a time: slots are reused, so among the last 40 stale handles are some
     * of the slot the live request occupies. None may touch it. */
    enum { N = 100, KEEP = 40 };
    hoop_request_t *old[N];
    int stale_calls = 0;
    for (int i = 0; i < N; i++) {
        int64_t x = (int64_t)rank_ * 1000 + i;
        rc = hoop_iallreduce(w, &x, &x, 1, HOOP_INT64, HOOP_SUM, &old[i]);
        CHECK(rc == HOOP_OK, "iallreduce %d: %s", i, hoop_comm_last_error(w));
        for (int j = i > KEEP ? i - KEEP : 0; j < i; j++) {
            done = 7;
            rc = hoop_test(old[j], &done);
            CHECK(rc == HOOP_ERR_INVALID_ARGUMENT && done == 0,
                  "hoop_test of request %d while %d is live: %s, done=%d", j, i,
                  hoop_error_string(rc), done);
            if (j % 4 == 0) {
                rc = hoop_wait(old[j]);
                CHECK(rc == HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_wait of request %d while %d is live: %s", j, i, hoop_error_string(rc));
            }
            stale_calls++;
        }
        rc = hoop_wait(old[i]);
        CHECK(rc == HOOP_OK && x == 1000 + 2 * i, "request %d: %s, x=%lld (want %d)", i,
              hoop_error_string(rc), (long long)x, 1000 + 2 * i);
    }

    /* Two threads wait for one request: one result, one error. Rank 1 posts late, so that both
     * threads of rank 0 block first. */
    int32_t y = rank_ + 1;
    if (rank_ == 1) sleep_s(0.2);
    rc = hoop_iallreduce(w, &y, &y, 1, HOOP_INT32, HOOP_SUM, &q);
    CHECK(rc == HOOP_OK, "iallreduce: %s", hoop_comm_last_error(w));
    waiter_t two[2] = {{.req = q}, {.req = q}};
    for (int i = 0; i < 2; i++) pthread_create(&two[i].th, NULL, wait_thread, &two[i]);
    for (int i = 0; i < 2; i++) pthread_join(two[i].th, NULL);
    int oks = (two[0].rc == HOOP_OK) + (two[1].rc == HOOP_OK);
    int bad = (two[0].rc == HOOP_ERR_INVALID_ARGUMENT) + (two[1].rc == HOOP_ERR_INVALID_ARGUMENT);
    CHECK(oks == 1 && bad == 1 && y == 3, "two waiters: %s and %s, y=%d",
          hoop_error_string(two[0].rc), hoop_error_string(two[1].rc), (int)y);

    CHECK(hoop_wait(NULL) == HOOP_ERR_INVALID_ARGUMENT, "hoop_wait(NULL)");
    printf("rank %d: handles: %d stale calls on live slots refused, the live requests right\n",
           rank_, stale_calls);
}

/* ---- calls nobody waits for ---- */

/* Small nonblocking calls that nobody waits for still run: they are left to a waiter for a while,
 * then the progress thread takes them. Polled with hoop_test alone (which runs nothing): one call
 * posted once the thread has gone idle (it must be woken), one right after another call (the
 * thread naps briefly and looks by itself), then four at once, which end in order with the right
 * sums. The 5 s bound only proves that they run; how soon is for benchmarks. */
static void unwaited(hoop_comm_t *w)
{
    for (int round = 0; round < 3; round++) {
        if (round == 0) sleep_s(0.3); /* calls stopped: the thread sleeps long */
        const int n = round == 2 ? 4 : 1;
        int64_t x[4];
        hoop_request_t *q[4] = {NULL};
        for (int i = 0; i < n; i++) {
            x[i] = 10 * rank_ + i + round;
            hoop_result_t rc = hoop_iallreduce(w, &x[i], &x[i], 1, HOOP_INT64, HOOP_SUM, &q[i]);
            CHECK(rc == HOOP_OK, "round %d: iallreduce %d: %s", round, i, hoop_comm_last_error(w));
        }
        const double t0 = now_s();
        int done = 0;
        while (done < n && now_s() - t0 < 5.0) {
            int d = 0;
            hoop_result_t rc = hoop_test(q[done], &d);
            CHECK(rc == HOOP_OK, "round %d: hoop_test of call %d: %s", round, done,
                  hoop_error_string(rc));
            if (rc != HOOP_OK) break;
            if (d)
                done++;
            else
                sleep_s(50e-6);
        }
        CHECK(done == n, "round %d: %d of %d calls nobody waited for ended within %.1f s", round,
              done, n, now_s() - t0);
        for (int i = 0; i < n; i++) {
            hoop_result_t rc = hoop_wait(q[i]);
            CHECK(rc == HOOP_OK && x[i] == 10 + 2 * (i + round), "round %d: call %d: %s, x=%lld",
                  round, i, hoop_error_string(rc), (long long)x[i]);
        }
    }
}

/* ---- destroy with calls pending ---- */

enum { P_BCAST, P_RECV, P_MIX };
static const char *const pending_name[] = {"a broadcast from the peer", "a receive", "four calls"};

static void destroy_pending(hoop_comm_t *w, int what, int with_waiter)
{
    hoop_comm_t *sub = NULL;
    hoop_result_t rc = hoop_comm_split(w, 0, rank_, &sub);
    CHECK(rc == HOOP_OK && sub != NULL, "split: %s", hoop_comm_last_error(w));
    if (sub == NULL) return;
    hoop_comm_set_timeout(sub, 20);
    rc = hoop_barrier(sub); /* connected on both sides */
    CHECK(rc == HOOP_OK, "barrier: %s", hoop_comm_last_error(sub));
    if (rank_ == 0) {
        /* Nothing the peer ever matches, and nothing sent that it could mistake for a call. */
        uint8_t buf[4][64];
        hoop_request_t *q[4];
        int nq = 0;
        if (what == P_BCAST || what == P_MIX)
            rc = hoop_ibroadcast(sub, buf[nq], 64, HOOP_UINT8, 1, &q[nq]), nq++;
        if (what == P_RECV || what == P_MIX)
            rc = hoop_irecv(sub, buf[nq], 64, HOOP_UINT8, 1, &q[nq]), nq++;
        if (what == P_MIX) {
            rc = hoop_iscatter(sub, NULL, buf[nq], 64, HOOP_UINT8, 1, &q[nq]), nq++;
            rc = hoop_irecv(sub, buf[nq], 64, HOOP_UINT8, 1, &q[nq]), nq++;
        }
        CHECK(rc == HOOP_OK, "posting: %s", hoop_comm_last_error(sub));
        waiter_t wt = {.req = q[0]};
        if (with_waiter) pthread_create(&wt.th, NULL, wait_thread, &wt);
        sleep_s(0.1); /* the waiter is blocked, the calls under way */
        double t0 = now_s();
        rc = hoop_comm_destroy(sub);
        double t1 = now_s();
        CHECK(rc == HOOP_OK, "destroy: %s", hoop_error_string(rc));
        CHECK(t1 - t0 < 1.0, "destroy with %s pending took %.3f s", pending_name[what], t1 - t0);
        if (with_waiter) {
            pthread_join(wt.th, NULL);
            CHECK(wt.rc == HOOP_ERR_ABORTED, "the blocked hoop_wait returned %s",
                  hoop_error_string(wt.rc));
            CHECK(wt.end - t0 < 1.0, "the blocked hoop_wait returned %.3f s after destroy began",
                  wt.end - t0);
        }
        printf("rank 0: destroy with %s pending%s: %.3f ms\n", pending_name[what],
               with_waiter ? " and a thread in hoop_wait" : "", (t1 - t0) * 1e3);
        rc = hoop_barrier(w);
        CHECK(rc == HOOP_OK, "world barrier: %s", hoop_comm_last_error(w));
    } else {
        rc = hoop_barrier(w); /* rank 0 has destroyed its side */
        CHECK(rc == HOOP_OK, "world barrier: %s", hoop_comm_last_error(w));
        double t0 = now_s();
        rc = hoop_barrier(sub);
        double dt = now_s() - t0;
        CHECK(rc != HOOP_OK && dt < 5.0,
              "barrier with a peer that destroyed its side: %s after %.3f s", hoop_error_string(rc),
              dt);
        if (what == P_BCAST)
            printf("rank 1: the peer's side is gone: %s after %.3f ms: %s\n", hoop_error_string(rc),
                   dt * 1e3, hoop_comm_last_error(sub));
        CHECK(hoop_comm_destroy(sub) == HOOP_OK, "destroy");
    }
}

/* ---- hoop_comm_abort from another thread, during a blocking call ---- */

typedef struct aborter {
    hoop_comm_t *c;
    double at;
    pthread_t th;
} aborter_t;

static void *abort_thread(void *arg)
{
    aborter_t *a = arg;
    sleep_s(0.2); /* the all-reduce is waiting for the peer */
    a->at = now_s();
    hoop_comm_abort(a->c);
    return NULL;
}

static void abort_blocking(hoop_comm_t *w)
{
    hoop_comm_t *sub = NULL;
    hoop_result_t rc = hoop_comm_split(w, 0, rank_, &sub);
    CHECK(rc == HOOP_OK && sub != NULL, "split: %s", hoop_comm_last_error(w));
    if (sub == NULL) return;
    hoop_comm_set_timeout(sub, 20);
    rc = hoop_barrier(sub); /* connected on both sides */
    CHECK(rc == HOOP_OK, "barrier: %s", hoop_comm_last_error(sub));
    float v[300];
    for (int i = 0; i < 300; i++) v[i] = (float)(rank_ + 1);
    if (rank_ == 0) {
        aborter_t ab = {.c = sub};
        CHECK(pthread_create(&ab.th, NULL, abort_thread, &ab) == 0, "pthread_create");
        rc = hoop_allreduce(sub, v, v, 300, HOOP_FLOAT32, HOOP_SUM);
        double end = now_s();
        pthread_join(ab.th, NULL);
        CHECK(rc == HOOP_ERR_ABORTED, "the blocking all-reduce returned %s: %s",
              hoop_error_string(rc), hoop_comm_last_error(sub));
        CHECK(end - ab.at < 1.0, "the blocking all-reduce returned %.3f s after the abort",
              end - ab.at);
        printf("rank 0: hoop_comm_abort from another thread ended a blocking all-reduce after "
               "%.3f ms: %s\n",
               (end - ab.at) * 1e3, hoop_comm_last_error(sub));
        rc = hoop_barrier(w);
        CHECK(rc == HOOP_OK, "world barrier: %s", hoop_comm_last_error(w));
    } else {
        rc = hoop_barrier(w); /* rank 0's call has ended */
        CHECK(rc == HOOP_OK, "world barrier: %s", hoop_comm_last_error(w));
        /* Rank 0 published its part before it aborted: this call may complete with it, and must
         * then have the right sum; the next cannot. */
        double t0 = now_s();
        rc = hoop_allreduce(sub, v, v, 300, HOOP_FLOAT32, HOOP_SUM);
        int wrong = 0;
        for (int i = 0; i < 300 && rc == HOOP_OK; i++) wrong += v[i] != 3.0f;
        CHECK(wrong == 0, "all-reduce with a peer that aborted after its part: %d wrong", wrong);
        if (rc == HOOP_OK) rc = hoop_allreduce(sub, v, v, 300, HOOP_FLOAT32, HOOP_SUM);
        double dt = now_s() - t0;
        CHECK(rc != HOOP_OK && dt < 5.0, "all-reduce with a peer that aborted: %s after %.3f s",
              hoop_error_string(rc), dt);
        printf("rank 1: the peer aborted: %s after %.3f ms: %s\n", hoop_error_string(rc), dt * 1e3,
               hoop_comm_last_error(sub));
    }
    CHECK(hoop_comm_destroy(sub) == HOOP_OK, "destroy");
}

/* ---- a split that cannot connect ---- */

static void split_numbering(hoop_comm_t *w)
{
    /* Keys reverse the order: parent rank 0 is new rank 1 and parent rank 1 new rank 0, so each
     * rank's error about its peer reads "rank P (new rank N)" with P != N. */
    hoop_comm_set_timeout(w, 2);
    hoop_comm_t *sub = NULL;
    atomic_store(&refuse, 1);
    double t0 = now_s();
    hoop_result_t rc = hoop_comm_split(w, 0, -rank_, &sub);
    double dt = now_s() - t0;
    atomic_store(&refuse, 0);
    hoop_comm_set_timeout(w, 30);
    char want[64];
    snprintf(want, sizeof(want), "rank %d (new rank %d)", 1 - rank_, rank_);
    const char *m = hoop_comm_last_error(w);
    CHECK(rc != HOOP_OK && sub == NULL, "split with refused connections: %s",
          hoop_error_string(rc));
    CHECK(strstr(m, want) != NULL && strstr(m, "parent") != NULL,
          "split error '%s' does not name the peer as '%s'", m, want);
    CHECK(dt < 10, "the failed split took %.1f s", dt);
    printf("rank %d: failed split: %s\n", rank_, m);
    if (sub != NULL) hoop_comm_destroy(sub);
    /* The parent is unharmed. */
    int32_t v = rank_ + 1;
    rc = hoop_allreduce(w, &v, &v, 1, HOOP_INT32, HOOP_SUM);
    CHECK(rc == HOOP_OK && v == 3, "allreduce after the failed split: %s, v=%d",
          hoop_comm_last_error(w), (int)v);
}

/* ---- out of memory ---- */

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

/* Limits this process's address space to what it maps now plus headroom. 0 if it cannot. */
static int limit_address_space(size_t headroom, struct rlimit *old)
{
#ifdef UNDER_ASAN
    (void)headroom;
    (void)old;
    return 0; /* its shadow memory makes the limit meaningless */
#else
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (f == NULL) return 0;
    int ok = fscanf(f, "%lu", &pages) == 1;
    fclose(f);
    if (!ok || getrlimit(RLIMIT_AS, old) != 0) return 0;
    struct rlimit lim = *old;
    lim.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + headroom;
    if (old->rlim_max != RLIM_INFINITY && lim.rlim_cur > old->rlim_max) return 0;
    return setrlimit(RLIMIT_AS, &lim) == 0;
#endif
}

static void out_of_memory(hoop_comm_t *w)
{
    const size_t n = (size_t)64 << 20;
    hoop_comm_t *sub = NULL;
    hoop_result_t rc = hoop_comm_split(w, 0, rank_, &sub);
    CHECK(rc == HOOP_OK && sub != NULL, "split: %s", hoop_comm_last_error(w));
    if (sub == NULL) return;
    hoop_comm_set_timeout(sub, 10);
    hoop_comm_set_algo(sub, "rd"); /* its scratch space is as large as the message */
    rc = hoop_barrier(sub);
    CHECK(rc == HOOP_OK, "barrier: %s", hoop_comm_last_error(sub));
    uint8_t *buf = malloc(n);
    CHECK(buf != NULL, "no memory for the test's own buffer");
    if (buf == NULL) return;
    memset(buf, 1, n);
    struct rlimit old;
    int32_t limited = rank_ == 1 && limit_address_space((size_t)16 << 20, &old);
    int32_t both = limited;
    rc = hoop_allreduce(w, &both, &both, 1, HOOP_INT32, HOOP_MAX);
    CHECK(rc == HOOP_OK, "allreduce: %s", hoop_comm_last_error(w));
    if (both) {
        double t0 = now_s();
        rc = hoop_allreduce(sub, buf, buf, n, HOOP_UINT8, HOOP_SUM);
        double dt = now_s() - t0;
        if (limited) setrlimit(RLIMIT_AS, &old);
        const char *m = hoop_comm_last_error(sub);
        char want[96];
        snprintf(want, sizeof(want), "cannot allocate %zu bytes", n);
        if (rank_ == 1)
            CHECK(rc == HOOP_ERR_NO_MEMORY && strstr(m, want) != NULL,
                  "allreduce under the limit: %s: '%s'", hoop_error_string(rc), m);
        else
            CHECK(rc == HOOP_ERR_ABORTED && strstr(m, "rank 1 aborted") != NULL &&
                      strstr(m, want) != NULL,
                  "allreduce with a peer out of memory: %s: '%s'", hoop_error_string(rc), m);
        CHECK(dt < 5, "the failure took %.1f s", dt);
        printf("rank %d: out of memory: %s after %.3f ms: %s\n", rank_, hoop_error_string(rc),
               dt * 1e3, m);
        rc = hoop_barrier(sub);
        CHECK(rc != HOOP_OK, "the communicator is aborted after the failure: %s",
              hoop_error_string(rc));
    } else {
        printf("rank %d: out of memory: skipped (the address space cannot be limited here)\n",
               rank_);
    }
    free(buf);
    hoop_comm_destroy(sub);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    hoop_comm_t *w = NULL;
    if (hoop_init_from_env(&w) != HOOP_OK) {
        printf("FAIL: hoop_init\n");
        return 1;
    }
    rank_ = test_rank = hoop_comm_rank(w);
    if (hoop_comm_size(w) != 2) {
        printf("SKIP: run as 2 ranks (hooprun -n 2)\n");
        hoop_comm_destroy(w);
        return 77;
    }
    hoop_comm_set_timeout(w, 30);
    handles(w);
    unwaited(w);
    for (int what = P_BCAST; what <= P_MIX; what++)
        for (int with_waiter = 0; with_waiter < 2; with_waiter++)
            destroy_pending(w, what, with_waiter);
    abort_blocking(w);
    split_numbering(w);
    out_of_memory(w);
    hoop_result_t rc = hoop_barrier(w);
    CHECK(rc == HOOP_OK, "final barrier: %s", hoop_comm_last_error(w));
    hoop_comm_destroy(w);
    printf("rank %d: %s\n", rank_, test_failures ? "FAILED" : "all checks passed");
    return test_failures != 0;
}
