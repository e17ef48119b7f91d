/* Configuration from the environment: defaults, every variable, every kind of bad value. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/config.h"
#include "base/log.h"
#include "base/wire.h"
#include "core/agree.h"
#include "transport/registry.h"

typedef struct {
    const char *kv[16][2];
} env_t;

static const char *lookup(const char *name, void *ctx)
{
    env_t *e = ctx;
    for (int i = 0; i < 16 && e->kv[i][0] != NULL; i++)
        if (strcmp(e->kv[i][0], name) == 0) return e->kv[i][1];
    return NULL;
}

static hoop_result_t parse1(hoop__config_t *c, const char *name, const char *val, char *err)
{
    env_t e = {{{name, val}}};
    return hoop__config_parse(c, lookup, &e, err, 256);
}

static void defaults(void **state)
{
    (void)state;
    hoop__config_t c;
    char err[256];
    env_t e = {{{NULL, NULL}}};
    assert_int_equal(hoop__config_parse(&c, lookup, &e, err, sizeof(err)), HOOP_OK);
    assert_int_equal(c.log_level, HOOP__LOG_WARN);
    assert_string_equal(c.transport, "auto");
    assert_string_equal(c.algo, "auto");
    assert_int_equal(c.sockets_per_peer, 1);
    assert_int_equal(c.chunk_bytes, 512 * 1024);
    assert_true(c.timeout_s == 300.0);
    assert_int_equal(c.record, 2048);
    assert_string_equal(c.record_dir, "");
    assert_int_equal(c.record_signal, 0);
}

/* The flight recorder's settings: 0 turns it off, the largest ring is taken, the rest as typed. */
static void record_settings(void **state)
{
    (void)state;
    hoop__config_t c;
    char err[256];
    env_t e = {
        {{"HOOP_RECORD", "0"}, {"HOOP_RECORD_DIR", "/tmp/x y"}, {"HOOP_RECORD_SIGNAL", "1"}}};
    assert_int_equal(hoop__config_parse(&c, lookup, &e, err, sizeof(err)), HOOP_OK);
    assert_int_equal(c.record, 0);
    assert_string_equal(c.record_dir, "/tmp/x y");
    assert_int_equal(c.record_signal, 1);
    env_t big = {{{"HOOP_RECORD", "1048576"}}};
    assert_int_equal(hoop__config_parse(&c, lookup, &big, err, sizeof(err)), HOOP_OK);
    assert_int_equal(c.record, 1048576);
}

static void every_variable(void **state)
{
    (void)state;
    hoop__config_t c;
    char err[256];
    env_t e = {{{"HOOP_DEBUG", "trace"},
                {"HOOP_DEBUG_FILE", "/tmp/hoop.%h.%p.log"},
                {"HOOP_TRANSPORT", "TCP"},
                {"HOOP_ALGO", "ring"},
                {"HOOP_SOCKET_IFNAME", "^lo,docker"},
                {"HOOP_SOCKETS_PER_PEER", "4"},
                {"HOOP_CHUNK_BYTES", "1M"},
                {"HOOP_SMALL_BYTES", "64K"},
                {"HOOP_TIMEOUT", "2.5"}}};
    assert_int_equal(hoop__config_parse(&c, lookup, &e, err, sizeof(err)), HOOP_OK);
    assert_int_equal(c.log_level, HOOP__LOG_TRACE);
    assert_string_equal(c.log_file, "/tmp/hoop.%h.%p.log");
    assert_string_equal(c.transport, "tcp");
    assert_string_equal(c.algo, "ring");
    assert_string_equal(c.ifname, "^lo,docker");
    assert_int_equal(c.sockets_per_peer, 4);
    assert_int_equal(c.chunk_bytes, 1 << 20);
    assert_int_equal(c.small_bytes, 64 << 10);
    assert_true(c.timeout_s == 2.5);
}

