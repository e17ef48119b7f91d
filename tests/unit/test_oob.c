/* The out-of-band exchange that init offers transports (hoop__tp_oob_t), through a real store (tcp,
 * served by rank 0, and file) and real processes: all-gathers, a put and a get for every pair, a
 * value of 64 KiB, and the failures (a get nobody answers, a bad tag, ranks that disagree on the
 * length of an all-gather), each with its sentence. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/clock.h"
#include "core/lifecycle.h"
#include "../common/testing.h"

#define RANKS 3
#define BIG (64 * 1024)

static void failf(int rank, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failf(int rank, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("rank %d: ", rank);
    vsay_fail(fmt, ap);
    va_end(ap);
}

#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failf(rank, __VA_ARGS__);                                                              \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static uint8_t byte_of(int from, int to, size_t i)
{
    return (uint8_t)(from * 31 + to * 7 + i * 13);
}

/* One rank's part. Returns 0 when every check held. */
static int rank_main(hoop__rdv_t rdv)
{
    int rank = rdv.rank;
    char err[512] = "";
    hoop__store_t *st = NULL;
    hoop_result_t rc = hoop__store_open(&rdv, 10.0, NULL, &st, err, sizeof err);
    REQUIRE(rc == HOOP_OK, "store: %s", err);
    hoop__oob_ctx_t ctx;
    hoop__tp_oob_t oob;
    hoop__oob_over_store(&ctx, st, rank, RANKS, &oob);
    double deadline = hoop__now() + 10.0;

    /* All-gathers, small and large. */
    static uint8_t mine[BIG], all[RANKS * BIG];
    const size_t lens[2] = {40, BIG};
    for (int k = 0; k < 2; k++) {
        char tag[32];
        snprintf(tag, sizeof tag, "test.all-%d", k);
        for (size_t i = 0; i < lens[k]; i++) mine[i] = byte_of(rank, k, i);
        rc = oob.allgather(oob.ctx, tag, mine, all, lens[k], deadline);
        REQUIRE(rc == HOOP_OK, "allgather %s: %s: %s", tag, hoop_error_string(rc),
                oob.error(oob.ctx));
        for (int j = 0; j < RANKS; j++)
            for (size_t i = 0; i < lens[k]; i++)
                REQUIRE(all[(size_t)j * lens[k] + i] == byte_of(j, k, i),
                        "allgather %s: byte %zu of rank %d differs", tag, i, j);
    }

    /* Every pair, both ways, each value of its own length. */
    uint8_t buf[64];
    for (int j = 0; j < RANKS; j++) {
        if (j == rank) continue;
        size_t n = 10 + (size_t)(rank * 7 + j);
        for (size_t i = 0; i < n; i++) buf[i] = byte_of(rank, j, i);
        rc = oob.put(oob.ctx, "test.pair", j, buf, n);
        REQUIRE(rc == HOOP_OK, "put for rank %d: %s", j, oob.error(oob.ctx));
    }
    for (int j = 0; j < RANKS; j++) {
        if (j == rank) continue;
        size_t got = 0, want = 10 + (size_t)(j * 7 + rank);
        rc = oob.get(oob.ctx, "test.pair", j, buf, sizeof buf, &got, deadline);
        REQUIRE(rc == HOOP_OK, "get from rank %d: %s", j, oob.error(oob.ctx));
        REQUIRE(got == want, "get from rank %d: %zu bytes, expected %zu", j, got, want);
        for (size_t i = 0; i < got; i++)
            REQUIRE(buf[i] == byte_of(j, rank, i), "get from rank %d: byte %zu differs", j, i);
    }

    /* Failures, each with a sentence. */
    size_t got = 0;
    double t0 = hoop__now();
    rc = oob.get(oob.ctx, "test.nobody", (rank + 1) % RANKS, buf, sizeof buf, &got, t0 + 0.2);
    REQUIRE(rc == HOOP_ERR_TIMEOUT && oob.error(oob.ctx)[0] != '\0' && hoop__now() - t0 < 5.0,
            "a get nobody answers: %s after %.2f s: \"%s\"", hoop_error_string(rc),
            hoop__now() - t0, oob.error(oob.ctx));
    rc = oob.put(oob.ctx, "a/b", 0, buf, 1);
    REQUIRE(rc == HOOP_ERR_INVALID_ARGUMENT && strstr(oob.error(oob.ctx), "bad tag") != NULL,
            "a tag with a slash: %s: \"%s\"", hoop_error_string(rc), oob.error(oob.ctx));
    /* Rank 1 gives 3 bytes where the others give 4: everyone fails, naming a rank that differs. */
    rc = oob.allgather(oob.ctx, "test.uneven", mine, all, rank == 1 ? 3 : 4, deadline);
    REQUIRE(rc == HOOP_ERR_MISMATCH &&
                strstr(oob.error(oob.ctx), rank == 1 ? "rank 0" : "rank 1") != NULL,
            "an uneven allgather: %s: \"%s\"", hoop_error_string(rc), oob.error(oob.ctx));

    /* Rank 0's store goes when it closes: it waits for everyone to say they are through. */
    for (int j = 1; j < RANKS && rank == 0; j++) {
        rc = oob.get(oob.ctx, "test.through", j, buf, sizeof buf, &got, deadline);
        REQUIRE(rc == HOOP_OK, "rank %d is not through: %s", j, oob.error(oob.ctx));
    }
    if (rank != 0) {
        rc = oob.put(oob.ctx, "test.through", 0, "", 0);
        REQUIRE(rc == HOOP_OK, "through: %s", oob.error(oob.ctx));
    }
    hoop__store_close(st);
    return 0;
}

static void run_ranks(hoop__rdv_t base)
{
    fflush(stdout);
    pid_t pids[RANKS];
    for (int r = 0; r < RANKS; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);
        if (pids[r] == 0) {
            hoop__rdv_t rdv = base;
            rdv.rank = r;
            _exit(rank_main(rdv));
        }
    }
    for (int r = 0; r < RANKS; r++) {
        int status = 0;
        assert_int_equal(waitpid(pids[r], &status, 0), pids[r]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
}

static hoop__rdv_t rdv_of(const char *method)
{
    hoop__rdv_t r;
    memset(&r, 0, sizeof r);
    snprintf(r.method, sizeof r.method, "%s", method);
    r.size = RANKS;
    r.local_rank = r.local_size = -1;
    return r;
}

static void over_tcp_store(void **state)
{
    (void)state;
    hoop__rdv_t r = rdv_of("tcp");
    snprintf(r.host, sizeof r.host, "127.0.0.1");
    r.port = test_free_port();
    assert_true(r.port > 0);
    run_ranks(r);
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void over_file_store(void **state)
{
    (void)state;
    char base[] = "/tmp/hoop-oob-test-XXXXXX";
    assert_non_null(mkdtemp(base));
    hoop__rdv_t r = rdv_of("file");
    snprintf(r.path, sizeof r.path, "%s/job.store", base);
    run_ranks(r);
    nftw(base, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(over_tcp_store),
        cmocka_unit_test(over_file_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
