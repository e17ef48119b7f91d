/* Rendezvous: init-method resolution, the store protocol parser, the tcp store (server in this process,
 * clients in threads) and the file store. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/log.h"
#include "rendezvous/proto.h"
#include "rendezvous/store.h"
#include "../common/testing.h"

/* ---------------------------------------------------------------------------------------------- */
/* Helpers                                                                                        */

static const char *const all_vars[] = {
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    /* Where they are set (the tests run inside srun or mpirun), env:// would ask the launcher. */
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "PMIX_NAMESPACE",
};

static void clear_env(void)
{
    for (size_t i = 0; i < sizeof all_vars / sizeof all_vars[0]; i++) unsetenv(all_vars[i]);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* A port that was free a moment ago on 127.0.0.1 (or ::1). */
static int free_port(int family)
{
    int fd = socket(family, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t sl;
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sl = sizeof *a;
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_loopback;
        sl = sizeof *a;
    }
    int port = -1;
    if (bind(fd, (struct sockaddr *)&ss, sl) == 0 &&
        getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        port = family == AF_INET ? ntohs(((struct sockaddr_in *)&ss)->sin_port)
                                 : ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    close(fd);
    return port;
}

static hoop__rdv_t tcp_rdv(const char *host, int port, int rank, int size)
{
    hoop__rdv_t r;
    memset(&r, 0, sizeof r);
    snprintf(r.method, sizeof r.method, "tcp");
    snprintf(r.host, sizeof r.host, "%s", host);
    r.port = port;
    r.rank = rank;
    r.size = size;
    r.local_rank = r.local_size = -1;
    return r;
}

static hoop__rdv_t file_rdv(const char *path, int rank, int size)
{
    hoop__rdv_t r;
    memset(&r, 0, sizeof r);
    snprintf(r.method, sizeof r.method, "file");
    snprintf(r.path, sizeof r.path, "%s", path);
    r.rank = rank;
    r.size = size;
    r.local_rank = r.local_size = -1;
    return r;
}

/* The value rank r publishes under key k: deterministic bytes that differ per rank and key. */
static size_t make_value(int r, int k, uint8_t *buf, size_t cap)
{
    size_t len = 1 + (size_t)((r * 131 + k * 17) % 97) * 37;
    if (len > cap) len = cap;
    uint32_t x = (uint32_t)(r * 2654435761u) ^ (uint32_t)(k * 40503u) ^ 0x9e3779b9u;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        buf[i] = (uint8_t)x;
    }
    return len;
}

/* ---------------------------------------------------------------------------------------------- */
/* Resolution                                                                                     */

static int env_setup(void **state)
{
    (void)state;
    clear_env();
    return 0;
}

static void test_resolve_env_torchrun(void **state)
{
    (void)state;
    setenv("MASTER_ADDR", "10.1.2.3", 1);
    setenv("MASTER_PORT", "29500", 1);
    setenv("RANK", "3", 1);
    setenv("WORLD_SIZE", "8", 1);
    setenv("LOCAL_RANK", "1", 1);
    setenv("LOCAL_WORLD_SIZE", "4", 1);
    /* Slurm variables of an enclosing allocation lose against torchrun's. */
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "2", 1);
    const char *methods[] = {NULL, "", "env://", "ENV://"};
    for (size_t i = 0; i < 4; i++) {
        hoop__rdv_t r;
        char err[256] = "unset";
        assert_int_equal(hoop__rdv_resolve(methods[i], -1, -1, &r, err, sizeof err), HOOP_OK);
        assert_string_equal(err, "");
        assert_string_equal(r.method, "tcp");
        assert_string_equal(r.host, "10.1.2.3");
        assert_int_equal(r.port, 29500);
        assert_int_equal(r.rank, 3);
        assert_int_equal(r.size, 8);
        assert_int_equal(r.local_rank, 1);
        assert_int_equal(r.local_size, 4);
    }
    /* Bracketed IPv6 in MASTER_ADDR. */
    setenv("MASTER_ADDR", "[fd00::7]", 1);
    hoop__rdv_t r;
    char err[256];
    assert_int_equal(hoop__rdv_resolve("env://", -1, -1, &r, err, sizeof err), HOOP_OK);
    assert_string_equal(r.host, "fd00::7");
}

static void test_resolve_env_slurm(void **state)
{
    (void)state;
    setenv("MASTER_ADDR", "node07", 1);
    setenv("MASTER_PORT", "1234", 1);
    setenv("SLURM_PROCID", "5", 1);
    setenv("SLURM_NTASKS", "6", 1);
    setenv("SLURM_LOCALID", "1", 1);
    setenv("SLURM_NTASKS_PER_NODE", "2", 1);
    setenv("OMPI_COMM_WORLD_RANK", "0", 1); /* Slurm comes before Open MPI */
    setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
    hoop__rdv_t r;
    char err[256];
    assert_int_equal(hoop__rdv_resolve(NULL, -1, -1, &r, err, sizeof err), HOOP_OK);
    assert_string_equal(r.host, "node07");
    assert_int_equal(r.port, 1234);
    assert_int_equal(r.rank, 5);
    assert_int_equal(r.size, 6);
    assert_int_equal(r.local_rank, 1);
    assert_int_equal(r.local_size, 2);
}

static void test_resolve_env_ompi(void **state)
{
    (void)state;
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "65535", 1);
    setenv("OMPI_COMM_WORLD_RANK", "2", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1", 1);
    hoop__rdv_t r;
    char err[256];
    assert_int_equal(hoop__rdv_resolve("env://", -1, -1, &r, err, sizeof err), HOOP_OK);
    assert_int_equal(r.port, 65535);
    assert_int_equal(r.rank, 2);
    assert_int_equal(r.size, 3);
    assert_int_equal(r.local_rank, 0);
    assert_int_equal(r.local_size, 1);

    /* Nothing about local placement: -1. */
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    assert_int_equal(hoop__rdv_resolve("env://", -1, -1, &r, err, sizeof err), HOOP_OK);
    assert_int_equal(r.local_rank, -1);
    assert_int_equal(r.local_size, -1);
}

static void test_resolve_explicit_wins(void **state)
{
    (void)state;
    setenv("MASTER_ADDR", "h", 1);
    setenv("MASTER_PORT", "1", 1);
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    hoop__rdv_t r;
    char err[256];
    assert_int_equal(hoop__rdv_resolve(NULL, 2, 4, &r, err, sizeof err), HOOP_OK);
    assert_int_equal(r.rank, 2);
    assert_int_equal(r.size, 4);
    /* One explicit, the other from the environment. */
    setenv("WORLD_SIZE", "9", 1);
    assert_int_equal(hoop__rdv_resolve(NULL, 7, -1, &r, err, sizeof err), HOOP_OK);
    assert_int_equal(r.rank, 7);
    assert_int_equal(r.size, 9);
    assert_int_equal(hoop__rdv_resolve(NULL, -1, 5, &r, err, sizeof err), HOOP_OK);
    assert_int_equal(r.rank, 0);
    assert_int_equal(r.size, 5);
    /* Stray launcher placement that does not fit explicit arguments is dropped, not an error. */
    setenv("SLURM_LOCALID", "3", 1);
    setenv("SLURM_NTASKS_PER_NODE", "8", 1);
    assert_int_equal(hoop__rdv_resolve("tcp://h:5", 0, 1, &r, err, sizeof err), HOOP_OK);
    assert_int_equal(r.local_rank, -1);
    assert_int_equal(r.local_size, -1);
    /* ... and kept when it fits. */
    assert_int_equal(hoop__rdv_resolve("tcp://h:5", 0, 16, &r, err, sizeof err), HOOP_OK);
    assert_int_equal(r.local_rank, 3);
    assert_int_equal(r.local_size, 8);
}

static void test_resolve_tcp_and_file(void **state)
{
    (void)state;
    hoop__rdv_t r;
    char err[256];
    /* tcp:// needs neither MASTER_ADDR nor MASTER_PORT. */
    assert_int_equal(hoop__rdv_resolve("tcp://node1.cluster:1234", 1, 2, &r, err, sizeof err),
                     HOOP_OK);
    assert_string_equal(r.method, "tcp");
    assert_string_equal(r.host, "node1.cluster");
    assert_int_equal(r.port, 1234);
    assert_int_equal(r.rank, 1);
    assert_int_equal(r.size, 2);

    assert_int_equal(hoop__rdv_resolve("tcp://[::1]:29500", 0, 1, &r, err, sizeof err), HOOP_OK);
    assert_string_equal(r.host, "::1");
    assert_int_equal(r.port, 29500);

    assert_int_equal(hoop__rdv_resolve("tcp://[fe80::1%eth0]:7/", 0, 1, &r, err, sizeof err),
                     HOOP_OK);
    assert_string_equal(r.host, "fe80::1%eth0");
    assert_int_equal(r.port, 7);

    assert_int_equal(hoop__rdv_resolve("TCP://10.0.0.1:1", 0, 1, &r, err, sizeof err), HOOP_OK);
    assert_string_equal(r.host, "10.0.0.1");
    assert_int_equal(r.port, 1);

    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "3", 1);
    assert_int_equal(hoop__rdv_resolve("file:///shared/jobs/42.store", -1, -1, &r, err, sizeof err),
                     HOOP_OK);
    assert_string_equal(r.method, "file");
    assert_string_equal(r.path, "/shared/jobs/42.store");
    assert_int_equal(r.rank, 1);
    assert_int_equal(r.size, 3);
}

typedef struct bad_case {
    const char *method;
    int rank, size;
    const char *env;    /* "NAME=value;NAME=value" set before the call */
    const char *expect; /* a part of the message */
} bad_case_t;

static void apply_env(const char *spec)
{
    if (spec == NULL) return;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *kv = strtok_r(buf, ";", &save); kv != NULL; kv = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(kv, '=');
        assert_non_null(eq);
        *eq = '\0';
        setenv(kv, eq + 1, 1);
    }
}

