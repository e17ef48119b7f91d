/*
 * Symmetric memory (hoop_mem_alloc) and the zero-copy all-reduce on it, with real processes: the
 * program forks its ranks itself, each joining over a fresh file:// rendezvous.
 *
 *   sym_test --ranks N --mode colls|bits|mixed|realloc|bad|others|nonblocking|kill
 *
 * colls:   every dtype and op, in and out of place, at odd counts above HOOP_SMALL_BYTES, on
 *          buffers of hoop_mem_alloc: the results against a reference each rank computes itself
 *          (common/refcheck.c), exactly (the float inputs are chosen so that every order of
 *          the reduction gives the same bits); the schedule trace must show the zero-copy fold.
 * bits:    inputs whose sums and products round: the zero-copy result must be the same bytes as
 *          the same call on ordinary buffers (the rounds through the shared area), on every rank.
 * mixed:   one rank's buffers ordinary, the others' symmetric: right results, and no rank takes
 *          the zero-copy schedule.
 * realloc: a buffer freed and allocated again (at the same address, where the kernel gives it)
 *          between calls, and allocations of other sizes: right results every time.
 * bad:     a pointer not from hoop_mem_alloc, a free twice, sizes that differ across ranks, and
 *          hoop_mem_free(NULL): each fails on every rank with HOOP_ERR_INVALID_ARGUMENT and a
 *          sentence, and the communicator still runs a checked all-reduce after.
 * others:  reduce-scatter (every dtype and op), all-gather and broadcast (every root) on
 *          symmetric buffers, in and out of place, against references; zero copy must run.
 * nonblocking: three all-reduces on symmetric buffers posted before any is waited for.
 * kill:    the ranks run zero-copy all-reduces in a loop; the parent kills the last rank with
 *          SIGKILL meanwhile: every survivor must fail (lost peer or abort) within the timeout,
 *          and no new hoop entry may be left in /dev/shm.
 */
#include <dirent.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hoop.h"
#include "../common/forked.h"

static int zero_copy_lines; /* trace lines of the zero-copy fold since the last reset */

static void on_trace(void *ctx, const char *line)
{
    (void)ctx;
    if (strstr(line, "from every rank's input") != NULL ||
        strstr(line, "into every rank's output") != NULL || strstr(line, "from where it lies"))
        zero_copy_lines++;
}

/* One all-reduce case on buffers in and out (out == in: in place); the zero-copy fold must have
 * run where zc, and not where !zc. */
static void one_case(hoop_comm_t *c, void *in, void *out, hoop_dtype_t dt, hoop_op_t op, size_t n,
                     uint64_t salt, int zc, const char *what)
{
    int p = hoop_comm_size(c), r = hoop_comm_rank(c);
    rc_fill_exact(in, dt, op, p, r, salt, n);
    zero_copy_lines = 0;
    test_must(hoop_allreduce(c, in, out, n, dt, op), c, what);
    test_verify_exact(out, dt, op, p, salt, n, what);
    CHECK(zc ? zero_copy_lines > 0 : zero_copy_lines == 0, "%s %s %s n=%zu: the zero-copy fold %s",
          what, hoop_dtype_name(dt), hoop_op_name(op), n, zc ? "did not run" : "ran");
}

static void mode_colls(hoop_comm_t *c)
{
    size_t cap = 300007 * 8;
    uint8_t *a, *b;
    test_must(hoop_mem_alloc(c, cap, (void **)&a), c, "hoop_mem_alloc");
    test_must(hoop_mem_alloc(c, cap, (void **)&b), c, "hoop_mem_alloc");
    uint64_t salt = 1;
    test_sweep_exact(c, a, b, one_case, 1, &salt);
    /* At an offset inside the allocations, odd by one element. */
    one_case(c, a + 8, b + 16, HOOP_INT64, HOOP_SUM, 70001, salt++, 1, "at offsets");
    test_must(hoop_mem_free(c, b), c, "hoop_mem_free");
    test_must(hoop_mem_free(c, a), c, "hoop_mem_free");
}