static void bad_values_name_the_variable(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        {"HOOP_DEBUG", "LOUD"},
        {"HOOP_TRANSPORT", "carrier-pigeon"},
        {"HOOP_ALGO", "bogo"},
        {"HOOP_SOCKETS_PER_PEER", "0"},
        {"HOOP_SOCKETS_PER_PEER", "17"},
        {"HOOP_SOCKETS_PER_PEER", "2x"},
        {"HOOP_CHUNK_BYTES", "1K"},
        {"HOOP_CHUNK_BYTES", "12Q"},
        {"HOOP_CHUNK_BYTES", "-5"},
        {"HOOP_TIMEOUT", "0"},
        {"HOOP_TIMEOUT", "-1"},
        {"HOOP_TIMEOUT", "soon"},
        {"HOOP_TIMEOUT", "nan"},
        {"HOOP_SMALL_BYTES", "2G"},
        {"HOOP_TIMEOUT", "1e-300"},
        {"HOOP_TIMEOUT", "0.0009"},
        {"HOOP_TIMEOUT", "1e-400"},
        {"HOOP_TIMEOUT", "-nan"},
        {"HOOP_TIMEOUT", "inf"},
        {"HOOP_TIMEOUT", "1e8"},
        {"HOOP_TIMEOUT", "1e400"},
        {"HOOP_TIMEOUT", "5 s"},
        {"HOOP_SHM_SPIN_US", "99999999999999999999"},
        {"HOOP_SHM_SPIN_US", "-1"},
        {"HOOP_SHM_SPIN_US", "1e3"},
        {"HOOP_SOCKETS_PER_PEER", "99999999999999999999"},
        {"HOOP_SHM_RING_BYTES", "3K"},
        {"HOOP_SHM_RING_BYTES", "2G"},
        {"HOOP_SHM_CMA_BYTES", "1.5M"},
        {"HOOP_SMALL_BYTES", "99999999999999999999"},
        {"HOOP_CUDA_IPC_BYTES", "4K"},
        {"HOOP_CUDA_IPC_BYTES", "lots"},
        {"HOOP_CUDA_IPC_ONESHOT_BYTES", "1.5M"},
        {"HOOP_IB_GID_INDEX", "-1"},
        {"HOOP_IB_GID_INDEX", "x"},
        {"HOOP_IB_GID_INDEX", "1x"},
        {"HOOP_IB_GID_INDEX", " 1"},
        {"HOOP_IB_GID_INDEX", "+1"},
        {"HOOP_IB_GID_INDEX", "256"},
        {"HOOP_IB_GID_INDEX", "99999999999999999999"},
        {"HOOP_IB_REG_CACHE", "yes"},
        {"HOOP_TRACE", "2"},
        {"HOOP_IB_HCA", "mlx5_0:x"},
        {"HOOP_IB_HCA", "mlx5_0,,mlx5_1"},
        {"HOOP_IB_HCA", "^="},
        {"HOOP_IB_HCA", "mlx5 0"},
        {"HOOP_DEBUG_SUBSYS", "LOUD"},
        {"HOOP_RECORD", "-1"},
        {"HOOP_RECORD", "lots"},
        {"HOOP_RECORD", "2k"},
        {"HOOP_RECORD", "1048577"},
        {"HOOP_RECORD", "99999999999999999999"},
        {"HOOP_RECORD_SIGNAL", "yes"},
        {"HOOP_RECORD_SIGNAL", "2"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        hoop__config_t c;
        char err[256] = "";
        assert_int_equal(parse1(&c, cases[i][0], cases[i][1], err), HOOP_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(err, cases[i][0]));
        assert_non_null(strstr(err, cases[i][1]));
    }
}