static void test_resolve_errors(void **state)
{
    (void)state;
    static const bad_case_t cases[] = {
        {"env://", 0, 1, NULL, "set MASTER_ADDR"},
        {"env://", 0, 1, "MASTER_PORT=5", "set MASTER_ADDR"},
        {NULL, 0, 1, "MASTER_ADDR=h", "set MASTER_PORT"},
        {NULL, 0, 1, "MASTER_ADDR=h;MASTER_PORT=0", "MASTER_PORT"},
        {NULL, 0, 1, "MASTER_ADDR=h;MASTER_PORT=65536", "MASTER_PORT"},
        {NULL, 0, 1, "MASTER_ADDR=h;MASTER_PORT=29x", "MASTER_PORT"},
        {NULL, 0, 1, "MASTER_ADDR=h;MASTER_PORT=-5", "MASTER_PORT"},
        {NULL, 0, 1, "MASTER_ADDR=a b;MASTER_PORT=5", "MASTER_ADDR"},
        {"env://x", 0, 1, "MASTER_ADDR=h;MASTER_PORT=5", "MASTER_ADDR and MASTER_PORT"},
        {"tcp://host", 0, 1, NULL, "tcp://HOST:PORT"},
        {"tcp://host:", 0, 1, NULL, "invalid port"},
        {"tcp://host:0", 0, 1, NULL, "invalid port"},
        {"tcp://host:99999", 0, 1, NULL, "invalid port"},
        {"tcp://host:12ab", 0, 1, NULL, "invalid port"},
        {"tcp://host:+80", 0, 1, NULL, "invalid port"},
        {"tcp://::1:5", 0, 1, NULL, "brackets"},
        {"tcp://[::1:5", 0, 1, NULL, "']'"},
        {"tcp://[::1]5", 0, 1, NULL, "no port"},
        {"tcp://:5", 0, 1, NULL, "empty host"},
        {"file://relative/path", 0, 1, NULL, "absolute path"},
        {"file://", 0, 1, NULL, "absolute path"},
        {"file:///tmp/dir/", 0, 1, NULL, "not of a directory"},
        {"udp://h:5", 0, 1, NULL, "unknown init method"},
        {"h:5", 0, 1, NULL, "unknown init method"},
        {"tcp://h:5", 4, 4, NULL, "out of range"},
        {"tcp://h:5", -2, 4, NULL, "rank -2"},
        {"tcp://h:5", 0, 0, NULL, "world size 0"},
        {"tcp://h:5", 0, -3, NULL, "world size -3"},
        {"tcp://h:5", -1, 4, NULL, "set RANK"},
        {"tcp://h:5", 0, -1, NULL, "set WORLD_SIZE"},
        {"tcp://h:5", -1, -1, "RANK=x;WORLD_SIZE=2", "RANK=\"x\""},
        {"tcp://h:5", -1, -1, "RANK=;SLURM_PROCID=1x;WORLD_SIZE=2", "SLURM_PROCID"},
        {"tcp://h:5", -1, -1, "RANK=0;WORLD_SIZE=0", "WORLD_SIZE"},
        {"tcp://h:5", -1, -1, "RANK=5;WORLD_SIZE=4", "RANK=5"},
        {"tcp://h:5", -1, -1, "OMPI_COMM_WORLD_RANK=3;OMPI_COMM_WORLD_SIZE=3",
         "OMPI_COMM_WORLD_RANK=3"},
        {"tcp://h:5", -1, -1, "RANK=1;WORLD_SIZE=4;LOCAL_RANK=2;LOCAL_WORLD_SIZE=2",
         "LOCAL_RANK=2"},
        {"tcp://h:5", -1, -1, "RANK=1;WORLD_SIZE=4;LOCAL_WORLD_SIZE=8", "LOCAL_WORLD_SIZE=8"},
        {"tcp://h:5", -1, -1, "RANK=1;WORLD_SIZE=4;LOCAL_RANK=one", "LOCAL_RANK"},
        /* A launcher variable that is not a number is named with its value, even where the
         * address is missing too: it is what to fix first. */
        {"env://", -1, -1, "OMPI_COMM_WORLD_RANK=0;OMPI_COMM_WORLD_SIZE=four",
         "OMPI_COMM_WORLD_SIZE=\"four\""},
        {NULL, -1, -1, "OMPI_COMM_WORLD_RANK=1.0;OMPI_COMM_WORLD_SIZE=2",
         "OMPI_COMM_WORLD_RANK=\"1.0\""},
        {NULL, -1, -1, "SLURM_PROCID=0;SLURM_NTASKS=", "no world size"},
        {NULL, -1, -1, "SLURM_PROCID=0;SLURM_NTASKS=8x", "SLURM_NTASKS=\"8x\""},
        {NULL, -1, -1, "RANK= 1;WORLD_SIZE=2;MASTER_PORT=5", "RANK=\" 1\""},
        {NULL, -1, -1, "RANK=0;WORLD_SIZE=99999999999;MASTER_ADDR=h", "WORLD_SIZE=\"99999999999\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bad_case_t *c = &cases[i];
        clear_env();
        apply_env(c->env);
        hoop__rdv_t r;
        char err[512] = "";
        hoop_result_t res = hoop__rdv_resolve(c->method, c->rank, c->size, &r, err, sizeof err);
        if (res != HOOP_ERR_INVALID_ARGUMENT || strstr(err, c->expect) == NULL)
            fail_msg("case %zu (%s, %d, %d, %s): got %d \"%s\", want \"%s\"", i,
                     c->method ? c->method : "NULL", c->rank, c->size, c->env ? c->env : "",
                     (int)res, err, c->expect);
        /* One sentence: no line breaks, no trailing period doubled, not empty. */
        assert_null(strchr(err, '\n'));
        assert_true(strlen(err) > 20);
        /* A NULL or tiny error buffer must not matter. */
        assert_int_equal(hoop__rdv_resolve(c->method, c->rank, c->size, &r, NULL, 0),
                         HOOP_ERR_INVALID_ARGUMENT);
        char tiny[4];
        assert_int_equal(hoop__rdv_resolve(c->method, c->rank, c->size, &r, tiny, sizeof tiny),
                         HOOP_ERR_INVALID_ARGUMENT);
        assert_true(strlen(tiny) < sizeof tiny);
    }
    clear_env();
    char err[64];
    assert_int_equal(hoop__rdv_resolve("tcp://h:5", 0, 1, NULL, err, sizeof err),
                     HOOP_ERR_INVALID_ARGUMENT);
    /* A host name that does not fit. */
    char longm[400];
    memset(longm, 'a', sizeof longm);
    memcpy(longm, "tcp://", 6);
    memcpy(longm + sizeof longm - 4, ":80", 4);
    hoop__rdv_t r;
    char err2[512];
    assert_int_equal(hoop__rdv_resolve(longm, 0, 1, &r, err2, sizeof err2),
                     HOOP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err2, "longer than"));
}

/* ---------------------------------------------------------------------------------------------- */
/* Parser                                                                                         */

static size_t build_req(uint8_t *buf, uint8_t op, uint32_t keylen, uint32_t vallen, const char *key,
                        const uint8_t *val)
{
    buf[0] = op;
    for (int i = 0; i < 4; i++) buf[1 + i] = (uint8_t)(keylen >> (8 * i));
    for (int i = 0; i < 4; i++) buf[5 + i] = (uint8_t)(vallen >> (8 * i));
    if (key != NULL) memcpy(buf + 9, key, keylen);
    if (val != NULL) memcpy(buf + 9 + keylen, val, vallen);
    return 9 + (size_t)keylen + vallen;
}

/* A get ('W') of key with a hold of ms milliseconds. */
static size_t build_wait(uint8_t *buf, const char *key, uint32_t ms)
{
    uint8_t hold[4];
    for (int i = 0; i < 4; i++) hold[i] = (uint8_t)(ms >> (8 * i));
    return build_req(buf, 'W', (uint32_t)strlen(key), 4, key, hold);
}

static void test_parse_valid_and_partial(void **state)
{
    (void)state;
    uint8_t buf[128];
    const uint8_t val[] = {'h', 'e', 'l', 'l', 'o', 0, 0xff};
    size_t n = build_req(buf, 'S', 3, sizeof val, "abc", val);
    assert_int_equal(n, 19);
    hoop__store_req_t req;
    assert_int_equal(hoop__store_parse(buf, n, &req), 19);
    assert_int_equal(req.op, 'S');
    assert_int_equal(req.keylen, 3);
    assert_memory_equal(req.key, "abc", 3);
    assert_ptr_equal(req.key, (const char *)buf + 9);
    assert_int_equal(req.vallen, sizeof val);
    assert_memory_equal(req.val, val, sizeof val);
    /* The next request's bytes after it are not part of it. */
    size_t m = build_wait(buf + n, "zz", 7);
    assert_int_equal(hoop__store_parse(buf, n + m, &req), 19);
    assert_int_equal(hoop__store_parse(buf + n, m, &req), 15);
    assert_int_equal(req.op, 'W');
    assert_int_equal(req.vallen, 4);
    assert_int_equal(hoop__store_hold_ms(&req), 7);
    assert_memory_equal(req.key, "zz", 2);
    /* Every strict prefix needs more bytes. */
    for (size_t k = 0; k < n; k++) assert_int_equal(hoop__store_parse(buf, k, &req), 0);
    assert_int_equal(hoop__store_parse(NULL, 0, &req), 0);
    /* req may be NULL. */
    assert_int_equal(hoop__store_parse(buf, n, NULL), 19);
    /* Bounds are inclusive: a key of exactly HOOP__STORE_MAX_KEY bytes is fine. */
    uint8_t big[9 + HOOP__STORE_MAX_KEY];
    char key[HOOP__STORE_MAX_KEY];
    memset(key, 'k', sizeof key);
    n = build_req(big, 'S', HOOP__STORE_MAX_KEY, 0, key, NULL);
    assert_int_equal(hoop__store_parse(big, n, &req), (long)n);
    /* A value of exactly HOOP__STORE_MAX_VALUE: the header alone asks for more. */
    n = build_req(buf, 'S', 1, HOOP__STORE_MAX_VALUE, "k", NULL);
    assert_int_equal(hoop__store_parse(buf, 10, &req), 0);
}