/* Reduce-scatter, all-gather and broadcast on symmetric buffers, in and out of place, against
 * references of their own; every rank (broadcast: every rank but the root) must take the
 * zero-copy schedule. */
static void mode_others(hoop_comm_t *c)
{
    int p = hoop_comm_size(c), r = hoop_comm_rank(c);
    /* All-gather: above 256 KiB a rank, past the 2-rank all-gather that runs point to point
     * (the planner's measured exception), for every dtype. */
    size_t n = 30011, cap = (size_t)p * (300u << 10);
    uint8_t *a, *b;
    test_must(hoop_mem_alloc(c, cap, (void **)&a), c, "hoop_mem_alloc");
    test_must(hoop_mem_alloc(c, cap, (void **)&b), c, "hoop_mem_alloc");
    uint64_t salt = 500;
    for (int dt = 0; dt < HOOP_DTYPE_COUNT; dt++) {
        size_t es = hoop_dtype_size((hoop_dtype_t)dt);
        for (int op = 0; op < HOOP_OP_COUNT; op++) {
            for (int inplace = 0; inplace < 2; inplace++) {
                /* Rank r's input is p blocks of n; its result is block r of the reduction. The
                 * reference of element i of block r: gen's element r * n + i on every rank. */
                rc_fill_exact(a, (hoop_dtype_t)dt, (hoop_op_t)op, p, r, salt, (size_t)p * n);
                uint8_t *out = inplace ? a + (size_t)r * n * es : b;
                zero_copy_lines = 0;
                test_must(hoop_reduce_scatter(c, a, out, n, (hoop_dtype_t)dt, (hoop_op_t)op), c,
                          "hoop_reduce_scatter");
                CHECK(zero_copy_lines > 0, "reduce-scatter %s %s: the zero-copy fold did not run",
                      hoop_dtype_name((hoop_dtype_t)dt), hoop_op_name((hoop_op_t)op));
                size_t bad = 0;
                for (size_t i = 0; i < n; i++) {
                    rc_acc_t acc = {0};
                    for (int q = 0; q < p; q++)
                        rc_acc_add(&acc, (hoop_dtype_t)dt, es, (hoop_op_t)op,
                                   rc_exact_input((hoop_dtype_t)dt, (hoop_op_t)op, p, q, salt,
                                                  (size_t)r * n + i));
                    uint64_t want = rc_acc_result(&acc, (hoop_dtype_t)dt, es, (hoop_op_t)op, p);
                    if (rc_ld(out, i, es) != want && bad++ == 0)
                        CHECK(0, "reduce-scatter %s %s %s: element %zu wrong",
                              hoop_dtype_name((hoop_dtype_t)dt), hoop_op_name((hoop_op_t)op),
                              inplace ? "in place" : "out of place", i);
                }
                salt++;
            }
        }
        /* All-gather: rank q's block is gen's elements of rank q. */
        size_t agn = ((size_t)260 << 10) / es + 1;
        for (int inplace = 0; inplace < 2; inplace++) {
            uint8_t *in = inplace ? b + (size_t)r * agn * es : a;
            rc_fill_exact(in, (hoop_dtype_t)dt, HOOP_SUM, p, r, salt, agn);
            zero_copy_lines = 0;
            test_must(hoop_allgather(c, in, b, agn, (hoop_dtype_t)dt), c, "hoop_allgather");
            CHECK(zero_copy_lines > 0, "all-gather %s: the zero-copy copy did not run",
                  hoop_dtype_name((hoop_dtype_t)dt));
            size_t bad = 0;
            for (int q = 0; q < p; q++)
                for (size_t i = 0; i < agn; i++)
                    if (rc_ld(b, (size_t)q * agn + i, es) !=
                            rc_exact_input((hoop_dtype_t)dt, HOOP_SUM, p, q, salt, i) &&
                        bad++ == 0)
                        CHECK(0, "all-gather %s %s: block %d element %zu wrong",
                              hoop_dtype_name((hoop_dtype_t)dt),
                              inplace ? "in place" : "out of place", q, i);
            salt++;
        }
        /* Broadcast from every root in turn. */
        for (int root = 0; root < p; root++) {
            rc_fill_exact(a, (hoop_dtype_t)dt, HOOP_SUM, p, r == root ? root : p + 7, salt, n);
            zero_copy_lines = 0;
            test_must(hoop_broadcast(c, a, n, (hoop_dtype_t)dt, root), c, "hoop_broadcast");
            CHECK(r == root || zero_copy_lines > 0, "broadcast %s: the zero-copy copy did not run",
                  hoop_dtype_name((hoop_dtype_t)dt));
            size_t bad = 0;
            for (size_t i = 0; i < n; i++)
                if (rc_ld(a, i, es) !=
                        rc_exact_input((hoop_dtype_t)dt, HOOP_SUM, p, root, salt, i) &&
                    bad++ == 0)
                    CHECK(0, "broadcast %s root %d: element %zu wrong",
                          hoop_dtype_name((hoop_dtype_t)dt), root, i);
            salt++;
        }
    }
    test_must(hoop_mem_free(c, a), c, "hoop_mem_free");
    test_must(hoop_mem_free(c, b), c, "hoop_mem_free");
}