/* The settings read for the engines and transports below the core, and the test hooks. */
static void engine_settings(void **state)
{
    (void)state;
    hoop__config_t c;
    char err[256];
    env_t none = {{{NULL, NULL}}};
    assert_int_equal(hoop__config_parse(&c, lookup, &none, err, sizeof(err)), HOOP_OK);
    assert_int_equal(c.cuda_ipc_bytes, 32u << 20);
    assert_int_equal(c.cuda_ipc_oneshot_bytes, 256u << 10);
    assert_int_equal(c.ib_gid_index, -1);
    assert_string_equal(c.ib_reg_cache, "auto");
    assert_string_equal(c.ib_hca, "");
    assert_string_equal(c.test_cuda_module, "");
    assert_string_equal(c.invalid, "");
    env_t e = {{{"HOOP_CUDA_IPC_BYTES", "8G"},
                {"HOOP_CUDA_IPC_ONESHOT_BYTES", "0"},
                {"HOOP_IB_HCA", "^=mlx5_1:1"},
                {"HOOP_IB_GID_INDEX", "255"},
                {"HOOP_IB_REG_CACHE", "OFF"},
                {"HOOP_TEST_CUDA_MODULE", "/x/libdouble.so"},
                {"HOOP_TEST_CUDA_DRIVER", "/x/libdriver.so"},
                {"HOOP_TEST_IBV_DOUBLE", "/x/ibv.so"}}};
    assert_int_equal(hoop__config_parse(&c, lookup, &e, err, sizeof(err)), HOOP_OK);
    assert_int_equal(c.cuda_ipc_bytes, (size_t)8 << 30);
    assert_int_equal(c.cuda_ipc_oneshot_bytes, 0);
    assert_string_equal(c.ib_hca, "^=mlx5_1:1");
    assert_int_equal(c.ib_gid_index, 255);
    assert_string_equal(c.ib_reg_cache, "off");
    assert_string_equal(c.test_cuda_module, "/x/libdouble.so");
    assert_string_equal(c.test_cuda_driver, "/x/libdriver.so");
    assert_string_equal(c.test_ibv_double, "/x/ibv.so");
    assert_int_equal(parse1(&c, "HOOP_IB_GID_INDEX", "0", err), HOOP_OK);
    assert_int_equal(c.ib_gid_index, 0);
}

/* A bad value is said, and kept at its default, while every other variable is still read: the
 * rank goes on to tell the others (core/agree.c). The sentence is in c.invalid too, free of bytes
 * that would break a log line. */
static void bad_value_keeps_the_rest(void **state)
{
    (void)state;
    hoop__config_t c;
    char err[256];
    env_t e = {{{"HOOP_CHUNK_BYTES", "12Q"},
                {"HOOP_ALGO", "ring"},
                {"HOOP_TIMEOUT", "bad\nline"},
                {"HOOP_SMALL_BYTES", "64K"}}};
    assert_int_equal(hoop__config_parse(&c, lookup, &e, err, sizeof(err)),
                     HOOP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "HOOP_CHUNK_BYTES=\"12Q\""));
    assert_string_equal(c.invalid, err);
    assert_int_equal(c.chunk_bytes, 512 * 1024);
    assert_true(c.timeout_s == 300.0);
    assert_string_equal(c.algo, "ring");
    assert_int_equal(c.small_bytes, 64 << 10);
    env_t f = {{{"HOOP_TIMEOUT", "bad\nline"}}};
    assert_int_equal(hoop__config_parse(&c, lookup, &f, err, sizeof(err)),
                     HOOP_ERR_INVALID_ARGUMENT);
    assert_null(strchr(err, '\n'));
    assert_non_null(strstr(err, "bad?line"));
    /* A bad key: that rank's own failure, nothing to tell. */
    env_t k = {{{"HOOP_AUTH_KEY_FILE", "/nonexistent/hoop-key"}, {"HOOP_CHUNK_BYTES", "12Q"}}};
    assert_int_not_equal(hoop__config_parse(&c, lookup, &k, err, sizeof(err)), HOOP_OK);
    assert_string_equal(c.invalid, "");
    hoop__config_wipe(&c);
}

/* No value, whatever its parser, puts a control byte into the sentence: c.invalid travels in the
 * rank's hello, one "name value" a line, so a newline in it would forge fields there. The hello
 * keeps one line per field whatever the job id holds, too. */