static void test_parse_malformed(void **state)
{
    (void)state;
    uint8_t buf[64];
    hoop__store_req_t req;
    /* Unknown op: known from the first byte. */
    build_req(buf, 'X', 3, 0, "abc", NULL);
    assert_int_equal(hoop__store_parse(buf, 1, &req), -1);
    assert_int_equal(hoop__store_parse(buf, 12, &req), -1);
    buf[0] = 0;
    assert_int_equal(hoop__store_parse(buf, 12, &req), -1);
    buf[0] = 's';
    assert_int_equal(hoop__store_parse(buf, 12, &req), -1);
    /* Key length 0 or over the bound: known once the length is in. */
    build_req(buf, 'W', 0, 0, NULL, NULL);
    assert_int_equal(hoop__store_parse(buf, 5, &req), -1);
    build_req(buf, 'S', HOOP__STORE_MAX_KEY + 1, 0, NULL, NULL);
    assert_int_equal(hoop__store_parse(buf, 5, &req), -1);
    build_req(buf, 'S', 0xffffffffu, 0, NULL, NULL);
    assert_int_equal(hoop__store_parse(buf, 9, &req), -1);
    /* Value length over the bound. */
    build_req(buf, 'S', 1, HOOP__STORE_MAX_VALUE + 1, NULL, NULL);
    assert_int_equal(hoop__store_parse(buf, 9, &req), -1);
    build_req(buf, 'S', 1, 0xffffffffu, NULL, NULL);
    assert_int_equal(hoop__store_parse(buf, 9, &req), -1);
    /* A get carries its hold, 4 bytes. */
    build_req(buf, 'W', 1, 0, "k", NULL);
    assert_int_equal(hoop__store_parse(buf, 10, &req), -1);
    build_req(buf, 'W', 1, 5, "k", (const uint8_t *)"\0\0\0\0\0");
    assert_int_equal(hoop__store_parse(buf, 15, &req), -1);
    /* 'G', the get without a hold that no client sends any more, is no request. */
    size_t n = build_req(buf, 'G', 1, 0, "k", NULL);
    assert_int_equal(hoop__store_parse(buf, 1, &req), -1);
    assert_int_equal(hoop__store_parse(buf, n, &req), -1);
    /* Keys are C strings. */
    build_req(buf, 'S', 3, 0, "a\0b", NULL);
    assert_int_equal(hoop__store_parse(buf, 12, &req), -1);
    /* Bytes but no buffer. */
    assert_int_equal(hoop__store_parse(NULL, 5, &req), -1);
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* What the parser should answer, written straight from the protocol description. */
static long parse_reference(const uint8_t *b, size_t len)
{
    if (len == 0) return 0;
    if (b[0] != 'S' && b[0] != 'W' && b[0] != 'C') return -1;
    if (len < 5) return 0;
    uint64_t kl = (uint64_t)b[1] | (uint64_t)b[2] << 8 | (uint64_t)b[3] << 16 |
                  (uint64_t)b[4] << 24;
    if (kl < 1 || kl > HOOP__STORE_MAX_KEY) return -1;
    if (len < 9) return 0;
    uint64_t vl = (uint64_t)b[5] | (uint64_t)b[6] << 8 | (uint64_t)b[7] << 16 |
                  (uint64_t)b[8] << 24;
    if (vl > HOOP__STORE_MAX_VALUE) return -1;
    if (b[0] == 'W' && vl != 4) return -1; /* its hold, in milliseconds */
    if (len < 9 + kl + vl) return 0;
    if (b[0] == 'W') {
        const uint8_t *h = b + 9 + kl;
        uint64_t ms = (uint64_t)h[0] | (uint64_t)h[1] << 8 | (uint64_t)h[2] << 16 |
                      (uint64_t)h[3] << 24;
        if (ms > HOOP__STORE_MAX_HOLD_MS) return -1;
    }
    for (uint64_t i = 0; i < kl; i++)
        if (b[9 + i] == 0) return -1;
    return (long)(9 + kl + vl);
}

static void test_parse_random(void **state)
{
    (void)state;
    uint64_t s = 0x1234567887654321ull;
    long complete = 0, malformed = 0;
    for (int iter = 0; iter < 200000; iter++) {
        size_t len = (size_t)(rng_next(&s) % 48);
        /* Exactly sized heap buffer: a read past it is caught by the sanitizers and valgrind. */
        uint8_t *b = malloc(len ? len : 1);
        assert_non_null(b);
        for (size_t i = 0; i < len; i++) b[i] = (uint8_t)rng_next(&s);
        /* Bias towards plausible headers so that every branch is taken. */
        if (len > 0 && rng_next(&s) % 4 != 0) b[0] = "SGCW"[rng_next(&s) % 4];
        if (len >= 5 && rng_next(&s) % 4 != 0) {
            b[1] = (uint8_t)(rng_next(&s) % 20);
            b[2] = b[3] = b[4] = 0;
        }
        if (len >= 9 && rng_next(&s) % 4 != 0) {
            b[5] = (uint8_t)(rng_next(&s) % 20);
            b[6] = b[7] = b[8] = 0;
        }
        for (size_t i = 9; i < len; i++)
            if (b[i] == 0 && rng_next(&s) % 8 != 0) b[i] = 'x';
        /* A waiting get's hold, on both sides of the longest one granted. */
        if (len >= 9 && b[0] == 'W' && rng_next(&s) % 2 != 0) {
            b[5] = 4;
            const size_t at = 9 + b[1];
            const uint32_t ms = (uint32_t)(rng_next(&s) % (2 * HOOP__STORE_MAX_HOLD_MS));
            for (size_t i = 0; i < 4 && at + i < len; i++) b[at + i] = (uint8_t)(ms >> (8 * i));
        }
        hoop__store_req_t req;
        long got = hoop__store_parse(b, len, &req);
        long want = parse_reference(b, len);
        if (got != want)
            fail_msg("iteration %d, length %zu: parse gave %ld, reference %ld", iter, len, got,
                     want);
        if (got > 0) {
            complete++;
            assert_ptr_equal(req.key, (const char *)b + 9);
            assert_ptr_equal(req.val, b + 9 + req.keylen);
            assert_int_equal(9 + (long)req.keylen + (long)req.vallen, got);
        } else if (got < 0) {
            malformed++;
        }
        free(b);
    }
    /* The generator must have reached both outcomes often. */
    assert_true(complete > 1000);
    assert_true(malformed > 1000);
}

/* ---------------------------------------------------------------------------------------------- */
/* tcp store                                                                                      */

#define NCLIENTS 4
#define NKEYS 5

typedef struct client_job {
    hoop__rdv_t rdv;
    int nranks;
    double open_timeout;
    int delay_ms;
    hoop_result_t result;
    char what[640];
} client_job_t;

/* Each rank publishes NKEYS values and reads every other rank's; any mismatch is written to what. */
static void *exchange_main(void *arg)
{
    client_job_t *j = arg;
    if (j->delay_ms > 0) sleep_ms(j->delay_ms);
    char err[512] = "";
    hoop__store_t *st = NULL;
    j->result = hoop__store_open(&j->rdv, j->open_timeout, NULL, &st, err, sizeof err);
    if (j->result != HOOP_OK) {
        snprintf(j->what, sizeof j->what, "open: %s", err);
        return NULL;
    }
    uint8_t val[4096], got[4096];
    for (int k = 0; k < NKEYS && j->result == HOOP_OK; k++) {
        char key[64];
        snprintf(key, sizeof key, "peer/%d/%d", j->rdv.rank, k);
        size_t n = make_value(j->rdv.rank, k, val, sizeof val);
        j->result = hoop__store_set(st, key, val, n);
        if (j->result != HOOP_OK)
            snprintf(j->what, sizeof j->what, "set %s: %s", key, hoop__store_error(st));
    }
    for (int r = 0; r < j->nranks && j->result == HOOP_OK; r++) {
        for (int k = 0; k < NKEYS && j->result == HOOP_OK; k++) {
            char key[64];
            snprintf(key, sizeof key, "peer/%d/%d", r, k);
            size_t len = 0;
            j->result = hoop__store_get(st, key, got, sizeof got, &len, 5.0);
            if (j->result != HOOP_OK) {
                snprintf(j->what, sizeof j->what, "get %s: %s", key, hoop__store_error(st));
                break;
            }
            size_t n = make_value(r, k, val, sizeof val);
            if (len != n || memcmp(got, val, n) != 0) {
                j->result = HOOP_ERR_INTERNAL;
                snprintf(j->what, sizeof j->what,
                         "rank %d read a wrong value for %s (%zu bytes, want %zu)", j->rdv.rank,
                         key, len, n);
            }
        }
    }
    /* Everyone has read everything before the server may go. */
    if (j->result == HOOP_OK) {
        char key[64];
        snprintf(key, sizeof key, "done/%d", j->rdv.rank);
        j->result = hoop__store_set(st, key, "", 0);
    }
    hoop__store_close(st);
    return NULL;
}

static void wait_all_done(hoop__store_t *st, int from, int to)
{
    for (int r = from; r < to; r++) {
        char key[64];
        size_t len = 99;
        snprintf(key, sizeof key, "done/%d", r);
        assert_int_equal(hoop__store_get(st, key, NULL, 0, &len, 10.0), HOOP_OK);
        assert_int_equal(len, 0);
    }
}

static void test_tcp_exchange(void **state)
{
    (void)state;
    int port = free_port(AF_INET);
    assert_true(port > 0);
    client_job_t jobs[NCLIENTS];
    pthread_t th[NCLIENTS];
    memset(jobs, 0, sizeof jobs);
    /* Rank 0 runs the server; ranks 1.. are threads, rank 0's own exchange is one more thread. */
    hoop__rdv_t r0 = tcp_rdv("127.0.0.1", port, 0, NCLIENTS);
    hoop__store_t *srv = NULL;
    char err[512];
    assert_int_equal(hoop__store_open(&r0, 5.0, NULL, &srv, err, sizeof err), HOOP_OK);
    /* Rank 0's exchange runs on srv itself, through its own loopback client. */
    for (int i = 1; i < NCLIENTS; i++) {
        jobs[i].rdv = tcp_rdv("127.0.0.1", port, i, NCLIENTS);
        jobs[i].nranks = NCLIENTS;
        jobs[i].open_timeout = 5.0;
        assert_int_equal(pthread_create(&th[i], NULL, exchange_main, &jobs[i]), 0);
    }
    uint8_t val[4096], got[4096];
    for (int k = 0; k < NKEYS; k++) {
        char key[64];
        snprintf(key, sizeof key, "peer/0/%d", k);
        size_t n = make_value(0, k, val, sizeof val);
        assert_int_equal(hoop__store_set(srv, key, val, n), HOOP_OK);
    }
    for (int r = 1; r < NCLIENTS; r++)
        for (int k = 0; k < NKEYS; k++) {
            char key[64];
            snprintf(key, sizeof key, "peer/%d/%d", r, k);
            size_t len = 0;
            assert_int_equal(hoop__store_get(srv, key, got, sizeof got, &len, 5.0), HOOP_OK);
            size_t n = make_value(r, k, val, sizeof val);
            assert_int_equal(len, n);
            assert_memory_equal(got, val, n);
        }
    for (int i = 1; i < NCLIENTS; i++) {
        pthread_join(th[i], NULL);
        if (jobs[i].result != HOOP_OK) fail_msg("rank %d: %s", i, jobs[i].what);
    }
    wait_all_done(srv, 1, NCLIENTS);
    hoop__store_close(srv);
}

typedef struct setter {
    hoop__store_t *st;
    int delay_ms;
    const char *key;
    const char *val;
    hoop_result_t result;
} setter_t;

static void *setter_main(void *arg)
{
    setter_t *s = arg;
    sleep_ms(s->delay_ms);
    s->result = hoop__store_set(s->st, s->key, s->val, strlen(s->val));
    return NULL;
}

static void test_tcp_get_waits_and_times_out(void **state)
{
    (void)state;
    int port = free_port(AF_INET);
    hoop__rdv_t r0 = tcp_rdv("localhost", port, 0, 2), r1 = tcp_rdv("127.0.0.1", port, 1, 2);
    hoop__store_t *s0 = NULL, *s1 = NULL;
    char err[512];
    assert_int_equal(hoop__store_open(&r0, 5.0, NULL, &s0, err, sizeof err), HOOP_OK);
    assert_int_equal(hoop__store_open(&r1, 5.0, NULL, &s1, err, sizeof err), HOOP_OK);

    /* A get that starts before the set. s0 and s1 are separate connections. */
    setter_t set = {.st = s0, .delay_ms = 300, .key = "late-key", .val = "arrived"};
    pthread_t th;
    const double t0 = now_s();
    assert_int_equal(pthread_create(&th, NULL, setter_main, &set), 0);
    char buf[32] = "";
    size_t len = 0;
    hoop_result_t r = hoop__store_get(s1, "late-key", buf, sizeof buf, &len, 5.0);
    const double waited = now_s() - t0;
    pthread_join(th, NULL);
    assert_int_equal(set.result, HOOP_OK);
    assert_int_equal(r, HOOP_OK);
    assert_int_equal(len, 7);
    assert_memory_equal(buf, "arrived", 7);
    assert_true(waited >= 0.25);
    assert_true(waited < 2.0);

    /* A key that never comes: HOOP_ERR_TIMEOUT close to the timeout, naming the key. */
    const double t1 = now_s();
    r = hoop__store_get(s1, "never", buf, sizeof buf, &len, 0.3);
    const double took = now_s() - t1;
    assert_int_equal(r, HOOP_ERR_TIMEOUT);
    assert_true(took >= 0.3);
    assert_true(took < 1.0);
    assert_non_null(strstr(hoop__store_error(s1), "\"never\""));

    /* Overwrite, truncated read, empty value, bad arguments. */
    assert_int_equal(hoop__store_set(s1, "late-key", "second value", 12), HOOP_OK);
    char small[6];
    assert_int_equal(hoop__store_get(s0, "late-key", small, sizeof small, &len, 1.0), HOOP_OK);
    assert_int_equal(len, 12);
    assert_memory_equal(small, "second", 6);
    assert_int_equal(hoop__store_get(s0, "late-key", buf, sizeof buf, &len, 1.0), HOOP_OK);
    assert_int_equal(len, 12);
    assert_memory_equal(buf, "second value", 12);
    assert_int_equal(hoop__store_set(s0, "empty", NULL, 0), HOOP_OK);
    len = 99;
    assert_int_equal(hoop__store_get(s1, "empty", buf, sizeof buf, &len, 1.0), HOOP_OK);
    assert_int_equal(len, 0);

    assert_int_equal(hoop__store_set(s1, "", "x", 1), HOOP_ERR_INVALID_ARGUMENT);
    assert_int_equal(hoop__store_set(s1, NULL, "x", 1), HOOP_ERR_INVALID_ARGUMENT);
    char longkey[HOOP__STORE_MAX_KEY + 2];
    memset(longkey, 'q', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    assert_int_equal(hoop__store_set(s1, longkey, "x", 1), HOOP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hoop__store_error(s1), "longer than"));
    longkey[HOOP__STORE_MAX_KEY] = '\0'; /* exactly the bound: fine */
    assert_int_equal(hoop__store_set(s1, longkey, "y", 1), HOOP_OK);
    assert_int_equal(hoop__store_get(s0, longkey, buf, sizeof buf, &len, 1.0), HOOP_OK);
    assert_int_equal(len, 1);
    assert_int_equal(buf[0], 'y');
    assert_int_equal(hoop__store_set(s1, "k", NULL, 3), HOOP_ERR_INVALID_ARGUMENT);
    assert_int_equal(hoop__store_set(s1, "k", "x", (size_t)HOOP__STORE_MAX_VALUE + 1),
                     HOOP_ERR_INVALID_ARGUMENT);
    assert_int_equal(hoop__store_get(s1, "k", buf, sizeof buf, &len, NAN),
                     HOOP_ERR_INVALID_ARGUMENT);
    /* A deadline that has just passed: one look, no wait. */
    const double t2 = now_s();
    assert_int_equal(hoop__store_get(s1, "k", buf, sizeof buf, &len, -0.5), HOOP_ERR_TIMEOUT);
    assert_int_equal(hoop__store_get(s1, "empty", buf, sizeof buf, &len, -0.5), HOOP_OK);
    assert_true(now_s() - t2 < 0.5);

    /* The largest value goes through whole, and the connection stays in step after a short read. */
    uint8_t *big = malloc(HOOP__STORE_MAX_VALUE), *back = malloc(HOOP__STORE_MAX_VALUE);
    assert_non_null(big);
    assert_non_null(back);
    for (size_t i = 0; i < HOOP__STORE_MAX_VALUE; i++) big[i] = (uint8_t)(i * 7 + (i >> 11));
    assert_int_equal(hoop__store_set(s1, "big", big, HOOP__STORE_MAX_VALUE), HOOP_OK);
    assert_int_equal(hoop__store_get(s0, "big", buf, 10, &len, 2.0), HOOP_OK);
    assert_int_equal(len, HOOP__STORE_MAX_VALUE);
    assert_memory_equal(buf, big, 10);
    assert_int_equal(hoop__store_get(s0, "big", back, HOOP__STORE_MAX_VALUE, &len, 2.0), HOOP_OK);
    assert_int_equal(len, HOOP__STORE_MAX_VALUE);
    assert_memory_equal(back, big, HOOP__STORE_MAX_VALUE);
    free(big);
    free(back);

    hoop__store_close(s1);
    hoop__store_close(s0);
    /* The port is free again once rank 0 closed. */
    assert_int_equal(hoop__store_open(&r0, 1.0, NULL, &s0, err, sizeof err), HOOP_OK);
    hoop__store_close(s0);
}

/* Clients that start before the server, and a client that starts long after the others. */
static void test_tcp_late_starters(void **state)
{
    (void)state;
    int port = free_port(AF_INET);
    client_job_t early = {
        .rdv = tcp_rdv("127.0.0.1", port, 1, 3), .nranks = 1, .open_timeout = 5.0};
    pthread_t th_early, th_late;
    assert_int_equal(pthread_create(&th_early, NULL, exchange_main, &early), 0);
    sleep_ms(500); /* the client is retrying against a closed port */

    hoop__rdv_t r0 = tcp_rdv("127.0.0.1", port, 0, 3);
    hoop__store_t *s0 = NULL;
    char err[512];
    assert_int_equal(hoop__store_open(&r0, 5.0, NULL, &s0, err, sizeof err), HOOP_OK);
    uint8_t val[4096];
    for (int k = 0; k < NKEYS; k++) {
        char key[64];
        snprintf(key, sizeof key, "peer/0/%d", k);
        size_t n = make_value(0, k, val, sizeof val);
        assert_int_equal(hoop__store_set(s0, key, val, n), HOOP_OK);
    }
    pthread_join(th_early, NULL);
    if (early.result != HOOP_OK) fail_msg("early client: %s", early.what);

    client_job_t late = {.rdv = tcp_rdv("127.0.0.1", port, 2, 3),
                         .nranks = 2,
                         .open_timeout = 2.0,
                         .delay_ms = 1000};
    assert_int_equal(pthread_create(&th_late, NULL, exchange_main, &late), 0);
    pthread_join(th_late, NULL);
    if (late.result != HOOP_OK) fail_msg("late client: %s", late.what);
    wait_all_done(s0, 1, 3);
    hoop__store_close(s0);
}

static void test_tcp_nothing_listens(void **state)
{
    (void)state;
    int port = free_port(AF_INET);
    hoop__rdv_t r1 = tcp_rdv("127.0.0.1", port, 1, 2);
    hoop__store_t *st = (hoop__store_t *)&r1; /* must be reset to NULL */
    char err[512] = "";
    const double t0 = now_s();
    hoop_result_t r = hoop__store_open(&r1, 0.5, NULL, &st, err, sizeof err);
    const double took = now_s() - t0;
    assert_int_equal(r, HOOP_ERR_TIMEOUT);
    assert_null(st);
    assert_true(took >= 0.5);
    assert_true(took < 1.5);
    char want[128];
    snprintf(want, sizeof want,
             "could not reach the rendezvous store at 127.0.0.1:%d after 0.5 s (", port);
    if (strstr(err, want) == NULL || strstr(err, "refused") == NULL) fail_msg("message: %s", err);
}

static void test_tcp_port_in_use(void **state)
{
    (void)state;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 4), 0);
    socklen_t sl = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &sl), 0);
    const int port = ntohs(a.sin_port);

    hoop__rdv_t r0 = tcp_rdv("127.0.0.1", port, 0, 2);
    hoop__store_t *st = NULL;
    char err[512] = "";
    const double t0 = now_s();
    assert_int_equal(hoop__store_open(&r0, 5.0, NULL, &st, err, sizeof err), HOOP_ERR_SYSTEM);
    assert_true(now_s() - t0 < 1.0); /* no waiting for a port that is taken */
    assert_null(st);
    char want[160];
    snprintf(want, sizeof want,
             "port %d on 127.0.0.1 is already in use (is another job running? set MASTER_PORT)",
             port);
    assert_string_equal(err, want);
    close(fd);

    /* An address this machine does not have. */
    hoop__rdv_t far = tcp_rdv("192.0.2.1", port, 0, 2);
    assert_int_equal(hoop__store_open(&far, 1.0, NULL, &st, err, sizeof err), HOOP_ERR_SYSTEM);
    assert_non_null(strstr(err, "MASTER_ADDR"));
    /* A name that does not resolve fails at once, for the server and for a client. */
    hoop__rdv_t bad = tcp_rdv("no-such-host.invalid", port, 1, 2);
    const double t1 = now_s();
    hoop_result_t r = hoop__store_open(&bad, 1.0, NULL, &st, err, sizeof err);
    assert_true(r == HOOP_ERR_SYSTEM ||
                r == HOOP_ERR_TIMEOUT); /* TIMEOUT where no resolver answers */
    if (r == HOOP_ERR_SYSTEM) {
        assert_true(now_s() - t1 < 0.9);
        assert_non_null(strstr(err, "no-such-host.invalid"));
    }
}