/* Rounding floats in [0.5, 2.5). */
static void fill_rounding(void *buf, hoop_dtype_t dt, size_t n, uint64_t seed)
{
    size_t es = hoop_dtype_size(dt);
    for (size_t i = 0; i < n; i++) {
        uint64_t h = rc_mix(seed + i);
        double v = (double)(h >> 11) / 9007199254740992.0 * 2.0 + 0.5;
        rc_st(buf, i, es, rc_fenc(dt, v));
    }
}

static void mode_bits(hoop_comm_t *c)
{
    int r = hoop_comm_rank(c);
    size_t n = 300007, cap = n * 8;
    uint8_t *a, *b, *o1 = malloc(cap), *o2 = malloc(cap);
    test_must(hoop_mem_alloc(c, cap, (void **)&a), c, "hoop_mem_alloc");
    test_must(hoop_mem_alloc(c, cap, (void **)&b), c, "hoop_mem_alloc");
    const hoop_dtype_t dts[] = {HOOP_FLOAT32, HOOP_FLOAT64, HOOP_FLOAT16, HOOP_BFLOAT16};
    const hoop_op_t ops[] = {HOOP_SUM, HOOP_PROD, HOOP_AVG};
    for (size_t d = 0; d < 4; d++)
        for (size_t o = 0; o < 3; o++) {
            size_t bytes = n * hoop_dtype_size(dts[d]);
            uint64_t seed = (uint64_t)r << 32 | (d * 8 + o);
            fill_rounding(a, dts[d], n, seed);
            memcpy(o1, a, bytes);
            zero_copy_lines = 0;
            test_must(hoop_allreduce(c, a, b, n, dts[d], ops[o]), c, "hoop_allreduce sym");
            CHECK(zero_copy_lines > 0, "bits: the zero-copy fold did not run");
            test_must(hoop_allreduce(c, o1, o2, n, dts[d], ops[o]), c, "hoop_allreduce ordinary");
            CHECK(memcmp(b, o2, bytes) == 0, "bits %s %s: zero copy and the rounds differ",
                  hoop_dtype_name(dts[d]), hoop_op_name(ops[o]));
            /* In place, on the same inputs. */
            fill_rounding(a, dts[d], n, seed);
            test_must(hoop_allreduce(c, a, a, n, dts[d], ops[o]), c, "hoop_allreduce sym in place");
            CHECK(memcmp(a, o2, bytes) == 0, "bits %s %s in place: zero copy and the rounds differ",
                  hoop_dtype_name(dts[d]), hoop_op_name(ops[o]));
            /* Reduce-scatter of the same inputs, n / p elements a rank. */
            size_t rn = n / (size_t)hoop_comm_size(c), rbytes = rn * hoop_dtype_size(dts[d]);
            fill_rounding(a, dts[d], rn * (size_t)hoop_comm_size(c), seed);
            memcpy(o1, a, rbytes * (size_t)hoop_comm_size(c));
            zero_copy_lines = 0;
            test_must(hoop_reduce_scatter(c, a, b, rn, dts[d], ops[o]), c, "reduce-scatter sym");
            CHECK(zero_copy_lines > 0, "bits: the zero-copy reduce-scatter did not run");
            test_must(hoop_reduce_scatter(c, o1, o2, rn, dts[d], ops[o]), c,
                      "reduce-scatter ordinary");
            CHECK(memcmp(b, o2, rbytes) == 0,
                  "bits reduce-scatter %s %s: zero copy and the "
                  "rounds differ",
                  hoop_dtype_name(dts[d]), hoop_op_name(ops[o]));
        }
    free(o1);
    free(o2);
    test_must(hoop_mem_free(c, a), c, "hoop_mem_free");
    test_must(hoop_mem_free(c, b), c, "hoop_mem_free");
}

