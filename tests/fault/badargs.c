/*
 * Every public function with every kind of bad argument, on 1 rank (run it alone) or more (under
 * hooprun): each call must return the right code at once, with a message in
 * hoop_comm_last_error() that names the function and the argument at fault (hoop_init, which has
 * no communicator, says it in the log: stderr is captured to check). The communicator must still
 * work afterwards, although rank 0 made more bad calls than the others.
 * Then a split communicator is aborted on rank 0: every call on it must fail with
 * HOOP_ERR_ABORTED, naming itself and the abort, and the other ranks must learn it within 5 s,
 * while the parent goes on working.
 *
 *   [hooprun -n N] badargs [--transport T]
 *
 * A transport the library does not accept (HOOP_TRANSPORT) makes the test skip (exit 77).
 */
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hoop.h"
#include "../common/testing.h"

#define BAD_DT1 ((hoop_dtype_t)-1)
#define BAD_DT2 ((hoop_dtype_t)HOOP_DTYPE_COUNT)
#define BAD_OP1 ((hoop_op_t)-1)
#define BAD_OP2 ((hoop_op_t)HOOP_OP_COUNT)

static int rank_ = 0, size_ = 1;
static long tried, failed;

static void fail(int line, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("rank %d: FAIL line %d: ", rank_, line);
    vprintf(fmt, ap);
    putchar('\n');
    fflush(stdout);
    va_end(ap);
    failed++;
}

/*
 * One call's outcome: the code, and on a communicator a message naming the function (fn) and the
 * faulty argument (key, a word of the sentence). Each call is timed: a bad argument is found
 * without waiting for anyone.
 */
static void expect_at(int line, const char *text, hoop_comm_t *c, hoop_result_t got, double dt,
                      hoop_result_t want, const char *fn, const char *key)
{
    tried++;
    if (got != want) {
        fail(line, "%s returned %d (%s), want %d (%s)", text, (int)got, hoop_error_string(got),
             (int)want, hoop_error_string(want));
        return;
    }
    if (dt > 0.5) fail(line, "%s took %.3f s", text, dt);
    const char *m = hoop_comm_last_error(c);
    if (m == NULL || m[0] == '\0') {
        fail(line, "%s: empty message", text);
        return;
    }
    if (c == NULL) return; /* no communicator to name the call: only the generic sentence */
    if (fn != NULL && strstr(m, fn) == NULL)
        fail(line, "%s: message '%s' does not name %s", text, m, fn);
    if (key != NULL && strstr(m, key) == NULL)
        fail(line, "%s: message '%s' does not mention '%s'", text, m, key);
}