static void test_tcp_server_gone(void **state)
{
    (void)state;
    int port = free_port(AF_INET);
    hoop__rdv_t r0 = tcp_rdv("127.0.0.1", port, 0, 2), r1 = tcp_rdv("127.0.0.1", port, 1, 2);
    hoop__store_t *s0 = NULL, *s1 = NULL;
    char err[512];
    assert_int_equal(hoop__store_open(&r0, 5.0, NULL, &s0, err, sizeof err), HOOP_OK);
    assert_int_equal(hoop__store_open(&r1, 5.0, NULL, &s1, err, sizeof err), HOOP_OK);
    assert_int_equal(hoop__store_set(s1, "a", "1", 1), HOOP_OK);
    hoop__store_close(s0);
    char buf[8];
    size_t len;
    const double t0 = now_s();
    assert_int_equal(hoop__store_get(s1, "a", buf, sizeof buf, &len, 5.0), HOOP_ERR_PEER_LOST);
    assert_true(now_s() - t0 < 1.0);
    assert_non_null(strstr(hoop__store_error(s1), "rendezvous store"));
    /* Stays lost, quickly. */
    assert_int_equal(hoop__store_set(s1, "b", "2", 1), HOOP_ERR_PEER_LOST);
    hoop__store_close(s1);
}

/* A child process that listens on port and, for seconds, accepts each connection and closes it
 * without a byte, as a store that is closing does to a client that reached it in time; it exits
 * then, with the number of connections it dropped (at most 100), or 255 if it could not listen.
 * Returns its pid once it listens. */