static void mode_mixed(hoop_comm_t *c)
{
    int r = hoop_comm_rank(c), p = hoop_comm_size(c);
    size_t n = 100003, cap = n * 8;
    uint8_t *a, *b, *ma = malloc(cap), *mb = malloc(cap);
    test_must(hoop_mem_alloc(c, cap, (void **)&a), c, "hoop_mem_alloc");
    test_must(hoop_mem_alloc(c, cap, (void **)&b), c, "hoop_mem_alloc");
    /* Rank p-1 with ordinary buffers; then rank 0 with a symmetric input and an ordinary
     * output; then every rank symmetric again. */
    uint64_t salt = 100;
    for (int op = 0; op < HOOP_OP_COUNT; op++) {
        int ord = r == p - 1;
        one_case(c, ord ? ma : a, ord ? mb : b, HOOP_FLOAT32, (hoop_op_t)op, n, salt++, 0,
                 "mixed (last rank ordinary)");
        one_case(c, a, r == 0 ? mb : b, HOOP_INT32, (hoop_op_t)op, n, salt++, 0,
                 "mixed (rank 0's output ordinary)");
        one_case(c, ord ? ma : a, ord ? ma : a, HOOP_INT8, (hoop_op_t)op, n, salt++, 0,
                 "mixed in place");
        one_case(c, a, b, HOOP_FLOAT64, (hoop_op_t)op, n, salt++, 1, "all symmetric after mixed");
    }
    /* Input and output that overlap other than in place: served apart, not zero copy. */
    one_case(c, a, a + 8, HOOP_INT32, HOOP_SUM, n, salt++, 0, "overlapping");
    free(ma);
    free(mb);
    test_must(hoop_mem_free(c, a), c, "hoop_mem_free");
    test_must(hoop_mem_free(c, b), c, "hoop_mem_free");
}

static void mode_realloc(hoop_comm_t *c)
{
    size_t n = 65537;
    uint64_t salt = 200;
    void *first = NULL;
    for (int i = 0; i < 6; i++) {
        size_t cap = n * 8 * (size_t)(i % 3 == 2 ? 3 : 1);
        uint8_t *a, *b;
        test_must(hoop_mem_alloc(c, cap, (void **)&a), c, "hoop_mem_alloc");
        test_must(hoop_mem_alloc(c, cap, (void **)&b), c, "hoop_mem_alloc");
        if (i == 0) first = a;
        one_case(c, a, b, HOOP_INT64, HOOP_SUM, n, salt++, 1, "realloc");
        one_case(c, b, b, HOOP_FLOAT32, HOOP_MAX, n, salt++, 1, "realloc in place");
        test_must(hoop_mem_free(c, a), c, "hoop_mem_free");
        /* A call between the frees: b still symmetric, a's memory gone. */
        one_case(c, b, b, HOOP_UINT32, HOOP_SUM, n, salt++, 1, "after one free");
        test_must(hoop_mem_free(c, b), c, "hoop_mem_free");
    }
    (void)first;
    /* Nothing live: ordinary buffers run as ever. */
    uint8_t *m = malloc(n * 8);
    one_case(c, m, m, HOOP_INT32, HOOP_SUM, n, salt++, 0, "no symmetric memory left");
    free(m);
}

