/*
 * The shared area's single-copy all-reduce (HOOP_CMA; every rank reads its peers' buffers with
 * process_vm_readv), with real processes: the program forks its ranks itself, each joining over
 * a fresh file:// rendezvous.
 *
 *   cma_test --ranks N --mode colls|bits|others|refused|midcall|kill
 *
 * colls:   HOOP_CMA=on: every dtype and op, in and out of place, at odd counts, against a
 *          reference each rank computes itself (common/refcheck.c; inputs exact under any order
 *          of reduction); the schedule trace must show the single-copy reads on every rank.
 * bits:    inputs whose sums and products round: the single-copy result must be the same bytes
 *          as the same call on a second communicator under HOOP_CMA=off (the area's rounds).
 * others:  reduce-scatter of every dtype and op and all-gather, in and out of place, against
 *          references, single copy on every rank; reduce-scatter's bytes against HOOP_CMA=off.
 * refused: the last rank forbids itself process_vm_readv (a seccomp filter answering EPERM,
 *          installed before init): every rank must fall back to the rounds, with right results,
 *          and none may take the single-copy schedule.
 * midcall: the same filter installed in the last rank after a first single-copy call: the next
 *          call must fail on every rank (never HOOP_OK with wrong bytes), no rank hangs.
 * kill:    the ranks run single-copy all-reduces in a loop; the parent kills the last rank with
 *          SIGKILL: every survivor must fail within the timeout.
 */
#include <errno.h>
#include <inttypes.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hoop.h"
#include "../common/forked.h"

static int cma_lines;    /* trace lines of the single-copy reads since the last reset */
static int rounds_lines; /* trace lines of the area's rounds since the last reset */

static void on_trace(void *ctx, const char *line)
{
    (void)ctx;
    if (strstr(line, "with process_vm_readv") != NULL) cma_lines++;
    if (strstr(line, "folds chunk") != NULL) rounds_lines++;
}

/* Makes process_vm_readv fail with EPERM in this process from now on, as a kernel that forbids
 * it would. */
static int forbid_cma(void)
{
#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#endif
#ifdef ARCH
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = (unsigned short)(sizeof f / sizeof f[0]), .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
#else
    return -1;
#endif
}

/* One all-reduce on in and out (out == in: in place) against the reference; cma: whether every
 * rank must have read its peers (else the rounds must have run). */
static void one_case(hoop_comm_t *c, void *in, void *out, hoop_dtype_t dt, hoop_op_t op, size_t n,
                     uint64_t salt, int cma, const char *what)
{
    int p = hoop_comm_size(c), r = hoop_comm_rank(c);
    rc_fill_exact(in, dt, op, p, r, salt, n);
    cma_lines = rounds_lines = 0;
    test_must(hoop_allreduce(c, in, out, n, dt, op), c, what);
    test_verify_exact(out, dt, op, p, salt, n, what);
    CHECK(cma ? cma_lines == 2 && rounds_lines == 0 : cma_lines == 0 && rounds_lines > 0,
          "%s %s %s n=%zu: %d single-copy and %d rounds trace lines, want %s", what,
          hoop_dtype_name(dt), hoop_op_name(op), n, cma_lines, rounds_lines,
          cma ? "the single copy" : "the rounds");
}

static void mode_colls(hoop_comm_t *c)
{
    size_t cap = 300007 * 8;
    uint8_t *a = malloc(cap + 64), *b = malloc(cap + 64);
    uint64_t salt = 1;
    test_sweep_exact(c, a, b, one_case, 1, &salt);
    free(a);
    free(b);
    /* A block over several of the reads (2 MiB each), at 2 ranks too. */
    size_t big = 1572869;
    a = malloc(big * 4 + 64);
    b = malloc(big * 4 + 64);
    one_case(c, a, b, HOOP_FLOAT32, HOOP_SUM, big, salt++, 1, "several reads");
    one_case(c, a, a, HOOP_INT32, HOOP_PROD, big, salt++, 1, "several reads in place");
    /* Unaligned addresses, which no rank shares with its peers. */
    one_case(c, a + 8 + (size_t)test_rank, b + 3, HOOP_INT64, HOOP_SUM, 70001, salt++, 1,
             "at offsets");
    free(a);
    free(b);
}