static pid_t closing_store(int port, double seconds)
{
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 64) != 0) _exit(255);
        if (write(ready[1], "r", 1) != 1) _exit(255);
        const double end = now_s() + seconds;
        int dropped = 0;
        for (double now; (now = now_s()) < end;) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            if (poll(&p, 1, (int)((end - now) * 1000) + 1) <= 0) continue;
            int c = accept(fd, NULL, NULL);
            if (c >= 0) {
                close(c);
                dropped += dropped < 100;
            }
        }
        _exit(dropped);
    }
    close(ready[1]);
    char r;
    assert_int_equal(read(ready[0], &r, 1), 1);
    close(ready[0]);
    return pid;
}

typedef struct keyed_client {
    hoop__rdv_t rdv;
    double timeout;
    hoop_result_t open_rc, get_rc;
    double took; /* of the open */
    char err[512], val[16];
} keyed_client_t;

/* Opens the store as rdv says and reads key "v" from it. */
static void *keyed_client_main(void *arg)
{
    keyed_client_t *k = arg;
    hoop__store_t *st = NULL;
    const double t0 = now_s();
    k->open_rc = hoop__store_open(&k->rdv, k->timeout, NULL, &st, k->err, sizeof k->err);
    k->took = now_s() - t0;
    if (k->open_rc != HOOP_OK) return NULL;
    size_t len = 0;
    k->get_rc = hoop__store_get(st, "v", k->val, sizeof k->val - 1, &len, k->timeout);
    if (k->get_rc != HOOP_OK) snprintf(k->err, sizeof k->err, "%s", hoop__store_error(st));
    hoop__store_close(st);
    return NULL;
}

static hoop__rdv_t keyed_rdv(int port, int rank, const char *key)
{
    hoop__rdv_t r = tcp_rdv("127.0.0.1", port, rank, 2);
    char err[256];
    if (key != NULL) assert_int_equal(hoop__auth_key_from_string(&r.auth, key, err, sizeof err), 0);
    return r;
}

/* A client with a key that reaches a store while it closes (init, destroy, init again at once:
 * the next init's store comes up on the same port) waits for the next one; a store without a
 * key, or with another key, is an error at once. */
static void test_tcp_store_closes_under_client(void **state)
{
    (void)state;
    const char *key = "one key for both";
    int port = test_free_port();
    assert_true(port > 0);
    pid_t fake = closing_store(port, 0.5);
    keyed_client_t c = {.rdv = keyed_rdv(port, 1, key), .timeout = 5.0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, keyed_client_main, &c), 0);
    int ws = 0;
    assert_int_equal(waitpid(fake, &ws, 0), fake);
    /* The client met the closing store at least once: else this tests only a plain wait. */
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) != 255);
    if (WEXITSTATUS(ws) < 1) fail_msg("the client never reached the store that was closing");
    hoop__rdv_t r0 = keyed_rdv(port, 0, key);
    hoop__store_t *s0 = NULL;
    char err[512] = "";
    assert_int_equal(hoop__store_open(&r0, 5.0, NULL, &s0, err, sizeof err), HOOP_OK);
    assert_int_equal(hoop__store_set(s0, "v", "next", 4), HOOP_OK);
    pthread_join(th, NULL);
    if (c.open_rc != HOOP_OK || c.get_rc != HOOP_OK)
        fail_msg("the client of the store that closed: open %s (after %.2f s), get %s: %s",
                 hoop_error_string(c.open_rc), c.took, hoop_error_string(c.get_rc), c.err);
    assert_string_equal(c.val, "next");
    hoop__store_close(s0);
    hoop__auth_key_wipe(&r0.auth);

    /* The store of rank 0 has no key: said at once, well before the timeout. */
    r0 = keyed_rdv(port, 0, NULL);
    assert_int_equal(hoop__store_open(&r0, 5.0, NULL, &s0, err, sizeof err), HOOP_OK);
    c = (keyed_client_t){.rdv = keyed_rdv(port, 1, key), .timeout = 5.0};
    keyed_client_main(&c);
    if (c.open_rc != HOOP_ERR_AUTH || c.took > 1.5 || strstr(c.err, "has no key") == NULL)
        fail_msg("a keyless store: %s after %.2f s: %s", hoop_error_string(c.open_rc), c.took,
                 c.err);
    hoop__store_close(s0);

    /* Another key: rejected at once. */
    r0 = keyed_rdv(port, 0, "another key");
    assert_int_equal(hoop__store_open(&r0, 5.0, NULL, &s0, err, sizeof err), HOOP_OK);
    c = (keyed_client_t){.rdv = keyed_rdv(port, 1, key), .timeout = 5.0};
    keyed_client_main(&c);
    if (c.open_rc != HOOP_ERR_AUTH || c.took > 1.5 || strstr(c.err, "rejected our key") == NULL)
        fail_msg("another key: %s after %.2f s: %s", hoop_error_string(c.open_rc), c.took, c.err);
    hoop__store_close(s0);
    hoop__auth_key_wipe(&r0.auth);
    hoop__auth_key_wipe(&c.rdv.auth);
}

static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* 1 when the server closes fd within two seconds. */
static int closed_by_peer(int fd)
{
    const double end = now_s() + 2.0;
    char b[64];
    while (now_s() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) > 0) {
            ssize_t n = recv(fd, b, sizeof b, 0);
            if (n == 0 || (n < 0 && errno == ECONNRESET)) return 1;
        }
    }
    return 0;
}

/* Rank 0's store, logging at level to a file of its own, and rank 1's, on a fresh port. */
typedef struct logged_pair {
    char logpath[32];
    hoop__log_t log;
    int port;
    hoop__store_t *s0, *s1;
} logged_pair_t;

static void pair_open(logged_pair_t *lp, int level)
{
    snprintf(lp->logpath, sizeof lp->logpath, "/tmp/hoop-store-log-XXXXXX");
    int lfd = mkstemp(lp->logpath);
    assert_true(lfd >= 0);
    close(lfd);
    hoop__log_open(&lp->log, level, lp->logpath, 0);
    int port = lp->port = free_port(AF_INET);
    hoop__rdv_t r0 = tcp_rdv("127.0.0.1", port, 0, 2), r1 = tcp_rdv("127.0.0.1", port, 1, 2);
    char err[512];
    lp->s0 = lp->s1 = NULL;
    assert_int_equal(hoop__store_open(&r0, 5.0, &lp->log, &lp->s0, err, sizeof err), HOOP_OK);
    assert_int_equal(hoop__store_open(&r1, 5.0, NULL, &lp->s1, err, sizeof err), HOOP_OK);
}

/* Both stores and the log closed; the log's file is left to read (and unlink). */
static void pair_close(logged_pair_t *lp)
{
    hoop__store_close(lp->s1);
    hoop__store_close(lp->s0);
    hoop__log_close(&lp->log);
}

static void test_tcp_malformed_client(void **state)
{
    (void)state;
    logged_pair_t lp;
    pair_open(&lp, HOOP__LOG_WARN);
    hoop__store_t *s0 = lp.s0, *s1 = lp.s1;

    /* Unknown op, an oversized key, an oversized value, a whole 'G' (a get without a hold, no
     * request any more): each drops only its own connection. */
    uint8_t req[32];
    const size_t lens[4] = {1, 5, 9, 12};
    build_req(req, 'Q', 1, 0, NULL, NULL);
    uint8_t req2[16];
    build_req(req2, 'S', HOOP__STORE_MAX_KEY + 1, 0, NULL, NULL);
    uint8_t req3[16];
    build_req(req3, 'S', 4, HOOP__STORE_MAX_VALUE + 1, NULL, NULL);
    uint8_t req4[16];
    build_req(req4, 'G', 3, 0, "key", NULL);
    const uint8_t *reqs[4] = {req, req2, req3, req4};
    for (int i = 0; i < 4; i++) {
        int fd = raw_connect(lp.port);
        assert_true(fd >= 0);
        assert_int_equal(send(fd, reqs[i], lens[i], MSG_NOSIGNAL), (ssize_t)lens[i]);
        assert_true(closed_by_peer(fd));
        close(fd);
    }
    /* A client that connects and sends half a request, then stalls, does not block the others. */
    int stall = raw_connect(lp.port);
    assert_true(stall >= 0);
    build_req(req, 'S', 3, 100, NULL, NULL);
    assert_int_equal(send(stall, req, 9, MSG_NOSIGNAL), 9);

    assert_int_equal(hoop__store_set(s1, "still", "works", 5), HOOP_OK);
    char buf[8];
    size_t len = 0;
    assert_int_equal(hoop__store_get(s0, "still", buf, sizeof buf, &len, 1.0), HOOP_OK);
    assert_int_equal(len, 5);
    assert_memory_equal(buf, "works", 5);

    /* A hand-made valid request gets the documented reply bytes. */
    int fd = raw_connect(lp.port);
    assert_true(fd >= 0);
    size_t n = build_wait(req, "still", 0);
    assert_int_equal(send(fd, req, n, MSG_NOSIGNAL), (ssize_t)n);
    uint8_t rep[10];
    size_t got = 0;
    while (got < sizeof rep) {
        ssize_t k = recv(fd, rep + got, sizeof rep - got, 0);
        assert_true(k > 0);
        got += (size_t)k;
    }
    const uint8_t want[10] = {0, 5, 0, 0, 0, 'w', 'o', 'r', 'k', 's'};
    assert_memory_equal(rep, want, sizeof want);
    n = build_wait(req, "nope", 0);
    assert_int_equal(send(fd, req, n, MSG_NOSIGNAL), (ssize_t)n);
    got = 0;
    while (got < 5) {
        ssize_t k = recv(fd, rep + got, 5 - got, 0);
        assert_true(k > 0);
        got += (size_t)k;
    }
    const uint8_t missing[5] = {1, 0, 0, 0, 0};
    assert_memory_equal(rep, missing, 5);
    close(fd);
    close(stall);

    pair_close(&lp);
    FILE *f = fopen(lp.logpath, "r");
    assert_non_null(f);
    char text[8192];
    size_t tl = fread(text, 1, sizeof text - 1, f);
    text[tl] = '\0';
    fclose(f);
    unlink(lp.logpath);
    int warnings = 0;
    for (const char *p = text; (p = strstr(p, "malformed request")) != NULL; p++) warnings++;
    if (warnings != 4) fail_msg("expected 4 warnings about malformed requests, log:\n%s", text);
}

/* ---------------------------------------------------------------------------------------------- */
/* Waiting gets: held at the server until the key is set                                         */

/* The number of requests rank 0's store served, from the line it logs at INFO when it stops. */
static unsigned long long served_in_log(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[1024];
    unsigned long long n = 0;
    int seen = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        const char *p = strstr(line, ": served ");
        if (p != NULL && sscanf(p, ": served %llu requests", &n) == 1) seen = 1;
    }
    fclose(f);
    if (!seen) fail_msg("no \"served N requests\" line in the store's log");
    return n;
}