/* Nonblocking: three all-reduces posted together on symmetric buffers (they run in order, on the
 * progress thread or the waiter), then an allocation while none is pending, then one more. */
static void mode_nonblocking(hoop_comm_t *c)
{
    int p = hoop_comm_size(c), r = hoop_comm_rank(c);
    size_t n = 90001;
    uint8_t *buf[3];
    hoop_request_t *req[3];
    const hoop_dtype_t dts[3] = {HOOP_INT32, HOOP_FLOAT64, HOOP_UINT8};
    const hoop_op_t ops[3] = {HOOP_SUM, HOOP_MAX, HOOP_PROD};
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 3; i++)
            test_must(hoop_mem_alloc(c, n * 8, (void **)&buf[i]), c, "alloc");
        zero_copy_lines = 0;
        for (int i = 0; i < 3; i++) {
            rc_fill_exact(buf[i], dts[i], ops[i], p, r, 400 + (uint64_t)(round * 3 + i), n);
            test_must(hoop_iallreduce(c, buf[i], buf[i], n, dts[i], ops[i], &req[i]), c,
                      "hoop_iallreduce");
        }
        for (int i = 0; i < 3; i++) test_must(hoop_wait(req[i]), c, "hoop_wait");
        CHECK(zero_copy_lines == 3, "nonblocking: %d zero-copy folds, want 3", zero_copy_lines);
        for (int i = 0; i < 3; i++)
            test_verify_exact(buf[i], dts[i], ops[i], p, 400 + (uint64_t)(round * 3 + i), n,
                              "nonblocking");
        for (int i = 0; i < 3; i++) test_must(hoop_mem_free(c, buf[i]), c, "free");
    }
}

static void expect_invalid(hoop_comm_t *c, hoop_result_t rc, const char *what, const char *word)
{
    const char *msg = hoop_comm_last_error(c);
    CHECK(rc == HOOP_ERR_INVALID_ARGUMENT, "%s: %s, want HOOP_ERR_INVALID_ARGUMENT", what,
          hoop_error_string(rc));
    CHECK(msg != NULL && strstr(msg, word) != NULL, "%s: the sentence \"%s\" does not say \"%s\"",
          what, msg != NULL ? msg : "(none)", word);
}

static void usable(hoop_comm_t *c, uint64_t salt)
{
    size_t n = 70001;
    uint8_t *a;
    test_must(hoop_mem_alloc(c, n * 4, (void **)&a), c, "hoop_mem_alloc after bad input");
    one_case(c, a, a, HOOP_INT32, HOOP_SUM, n, salt, 1, "after bad input");
    test_must(hoop_mem_free(c, a), c, "hoop_mem_free after bad input");
}

static void mode_bad(hoop_comm_t *c)
{
    int r = hoop_comm_rank(c);
    uint8_t *a;
    void *x = NULL;
    test_must(hoop_mem_alloc(c, 4096, (void **)&a), c, "hoop_mem_alloc");
    /* Not from the arena on the last rank only (the others pass their good one). */
    char stack[64];
    void *bad = r == hoop_comm_size(c) - 1 ? (void *)stack : (void *)a;
    expect_invalid(c, hoop_mem_free(c, bad), "free of a foreign pointer", "not a live buffer");
    usable(c, 300);
    /* An interior pointer is not an allocation's start either. */
    expect_invalid(c, hoop_mem_free(c, a + 64), "free of an interior pointer", "not a live buffer");
    test_must(hoop_mem_free(c, a), c, "hoop_mem_free");
    expect_invalid(c, hoop_mem_free(c, a), "free twice", "freed already");
    usable(c, 301);
    expect_invalid(c, hoop_mem_free(c, NULL), "free of NULL", "not a live buffer");
    /* Sizes that differ: rank 0 asks for one more page. */
    hoop_result_t rc = hoop_mem_alloc(c, r == 0 ? 8192 : 4096, &x);
    expect_invalid(c, rc, "sizes that differ", "disagree on the size");
    CHECK(x == NULL, "sizes that differ: *ptr is not NULL");
    expect_invalid(c, hoop_mem_alloc(c, 0, &x), "size 0", "a size of 0");
    usable(c, 302);
}