static void fill_rounding(void *buf, hoop_dtype_t dt, size_t n, uint64_t seed)
{
    size_t es = hoop_dtype_size(dt);
    for (size_t i = 0; i < n; i++) {
        uint64_t h = rc_mix(seed + i);
        double v = (double)(h >> 11) / 9007199254740992.0 * 2.0 + 0.5;
        rc_st(buf, i, es, rc_fenc(dt, v));
    }
}

/* c under HOOP_CMA=on, off under HOOP_CMA=off: the same calls, the same bytes. */
static void mode_bits(hoop_comm_t *c, hoop_comm_t *off)
{
    int r = hoop_comm_rank(c);
    size_t n = 300007, cap = n * 8;
    uint8_t *a = malloc(cap), *b = malloc(cap), *o1 = malloc(cap), *o2 = malloc(cap);
    const hoop_dtype_t dts[] = {HOOP_FLOAT32, HOOP_FLOAT64, HOOP_FLOAT16, HOOP_BFLOAT16};
    const hoop_op_t ops[] = {HOOP_SUM, HOOP_PROD, HOOP_AVG};
    for (size_t d = 0; d < 4; d++)
        for (size_t o = 0; o < 3; o++) {
            size_t bytes = n * hoop_dtype_size(dts[d]);
            uint64_t seed = (uint64_t)r << 32 | (d * 8 + o);
            fill_rounding(a, dts[d], n, seed);
            memcpy(o1, a, bytes);
            cma_lines = rounds_lines = 0;
            test_must(hoop_allreduce(c, a, b, n, dts[d], ops[o]), c, "allreduce HOOP_CMA=on");
            CHECK(cma_lines == 2, "bits: the single copy did not run");
            test_must(hoop_allreduce(off, o1, o2, n, dts[d], ops[o]), off,
                      "allreduce HOOP_CMA=off");
            CHECK(rounds_lines > 0, "bits: the rounds did not run under HOOP_CMA=off");
            CHECK(memcmp(b, o2, bytes) == 0, "bits %s %s: single copy and the rounds differ",
                  hoop_dtype_name(dts[d]), hoop_op_name(ops[o]));
            fill_rounding(a, dts[d], n, seed);
            test_must(hoop_allreduce(c, a, a, n, dts[d], ops[o]), c, "allreduce in place");
            CHECK(memcmp(a, o2, bytes) == 0,
                  "bits %s %s in place: single copy and the rounds differ", hoop_dtype_name(dts[d]),
                  hoop_op_name(ops[o]));
        }
    free(a);
    free(b);
    free(o1);
    free(o2);
}

/* Reduce-scatter of every dtype and op, and all-gather, in and out of place, under HOOP_CMA=on:
 * references of their own, the single copy's trace on every rank, and for reduce-scatter of
 * rounding inputs the bytes of the same call under HOOP_CMA=off. */