typedef struct timed_setter {
    hoop__store_t *st;
    double at;  /* when to set (now_s) */
    double set; /* when the set returned */
    const char *key;
    hoop_result_t result;
} timed_setter_t;

static void *timed_setter_main(void *arg)
{
    timed_setter_t *t = arg;
    const double left = t->at - now_s();
    if (left > 0) sleep_ms((int)(left * 1e3));
    t->result = hoop__store_set(t->st, t->key, "ready", 5);
    t->set = now_s();
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A get that waits for a key comes back as the key is set, not at the next poll: with polls
 * backing off to 50 ms, a set 200-280 ms after the get was seen up to 50 ms late. And the
 * server is asked once per wait, not once per poll. */
static void test_tcp_get_returns_at_set(void **state)
{
    (void)state;
    logged_pair_t lp;
    pair_open(&lp, HOOP__LOG_INFO);
    hoop__store_t *s0 = lp.s0, *s1 = lp.s1;
    enum { TRIALS = 5 };
    double late[TRIALS];
    for (int i = 0; i < TRIALS; i++) {
        char key[32];
        snprintf(key, sizeof key, "at-set/%d", i);
        timed_setter_t t = {.st = s0, .at = now_s() + 0.2 + 0.02 * i, .key = key};
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, timed_setter_main, &t), 0);
        char buf[8] = "";
        size_t len = 0;
        hoop_result_t r = hoop__store_get(s1, key, buf, sizeof buf, &len, 5.0);
        const double back = now_s();
        pthread_join(th, NULL);
        assert_int_equal(t.result, HOOP_OK);
        assert_int_equal(r, HOOP_OK);
        assert_int_equal(len, 5);
        assert_memory_equal(buf, "ready", 5);
        /* The server answers the held get before the setter reads its own reply: the get may
         * even be back first. */
        late[i] = back - t.set;
    }
    qsort(late, TRIALS, sizeof late[0], cmp_double);
    if (late[TRIALS / 2] > 0.010)
        fail_msg("a get came back a median %.1f ms after the set (%.1f-%.1f)",
                 late[TRIALS / 2] * 1e3, late[0] * 1e3, late[TRIALS - 1] * 1e3);
    pair_close(&lp);
    /* Per trial: one set and one held get, give or take one asked again. */
    const unsigned long long served = served_in_log(lp.logpath);
    unlink(lp.logpath);
    if (served > 3 * TRIALS)
        fail_msg("the store served %llu requests for %d sets and %d waits", served, TRIALS, TRIALS);
}

/* A key that never comes: the wait ends on the get's own deadline, having asked the server about
 * once, not every 50 ms; and a get on a key that is there does not wait. */
static void test_tcp_held_get_times_out(void **state)
{
    (void)state;
    logged_pair_t lp;
    pair_open(&lp, HOOP__LOG_INFO);
    hoop__store_t *s0 = lp.s0, *s1 = lp.s1;
    char buf[8];
    size_t len = 0;
    const double t0 = now_s();
    assert_int_equal(hoop__store_get(s1, "never", buf, sizeof buf, &len, 0.6), HOOP_ERR_TIMEOUT);
    const double took = now_s() - t0;
    if (took < 0.6 || took > 1.2) fail_msg("a 0.6 s wait took %.3f s", took);
    assert_non_null(strstr(hoop__store_error(s1), "\"never\""));
    /* The connection is in step after a hold that ran out. */
    assert_int_equal(hoop__store_set(s0, "there", "yes", 3), HOOP_OK);
    const double t1 = now_s();
    assert_int_equal(hoop__store_get(s1, "there", buf, sizeof buf, &len, 5.0), HOOP_OK);
    assert_true(now_s() - t1 < 0.5);
    assert_int_equal(len, 3);
    assert_memory_equal(buf, "yes", 3);
    pair_close(&lp);
    /* The wait, the set and the get; polling would have been 15 or more. */
    const unsigned long long served = served_in_log(lp.logpath);
    unlink(lp.logpath);
    if (served > 5)
        fail_msg("the store served %llu requests for a 0.6 s wait, a set and a get", served);
}

typedef struct held_reader {
    hoop__rdv_t rdv;
    hoop_result_t open_rc, get_rc;
    double back; /* when the get returned (now_s) */
    char err[512];
} held_reader_t;

static void *held_reader_main(void *arg)
{
    held_reader_t *h = arg;
    hoop__store_t *st = NULL;
    h->open_rc = hoop__store_open(&h->rdv, 5.0, NULL, &st, h->err, sizeof h->err);
    if (h->open_rc != HOOP_OK) return NULL;
    char buf[8];
    size_t len = 0;
    h->get_rc = hoop__store_get(st, "never", buf, sizeof buf, &len, 20.0);
    h->back = now_s();
    snprintf(h->err, sizeof h->err, "%s", hoop__store_error(st));
    hoop__store_close(st);
    return NULL;
}

/* Rank 0's store closes while gets are held: it stops at once, and every waiting client hears
 * that the store went away at once, not at its timeout. */
static void test_tcp_store_closes_with_held_gets(void **state)
{
    (void)state;
    int port = free_port(AF_INET);
    hoop__rdv_t r0 = tcp_rdv("127.0.0.1", port, 0, 5);
    hoop__store_t *s0 = NULL;
    char err[512];
    assert_int_equal(hoop__store_open(&r0, 5.0, NULL, &s0, err, sizeof err), HOOP_OK);
    enum { READERS = 4 };
    held_reader_t h[READERS];
    pthread_t th[READERS];
    for (int i = 0; i < READERS; i++) {
        h[i] = (held_reader_t){.rdv = tcp_rdv("127.0.0.1", port, i + 1, 5)};
        assert_int_equal(pthread_create(&th[i], NULL, held_reader_main, &h[i]), 0);
    }
    sleep_ms(300);
    const double t0 = now_s();
    hoop__store_close(s0);
    const double closed = now_s();
    if (closed - t0 > 1.0) fail_msg("closing the store took %.2f s", closed - t0);
    for (int i = 0; i < READERS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(h[i].open_rc, HOOP_OK);
        if (h[i].get_rc != HOOP_ERR_PEER_LOST || h[i].back - closed > 1.0)
            fail_msg("reader %d: %s %.2f s after the store closed: %s", i,
                     hoop_error_string(h[i].get_rc), h[i].back - closed, h[i].err);
        assert_non_null(strstr(h[i].err, "rendezvous store"));
    }
}

static void recv_exact(int fd, uint8_t *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        assert_true(poll(&p, 1, 3000) == 1);
        ssize_t k = recv(fd, buf + got, n - got, 0);
        assert_true(k > 0);
        got += (size_t)k;
    }
}

/* 1 when nothing arrives on fd for ms milliseconds (the connection stays open). */
static int quiet_for(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) == 0;
}

/* The wire of a held get: answered as a get, when the key is set or the hold is over; a request
 * sent behind it waits for it (one held request a connection); a hold over the longest granted,
 * or a client that leaves while held, costs the others nothing. */
static void test_tcp_held_get_wire(void **state)
{
    (void)state;
    int port = free_port(AF_INET);
    hoop__rdv_t r0 = tcp_rdv("127.0.0.1", port, 0, 2);
    hoop__store_t *s0 = NULL;
    char err[512];
    assert_int_equal(hoop__store_open(&r0, 5.0, NULL, &s0, err, sizeof err), HOOP_OK);

    int fd = raw_connect(port);
    assert_true(fd >= 0);
    uint8_t req[64];
    size_t n = build_wait(req, "wk", 5000);
    n += build_wait(req + n, "gk", 0);
    assert_int_equal(send(fd, req, n, MSG_NOSIGNAL), (ssize_t)n);
    assert_true(quiet_for(fd, 200)); /* held, and the get behind it with it */
    assert_int_equal(hoop__store_set(s0, "gk", "g", 1), HOOP_OK);
    assert_true(quiet_for(fd, 100)); /* still: "wk" is not there */
    assert_int_equal(hoop__store_set(s0, "wk", "held", 4), HOOP_OK);
    /* The held get's reply, then the get's behind it. */
    uint8_t rep[15];
    recv_exact(fd, rep, sizeof rep);
    const uint8_t want[15] = {0, 4, 0, 0, 0, 'h', 'e', 'l', 'd', 0, 1, 0, 0, 0, 'g'};
    assert_memory_equal(rep, want, sizeof want);

    /* A hold that runs out is answered "missing", after it and not long after. */
    n = build_wait(req, "absent", 300);
    const double t0 = now_s();
    assert_int_equal(send(fd, req, n, MSG_NOSIGNAL), (ssize_t)n);
    recv_exact(fd, rep, 5);
    const double held = now_s() - t0;
    const uint8_t missing[5] = {1, 0, 0, 0, 0};
    assert_memory_equal(rep, missing, 5);
    if (held < 0.29 || held > 1.0) fail_msg("a 300 ms hold was answered after %.3f s", held);
    /* A hold of 0 is a plain look. */
    n = build_wait(req, "absent", 0);
    assert_int_equal(send(fd, req, n, MSG_NOSIGNAL), (ssize_t)n);
    recv_exact(fd, rep, 5);
    assert_memory_equal(rep, missing, 5);

    /* Clients that leave while held: nothing is written to them when the key comes. */
    int gone[8];
    for (int i = 0; i < 8; i++) {
        gone[i] = raw_connect(port);
        assert_true(gone[i] >= 0);
        n = build_wait(req, "late", 5000);
        assert_int_equal(send(gone[i], req, n, MSG_NOSIGNAL), (ssize_t)n);
    }
    sleep_ms(100);
    for (int i = 0; i < 8; i++) close(gone[i]);
    sleep_ms(100);
    assert_int_equal(hoop__store_set(s0, "late", "x", 1), HOOP_OK);

    /* A hold longer than the server grants is a malformed request. */
    int bad = raw_connect(port);
    assert_true(bad >= 0);
    n = build_wait(req, "k", HOOP__STORE_MAX_HOLD_MS + 1);
    assert_int_equal(send(bad, req, n, MSG_NOSIGNAL), (ssize_t)n);
    assert_true(closed_by_peer(bad));
    close(bad);

    /* The first connection is still served. */
    n = build_wait(req, "late", 0);
    assert_int_equal(send(fd, req, n, MSG_NOSIGNAL), (ssize_t)n);
    recv_exact(fd, rep, 6);
    const uint8_t late[6] = {0, 1, 0, 0, 0, 'x'};
    assert_memory_equal(rep, late, 6);
    close(fd);
    hoop__store_close(s0);
}

/* With HOOP_AUTH_KEY, a waiting get is a request like any other: held for a client that proved
 * the key, never read from one that did not. */