static void sentences_stay_one_line(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        {"HOOP_DEBUG_SUBSYS", "INIT\nsettings ok\nHOOP_ALGO ring"},
        {"HOOP_IB_HCA", "mlx5_0\nsettings ok"},
        {"HOOP_TIMEOUT", "1\nsettings ok"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        hoop__config_t c;
        char err[256] = "";
        assert_int_equal(parse1(&c, cases[i][0], cases[i][1], err), HOOP_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(err, cases[i][0]));
        assert_null(strchr(err, '\n'));
        assert_string_equal(c.invalid, err);
        char hello[HOOP__HELLO_MAX], v[400];
        hoop__agree_hello(&c, "job", 1, 2, hello, sizeof(hello));
        assert_true(hoop__agree_field(hello, "settings", v, sizeof(v)));
        assert_string_equal(v, c.invalid);
        assert_true(hoop__agree_field(hello, "HOOP_ALGO", v, sizeof(v)));
        assert_string_equal(v, "auto");
    }
    hoop__config_t c;
    char err[256], hello[HOOP__HELLO_MAX], v[400];
    env_t none = {{{NULL, NULL}}};
    assert_int_equal(hoop__config_parse(&c, lookup, &none, err, sizeof(err)), HOOP_OK);
    hoop__agree_hello(&c, "j\nsettings bad\rHOOP_ALGO\tring", 1, 2, hello, sizeof(hello));
    assert_true(hoop__agree_field(hello, "settings", v, sizeof(v)));
    assert_string_equal(v, "ok");
    assert_true(hoop__agree_field(hello, "HOOP_ALGO", v, sizeof(v)));
    assert_string_equal(v, "auto");
    assert_true(hoop__agree_field(hello, "job", v, sizeof(v)));
    assert_string_equal(v, "j?settings bad?HOOP_ALGO?ring");
}

/* The words of the sentences come from the tables: every algorithm of the wire's table, every
 * transport of the registry. */
static void words_from_the_tables(void **state)
{
    (void)state;
    char buf[256], err[256];
    hoop__algo_words(buf, sizeof(buf));
    for (int i = 0; i < HOOP__WIRE_ALGO_COUNT; i++)
        assert_non_null(strstr(buf, hoop__wire_algo_name(i)));
    assert_non_null(strstr(buf, "auto, ring, "));
    hoop__config_t c;
    /* Every algorithm's name is taken, in any case, and kept as the table spells it. */
    for (int i = 0; i < HOOP__WIRE_ALGO_COUNT; i++) {
        char upper[32];
        const char *name = hoop__wire_algo_name(i);
        size_t k = 0;
        for (; name[k] != '\0' && k + 1 < sizeof(upper); k++)
            upper[k] = (char)(name[k] >= 'a' && name[k] <= 'z' ? name[k] - 32 : name[k]);
        upper[k] = '\0';
        assert_int_equal(parse1(&c, "HOOP_ALGO", upper, err), HOOP_OK);
        assert_string_equal(c.algo, name);
        assert_int_equal(hoop__wire_algo_parse(upper), i);
    }
    assert_int_equal(hoop__wire_algo_parse("ring2"), -1);
    assert_int_equal(hoop__wire_algo_parse(NULL), -1);
    for (int t = 0; t < hoop__tp_registry_n; t++) {
        assert_int_equal(parse1(&c, "HOOP_TRANSPORT", hoop__tp_registry[t].name, err), HOOP_OK);
        assert_string_equal(c.transport, hoop__tp_registry[t].name);
    }
    assert_int_equal(parse1(&c, "HOOP_TRANSPORT", "carrier-pigeon", err),
                     HOOP_ERR_INVALID_ARGUMENT);
    for (int i = 0; hoop__transport_words[i] != NULL; i++)
        assert_non_null(strstr(err, hoop__transport_words[i]));
    const char *three[] = {"a", "b", "c"};
    assert_string_equal(hoop__words_join(three, 3, buf, sizeof(buf)), "a, b or c");
    assert_string_equal(hoop__words_join(three, 1, buf, sizeof(buf)), "a");
}