/* hoop_mem_register_fd: each rank's own memfd, registered at an offset; all-reduces on it run
 * zero-copy and are right, the program's own mapping of the file sees the result, and bad
 * arguments on one rank fail every rank and leave the communicator usable. */
static void mode_register(hoop_comm_t *c)
{
    int r = hoop_comm_rank(c), p = hoop_comm_size(c);
    size_t n = 70001, bytes = n * 8, off = 3 * 4096, flen = off + bytes + 4096;
    int fd = memfd_create("sym-test-reg", MFD_CLOEXEC);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)flen) == 0, "memfd of %zu bytes", flen);
    uint8_t *own = mmap(NULL, flen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(own != MAP_FAILED, "mapping the memfd");
    uint8_t *a = NULL, *b = NULL;
    test_must(hoop_mem_register_fd(c, fd, off, bytes, (void **)&a), c, "hoop_mem_register_fd");
    void *x = NULL;
    int fd2 = memfd_create("sym-test-reg2", MFD_CLOEXEC);
    CHECK(fd2 >= 0 && ftruncate(fd2, (off_t)bytes) == 0, "second memfd");
    test_must(hoop_mem_register_fd(c, fd2, 0, bytes, (void **)&b), c, "hoop_mem_register_fd");
    close(fd2); /* the registration holds its own mappings */
    uint64_t salt = 900;
    one_case(c, a, b, HOOP_FLOAT64, HOOP_SUM, n, salt++, 1, "registered, out of place");
    one_case(c, a, a, HOOP_INT32, HOOP_MAX, 2 * n, salt++, 1, "registered, in place");
    /* The program's own mapping of the file is the same memory. */
    CHECK(memcmp(own + off, a, bytes) == 0, "the memfd's own mapping does not see the result");
    /* Mixed: a registration and an allocation in one call. */
    uint8_t *m;
    test_must(hoop_mem_alloc(c, bytes, (void **)&m), c, "hoop_mem_alloc");
    one_case(c, a, m, HOOP_INT64, HOOP_SUM, n, salt++, 1, "registered into allocated");
    test_must(hoop_mem_free(c, m), c, "hoop_mem_free");
    test_must(hoop_mem_free(c, b), c, "hoop_mem_free");
    /* Bad arguments on the last rank only: every rank fails with its sentence. */
    int last = r == p - 1;
    expect_invalid(c, hoop_mem_register_fd(c, fd, last ? 100 : off, bytes, &x),
                   "an unaligned offset", "not a multiple of 4096");
    expect_invalid(c, hoop_mem_register_fd(c, last ? -1 : fd, off, bytes, &x), "a closed fd",
                   "not open");
    expect_invalid(c, hoop_mem_register_fd(c, fd, off, last ? flen : bytes, &x),
                   "a range past the file", "past the end");
    expect_invalid(c, hoop_mem_register_fd(c, fd, off, last ? bytes - 8 : bytes, &x),
                   "sizes that differ", "disagree on the size");
    expect_invalid(c, hoop_mem_register_fd(c, fd, off, 0, &x), "size 0", "a size of 0");
    CHECK(x == NULL, "a failed registration set *ptr");
    usable(c, 310);
    uint8_t kept[64];
    memcpy(kept, a, sizeof(kept));
    test_must(hoop_mem_free(c, a), c, "hoop_mem_free");
    /* The file is the program's: its own mapping keeps the data after the free. */
    CHECK(memcmp(own + off, kept, sizeof(kept)) == 0, "the file changed at the free");
    munmap(own, flen);
    close(fd);
}