static void test_tcp_held_get_keyed(void **state)
{
    (void)state;
    const char *key = "the held key";
    int port = test_free_port();
    assert_true(port > 0);
    hoop__rdv_t r0 = keyed_rdv(port, 0, key), r1 = keyed_rdv(port, 1, key);
    hoop__store_t *s0 = NULL, *s1 = NULL;
    char err[512];
    assert_int_equal(hoop__store_open(&r0, 5.0, NULL, &s0, err, sizeof err), HOOP_OK);
    assert_int_equal(hoop__store_open(&r1, 5.0, NULL, &s1, err, sizeof err), HOOP_OK);
    /* A stranger's held get: the server speaks its hello, never a store's reply. */
    int fd = raw_connect(port);
    assert_true(fd >= 0);
    uint8_t req[64];
    size_t n = build_wait(req, "k", 5000);
    assert_int_equal(send(fd, req, n, MSG_NOSIGNAL), (ssize_t)n);

    timed_setter_t t = {.st = s0, .at = now_s() + 0.2, .key = "k"};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, timed_setter_main, &t), 0);
    char buf[8] = "";
    size_t len = 0;
    assert_int_equal(hoop__store_get(s1, "k", buf, sizeof buf, &len, 5.0), HOOP_OK);
    pthread_join(th, NULL);
    assert_int_equal(t.result, HOOP_OK);
    assert_int_equal(len, 5);
    assert_memory_equal(buf, "ready", 5);

    uint8_t got[256];
    size_t have = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 3000) != 1) break;
        ssize_t k = recv(fd, got + have, sizeof got - have, 0);
        if (k <= 0) break;
        have += (size_t)k;
        if (have == sizeof got) break;
    }
    close(fd);
    /* Whatever came is the hello (it starts "HOOPAUTH"), not the value. */
    assert_true(have >= 8);
    assert_memory_equal(got, "HOOPAUTH", 8);
    assert_null(memmem(got, have, "ready", 5));
    hoop__store_close(s1);
    hoop__store_close(s0);
    hoop__auth_key_wipe(&r0.auth);
    hoop__auth_key_wipe(&r1.auth);
}

static void test_tcp_ipv6(void **state)
{
    (void)state;
    int port = free_port(AF_INET6);
    if (port < 0) {
        skip(); /* no IPv6 loopback here */
        return;
    }
    char method[64];
    snprintf(method, sizeof method, "tcp://[::1]:%d", port);
    hoop__rdv_t r0, r1;
    char err[512];
    assert_int_equal(hoop__rdv_resolve(method, 0, 2, &r0, err, sizeof err), HOOP_OK);
    assert_int_equal(hoop__rdv_resolve(method, 1, 2, &r1, err, sizeof err), HOOP_OK);
    hoop__store_t *s0 = NULL, *s1 = NULL;
    assert_int_equal(hoop__store_open(&r0, 5.0, NULL, &s0, err, sizeof err), HOOP_OK);
    assert_int_equal(hoop__store_open(&r1, 5.0, NULL, &s1, err, sizeof err), HOOP_OK);
    assert_int_equal(hoop__store_set(s1, "v6", "yes", 3), HOOP_OK);
    char buf[8];
    size_t len = 0;
    assert_int_equal(hoop__store_get(s0, "v6", buf, sizeof buf, &len, 1.0), HOOP_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(buf, "yes", 3);
    hoop__store_close(s1);
    hoop__store_close(s0);
    /* The message brackets the address. */
    hoop__store_t *st = NULL;
    assert_int_equal(hoop__store_open(&r1, 0.2, NULL, &st, err, sizeof err), HOOP_ERR_TIMEOUT);
    char want[64];
    snprintf(want, sizeof want, "[::1]:%d", port);
    assert_non_null(strstr(err, want));
}

/* ---------------------------------------------------------------------------------------------- */
/* file store                                                                                     */

static void rm_rf(const char *path)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
}

/* Claims: of several clients claiming one key at once, exactly one sets it, and every other one
 * is told it was taken and given the winner's value; a later set does not un-take it. */
typedef struct claim_job {
    hoop__rdv_t rdv;
    int taken;
    char holder[64];
    hoop_result_t rc;
} claim_job_t;

static void *claim_main(void *arg)
{
    claim_job_t *j = arg;
    hoop__store_t *st = NULL;
    char err[512], mine[64];
    j->rc = hoop__store_open(&j->rdv, 5.0, NULL, &st, err, sizeof err);
    if (j->rc != HOOP_OK) return NULL;
    snprintf(mine, sizeof mine, "claimed by %d", j->rdv.rank);
    size_t len = 0;
    j->rc = hoop__store_claim(st, "hoop/rank/1", mine, strlen(mine), &j->taken, j->holder,
                              sizeof j->holder - 1, &len);
    j->holder[len < sizeof j->holder ? len : sizeof j->holder - 1] = '\0';
    /* Stay connected until rank 0 has checked (it closes the server). */
    char one[2];
    if (j->rc == HOOP_OK) j->rc = hoop__store_get(st, "done", one, sizeof one, &len, 5.0);
    hoop__store_close(st);
    return NULL;
}

static void claim_once(hoop__rdv_t (*mk)(const char *, int, int, int, const char *), int port,
                       const char *path)
{
    enum { N = 6 };
    claim_job_t jobs[N];
    pthread_t th[N];
    memset(jobs, 0, sizeof jobs);
    hoop__rdv_t r0 = mk("127.0.0.1", port, 0, N, path);
    hoop__store_t *s0 = NULL;
    char err[512];
    assert_int_equal(hoop__store_open(&r0, 5.0, NULL, &s0, err, sizeof err), HOOP_OK);
    for (int i = 1; i < N; i++) {
        jobs[i].rdv = mk("127.0.0.1", port, i, N, path);
        assert_int_equal(pthread_create(&th[i], NULL, claim_main, &jobs[i]), 0);
    }
    char winner[64];
    size_t len = 0;
    assert_int_equal(hoop__store_get(s0, "hoop/rank/1", winner, sizeof winner - 1, &len, 5.0),
                     HOOP_OK);
    winner[len] = '\0';
    assert_int_equal(hoop__store_set(s0, "done", "1", 1), HOOP_OK);
    int won = 0;
    for (int i = 1; i < N; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(jobs[i].rc, HOOP_OK);
        char mine[64];
        snprintf(mine, sizeof mine, "claimed by %d", i);
        if (!jobs[i].taken) {
            won++;
            assert_string_equal(winner, mine);
        } else {
            assert_string_equal(jobs[i].holder, winner);
        }
    }
    assert_int_equal(won, 1);
    int taken = 0;
    assert_int_equal(hoop__store_claim(s0, "hoop/rank/1", "x", 1, &taken, NULL, 0, NULL), HOOP_OK);
    assert_int_equal(taken, 1);
    hoop__store_close(s0);
}

static hoop__rdv_t claim_tcp_rdv(const char *host, int port, int rank, int size, const char *path)
{
    (void)path;
    return tcp_rdv(host, port, rank, size);
}

static hoop__rdv_t claim_file_rdv(const char *host, int port, int rank, int size, const char *path)
{
    (void)host;
    (void)port;
    return file_rdv(path, rank, size);
}

static void test_claim_once(void **state)
{
    (void)state;
    int port = free_port(AF_INET);
    assert_true(port > 0);
    claim_once(claim_tcp_rdv, port, NULL);
    char base[] = "/tmp/hoop-store-test-XXXXXX";
    assert_non_null(mkdtemp(base));
    char path[256];
    snprintf(path, sizeof path, "%s/claim.store", base);
    claim_once(claim_file_rdv, 0, path);
    rmdir(base);
}

static void test_file_exchange(void **state)
{
    (void)state;
    char base[] = "/tmp/hoop-store-test-XXXXXX";
    assert_non_null(mkdtemp(base));
    char path[256];
    snprintf(path, sizeof path, "%s/a/b/job.store", base); /* parents created on demand */
    client_job_t jobs[NCLIENTS];
    pthread_t th[NCLIENTS];
    memset(jobs, 0, sizeof jobs);
    for (int i = 1; i < NCLIENTS; i++) {
        jobs[i].rdv = file_rdv(path, i, NCLIENTS);
        jobs[i].nranks = NCLIENTS;
        jobs[i].delay_ms = 50 * i;
        assert_int_equal(pthread_create(&th[i], NULL, exchange_main, &jobs[i]), 0);
    }
    hoop__rdv_t r0 = file_rdv(path, 0, NCLIENTS);
    hoop__store_t *s0 = NULL;
    char err[512];
    assert_int_equal(hoop__store_open(&r0, 5.0, NULL, &s0, err, sizeof err), HOOP_OK);
    uint8_t val[4096], got[4096];
    for (int k = 0; k < NKEYS; k++) {
        char key[64];
        snprintf(key, sizeof key, "peer/0/%d", k);
        size_t n = make_value(0, k, val, sizeof val);
        assert_int_equal(hoop__store_set(s0, key, val, n), HOOP_OK);
    }
    for (int i = 1; i < NCLIENTS; i++) {
        pthread_join(th[i], NULL);
        if (jobs[i].result != HOOP_OK) fail_msg("rank %d: %s", i, jobs[i].what);
    }
    wait_all_done(s0, 1, NCLIENTS);

    /* Keys that are not file names: they stay inside PATH.d and come back unchanged. */
    char k256[HOOP__STORE_MAX_KEY + 1];
    memset(k256, '/', HOOP__STORE_MAX_KEY);
    k256[HOOP__STORE_MAX_KEY] = '\0';
    char kdots[HOOP__STORE_MAX_KEY + 1];
    memset(kdots, '.', HOOP__STORE_MAX_KEY);
    kdots[HOOP__STORE_MAX_KEY] = '\0';
    char kplain[HOOP__STORE_MAX_KEY + 1];
    memset(kplain, 'p', HOOP__STORE_MAX_KEY);
    kplain[HOOP__STORE_MAX_KEY] = '\0';
    char kprefix[201]; /* a prefix of kplain that ends exactly where a long name is split */
    memset(kprefix, 'p', 200);
    kprefix[200] = '\0';
    const char *keys[] = {
        "../../escape", ".",   "..",   ".tmp.abcdef", "a/b", "a%2Fb", "sp ace", "\x01\x7f\xff",
        k256,           kdots, kplain, kprefix,       "%",   "+",     "x+"};
    const size_t nk = sizeof keys / sizeof keys[0];
    for (size_t i = 0; i < nk; i++) {
        char v[32];
        int n = snprintf(v, sizeof v, "value %zu", i);
        assert_int_equal(hoop__store_set(s0, keys[i], v, (size_t)n), HOOP_OK);
    }
    hoop__rdv_t r1 = file_rdv(path, 1, 2);
    hoop__store_t *s1 = NULL;
    assert_int_equal(hoop__store_open(&r1, 5.0, NULL, &s1, err, sizeof err), HOOP_OK);
    for (size_t i = 0; i < nk; i++) {
        char v[32], b[32];
        int n = snprintf(v, sizeof v, "value %zu", i);
        size_t len = 0;
        assert_int_equal(hoop__store_get(s1, keys[i], b, sizeof b, &len, 1.0), HOOP_OK);
        assert_int_equal(len, (size_t)n);
        assert_memory_equal(b, v, len);
    }
    char esc[300];
    snprintf(esc, sizeof esc, "%s/escape", base);
    struct stat sb;
    assert_int_not_equal(stat(esc, &sb), 0);
    snprintf(esc, sizeof esc, "%s/a/escape", base);
    assert_int_not_equal(stat(esc, &sb), 0);

    /* Missing key: timeout. */
    const double t0 = now_s();
    size_t len;
    assert_int_equal(hoop__store_get(s1, "absent", got, sizeof got, &len, 0.2), HOOP_ERR_TIMEOUT);
    assert_true(now_s() - t0 >= 0.2);
    assert_non_null(strstr(hoop__store_error(s1), "absent"));

    /* A non-zero rank's close leaves the directory; rank 0's removes it. */
    char dir[300];
    snprintf(dir, sizeof dir, "%s.d", path);
    hoop__store_close(s1);
    assert_int_equal(stat(dir, &sb), 0);
    hoop__store_close(s0);
    assert_int_not_equal(stat(dir, &sb), 0);
    assert_int_equal(errno, ENOENT);
    rm_rf(base);
}