static void mode_others(hoop_comm_t *c, hoop_comm_t *off)
{
    int p = hoop_comm_size(c), r = hoop_comm_rank(c);
    size_t n = 30011; /* a rank's block: above HOOP_SMALL_BYTES for every dtype */
    /* all-gather: above 256 KiB a rank, where 2 ranks would go point to point (plan.c) */
    size_t agn = 70001, cap = agn * 4 * (size_t)p;
    uint8_t *a = malloc(cap), *b = malloc(cap), *o1 = malloc(cap), *o2 = malloc(cap);
    uint64_t salt = 500;
    for (int dt = 0; dt < HOOP_DTYPE_COUNT; dt++)
        for (int op = 0; op < HOOP_OP_COUNT; op++)
            for (int ip = 0; ip < 2; ip++) {
                size_t es = hoop_dtype_size((hoop_dtype_t)dt);
                rc_fill_exact(a, (hoop_dtype_t)dt, (hoop_op_t)op, p, r, salt, n * (size_t)p);
                /* in place: NCCL's placement, the output at the own block of the input */
                uint8_t *out = ip ? a + (size_t)r * n * es : b;
                cma_lines = rounds_lines = 0;
                test_must(hoop_reduce_scatter(c, a, out, n, (hoop_dtype_t)dt, (hoop_op_t)op), c,
                          "reduce-scatter");
                CHECK(cma_lines == 1 && rounds_lines == 0,
                      "reduce-scatter %s %s%s: %d single-copy, %d rounds trace lines",
                      hoop_dtype_name((hoop_dtype_t)dt), hoop_op_name((hoop_op_t)op),
                      ip ? " in place" : "", cma_lines, rounds_lines);
                /* the reference of block r: elements r*n .. r*n+n-1 of every input */
                size_t bad = 0;
                for (size_t i = 0; i < n; i++) {
                    rc_acc_t acc = {0};
                    for (int q = 0; q < p; q++)
                        rc_acc_add(&acc, (hoop_dtype_t)dt, es, (hoop_op_t)op,
                                   rc_exact_input((hoop_dtype_t)dt, (hoop_op_t)op, p, q, salt,
                                                  (size_t)r * n + i));
                    uint64_t want = rc_acc_result(&acc, (hoop_dtype_t)dt, es, (hoop_op_t)op, p);
                    if (rc_ld(out, i, es) != want) bad++;
                }
                CHECK(bad == 0, "reduce-scatter %s %s%s: %zu wrong elements",
                      hoop_dtype_name((hoop_dtype_t)dt), hoop_op_name((hoop_op_t)op),
                      ip ? " in place" : "", bad);
                salt++;
            }
    /* Rounding inputs: the bytes of the rounds. */
    const hoop_dtype_t dts[] = {HOOP_FLOAT32, HOOP_FLOAT16, HOOP_BFLOAT16, HOOP_FLOAT64};
    const hoop_op_t ops[] = {HOOP_SUM, HOOP_PROD, HOOP_AVG};
    for (size_t d = 0; d < 4; d++)
        for (size_t o = 0; o < 3; o++) {
            size_t bytes = n * hoop_dtype_size(dts[d]);
            fill_rounding(a, dts[d], n * (size_t)p, (uint64_t)r << 32 | (d * 8 + o));
            memcpy(o1, a, bytes * (size_t)p);
            test_must(hoop_reduce_scatter(c, a, b, n, dts[d], ops[o]), c, "reduce-scatter on");
            test_must(hoop_reduce_scatter(off, o1, o2, n, dts[d], ops[o]), off,
                      "reduce-scatter off");
            CHECK(memcmp(b, o2, bytes) == 0, "reduce-scatter %s %s: single copy and rounds differ",
                  hoop_dtype_name(dts[d]), hoop_op_name(ops[o]));
        }
    /* All-gather, out of place and in place (the input at the own block of the output). */
    n = agn;
    for (int ip = 0; ip < 2; ip++) {
        size_t bytes = n * 4;
        uint8_t *in = ip ? b + (size_t)r * bytes : a;
        for (size_t i = 0; i < n; i++)
            rc_st(in, i, 4, rc_mix((uint64_t)r << 40 ^ i ^ 77) & 0xffffffffu);
        cma_lines = rounds_lines = 0;
        test_must(hoop_allgather(c, in, b, n, HOOP_UINT32), c, "all-gather");
        CHECK(cma_lines == 1, "all-gather%s: the single copy did not run", ip ? " in place" : "");
        size_t bad = 0;
        for (int q = 0; q < p; q++)
            for (size_t i = 0; i < n; i++)
                if (rc_ld(b + (size_t)q * bytes, i, 4) !=
                    (rc_mix((uint64_t)q << 40 ^ i ^ 77) & 0xffffffffu))
                    bad++;
        CHECK(bad == 0, "all-gather%s: %zu wrong elements", ip ? " in place" : "", bad);
    }
    free(a);
    free(b);
    free(o1);
    free(o2);
}

/* The last rank cannot read its peers (filter installed before init): the rounds on every rank,
 * call after call. */
static void mode_refused(hoop_comm_t *c)
{
    size_t n = 300007;
    uint8_t *a = malloc(n * 8), *b = malloc(n * 8);
    for (int k = 0; k < 3; k++) {
        one_case(c, a, b, HOOP_FLOAT32, HOOP_SUM, n, 100 + (uint64_t)k, 0, "refused");
        one_case(c, a, a, HOOP_INT32, HOOP_MAX, n, 200 + (uint64_t)k, 0, "refused in place");
    }
    free(a);
    free(b);
}

/* The last rank loses process_vm_readv after the probe passed: the next call fails on every
 * rank, whatever it had written. */
