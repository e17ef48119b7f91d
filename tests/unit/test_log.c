/* The log's subsystems (HOOP_DEBUG_SUBSYS): the list's syntax, which lines each mask keeps, the
 * variable through the configuration, and the opening banner. */
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
#include "hoop.h"

static unsigned parse_ok(const char *s)
{
    unsigned m = 12345;
    char err[256] = "";
    assert_int_equal(hoop__log_subsys_parse(s, &m, err, sizeof(err)), 0);
    assert_string_equal(err, "");
    return m;
}

static void names_and_lists(void **state)
{
    (void)state;
    assert_int_equal(parse_ok("INIT"), HOOP__SUB_INIT);
    assert_int_equal(parse_ok("rendezvous"), HOOP__SUB_RENDEZVOUS);
    assert_int_equal(parse_ok("Bootstrap"), HOOP__SUB_RENDEZVOUS); /* NCCL's name */
    assert_int_equal(parse_ok("transport"), HOOP__SUB_TRANSPORT);
    assert_int_equal(parse_ok("NET"), HOOP__SUB_TRANSPORT);
    assert_int_equal(parse_ok("coll"), HOOP__SUB_COLL);
    assert_int_equal(parse_ok("collective"), HOOP__SUB_COLL);
    assert_int_equal(parse_ok("auth"), HOOP__SUB_AUTH);
    assert_int_equal(parse_ok("ALL"), HOOP__SUB_ALL);
    assert_int_equal(parse_ok("init,auth"), HOOP__SUB_INIT | HOOP__SUB_AUTH);
    assert_int_equal(parse_ok("coll,init,coll"), HOOP__SUB_COLL | HOOP__SUB_INIT);
    assert_int_equal(parse_ok(",init,,auth,"), HOOP__SUB_INIT | HOOP__SUB_AUTH);
    /* "^" first: everything but the list. */
    assert_int_equal(parse_ok("^transport"), HOOP__SUB_ALL & ~(unsigned)HOOP__SUB_TRANSPORT);
    assert_int_equal(parse_ok("^init,coll"),
                     HOOP__SUB_ALL & ~(unsigned)(HOOP__SUB_INIT | HOOP__SUB_COLL));
    assert_int_equal(parse_ok("^all"), 0);
    /* Empty (and "^" alone): the default, every subsystem. */
    assert_int_equal(parse_ok(""), HOOP__SUB_ALL);
    assert_int_equal(parse_ok("^"), HOOP__SUB_ALL);
    /* Every bit has a name of its own, and ALL is exactly them. */
    assert_int_equal(parse_ok("init,rendezvous,transport,coll,auth"), HOOP__SUB_ALL);
}

static void bad_lists(void **state)
{
    (void)state;
    static const char *const bad[] = {"bogus", "init,foo", "init;auth", "^x",
                                      "INITX", "ini",      " init"};
    static const char *const named[] = {"\"bogus\"", "\"foo\"", "\"init;auth\"", "\"x\"",
                                        "\"INITX\"", "\"ini\"", "\" init\""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        unsigned m = 777;
        char err[256] = "";
        assert_int_equal(hoop__log_subsys_parse(bad[i], &m, err, sizeof(err)), -1);
        assert_int_equal(m, 777); /* untouched */
        assert_non_null(strstr(err, "HOOP_DEBUG_SUBSYS"));
        assert_non_null(strstr(err, named[i]));
        assert_non_null(strstr(err, "INIT, RENDEZVOUS, TRANSPORT, COLL, AUTH or ALL"));
    }
}

/* A log into a fresh file; returns its path in path (a mkstemp template). */
static void open_file_log(hoop__log_t *l, int level, unsigned subsys, char *path)
{
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    hoop__log_open(l, level, path, 0);
    assert_ptr_not_equal(l->out, stderr);
    l->subsys = subsys;
}

static void read_log(hoop__log_t *l, const char *path, char *out, size_t cap)
{
    hoop__log_close(l);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    fclose(f);
    unlink(path);
}

