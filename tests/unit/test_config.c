/* Configuration from the environment: defaults, every variable, every kind of bad value. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/config.h"
#include "core/log.h"

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
    assert_int_equal(c.log_level, HOOP_LOG_WARN);
    assert_string_equal(c.transport, "auto");
    assert_string_equal(c.algo, "auto");
    assert_int_equal(c.sockets_per_peer, 1);
    assert_int_equal(c.chunk_bytes, 512 * 1024);
    assert_true(c.timeout_s == 300.0);
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
    assert_int_equal(c.log_level, HOOP_LOG_TRACE);
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
        {"HOOP_DEBUG", "LOUD"},          {"HOOP_TRANSPORT", "carrier-pigeon"},
        {"HOOP_ALGO", "bogo"},           {"HOOP_SOCKETS_PER_PEER", "0"},
        {"HOOP_SOCKETS_PER_PEER", "17"}, {"HOOP_SOCKETS_PER_PEER", "2x"},
        {"HOOP_CHUNK_BYTES", "1K"},      {"HOOP_CHUNK_BYTES", "12Q"},
        {"HOOP_CHUNK_BYTES", "-5"},      {"HOOP_TIMEOUT", "0"},
        {"HOOP_TIMEOUT", "-1"},          {"HOOP_TIMEOUT", "soon"},
        {"HOOP_TIMEOUT", "nan"},         {"HOOP_SMALL_BYTES", "2G"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        hoop__config_t c;
        char err[256] = "";
        assert_int_equal(parse1(&c, cases[i][0], cases[i][1], err), HOOP_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(err, cases[i][0]));
        assert_non_null(strstr(err, cases[i][1]));
    }
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
        cmocka_unit_test(every_variable),
        cmocka_unit_test(bad_values_name_the_variable),
        cmocka_unit_test(sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