/* The bounds of HOOP_TIMEOUT are themselves accepted, and mean what they say. */
static void timeout_bounds(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        double want;
    } ok[] = {{"0.001", 1e-3}, {"1e-3", 1e-3}, {"10000000", 1e7}, {"1e7", 1e7}, {"0.5", 0.5}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        hoop__config_t c;
        char err[256] = "";
        assert_int_equal(parse1(&c, "HOOP_TIMEOUT", ok[i].text, err), HOOP_OK);
        assert_true(c.timeout_s == ok[i].want);
    }
    hoop__config_t c;
    char err[256] = "";
    assert_int_equal(parse1(&c, "HOOP_TIMEOUT", "1e-300", err), HOOP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "0.001"));
}

/* What hoop__log_open writes to stderr, through a temporary file. */
static void log_open_capturing(hoop__log_t *l, int level, const char *file, char *out, size_t cap)
{
    char path[] = "/tmp/hoop-test-log-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    assert_true(dup2(fd, 2) == 2);
    hoop__log_open(l, level, file, 3);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t n = pread(fd, out, cap - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
}

/* HOOP_DEBUG_FILE that cannot be opened: the log goes to stderr, and says so once, naming the file
 * and the reason. */
static void unopenable_debug_file(void **state)
{
    (void)state;
    hoop__log_t l;
    char got[1024];
    log_open_capturing(&l, HOOP__LOG_WARN, "/nonexistent-hoop-dir/log.%p", got, sizeof(got));
    assert_ptr_equal(l.out, stderr);
    assert_non_null(strstr(got, "HOOP_DEBUG_FILE"));
    assert_non_null(strstr(got, "/nonexistent-hoop-dir/log.%p"));
    assert_non_null(strstr(got, "No such file or directory"));
    assert_non_null(strstr(got, "stderr"));
    assert_null(strstr(strstr(got, "HOOP_DEBUG_FILE") + 1, "HOOP_DEBUG_FILE")); /* one line */
    hoop__log_close(&l);
    /* HOOP_DEBUG=NONE asked for silence. */
    log_open_capturing(&l, HOOP__LOG_NONE, "/nonexistent-hoop-dir/log", got, sizeof(got));
    assert_string_equal(got, "");
    hoop__log_close(&l);
    /* A file that opens: nothing said. */
    char path[] = "/tmp/hoop-test-logfile-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    log_open_capturing(&l, HOOP__LOG_WARN, path, got, sizeof(got));
    assert_ptr_not_equal(l.out, stderr);
    assert_string_equal(got, "");
    hoop__log_close(&l);
    unlink(path);
}

static void sizes(void **state)
{
    (void)state;
    size_t v;
    assert_int_equal(hoop__parse_size("0", &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(hoop__parse_size("8", &v), 0);
    assert_int_equal(v, 8);
    assert_int_equal(hoop__parse_size("4k", &v), 0);
    assert_int_equal(v, 4096);
    assert_int_equal(hoop__parse_size("64M", &v), 0);
    assert_int_equal(v, 64u << 20);
    assert_int_equal(hoop__parse_size("1G", &v), 0);
    assert_int_equal(v, 1u << 30);
    assert_int_equal(hoop__parse_size("2MiB", &v), 0);
    assert_int_equal(v, 2u << 20);
    assert_int_equal(hoop__parse_size("16KB", &v), 0);
    assert_int_equal(v, 16u << 10);
    assert_int_equal(hoop__parse_size("", &v), -1);
    assert_int_equal(hoop__parse_size("M", &v), -1);
    assert_int_equal(hoop__parse_size("3X", &v), -1);
    assert_int_equal(hoop__parse_size("-1", &v), -1);
    assert_int_equal(hoop__parse_size("99999999999999999999", &v), -1);
    assert_int_equal(hoop__parse_size("99999999999T", &v), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults),
        cmocka_unit_test(record_settings),
        cmocka_unit_test(every_variable),
        cmocka_unit_test(bad_values_name_the_variable),
        cmocka_unit_test(timeout_bounds),
        cmocka_unit_test(engine_settings),
        cmocka_unit_test(bad_value_keeps_the_rest),
        cmocka_unit_test(sentences_stay_one_line),
        cmocka_unit_test(words_from_the_tables),
        cmocka_unit_test(unopenable_debug_file),
        cmocka_unit_test(sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