static void masks_filter_lines(void **state)
{
    (void)state;
    static const unsigned subs[] = {HOOP__SUB_INIT, HOOP__SUB_RENDEZVOUS, HOOP__SUB_TRANSPORT,
                                    HOOP__SUB_COLL, HOOP__SUB_AUTH};
    /* Every mask over the five subsystems, at INFO and at TRACE. */
    for (int level = HOOP__LOG_INFO; level <= HOOP__LOG_TRACE; level++) {
        for (unsigned mask = 0; mask <= HOOP__SUB_ALL; mask++) {
            hoop__log_t l;
            char path[] = "/tmp/hoop-test-subsys-XXXXXX", got[4096];
            open_file_log(&l, level, mask, path);
            for (int s = 0; s < 5; s++) {
                HOOP__INFO_IN(&l, subs[s], "info of %d", s);
                HOOP__TRACE_IN(&l, subs[s], "trace of %d", s);
            }
            HOOP__INFO(&l, "info of this file"); /* the default subsystem: init */
            HOOP__WARN(&l, "a warning");
            read_log(&l, path, got, sizeof(got));
            for (int s = 0; s < 5; s++) {
                char want[32];
                int on = (mask & subs[s]) != 0;
                snprintf(want, sizeof(want), "INFO info of %d\n", s);
                assert_int_equal(strstr(got, want) != NULL, on);
                snprintf(want, sizeof(want), "TRACE trace of %d\n", s);
                assert_int_equal(strstr(got, want) != NULL, on && level == HOOP__LOG_TRACE);
            }
            assert_int_equal(strstr(got, "info of this file") != NULL,
                             (mask & HOOP__SUB_INIT) != 0);
            /* Warnings are never filtered by subsystem. */
            assert_non_null(strstr(got, "WARN a warning\n"));
        }
    }
    /* Below INFO no subsystem brings INFO lines back. */
    hoop__log_t l;
    char path[] = "/tmp/hoop-test-subsys-XXXXXX", got[1024];
    open_file_log(&l, HOOP__LOG_WARN, HOOP__SUB_ALL, path);
    HOOP__INFO_IN(&l, HOOP__SUB_AUTH, "hidden");
    read_log(&l, path, got, sizeof(got));
    assert_null(strstr(got, "hidden"));
}

static const char *lookup(const char *name, void *ctx)
{
    const char *const *kv = ctx;
    for (int i = 0; kv[i] != NULL; i += 2)
        if (strcmp(kv[i], name) == 0) return kv[i + 1];
    return NULL;
}

static void through_the_configuration(void **state)
{
    (void)state;
    hoop__config_t c;
    char err[256] = "";
    const char *none[] = {NULL};
    assert_int_equal(hoop__config_parse(&c, lookup, none, err, sizeof(err)), HOOP_OK);
    assert_int_equal(c.log_subsys, HOOP__SUB_ALL);
    const char *some[] = {"HOOP_DEBUG", "INFO", "HOOP_DEBUG_SUBSYS", "^coll,rendezvous", NULL};
    assert_int_equal(hoop__config_parse(&c, lookup, some, err, sizeof(err)), HOOP_OK);
    assert_int_equal(c.log_subsys, HOOP__SUB_INIT | HOOP__SUB_TRANSPORT | HOOP__SUB_AUTH);
    const char *bad[] = {"HOOP_DEBUG_SUBSYS", "init,tcp", NULL};
    assert_int_equal(hoop__config_parse(&c, lookup, bad, err, sizeof(err)),
                     HOOP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "HOOP_DEBUG_SUBSYS=\"init,tcp\": no subsystem \"tcp\""));
}

static void banner(void **state)
{
    (void)state;
    for (int auth = 0; auth < 2; auth++) {
        hoop__log_t l;
        char path[] = "/tmp/hoop-test-banner-XXXXXX", got[1024], want[64];
        open_file_log(&l, HOOP__LOG_INFO, HOOP__SUB_ALL, path);
        hoop__log_banner(&l, auth);
        read_log(&l, path, got, sizeof(got));
        snprintf(want, sizeof(want), "INFO hoop version %s; built with ", hoop_version());
        assert_non_null(strstr(got, want));
#ifdef HOOP__CUDA_BUILT
        assert_non_null(strstr(got, "built with CUDA"));
#else
        assert_non_null(strstr(got, "built with no CUDA"));
#endif
#ifdef HOOP__HAVE_IBVERBS
        assert_non_null(strstr(got, ", RDMA verbs"));
#else
        assert_non_null(strstr(got, ", no RDMA verbs"));
#endif
        assert_non_null(strstr(got, "authentication by libsodium "));
        assert_non_null(strstr(got, auth ? "this run authenticates" : "does not authenticate"));
        int lines = 0;
        for (const char *q = got; *q != '\0'; q++) lines += *q == '\n';
        assert_int_equal(lines, 1);
    }
    /* It belongs to init: off with it, and off below INFO. */
    hoop__log_t l;
    char path[] = "/tmp/hoop-test-banner-XXXXXX", got[1024];
    open_file_log(&l, HOOP__LOG_INFO, HOOP__SUB_ALL & ~(unsigned)HOOP__SUB_INIT, path);
    hoop__log_banner(&l, 0);
    read_log(&l, path, got, sizeof(got));
    assert_string_equal(got, "");
    char path2[] = "/tmp/hoop-test-banner-XXXXXX";
    open_file_log(&l, HOOP__LOG_WARN, HOOP__SUB_ALL, path2);
    hoop__log_banner(&l, 0);
    read_log(&l, path2, got, sizeof(got));
    assert_string_equal(got, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(names_and_lists),
        cmocka_unit_test(bad_lists),
        cmocka_unit_test(masks_filter_lines),
        cmocka_unit_test(through_the_configuration),
        cmocka_unit_test(banner),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