/* Loops zero-copy all-reduces until one fails: the parent kills the last rank meanwhile. */
static void mode_kill(hoop_comm_t *c)
{
    size_t n = 1 << 20;
    float *a, *b;
    test_must(hoop_mem_alloc(c, n * 4, (void **)&a), c, "hoop_mem_alloc");
    test_must(hoop_mem_alloc(c, n * 4, (void **)&b), c, "hoop_mem_alloc");
    for (size_t i = 0; i < n; i++) a[i] = 1.0f;
    test_loop_until_killed(c, a, b, n, 1u << HOOP_ERR_PEER_LOST | 1u << HOOP_ERR_ABORTED);
}

/* The names in /dev/shm that say hoop, up to 64. */
static int shm_names(char names[][256])
{
    DIR *d = opendir("/dev/shm");
    int n = 0;
    if (d == NULL) return 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && n < 64;)
        if (strstr(e->d_name, "hoop") != NULL) snprintf(names[n++], 256, "%s", e->d_name);
    closedir(d);
    return n;
}

static int rank_main(int rank, int size, void *arg)
{
    const char *url = ((const char **)arg)[0], *mode = ((const char **)arg)[1];
    test_rank = rank;
    hoop_comm_t *c;
    if (hoop_init(&c, url, rank, size) != HOOP_OK) {
        printf("FAIL (rank %d): hoop_init\n", rank);
        return 1;
    }
    hoop_comm_set_trace(c, on_trace, NULL);
    if (strcmp(mode, "colls") == 0)
        mode_colls(c);
    else if (strcmp(mode, "bits") == 0)
        mode_bits(c);
    else if (strcmp(mode, "mixed") == 0)
        mode_mixed(c);
    else if (strcmp(mode, "realloc") == 0)
        mode_realloc(c);
    else if (strcmp(mode, "bad") == 0)
        mode_bad(c);
    else if (strcmp(mode, "nonblocking") == 0)
        mode_nonblocking(c);
    else if (strcmp(mode, "others") == 0)
        mode_others(c);
    else if (strcmp(mode, "register") == 0)
        mode_register(c);
    else if (strcmp(mode, "kill") == 0) {
        mode_kill(c);
        return test_rank_end(c, 0);
    }
    return test_rank_end(c, 1);
}

int main(int argc, char **argv)
{
    static const char *const modes[] = {"colls",  "bits",        "mixed", "realloc",  "bad",
                                        "others", "nonblocking", "kill",  "register", NULL};
    int ranks;
    const char *mode;
    if (test_forked_args(argc, argv, modes, &ranks, &mode) != 0) return 2;
    /* The longest time tests/sym/meson.build gives a row: past it, under a timeout multiplier,
     * the ranks still running are named and killed. */
    test_launch_t l;
    char url[160];
    if (test_launch_open(&l, "sym-test", 240) != 0) return 1;
    test_launch_url(&l, "rdv", url, sizeof url);
    int kill_mode = strcmp(mode, "kill") == 0;
    static char before[64][256], after[64][256];
    int nbefore = shm_names(before);
    const char *arg[] = {url, mode};
    int bad = test_launch_fork(&l, ranks, kill_mode, rank_main, arg) != 0;
    /* Once every rank loops, let a few calls pass, then kill the last rank. */
    if (!bad && kill_mode) bad |= test_launch_kill_when(&l, "looping", ranks - 1);
    if (l.nranks > 0) bad |= test_launch_wait(&l, kill_mode ? ranks - 1 : -1, NULL, NULL);
    int nafter = shm_names(after);
    for (int i = 0; i < nafter; i++) {
        int old = 0;
        for (int j = 0; j < nbefore && !old; j++) old = strcmp(after[i], before[j]) == 0;
        if (!old) {
            printf("FAIL: /dev/shm/%s was left behind\n", after[i]);
            bad = 1;
        }
    }
    test_launch_close(&l);
    printf("%s: %s, %d ranks\n", bad ? "FAIL" : "ok", mode, ranks);
    return bad;
}