static void mode_midcall(hoop_comm_t *c)
{
    int p = hoop_comm_size(c);
    size_t n = 300007;
    float *a = malloc(n * 4), *b = malloc(n * 4);
    one_case(c, a, b, HOOP_FLOAT32, HOOP_SUM, n, 7, 1, "before the filter");
    if (test_rank == p - 1) CHECK(forbid_cma() == 0, "seccomp: %s", strerror(errno));
    rc_fill_exact(a, HOOP_FLOAT32, HOOP_SUM, p, test_rank, 8, n);
    hoop_result_t rc = hoop_allreduce(c, a, b, n, HOOP_FLOAT32, HOOP_SUM);
    CHECK(rc != HOOP_OK, "the call after the filter returned HOOP_OK");
    printf("rank %d: %s: %s\n", test_rank, hoop_error_string(rc), hoop_comm_last_error(c));
    fflush(stdout);
    free(a);
    free(b);
}

static void mode_kill(hoop_comm_t *c)
{
    size_t n = 1 << 20;
    float *a = malloc(n * 4), *b = malloc(n * 4);
    for (size_t i = 0; i < n; i++) a[i] = 1.0f;
    test_loop_until_killed(
        c, a, b, n, 1u << HOOP_ERR_PEER_LOST | 1u << HOOP_ERR_ABORTED | 1u << HOOP_ERR_SYSTEM);
    free(a);
    free(b);
}

typedef struct launch_arg {
    const test_launch_t *launch;
    const char *mode;
} launch_arg_t;

static int rank_main(int rank, int size, void *arg)
{
    const test_launch_t *l = ((launch_arg_t *)arg)->launch;
    const char *mode = ((launch_arg_t *)arg)->mode;
    test_rank = rank;
    char url[160];
    if (strcmp(mode, "refused") == 0 && rank == size - 1 && forbid_cma() != 0) {
        printf("FAIL (rank %d): seccomp: %s\n", rank, strerror(errno));
        return 1;
    }
    setenv("HOOP_CMA", "on", 1);
    test_launch_url(l, "rdv", url, sizeof url);
    hoop_comm_t *c, *off = NULL;
    if (hoop_init(&c, url, rank, size) != HOOP_OK) {
        printf("FAIL (rank %d): hoop_init\n", rank);
        return 1;
    }
    hoop_comm_set_trace(c, on_trace, NULL);
    if (strcmp(mode, "bits") == 0 || strcmp(mode, "others") == 0) {
        setenv("HOOP_CMA", "off", 1);
        test_launch_url(l, "rdv-off", url, sizeof url);
        if (hoop_init(&off, url, rank, size) != HOOP_OK) {
            printf("FAIL (rank %d): hoop_init HOOP_CMA=off\n", rank);
            return 1;
        }
        hoop_comm_set_trace(off, on_trace, NULL);
        if (strcmp(mode, "bits") == 0)
            mode_bits(c, off);
        else
            mode_others(c, off);
        test_must(hoop_barrier(off), off, "hoop_barrier");
        hoop_comm_destroy(off);
    } else if (strcmp(mode, "colls") == 0) {
        mode_colls(c);
    } else if (strcmp(mode, "refused") == 0) {
        mode_refused(c);
    } else if (strcmp(mode, "midcall") == 0 || strcmp(mode, "kill") == 0) {
        if (strcmp(mode, "kill") == 0)
            mode_kill(c);
        else
            mode_midcall(c);
        return test_rank_end(c, 0);
    }
    return test_rank_end(c, 1);
}

int main(int argc, char **argv)
{
    static const char *const modes[] = {"colls",   "bits", "others", "refused",
                                        "midcall", "kill", NULL};
    int ranks;
    const char *mode;
    if (test_forked_args(argc, argv, modes, &ranks, &mode) != 0) return 2;
    if (ranks < 2 || ranks > 64) return 2;
    /* The longest time tests/cma/meson.build gives a row: past it, under a timeout multiplier,
     * the ranks still running are named and killed. */
    test_launch_t l;
    if (test_launch_open(&l, "cma-test", 240) != 0) return 1;
    int kill_mode = strcmp(mode, "kill") == 0;
    launch_arg_t arg = {&l, mode};
    int bad = test_launch_fork(&l, ranks, kill_mode, rank_main, &arg) != 0;
    if (!bad && kill_mode) bad |= test_launch_kill_when(&l, "looping", ranks - 1);
    if (l.nranks > 0) bad |= test_launch_wait(&l, kill_mode ? ranks - 1 : -1, NULL, NULL);
    test_launch_close(&l);
    printf("%s: %s, %d ranks\n", bad ? "FAIL" : "ok", mode, ranks);
    return bad;
}