#define EXPECT(c, call, want, fn, key)                                                             \
    do {                                                                                           \
        double t0_ = now_s();                                                                      \
        hoop_result_t r_ = (call);                                                                 \
        expect_at(__LINE__, #call, (c), r_, now_s() - t0_, (want), (fn), (key));                   \
    } while (0)

#define CHECK_TRUE(cond)                                                                           \
    do {                                                                                           \
        tried++;                                                                                   \
        if (!(cond)) fail(__LINE__, "%s", #cond);                                                  \
    } while (0)

/* ---- stderr capture, for hoop_init, whose sentence goes to the log ---- */

static int saved_err = -1;
static char cap_path[64];

static void capture_begin(void)
{
    fflush(stderr);
    snprintf(cap_path, sizeof cap_path, "/tmp/hoop-badargs-XXXXXX");
    int fd = mkstemp(cap_path);
    if (fd < 0) return;
    saved_err = dup(2);
    dup2(fd, 2);
    close(fd);
}

static void capture_end(char *out, size_t cap)
{
    out[0] = '\0';
    if (saved_err < 0) return;
    fflush(stderr);
    dup2(saved_err, 2);
    close(saved_err);
    saved_err = -1;
    FILE *f = fopen(cap_path, "r");
    if (f != NULL) {
        size_t n = fread(out, 1, cap - 1, f);
        out[n] = '\0';
        fclose(f);
    }
    unlink(cap_path);
}

/* hoop_init must fail at once with want, leave *comm NULL, and log a line naming hoop_init and key. */
static void init_case(int line, const char *method, int rank, int size, hoop_result_t want,
                      const char *key)
{
    hoop_comm_t *c = (hoop_comm_t *)&tried; /* must be overwritten with NULL */
    char log[4096];
    capture_begin();
    double t0 = now_s();
    hoop_result_t rc = hoop_init(&c, method, rank, size);
    double dt = now_s() - t0;
    capture_end(log, sizeof log);
    tried++;
    char what[160];
    snprintf(what, sizeof what, "hoop_init(\"%s\", %d, %d)", method ? method : "(null)", rank,
             size);
    if (rc != want) {
        fail(line, "%s returned %s, want %s", what, hoop_error_string(rc), hoop_error_string(want));
        if (rc == HOOP_OK && c != NULL) hoop_comm_destroy(c);
        return;
    }
    if (c != NULL) fail(line, "%s failed but left *comm set", what);
    if (dt > 1.0) fail(line, "%s took %.2f s to fail", what, dt);
    if (strstr(log, "hoop_init") == NULL || (key != NULL && strstr(log, key) == NULL))
        fail(line, "%s: the log does not say why (want hoop_init and '%s'): '%s'", what,
             key ? key : "", log);
}

/* hoop_init_from_env with one variable set to a bad value (single-rank runs only). A launcher
 * variable is tried as rank 0 of 2, whose other rank never comes: the rendezvous refuses it before
 * waiting. A HOOP_* one as a job of its own: in a larger job that rank meets the others first, to
 * fail init on every rank with its sentence (tests/agree, init mode), and here nobody would come. */
static void env_case(int line, const char *var, const char *val, const char *key)
{
    const char *vars[] = {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
    const char *vals[] = {"0", strncmp(var, "HOOP_", 5) == 0 ? "1" : "2", "127.0.0.1", "1"};
    for (int i = 0; i < 4; i++) setenv(vars[i], vals[i], 1);
    char *old = getenv(var) ? strdup(getenv(var)) : NULL;
    setenv(var, val, 1);
    hoop_comm_t *c = NULL;
    char log[4096];
    capture_begin();
    double t0 = now_s();
    hoop_result_t rc = hoop_init_from_env(&c);
    double dt = now_s() - t0;
    capture_end(log, sizeof log);
    tried++;
    if (rc != HOOP_ERR_INVALID_ARGUMENT)
        fail(line, "%s=%s: hoop_init_from_env returned %s", var, val, hoop_error_string(rc));
    else if (dt > 1.0)
        fail(line, "%s=%s: hoop_init_from_env took %.2f s", var, val, dt);
    else if (strstr(log, key) == NULL)
        fail(line, "%s=%s: the log does not mention '%s': '%s'", var, val, key, log);
    if (rc == HOOP_OK) hoop_comm_destroy(c);
    if (old != NULL) {
        setenv(var, old, 1);
        free(old);
    } else {
        unsetenv(var);
    }
    for (int i = 0; i < 4; i++)
        if (strcmp(vars[i], var) != 0) unsetenv(vars[i]);
    unsetenv(var);
}

static void trace_sink(void *ctx, const char *line)
{
    (void)ctx;
    (void)line;
}

/* ---- the calls ---- */

static void free_functions(void)
{
    /* Lookups never return NULL or an empty string, whatever the value. */
    int vals[] = {-1, 11, 1000, INT_MIN, INT_MAX};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        const char *e = hoop_error_string((hoop_result_t)vals[i]);
        const char *d = hoop_dtype_name((hoop_dtype_t)vals[i]);
        const char *o = hoop_op_name((hoop_op_t)vals[i]);
        CHECK_TRUE(e != NULL && e[0] != '\0');
        CHECK_TRUE(d != NULL && d[0] != '\0');
        CHECK_TRUE(o != NULL && o[0] != '\0');
        CHECK_TRUE(hoop_dtype_size((hoop_dtype_t)vals[i]) == 0);
    }
    CHECK_TRUE(hoop_version() != NULL && hoop_version()[0] != '\0');
    CHECK_TRUE(hoop_comm_rank(NULL) == -1);
    CHECK_TRUE(hoop_comm_size(NULL) == -1);
    const char *m = hoop_comm_last_error(NULL);
    CHECK_TRUE(m != NULL && m[0] != '\0');

    /* hoop_reduce_local has no communicator: the code alone. */
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 1, 1, 1}, out[4];
    EXPECT(NULL, hoop_reduce_local(out, a, b, 4, BAD_DT1, HOOP_SUM), HOOP_ERR_INVALID_ARGUMENT,
           NULL, NULL);
    EXPECT(NULL, hoop_reduce_local(out, a, b, 4, BAD_DT2, HOOP_SUM), HOOP_ERR_INVALID_ARGUMENT,
           NULL, NULL);
    EXPECT(NULL, hoop_reduce_local(out, a, b, 4, HOOP_FLOAT32, BAD_OP1), HOOP_ERR_INVALID_ARGUMENT,
           NULL, NULL);
    EXPECT(NULL, hoop_reduce_local(out, a, b, 4, HOOP_FLOAT32, BAD_OP2), HOOP_ERR_INVALID_ARGUMENT,
           NULL, NULL);
    EXPECT(NULL, hoop_reduce_local(NULL, a, b, 4, HOOP_FLOAT32, HOOP_SUM),
           HOOP_ERR_INVALID_ARGUMENT, NULL, NULL);
    EXPECT(NULL, hoop_reduce_local(out, NULL, b, 4, HOOP_FLOAT32, HOOP_SUM),
           HOOP_ERR_INVALID_ARGUMENT, NULL, NULL);
    EXPECT(NULL, hoop_reduce_local(out, a, NULL, 4, HOOP_FLOAT32, HOOP_SUM),
           HOOP_ERR_INVALID_ARGUMENT, NULL, NULL);
    EXPECT(NULL, hoop_reduce_local(out, a, b, SIZE_MAX / 2, HOOP_FLOAT32, HOOP_SUM),
           HOOP_ERR_INVALID_ARGUMENT, NULL, NULL);
    EXPECT(NULL, hoop_reduce_local(NULL, NULL, NULL, 0, HOOP_FLOAT32, HOOP_SUM), HOOP_OK, NULL,
           NULL);
    EXPECT(NULL, hoop_reduce_local(out, a, b, 4, HOOP_FLOAT32, HOOP_SUM), HOOP_OK, NULL, NULL);
    CHECK_TRUE(out[0] == 2 && out[1] == 3 && out[2] == 4 && out[3] == 5);

    EXPECT(NULL, hoop_wait(NULL), HOOP_ERR_INVALID_ARGUMENT, NULL, NULL);
    int done = 0;
    EXPECT(NULL, hoop_test(NULL, &done), HOOP_ERR_INVALID_ARGUMENT, NULL, NULL);
    hoop_stats_t st;
    EXPECT(NULL, hoop_comm_stats(NULL, &st), HOOP_ERR_INVALID_ARGUMENT, NULL, NULL);
    EXPECT(NULL, hoop_comm_dump(NULL, NULL), HOOP_ERR_INVALID_ARGUMENT, NULL, NULL);
    EXPECT(NULL, hoop_comm_set_trace(NULL, trace_sink, NULL), HOOP_ERR_INVALID_ARGUMENT, NULL,
           NULL);
    EXPECT(NULL, hoop_comm_destroy(NULL), HOOP_ERR_INVALID_ARGUMENT, NULL, NULL);
    EXPECT(NULL, hoop_comm_abort(NULL), HOOP_ERR_INVALID_ARGUMENT, NULL, NULL);
    EXPECT(NULL, hoop_comm_set_algo(NULL, "ring"), HOOP_ERR_INVALID_ARGUMENT, NULL, NULL);
    EXPECT(NULL, hoop_comm_set_timeout(NULL, 1.0), HOOP_ERR_INVALID_ARGUMENT, NULL, NULL);
    hoop_comm_t *nc = NULL;
    EXPECT(NULL, hoop_comm_split(NULL, 0, 0, &nc), HOOP_ERR_INVALID_ARGUMENT, NULL, NULL);
    EXPECT(NULL, hoop_init(NULL, NULL, 0, 1), HOOP_ERR_INVALID_ARGUMENT, NULL, NULL);
}

static void init_methods(int single)
{
    /* Malformed methods and numbers: no network is touched, so each fails at once. */
    init_case(__LINE__, "bogus://x", 0, 2, HOOP_ERR_INVALID_ARGUMENT, "bogus");
    init_case(__LINE__, "tcp://", 0, 2, HOOP_ERR_INVALID_ARGUMENT, "tcp://");
    init_case(__LINE__, "tcp://127.0.0.1", 0, 2, HOOP_ERR_INVALID_ARGUMENT, "port");
    init_case(__LINE__, "tcp://127.0.0.1:", 0, 2, HOOP_ERR_INVALID_ARGUMENT, "port");
    init_case(__LINE__, "tcp://127.0.0.1:0", 1, 2, HOOP_ERR_INVALID_ARGUMENT, "port");
    init_case(__LINE__, "tcp://127.0.0.1:70000", 0, 2, HOOP_ERR_INVALID_ARGUMENT, "port");
    init_case(__LINE__, "tcp://127.0.0.1:29x00", 0, 2, HOOP_ERR_INVALID_ARGUMENT, "port");
    init_case(__LINE__, "tcp://127.0.0.1:29500", 2, 2, HOOP_ERR_INVALID_ARGUMENT, "rank");
    init_case(__LINE__, "tcp://127.0.0.1:29500", -2, 2, HOOP_ERR_INVALID_ARGUMENT, "rank");
    init_case(__LINE__, "tcp://127.0.0.1:29500", 0, 0, HOOP_ERR_INVALID_ARGUMENT, "size");
    init_case(__LINE__, "tcp://127.0.0.1:29500", 0, -3, HOOP_ERR_INVALID_ARGUMENT, "size");
    init_case(__LINE__, "file://", 0, 2, HOOP_ERR_INVALID_ARGUMENT, "file://");
    init_case(__LINE__, "file://relative/path", 0, 2, HOOP_ERR_INVALID_ARGUMENT, "file://");
    init_case(__LINE__, "", 5, 2, HOOP_ERR_INVALID_ARGUMENT, "rank");
    if (!single) return;
    /* Launcher variables with bad values (only alone: a real job's variables are left as they are). */
    env_case(__LINE__, "WORLD_SIZE", "two", "WORLD_SIZE");
    env_case(__LINE__, "WORLD_SIZE", "0", "WORLD_SIZE");
    env_case(__LINE__, "RANK", "-1", "RANK");
    env_case(__LINE__, "RANK", "2", "RANK");
    env_case(__LINE__, "MASTER_PORT", "65536", "MASTER_PORT");
    env_case(__LINE__, "MASTER_PORT", "", "MASTER_PORT");
    env_case(__LINE__, "HOOP_TIMEOUT", "-5", "HOOP_TIMEOUT");
    env_case(__LINE__, "HOOP_TRANSPORT", "carrier-pigeon", "HOOP_TRANSPORT");
    env_case(__LINE__, "HOOP_ALGO", "bogus", "HOOP_ALGO");
    env_case(__LINE__, "HOOP_SOCKETS_PER_PEER", "0", "HOOP_SOCKETS_PER_PEER");
    env_case(__LINE__, "HOOP_CHUNK_BYTES", "12Q", "HOOP_CHUNK_BYTES");
}

/* Every collective entry point, blocking and nonblocking, with each kind of bad argument. */
static void collectives(hoop_comm_t *c, int extra)
{
    const hoop_result_t INV = HOOP_ERR_INVALID_ARGUMENT;
    int p = hoop_comm_size(c), me = hoop_comm_rank(c);
    float s[64] = {0}, r[64 * 8] = {0};
    hoop_request_t *q = NULL;
    size_t huge = SIZE_MAX / 2 + 1; /* overflows in bytes for every dtype but 1-byte */
    /* Fits alone, overflows once multiplied by the rank count (alone: simply too large). */
    size_t per_rank = p > 1 ? SIZE_MAX / (size_t)p + 1 : SIZE_MAX;

    for (int pass = 0; pass < 1 + extra; pass++) {
        /* NULL communicator: no message holder, the code alone. */
        EXPECT(NULL, hoop_allreduce(NULL, s, r, 4, HOOP_FLOAT32, HOOP_SUM), INV, NULL, NULL);
        EXPECT(NULL, hoop_broadcast(NULL, s, 4, HOOP_FLOAT32, 0), INV, NULL, NULL);
        EXPECT(NULL, hoop_reduce(NULL, s, r, 4, HOOP_FLOAT32, HOOP_SUM, 0), INV, NULL, NULL);
        EXPECT(NULL, hoop_allgather(NULL, s, r, 4, HOOP_FLOAT32), INV, NULL, NULL);
        EXPECT(NULL, hoop_gather(NULL, s, r, 4, HOOP_FLOAT32, 0), INV, NULL, NULL);
        EXPECT(NULL, hoop_scatter(NULL, s, r, 4, HOOP_FLOAT32, 0), INV, NULL, NULL);
        EXPECT(NULL, hoop_reduce_scatter(NULL, s, r, 4, HOOP_FLOAT32, HOOP_SUM), INV, NULL, NULL);
        EXPECT(NULL, hoop_alltoall(NULL, s, r, 4, HOOP_FLOAT32), INV, NULL, NULL);
        EXPECT(NULL, hoop_barrier(NULL), INV, NULL, NULL);
        EXPECT(NULL, hoop_send(NULL, s, 4, HOOP_FLOAT32, 0), INV, NULL, NULL);
        EXPECT(NULL, hoop_recv(NULL, r, 4, HOOP_FLOAT32, 0), INV, NULL, NULL);
        EXPECT(NULL, hoop_iallreduce(NULL, s, r, 4, HOOP_FLOAT32, HOOP_SUM, &q), INV, NULL, NULL);
        EXPECT(NULL, hoop_ibroadcast(NULL, s, 4, HOOP_FLOAT32, 0, &q), INV, NULL, NULL);
        EXPECT(NULL, hoop_ireduce(NULL, s, r, 4, HOOP_FLOAT32, HOOP_SUM, 0, &q), INV, NULL, NULL);
        EXPECT(NULL, hoop_iallgather(NULL, s, r, 4, HOOP_FLOAT32, &q), INV, NULL, NULL);
        EXPECT(NULL, hoop_igather(NULL, s, r, 4, HOOP_FLOAT32, 0, &q), INV, NULL, NULL);
        EXPECT(NULL, hoop_iscatter(NULL, s, r, 4, HOOP_FLOAT32, 0, &q), INV, NULL, NULL);
        EXPECT(NULL, hoop_ireduce_scatter(NULL, s, r, 4, HOOP_FLOAT32, HOOP_SUM, &q), INV, NULL,
               NULL);
        EXPECT(NULL, hoop_ialltoall(NULL, s, r, 4, HOOP_FLOAT32, &q), INV, NULL, NULL);
        EXPECT(NULL, hoop_ibarrier(NULL, &q), INV, NULL, NULL);
        EXPECT(NULL, hoop_isend(NULL, s, 4, HOOP_FLOAT32, 0, &q), INV, NULL, NULL);
        EXPECT(NULL, hoop_irecv(NULL, r, 4, HOOP_FLOAT32, 0, &q), INV, NULL, NULL);

        /* Invalid dtypes, negative and too large, alternating with other faults so that a stale
         * message cannot pass for a fresh one. */
        EXPECT(c, hoop_allreduce(c, s, r, 4, BAD_DT1, HOOP_SUM), INV, "hoop_allreduce", "dtype");
        EXPECT(c, hoop_allreduce(c, s, r, 4, HOOP_FLOAT32, BAD_OP1), INV, "hoop_allreduce", "op");
        EXPECT(c, hoop_allreduce(c, s, r, 4, BAD_DT2, HOOP_SUM), INV, "hoop_allreduce", "dtype");
        EXPECT(c, hoop_allreduce(c, s, r, 4, HOOP_FLOAT32, BAD_OP2), INV, "hoop_allreduce", "op");
        EXPECT(c, hoop_allreduce(c, NULL, r, 4, HOOP_FLOAT32, HOOP_SUM), INV, "hoop_allreduce",
               "sendbuf");
        EXPECT(c, hoop_allreduce(c, s, NULL, 4, HOOP_FLOAT32, HOOP_SUM), INV, "hoop_allreduce",
               "recvbuf");
        EXPECT(c, hoop_allreduce(c, s, r, huge, HOOP_FLOAT32, HOOP_SUM), INV, "hoop_allreduce",
               "count");
        EXPECT(c, hoop_allreduce(c, s, r, SIZE_MAX, HOOP_UINT8, HOOP_SUM), INV, "hoop_allreduce",
               "count");
        EXPECT(c, hoop_iallreduce(c, s, r, 4, HOOP_FLOAT32, HOOP_SUM, NULL), INV, "hoop_iallreduce",
               "req");
        EXPECT(c, hoop_iallreduce(c, s, r, 4, BAD_DT2, HOOP_SUM, &q), INV, "hoop_iallreduce",
               "dtype");
        EXPECT(c, hoop_iallreduce(c, NULL, r, 4, HOOP_FLOAT32, HOOP_SUM, &q), INV,
               "hoop_iallreduce", "sendbuf");
        EXPECT(c, hoop_iallreduce(c, s, r, 4, HOOP_FLOAT32, BAD_OP2, &q), INV, "hoop_iallreduce",
               "op");

        EXPECT(c, hoop_broadcast(c, s, 4, HOOP_FLOAT32, -1), INV, "hoop_broadcast", "root");
        EXPECT(c, hoop_broadcast(c, s, 4, BAD_DT1, 0), INV, "hoop_broadcast", "dtype");
        EXPECT(c, hoop_broadcast(c, s, 4, HOOP_FLOAT32, p), INV, "hoop_broadcast", "root");
        EXPECT(c, hoop_broadcast(c, NULL, 4, HOOP_FLOAT32, 0), INV, "hoop_broadcast", "NULL");
        EXPECT(c, hoop_broadcast(c, s, 4, HOOP_FLOAT32, INT_MAX), INV, "hoop_broadcast", "root");
        EXPECT(c, hoop_broadcast(c, s, huge, HOOP_INT32, 0), INV, "hoop_broadcast", "count");
        EXPECT(c, hoop_broadcast(c, s, 4, HOOP_FLOAT32, INT_MIN), INV, "hoop_broadcast", "root");
        EXPECT(c, hoop_ibroadcast(c, s, 4, HOOP_FLOAT32, 0, NULL), INV, "hoop_ibroadcast", "req");
        EXPECT(c, hoop_ibroadcast(c, s, 4, HOOP_FLOAT32, p, &q), INV, "hoop_ibroadcast", "root");

        EXPECT(c, hoop_reduce(c, s, r, 4, HOOP_FLOAT32, HOOP_SUM, -1), INV, "hoop_reduce", "root");
        EXPECT(c, hoop_reduce(c, s, r, 4, HOOP_FLOAT32, BAD_OP1, 0), INV, "hoop_reduce", "op");
        EXPECT(c, hoop_reduce(c, s, r, 4, HOOP_FLOAT32, HOOP_SUM, p), INV, "hoop_reduce", "root");
        EXPECT(c, hoop_reduce(c, s, r, 4, BAD_DT2, HOOP_SUM, 0), INV, "hoop_reduce", "dtype");
        EXPECT(c, hoop_reduce(c, NULL, r, 4, HOOP_FLOAT32, HOOP_SUM, 0), INV, "hoop_reduce",
               "sendbuf");
        EXPECT(c, hoop_reduce(c, s, r, huge, HOOP_FLOAT64, HOOP_SUM, 0), INV, "hoop_reduce",
               "count");
        if (me == 0) /* only the root needs recvbuf */
            EXPECT(c, hoop_reduce(c, s, NULL, 4, HOOP_FLOAT32, HOOP_SUM, 0), INV, "hoop_reduce",
                   "recvbuf");
        EXPECT(c, hoop_ireduce(c, s, r, 4, HOOP_FLOAT32, HOOP_SUM, 0, NULL), INV, "hoop_ireduce",
               "req");
        EXPECT(c, hoop_ireduce(c, s, r, 4, HOOP_FLOAT32, BAD_OP2, 0, &q), INV, "hoop_ireduce",
               "op");

        EXPECT(c, hoop_allgather(c, NULL, r, 4, HOOP_FLOAT32), INV, "hoop_allgather", "sendbuf");
        EXPECT(c, hoop_allgather(c, s, r, 4, BAD_DT1), INV, "hoop_allgather", "dtype");
        EXPECT(c, hoop_allgather(c, s, NULL, 4, HOOP_FLOAT32), INV, "hoop_allgather", "recvbuf");
        EXPECT(c, hoop_allgather(c, s, r, per_rank, HOOP_UINT8), INV, "hoop_allgather", "count");
        EXPECT(c, hoop_iallgather(c, s, r, 4, HOOP_FLOAT32, NULL), INV, "hoop_iallgather", "req");
        EXPECT(c, hoop_iallgather(c, s, r, 4, BAD_DT2, &q), INV, "hoop_iallgather", "dtype");

        EXPECT(c, hoop_gather(c, s, r, 4, HOOP_FLOAT32, -1), INV, "hoop_gather", "root");
        EXPECT(c, hoop_gather(c, NULL, r, 4, HOOP_FLOAT32, 0), INV, "hoop_gather", "sendbuf");
        EXPECT(c, hoop_gather(c, s, r, 4, HOOP_FLOAT32, p), INV, "hoop_gather", "root");
        EXPECT(c, hoop_gather(c, s, r, 4, BAD_DT1, 0), INV, "hoop_gather", "dtype");
        EXPECT(c, hoop_gather(c, s, r, per_rank, HOOP_INT8, 0), INV, "hoop_gather", "count");
        if (me == 0)
            EXPECT(c, hoop_gather(c, s, NULL, 4, HOOP_FLOAT32, 0), INV, "hoop_gather", "recvbuf");
        EXPECT(c, hoop_igather(c, s, r, 4, HOOP_FLOAT32, 0, NULL), INV, "hoop_igather", "req");
        EXPECT(c, hoop_igather(c, s, r, 4, HOOP_FLOAT32, p, &q), INV, "hoop_igather", "root");

        EXPECT(c, hoop_scatter(c, s, r, 4, HOOP_FLOAT32, -1), INV, "hoop_scatter", "root");
        EXPECT(c, hoop_scatter(c, s, NULL, 4, HOOP_FLOAT32, 0), INV, "hoop_scatter", "NULL");
        EXPECT(c, hoop_scatter(c, s, r, 4, HOOP_FLOAT32, p), INV, "hoop_scatter", "root");
        EXPECT(c, hoop_scatter(c, s, r, 4, BAD_DT2, 0), INV, "hoop_scatter", "dtype");
        if (me == 0)
            EXPECT(c, hoop_scatter(c, NULL, r, 4, HOOP_FLOAT32, 0), INV, "hoop_scatter", "sendbuf");
        EXPECT(c, hoop_scatter(c, s, r, per_rank, HOOP_UINT8, 0), INV, "hoop_scatter", "count");
        EXPECT(c, hoop_iscatter(c, s, r, 4, HOOP_FLOAT32, 0, NULL), INV, "hoop_iscatter", "req");
        EXPECT(c, hoop_iscatter(c, s, r, 4, HOOP_FLOAT32, -1, &q), INV, "hoop_iscatter", "root");

        EXPECT(c, hoop_reduce_scatter(c, s, r, 4, HOOP_FLOAT32, BAD_OP1), INV,
               "hoop_reduce_scatter", "op");
        EXPECT(c, hoop_reduce_scatter(c, NULL, r, 4, HOOP_FLOAT32, HOOP_SUM), INV,
               "hoop_reduce_scatter", "sendbuf");
        EXPECT(c, hoop_reduce_scatter(c, s, r, 4, BAD_DT1, HOOP_SUM), INV, "hoop_reduce_scatter",
               "dtype");
        EXPECT(c, hoop_reduce_scatter(c, s, NULL, 4, HOOP_FLOAT32, HOOP_SUM), INV,
               "hoop_reduce_scatter", "recvbuf");
        EXPECT(c, hoop_reduce_scatter(c, s, r, 4, HOOP_FLOAT32, BAD_OP2), INV,
               "hoop_reduce_scatter", "op");
        EXPECT(c, hoop_reduce_scatter(c, s, r, per_rank, HOOP_UINT8, HOOP_SUM), INV,
               "hoop_reduce_scatter", "count");
        EXPECT(c, hoop_ireduce_scatter(c, s, r, 4, HOOP_FLOAT32, HOOP_SUM, NULL), INV,
               "hoop_ireduce_scatter", "req");
        EXPECT(c, hoop_ireduce_scatter(c, s, r, 4, HOOP_FLOAT32, BAD_OP1, &q), INV,
               "hoop_ireduce_scatter", "op");

        EXPECT(c, hoop_alltoall(c, NULL, r, 4, HOOP_FLOAT32), INV, "hoop_alltoall", "sendbuf");
        EXPECT(c, hoop_alltoall(c, s, r, 4, BAD_DT2), INV, "hoop_alltoall", "dtype");
        EXPECT(c, hoop_alltoall(c, s, NULL, 4, HOOP_FLOAT32), INV, "hoop_alltoall", "recvbuf");
        EXPECT(c, hoop_alltoall(c, s, r, per_rank, HOOP_INT8), INV, "hoop_alltoall", "count");
        EXPECT(c, hoop_ialltoall(c, s, r, 4, HOOP_FLOAT32, NULL), INV, "hoop_ialltoall", "req");
        EXPECT(c, hoop_ialltoall(c, s, r, 4, BAD_DT1, &q), INV, "hoop_ialltoall", "dtype");

        EXPECT(c, hoop_ibarrier(c, NULL), INV, "hoop_ibarrier", "req");

        /* Point-to-point: the peer must be another rank. */
        EXPECT(c, hoop_send(c, s, 4, HOOP_FLOAT32, -1), INV, "hoop_send", "peer");
        EXPECT(c, hoop_send(c, s, 4, BAD_DT1, (me + 1) % p), INV, "hoop_send", "dtype");
        EXPECT(c, hoop_send(c, s, 4, HOOP_FLOAT32, p), INV, "hoop_send", "peer");
        EXPECT(c, hoop_send(c, NULL, 4, HOOP_FLOAT32, (me + 1) % p), INV, "hoop_send", "NULL");
        EXPECT(c, hoop_send(c, s, 4, HOOP_FLOAT32, me), INV, "hoop_send", "peer");
        EXPECT(c, hoop_send(c, s, huge, HOOP_FLOAT16, (me + 1) % p), INV, "hoop_send", "count");
        EXPECT(c, hoop_recv(c, r, 4, HOOP_FLOAT32, INT_MAX), INV, "hoop_recv", "peer");
        EXPECT(c, hoop_recv(c, r, 4, BAD_DT2, (me + 1) % p), INV, "hoop_recv", "dtype");
        EXPECT(c, hoop_recv(c, r, 4, HOOP_FLOAT32, me), INV, "hoop_recv", "peer");
        EXPECT(c, hoop_recv(c, NULL, 4, HOOP_FLOAT32, (me + 1) % p), INV, "hoop_recv", "NULL");
        EXPECT(c, hoop_isend(c, s, 4, HOOP_FLOAT32, (me + 1) % p, NULL), INV, "hoop_isend", "req");
        EXPECT(c, hoop_isend(c, s, 4, HOOP_FLOAT32, -5, &q), INV, "hoop_isend", "peer");
        EXPECT(c, hoop_irecv(c, r, 4, HOOP_FLOAT32, (me + 1) % p, NULL), INV, "hoop_irecv", "req");
        EXPECT(c, hoop_irecv(c, r, 4, HOOP_FLOAT32, p + 3, &q), INV, "hoop_irecv", "peer");

        /* Communicator settings. */
        EXPECT(c, hoop_comm_set_algo(c, NULL), INV, "hoop_comm_set_algo", NULL);
        EXPECT(c, hoop_comm_set_timeout(c, 0), INV, "hoop_comm_set_timeout", "timeout");
        EXPECT(c, hoop_comm_set_algo(c, "bogus"), INV, "hoop_comm_set_algo", "bogus");
        EXPECT(c, hoop_comm_set_timeout(c, -1), INV, "hoop_comm_set_timeout", "timeout");
        EXPECT(c, hoop_comm_set_algo(c, ""), INV, "hoop_comm_set_algo", NULL);
        EXPECT(c, hoop_comm_set_timeout(c, NAN), INV, "hoop_comm_set_timeout", "timeout");
        EXPECT(c, hoop_comm_set_algo(c, "ring; rm -rf /"), INV, "hoop_comm_set_algo", NULL);
        EXPECT(c, hoop_comm_set_timeout(c, INFINITY), INV, "hoop_comm_set_timeout", "timeout");
        EXPECT(c, hoop_comm_set_timeout(c, 1e300), INV, "hoop_comm_set_timeout", "timeout");
        hoop_stats_t st;
        EXPECT(c, hoop_comm_stats(c, NULL), INV, NULL, NULL);
        EXPECT(c, hoop_comm_stats(c, &st), HOOP_OK, NULL, NULL);
        /* A dump nowhere to be written: a sentence naming the path, the communicator goes on. */
        EXPECT(c, hoop_comm_dump(c, ""), INV, "hoop_comm_dump", "empty");
        EXPECT(c, hoop_comm_dump(c, "/nonexistent-dir/hoop/dump.json"), HOOP_ERR_SYSTEM,
               "hoop_comm_dump", "/nonexistent-dir/hoop/dump.json");

        /* Split: a NULL result pointer, colors below HOOP_SPLIT_NONE. */
        hoop_comm_t *nc = (hoop_comm_t *)&tried;
        EXPECT(c, hoop_comm_split(c, 0, 0, NULL), INV, "hoop_comm_split", "newcomm");
        EXPECT(c, hoop_comm_split(c, -2, 0, &nc), INV, "hoop_comm_split", "color");
        CHECK_TRUE(nc == NULL);
        EXPECT(c, hoop_comm_split(c, INT_MIN, 0, &nc), INV, "hoop_comm_split", "color");
    }

    /* Zero elements with NULL buffers are not an error. */
    EXPECT(c, hoop_allreduce(c, NULL, NULL, 0, HOOP_FLOAT32, HOOP_SUM), HOOP_OK, NULL, NULL);
    EXPECT(c, hoop_broadcast(c, NULL, 0, HOOP_INT64, p - 1), HOOP_OK, NULL, NULL);
    EXPECT(c, hoop_allgather(c, NULL, NULL, 0, HOOP_UINT8), HOOP_OK, NULL, NULL);
    EXPECT(c, hoop_alltoall(c, NULL, NULL, 0, HOOP_BFLOAT16), HOOP_OK, NULL, NULL);
}

/* A correct all-reduce, broadcast and barrier, with their results checked. */
static void works(hoop_comm_t *c, int line, const char *when)
{
    int p = hoop_comm_size(c), me = hoop_comm_rank(c);
    int64_t v[7], want = 0;
    for (int q = 0; q < p; q++) want += (int64_t)(q + 1) * 1000003;
    for (int i = 0; i < 7; i++) v[i] = (int64_t)(me + 1) * 1000003 + i;
    hoop_result_t rc = hoop_allreduce(c, v, v, 7, HOOP_INT64, HOOP_SUM);
    tried++;
    if (rc != HOOP_OK) {
        fail(line, "%s: allreduce failed: %s: %s", when, hoop_error_string(rc),
             hoop_comm_last_error(c));
        return;
    }
    for (int i = 0; i < 7; i++)
        if (v[i] != want + (int64_t)i * p)
            fail(line, "%s: allreduce element %d is %lld", when, i, (long long)v[i]);
    uint32_t b[5];
    for (int i = 0; i < 5; i++) b[i] = me == p - 1 ? 0xC0DE0000u + (uint32_t)i : 0;
    rc = hoop_broadcast(c, b, 5, HOOP_UINT32, p - 1);
    tried++;
    if (rc != HOOP_OK) fail(line, "%s: broadcast failed: %s", when, hoop_comm_last_error(c));
    for (int i = 0; i < 5 && rc == HOOP_OK; i++)
        if (b[i] != 0xC0DE0000u + (uint32_t)i)
            fail(line, "%s: broadcast element %d is %#x", when, i, b[i]);
    rc = hoop_barrier(c);
    tried++;
    if (rc != HOOP_OK) fail(line, "%s: barrier failed: %s", when, hoop_comm_last_error(c));
}

/* hoop_test with a NULL flag on a live request, then the request completes normally. */
static void request_args(hoop_comm_t *c)
{
    int32_t v = 1;
    hoop_request_t *q = NULL;
    hoop_result_t rc = hoop_iallreduce(c, &v, &v, 1, HOOP_INT32, HOOP_SUM, &q);
    tried++;
    if (rc != HOOP_OK) {
        fail(__LINE__, "iallreduce: %s", hoop_comm_last_error(c));
        return;
    }
    EXPECT(c, hoop_test(q, NULL), HOOP_ERR_INVALID_ARGUMENT, NULL, NULL);
    EXPECT(c, hoop_wait(q), HOOP_OK, NULL, NULL);
    CHECK_TRUE(v == hoop_comm_size(c));
}

/* Every call on an aborted communicator fails at once with HOOP_ERR_ABORTED, naming itself. */
static void aborted_calls(hoop_comm_t *a, hoop_result_t want)
{
    int p = hoop_comm_size(a), me = hoop_comm_rank(a), peer = (me + 1) % p;
    float s[16] = {0}, r[16 * 8] = {0};
    hoop_request_t *q = NULL;
    const char *k = want == HOOP_ERR_ABORTED ? "abort" : NULL;
    EXPECT(a, hoop_allreduce(a, s, r, 4, HOOP_FLOAT32, HOOP_SUM), want, "hoop_allreduce", k);
    EXPECT(a, hoop_broadcast(a, s, 4, HOOP_FLOAT32, 0), want, "hoop_broadcast", k);
    EXPECT(a, hoop_reduce(a, s, r, 4, HOOP_FLOAT32, HOOP_SUM, 0), want, "hoop_reduce", k);
    EXPECT(a, hoop_allgather(a, s, r, 4, HOOP_FLOAT32), want, "hoop_allgather", k);
    EXPECT(a, hoop_gather(a, s, r, 4, HOOP_FLOAT32, 0), want, "hoop_gather", k);
    EXPECT(a, hoop_scatter(a, s, r, 4, HOOP_FLOAT32, 0), want, "hoop_scatter", k);
    EXPECT(a, hoop_reduce_scatter(a, s, r, 4, HOOP_FLOAT32, HOOP_SUM), want, "hoop_reduce_scatter",
           k);
    EXPECT(a, hoop_alltoall(a, s, r, 4, HOOP_FLOAT32), want, "hoop_alltoall", k);
    EXPECT(a, hoop_barrier(a), want, "hoop_barrier", k);
    EXPECT(a, hoop_send(a, s, 4, HOOP_FLOAT32, peer), want, "hoop_send", k);
    EXPECT(a, hoop_recv(a, r, 4, HOOP_FLOAT32, peer), want, "hoop_recv", k);
    EXPECT(a, hoop_iallreduce(a, s, r, 4, HOOP_FLOAT32, HOOP_SUM, &q), want, "hoop_iallreduce", k);
    EXPECT(a, hoop_ibroadcast(a, s, 4, HOOP_FLOAT32, 0, &q), want, "hoop_ibroadcast", k);
    EXPECT(a, hoop_ireduce(a, s, r, 4, HOOP_FLOAT32, HOOP_SUM, 0, &q), want, "hoop_ireduce", k);
    EXPECT(a, hoop_iallgather(a, s, r, 4, HOOP_FLOAT32, &q), want, "hoop_iallgather", k);
    EXPECT(a, hoop_igather(a, s, r, 4, HOOP_FLOAT32, 0, &q), want, "hoop_igather", k);
    EXPECT(a, hoop_iscatter(a, s, r, 4, HOOP_FLOAT32, 0, &q), want, "hoop_iscatter", k);
    EXPECT(a, hoop_ireduce_scatter(a, s, r, 4, HOOP_FLOAT32, HOOP_SUM, &q), want,
           "hoop_ireduce_scatter", k);
    EXPECT(a, hoop_ialltoall(a, s, r, 4, HOOP_FLOAT32, &q), want, "hoop_ialltoall", k);
    EXPECT(a, hoop_ibarrier(a, &q), want, "hoop_ibarrier", k);
    EXPECT(a, hoop_isend(a, s, 4, HOOP_FLOAT32, peer, &q), want, "hoop_isend", k);
    EXPECT(a, hoop_irecv(a, r, 4, HOOP_FLOAT32, peer, &q), want, "hoop_irecv", k);
    hoop_comm_t *nc = NULL;
    EXPECT(a, hoop_comm_split(a, 0, 0, &nc), want, "hoop_comm_split", k);
    /* Bad arguments as well: the abort is reported first. */
    EXPECT(a, hoop_allreduce(a, NULL, r, 4, BAD_DT1, HOOP_SUM), want, "hoop_allreduce", k);
}

static void abort_section(hoop_comm_t *c)
{
    int me = hoop_comm_rank(c);
    hoop_comm_t *sub = NULL;
    hoop_result_t rc = hoop_comm_split(c, 7, -me, &sub); /* reversed order */
    tried++;
    if (rc != HOOP_OK || sub == NULL) {
        fail(__LINE__, "split: %s: %s", hoop_error_string(rc), hoop_comm_last_error(c));
        return;
    }
    hoop_comm_set_timeout(sub, 10.0);
    works(sub, __LINE__, "the split communicator");
    if (me == 0) {
        EXPECT(sub, hoop_comm_abort(sub), HOOP_OK, NULL, NULL);
        EXPECT(sub, hoop_comm_abort(sub), HOOP_OK, NULL, NULL); /* twice is harmless */
        aborted_calls(sub, HOOP_ERR_ABORTED);
    } else {
        /* The others learn it at their next call, long before the 10 s timeout. */
        float v[1024] = {0};
        double t0 = now_s();
        rc = hoop_allreduce(sub, v, v, 1024, HOOP_FLOAT32, HOOP_SUM);
        double dt = now_s() - t0;
        const char *m = hoop_comm_last_error(sub);
        tried++;
        printf("rank %d: after rank 0's abort: %s after %.1f ms: %s\n", me, hoop_error_string(rc),
               dt * 1e3, m);
        if (rc != HOOP_ERR_ABORTED && rc != HOOP_ERR_PEER_LOST)
            fail(__LINE__, "the call after a peer's abort returned %s", hoop_error_string(rc));
        else if (dt > 5.0)
            fail(__LINE__, "the abort took %.2f s to reach rank %d", dt, me);
        aborted_calls(sub, rc);
    }
    EXPECT(NULL, hoop_comm_destroy(sub), HOOP_OK, NULL, NULL);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--transport") == 0 && i + 1 < argc)
            setenv("HOOP_TRANSPORT", argv[++i], 1);
        else {
            fprintf(stderr, "usage: [hooprun -n N] badargs [--transport T]\n");
            return 2;
        }
    }
    hoop_comm_t *c = NULL;
    int init = test_init_from_env(&c, "hoop_init");
    if (init != 0) return init;
    rank_ = hoop_comm_rank(c);
    size_ = hoop_comm_size(c);
    double t0 = now_s();

    free_functions();
    init_methods(size_ == 1);
    works(c, __LINE__, "before the bad calls");
    /* Rank 0 makes more bad calls than the others: none may count as a collective call. */
    collectives(c, rank_ == 0);
    request_args(c);
    works(c, __LINE__, "after the bad calls");
    abort_section(c);
    works(c, __LINE__, "after a split communicator was aborted");

    EXPECT(NULL, hoop_comm_destroy(c), HOOP_OK, NULL, NULL);
    printf("rank %d of %d: %ld checks, %ld failed (%.2f s)\n", rank_, size_, tried, failed,
           now_s() - t0);
    printf("FIGURES badargs ranks=%d checks=%ld failed=%ld\n", size_, tried, failed);
    return failed ? 1 : 0;
}