typedef struct flipper {
    hoop__store_t *st;
    int rounds;
    hoop_result_t result;
} flipper_t;

/* Rewrites one key with two values of different lengths and bytes. */
static void *flipper_main(void *arg)
{
    flipper_t *f = arg;
    uint8_t *a = malloc(200000), *b = malloc(70000);
    if (a == NULL || b == NULL) {
        f->result = HOOP_ERR_NO_MEMORY;
        free(a);
        free(b);
        return NULL;
    }
    memset(a, 'a', 200000);
    memset(b, 'b', 70000);
    f->result = HOOP_OK;
    for (int i = 0; i < f->rounds && f->result == HOOP_OK; i++)
        f->result = hoop__store_set(f->st, "flip", (i & 1) ? b : a, (i & 1) ? 70000 : 200000);
    free(a);
    free(b);
    return NULL;
}

static void test_file_atomic_values(void **state)
{
    (void)state;
    char base[] = "/tmp/hoop-store-test-XXXXXX";
    assert_non_null(mkdtemp(base));
    char path[256];
    snprintf(path, sizeof path, "%s/job", base);
    hoop__rdv_t r0 = file_rdv(path, 0, 2), r1 = file_rdv(path, 1, 2);
    hoop__store_t *s0 = NULL, *s1 = NULL;
    char err[512];
    assert_int_equal(hoop__store_open(&r0, 5.0, NULL, &s0, err, sizeof err), HOOP_OK);
    assert_int_equal(hoop__store_open(&r1, 5.0, NULL, &s1, err, sizeof err), HOOP_OK);
    flipper_t f = {.st = s1, .rounds = 300};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, flipper_main, &f), 0);
    uint8_t *buf = malloc(200000);
    assert_non_null(buf);
    int torn = 0, reads = 0;
    for (int i = 0; i < 300; i++) {
        size_t len = 0;
        if (hoop__store_get(s0, "flip", buf, 200000, &len, 5.0) != HOOP_OK) {
            torn++;
            break;
        }
        reads++;
        const uint8_t c = len == 200000 ? 'a' : len == 70000 ? 'b' : 0;
        if (c == 0) {
            torn++;
            continue;
        }
        for (size_t j = 0; j < len; j++)
            if (buf[j] != c) {
                torn++;
                break;
            }
    }
    pthread_join(th, NULL);
    assert_int_equal(f.result, HOOP_OK);
    assert_int_equal(torn, 0);
    assert_int_equal(reads, 300);
    free(buf);
    hoop__store_close(s1);
    hoop__store_close(s0);
    rm_rf(base);
}

static void test_file_open_errors(void **state)
{
    (void)state;
    char base[] = "/tmp/hoop-store-test-XXXXXX";
    assert_non_null(mkdtemp(base));
    char file[256], path[300];
    snprintf(file, sizeof file, "%s/plain", base);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    /* A parent that is a regular file. */
    snprintf(path, sizeof path, "%s/sub/job", file);
    hoop__rdv_t r = file_rdv(path, 0, 1);
    hoop__store_t *st = NULL;
    char err[512] = "";
    assert_int_equal(hoop__store_open(&r, 1.0, NULL, &st, err, sizeof err), HOOP_ERR_SYSTEM);
    assert_null(st);
    assert_non_null(strstr(err, "cannot create the file store directory"));
    /* PATH.d exists as a file. */
    snprintf(path, sizeof path, "%s/x", base);
    snprintf(file, sizeof file, "%s/x.d", base);
    f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    r = file_rdv(path, 0, 1);
    assert_int_equal(hoop__store_open(&r, 1.0, NULL, &st, err, sizeof err), HOOP_ERR_SYSTEM);
    /* ... and nothing of it was removed by the failed open. */
    struct stat sb;
    assert_int_equal(stat(file, &sb), 0);
    /* A directory that already exists is fine. */
    snprintf(path, sizeof path, "%s/y", base);
    snprintf(file, sizeof file, "%s/y.d", base);
    assert_int_equal(mkdir(file, 0700), 0);
    r = file_rdv(path, 1, 2);
    assert_int_equal(hoop__store_open(&r, 1.0, NULL, &st, err, sizeof err), HOOP_OK);
    hoop__store_close(st);
    /* Bad rendezvous descriptions. */
    hoop__rdv_t bad = file_rdv(path, 0, 1);
    snprintf(bad.method, sizeof bad.method, "udp");
    assert_int_equal(hoop__store_open(&bad, 1.0, NULL, &st, err, sizeof err),
                     HOOP_ERR_INVALID_ARGUMENT);
    bad = tcp_rdv("127.0.0.1", 0, 0, 1);
    assert_int_equal(hoop__store_open(&bad, 1.0, NULL, &st, err, sizeof err),
                     HOOP_ERR_INVALID_ARGUMENT);
    assert_int_equal(hoop__store_open(NULL, 1.0, NULL, &st, err, sizeof err),
                     HOOP_ERR_INVALID_ARGUMENT);
    /* NULL handles are harmless. */
    hoop__store_close(NULL);
    assert_string_equal(hoop__store_error(NULL), "");
    assert_int_equal(hoop__store_set(NULL, "k", "v", 1), HOOP_ERR_INVALID_ARGUMENT);
    rm_rf(base);
}

/* Opens a file store at dir/sub/job in a child process after prepare(dir) ran there (a file
 * system made read-only, privileges dropped), and says whether the error names want. The child's
 * exit status: 0 the error says want, 1 it does not (or the open passed), 77 prepare could not
 * run here. */
static int open_in_child(const char *dir, int (*prepare)(const char *), const char *want, char *got,
                         size_t cap)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        if (prepare(dir) != 0) _exit(77);
        char path[300], err[512] = "";
        snprintf(path, sizeof path, "%s/sub/job", dir);
        hoop__rdv_t r = file_rdv(path, 0, 2);
        hoop__store_t *st = NULL;
        hoop_result_t rc = hoop__store_open(&r, 1.0, NULL, &st, err, sizeof err);
        if (rc == HOOP_OK) hoop__store_close(st);
        ssize_t n = write(p[1], err, strlen(err));
        (void)n;
        _exit(rc == HOOP_ERR_SYSTEM && strstr(err, want) != NULL ? 0 : 1);
    }
    close(p[1]);
    size_t n = 0;
    for (ssize_t r; n + 1 < cap && (r = read(p[0], got + n, cap - 1 - n)) > 0;) n += (size_t)r;
    got[n] = '\0';
    close(p[0]);
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 1;
}

/* dir becomes an empty read-only file system, in a mount namespace of this process's own (as
 * root, or as anyone where user namespaces are allowed). */
static int make_read_only(const char *dir)
{
    if (unshare(CLONE_NEWNS) != 0 && unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return -1;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return -1;
    return mount("hoop-test", dir, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, NULL);
}

/* dir becomes a directory this process may not write to: read-only to it, or, for root (whom
 * modes do not stop), owned by root while the process drops to nobody. */
static int make_unwritable(const char *dir)
{
    if (geteuid() != 0) return chmod(dir, 0555);
    if (chmod(dir, 0755) != 0 || setgroups(0, NULL) != 0 || setgid(65534) != 0 ||
        setuid(65534) != 0)
        return -1;
    return 0;
}

/* A store directory that cannot be made says why: the file system's own error, not the "No such
 * file or directory" of the look that follows a failed mkdir. */
static void test_file_unwritable(void **state)
{
    (void)state;
    char base[] = "/tmp/hoop-store-ro-XXXXXX";
    assert_non_null(mkdtemp(base));
    char got[600];
    int rc = open_in_child(base, make_read_only, strerror(EROFS), got, sizeof got);
    if (rc == 77)
        print_message("no mount namespace here: the read-only case is not run\n");
    else if (rc != 0)
        fail_msg("a read-only file system: \"%s\", want \"%s\"", got, strerror(EROFS));
    rc = open_in_child(base, make_unwritable, strerror(EACCES), got, sizeof got);
    if (rc != 0)
        fail_msg("a directory without write access: \"%s\", want \"%s\"", got, strerror(EACCES));
    assert_non_null(strstr(got, "cannot create the file store directory"));
    assert_int_equal(chmod(base, 0700), 0);
    rm_rf(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_resolve_env_torchrun, env_setup),
        cmocka_unit_test_setup(test_resolve_env_slurm, env_setup),
        cmocka_unit_test_setup(test_resolve_env_ompi, env_setup),
        cmocka_unit_test_setup(test_resolve_explicit_wins, env_setup),
        cmocka_unit_test_setup(test_resolve_tcp_and_file, env_setup),
        cmocka_unit_test_setup(test_resolve_errors, env_setup),
        cmocka_unit_test(test_parse_valid_and_partial),
        cmocka_unit_test(test_parse_malformed),
        cmocka_unit_test(test_parse_random),
        cmocka_unit_test(test_tcp_exchange),
        cmocka_unit_test(test_tcp_get_waits_and_times_out),
        cmocka_unit_test(test_tcp_late_starters),
        cmocka_unit_test(test_tcp_nothing_listens),
        cmocka_unit_test(test_tcp_port_in_use),
        cmocka_unit_test(test_tcp_server_gone),
        cmocka_unit_test(test_tcp_store_closes_under_client),
        cmocka_unit_test(test_tcp_malformed_client),
        cmocka_unit_test(test_tcp_ipv6),
        cmocka_unit_test(test_tcp_get_returns_at_set),
        cmocka_unit_test(test_tcp_held_get_times_out),
        cmocka_unit_test(test_tcp_store_closes_with_held_gets),
        cmocka_unit_test(test_tcp_held_get_wire),
        cmocka_unit_test(test_tcp_held_get_keyed),
        cmocka_unit_test(test_file_exchange),
        cmocka_unit_test(test_claim_once),
        cmocka_unit_test(test_file_atomic_values),
        cmocka_unit_test(test_file_open_errors),
        cmocka_unit_test(test_file_unwritable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
